"""Vectors the meaning router has embedded, kept across processes.

The router compares every source with every article of every bundle; embedding 10k articles
again in each process is most of a consolidate's cost. This cache keeps each text's vector in
``.memdir/cache/route-vectors.db`` (SQLite, ignored by git like the rest of
``.memdir/cache/``), keyed by the embedder's model id and the SHA-256 of the text, so an
unchanged article is embedded once, by the first run that needs it, and an edited one again.
It is derived data like the search index: deleting the file loses nothing; a file that cannot
be read or written (corrupt, read-only, a symbolic link, locked too long) is ignored and the
vectors are embedded as before; a stored vector whose width differs from its row's is never
returned.
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memdir.index.db import switch_to_wal

FILE = "route-vectors.db"


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


class VectorCache:
    """A content-hash keyed store of float32 vectors, one model id per row."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db: sqlite3.Connection | None = None
        self.broken = ""  # why the cache is not used, once it failed
        self.hits = 0
        self.misses = 0

    def _connect(self) -> sqlite3.Connection | None:
        if self._db is not None or self.broken:
            return self._db
        try:
            if self.path.is_symlink():
                raise OSError(f"{self.path} is a symbolic link")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(str(self.path), timeout=5.0, isolation_level=None)
            switch_to_wal(db)  # two processes opening a new cache at once: one waits
            db.execute(
                "CREATE TABLE IF NOT EXISTS route_vectors (model TEXT NOT NULL,"
                " digest BLOB NOT NULL, dim INTEGER NOT NULL, vector BLOB NOT NULL,"
                " PRIMARY KEY (model, digest))"
            )
        except (sqlite3.Error, OSError) as exc:
            self.broken = str(exc) or type(exc).__name__
            return None
        self._db = db
        return db

    def get(self, model: str, texts: Sequence[str]) -> dict[str, Any]:
        """The stored vectors of those ``texts`` the cache holds, by text."""
        import numpy as np

        db = self._connect()
        if db is None or not texts:
            return {}
        by_digest = {_digest(t): t for t in dict.fromkeys(texts)}
        keys = list(by_digest)
        out: dict[str, Any] = {}
        try:
            for start in range(0, len(keys), 500):
                chunk = keys[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows = db.execute(
                    "SELECT digest, dim, vector FROM route_vectors"
                    f" WHERE model = ? AND digest IN ({marks})",
                    [model, *chunk],
                ).fetchall()
                for digest, dim, blob in rows:
                    if isinstance(blob, bytes) and len(blob) == 4 * dim and digest in by_digest:
                        out[by_digest[digest]] = np.frombuffer(blob, dtype=np.float32).copy()
        except sqlite3.Error as exc:
            self.broken = str(exc) or type(exc).__name__
            return {}
        self.hits += len(out)
        self.misses += len(by_digest) - len(out)
        return out

    def put(self, model: str, pairs: Sequence[tuple[str, Any]]) -> None:
        """Keep the vectors of these texts (a failure only means they are embedded again)."""
        import numpy as np

        db = self._connect()
        if db is None or not pairs:
            return
        rows = []
        for text, vector in pairs:
            v = np.asarray(vector, dtype=np.float32).ravel()
            rows.append((model, _digest(text), len(v), v.tobytes()))
        try:
            db.execute("BEGIN IMMEDIATE")
            db.executemany("INSERT OR REPLACE INTO route_vectors VALUES (?, ?, ?, ?)", rows)
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            self.broken = str(exc) or type(exc).__name__
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def for_store(root: Path) -> VectorCache:
    """The cache of the store at ``root``."""
    return VectorCache(root / ".memdir" / "cache" / FILE)
