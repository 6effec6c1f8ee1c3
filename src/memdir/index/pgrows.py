"""How a store's rows are written into the Postgres index (:mod:`memdir.index.postgres`).

The tables (partitioned by store), FTS5's own tokens of a text, and :class:`StoreRows`: a
full build of a store's rows into new partitions swapped in at the end, and a push of the
rows of some paths only (those the local change log names, :mod:`memdir.index.pglog`).
Everything here runs in the caller's transaction, under the store's advisory lock.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import sqlite3
import threading
from collections.abc import Sequence
from typing import Any

from ..records import recordclass
from .postings import TOKENIZE

__all__ = ["SCHEMA", "TABLES", "PgSyncStats", "StoreRows", "tokens_of"]

DOCS, PASSAGES = 0, 1  # the two BM25 tables, as the `kind` column names them
VECTORS = 2  # memdir_counts' row of a store's vectors (n: how many; total: 0)
BATCH = 2000  # rows tokenized and written per round of an incremental sync
VERSION = "3"  # of the tables below; a database with another is emptied and made again

# Every table but memdir_stores is partitioned by store: a full build fills a new table
# of its own, builds its indexes once at the end and swaps it in for the old one.
SCHEMA = """
CREATE EXTENSION IF NOT EXISTS vector;
CREATE TABLE IF NOT EXISTS memdir_meta (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE IF NOT EXISTS memdir_stores (
    store text PRIMARY KEY, epoch text NOT NULL, seq bigint NOT NULL, model text);
CREATE TABLE IF NOT EXISTS memdir_counts (
    store text NOT NULL, kind smallint NOT NULL, n bigint NOT NULL, total bigint NOT NULL,
    PRIMARY KEY (store, kind));
CREATE TABLE IF NOT EXISTS memdir_ann (store text PRIMARY KEY, dim int NOT NULL);
CREATE TABLE IF NOT EXISTS memdir_docs (
    store text NOT NULL, path text NOT NULL,
    zone int NOT NULL, hidden int NOT NULL, memory_kind text, type text,
    thread text, "user" text, created text, fm jsonb,
    PRIMARY KEY (store, path)) PARTITION BY LIST (store);
CREATE TABLE IF NOT EXISTS memdir_rows (
    store text NOT NULL, kind smallint NOT NULL, path text NOT NULL, dl int NOT NULL,
    PRIMARY KEY (store, kind, path)) PARTITION BY LIST (store);
CREATE TABLE IF NOT EXISTS memdir_terms (
    store text NOT NULL, kind smallint NOT NULL, term text NOT NULL, path text NOT NULL,
    tf1 real NOT NULL, tf2 real NOT NULL, tf3 real NOT NULL, dl int NOT NULL)
    PARTITION BY LIST (store);
CREATE INDEX IF NOT EXISTS memdir_terms_term ON memdir_terms (kind, term);
CREATE INDEX IF NOT EXISTS memdir_terms_path ON memdir_terms (path);
CREATE TABLE IF NOT EXISTS memdir_vectors (
    store text NOT NULL, path text NOT NULL, chunk_no int NOT NULL,
    start_at int NOT NULL, end_at int NOT NULL, model text NOT NULL,
    embedding vector NOT NULL,
    PRIMARY KEY (store, path, chunk_no)) PARTITION BY LIST (store);
"""
# The partitioned tables, and the indexes a new partition of each is given before it is
# attached (matching the parent's, so attaching builds nothing).
TABLES = {
    "memdir_docs": ("PRIMARY KEY (store, path)",),
    "memdir_rows": ("PRIMARY KEY (store, kind, path)",),
    "memdir_terms": ("(kind, term)", "(path)"),  # no key: one row per kind, term, path
    "memdir_vectors": ("PRIMARY KEY (store, path, chunk_no)",),
}
# Per store: what was pushed (memdir_stores), the number of BM25 rows of each kind and
# their total length, which BM25 needs for every query, and of vectors (memdir_counts), and
# the dimension of its approximate vector index when it has one (memdir_ann).
PLAIN_TABLES = ("memdir_stores", "memdir_counts", "memdir_ann", "memdir_meta")
OLD_TABLES = ("memdir_vector_sigs",)  # of version 1, dropped with the rest


# -- FTS5's tokens --------------------------------------------------------------------


_tok = threading.local()


def _tokenizer() -> sqlite3.Connection:
    conn: sqlite3.Connection | None = getattr(_tok, "conn", None)
    if conn is None:
        conn = sqlite3.connect(":memory:", check_same_thread=False)
        conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(a, b, c, tokenize = '{TOKENIZE}')")
        conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")
        _tok.conn = conn
    return conn


def tokens_of(rows: Sequence[Sequence[str]]) -> list[tuple[dict[str, list[int]], int]]:
    """Each row's tokens as FTS5 makes them: ``term -> [count per column]``, and its length.

    Rows hold up to three columns of text; the tokenizer is the index's own.
    """
    conn = _tokenizer()
    out: list[tuple[dict[str, list[int]], int]] = [({}, 0) for _ in rows]
    with conn:
        conn.executemany(
            "INSERT INTO t(rowid, a, b, c) VALUES (?, ?, ?, ?)",
            [(i, *(list(r) + ["", "", ""])[:3]) for i, r in enumerate(rows)],
        )
        column = {"a": 0, "b": 1, "c": 2}
        for doc, term, col, count in conn.execute(
            "SELECT doc, term, col, count(*) FROM v GROUP BY doc, term, col"
        ):
            terms, length = out[doc]
            counts = terms.setdefault(term, [0, 0, 0])
            counts[column[col]] += count
            out[doc] = (terms, length + count)
        conn.execute("DELETE FROM t")
    return out


@recordclass
class PgSyncStats:
    docs: int = 0
    passages: int = 0
    vectors: int = 0
    removed: int = 0
    full: bool = False  # the store's rows were built afresh (not only the changed paths)
    skipped: bool = False  # another writer held the store's lock: read as it was

    @property
    def changed(self) -> int:
        return self.docs + self.passages + self.vectors + self.removed


class StoreRows:
    """The writing of one store's rows (the caller holds the transaction and the lock)."""

    def __init__(self, store: str, *, approximate_from: int = 0) -> None:
        self.store = store
        # A store with this many vectors or more gets an approximate (HNSW) index on them;
        # 0: every vector search stays an exact scan.
        self.approximate_from = approximate_from

    def build(
        self, conn: Any, lconn: sqlite3.Connection, model: str | None, stats: PgSyncStats
    ) -> None:
        """Write every row of the store into new tables and swap them in for the old ones.

        Each new table gets its indexes after it is filled (one sort each, several times
        faster than keeping them up to date row by row) and a check on the store key, so
        attaching it to its parent neither scans it nor builds anything. Readers see the
        old rows until the commit; the swap at the end holds each parent's lock for
        moments only.
        """
        stats.full = True
        conn.execute("SET LOCAL maintenance_work_mem = '256MB'")
        suffix = secrets.token_hex(4)
        made = {table: self._new_part(conn, table, suffix) for table in TABLES}
        with conn.cursor().copy(
            f"COPY {made['memdir_docs']} (store, path, zone, hidden, memory_kind, type, "
            'thread, "user", created, fm) FROM STDIN'
        ) as copy:
            for v in lconn.execute(_DOC_ROWS):
                copy.write_row((self.store, v[0], int(v[1] or 0), int(v[2] or 0), *v[3:8],
                                _json(v[8])))  # fmt: skip
                stats.docs += 1
        counts = {DOCS: self._build_rows(conn, lconn, made, DOCS)}
        if _has_passages(lconn):
            counts[PASSAGES] = self._build_rows(conn, lconn, made, PASSAGES)
            stats.passages = counts[PASSAGES][0]
        conn.execute("DELETE FROM memdir_counts WHERE store = %s", (self.store,))
        for kind, (n, total) in counts.items():
            conn.execute(
                "INSERT INTO memdir_counts (store, kind, n, total) VALUES (%s, %s, %s, %s)",
                (self.store, kind, n, total),
            )
        if model is not None and _has_table(lconn, "chunks"):
            with conn.cursor().copy(
                f"COPY {made['memdir_vectors']} (store, path, chunk_no, start_at, end_at, "
                "model, embedding) FROM STDIN"
            ) as copy:
                for path, chunk_no, start, end, vec in lconn.execute(_VECTOR_ROWS, (model,)):
                    copy.write_row((self.store, path, chunk_no, start, end, model, _vector(vec)))
                    stats.vectors += 1
        conn.execute(
            "INSERT INTO memdir_counts (store, kind, n, total) VALUES (%s, %s, %s, 0)",
            (self.store, VECTORS, stats.vectors),
        )
        for table, new in made.items():
            for index in TABLES[table]:
                if index.startswith("PRIMARY KEY"):
                    conn.execute(f"ALTER TABLE {new} ADD {index}")
                else:
                    conn.execute(f"CREATE INDEX ON {new} {index}")
        conn.execute("DELETE FROM memdir_ann WHERE store = %s", (self.store,))
        self._approximate(conn, made["memdir_vectors"], stats.vectors)
        for table, new in made.items():
            for old in self._parts(conn, table):
                if old != new:
                    conn.execute(f"DROP TABLE {old}")
            conn.execute(
                _sql(f"ALTER TABLE {table} ATTACH PARTITION {new} FOR VALUES IN ({{}})", self.store)
            )
            conn.execute(f"ANALYZE {new}")

    def _approximate(self, conn: Any, part: str, vectors: int) -> None:
        """Give the vectors partition ``part`` an HNSW index once it holds enough vectors.

        pgvector indexes only vectors of one declared dimension, and the column takes any:
        the index is on the column cast to the store's dimension (one model per store),
        which :meth:`memdir.index.postgres.PgIndex.nearest` orders by. The build sorts in
        memory when ``maintenance_work_mem`` holds the graph (about 2 KB a vector of 384
        dimensions), several times faster than spilling.
        """
        if self.approximate_from < 1 or vectors < self.approximate_from:
            return
        row = conn.execute(f"SELECT vector_dims(embedding) FROM {part} LIMIT 1").fetchone()
        if row is None:
            return
        dim = int(row[0])
        conn.execute("SET LOCAL maintenance_work_mem = '2GB'")
        conn.execute(
            f"CREATE INDEX ON {part} USING hnsw ((embedding::vector({dim})) vector_ip_ops)"
        )
        conn.execute(
            "INSERT INTO memdir_ann (store, dim) VALUES (%s, %s) "
            "ON CONFLICT (store) DO UPDATE SET dim = excluded.dim",
            (self.store, dim),
        )

    def _part_prefix(self, table: str) -> str:
        key = hashlib.blake2b(self.store.encode("utf-8", "surrogatepass"), digest_size=16)
        return f"{table}_{key.hexdigest()}_"

    def _new_part(self, conn: Any, table: str, suffix: str) -> str:
        name = self._part_prefix(table) + suffix
        conn.execute(f"CREATE TABLE {name} (LIKE {table} INCLUDING DEFAULTS)")
        conn.execute(_sql(f"ALTER TABLE {name} ADD CHECK (store = {{}})", self.store))
        return name

    def _parts(self, conn: Any, table: str) -> list[str]:
        """The partitions of ``table`` that hold this store (one, or none yet), by their bound."""
        rows = conn.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = %s::regclass AND pg_get_expr(c.relpartbound, c.oid) = "
            "'FOR VALUES IN (' || quote_literal(%s) || ')'",
            (table, self.store),
        ).fetchall()
        return [str(r[0]) for r in rows]

    def _build_rows(
        self,
        conn: Any,
        lconn: sqlite3.Connection,
        made: dict[str, str],
        kind: int,
    ) -> tuple[int, int]:
        """Every BM25 row of one kind, with its terms read from the local FTS5 index itself.

        The tokens are those FTS5 stored (``fts5vocab``), counted per row, term and column
        by SQLite, and written as lines of COPY text (a profile of 10,000 documents: 6.1 s
        with the lines made by SQLite's printf and group_concat, 3.0 s here). Rows without
        a token get their row (length 0), as FTS5 counts them. Returns the number of rows
        and their total length.
        """
        fts = "docs_fts" if kind == DOCS else "passages_fts"
        cols = ("title", "body") if kind == DOCS else ("title", "body", "context")
        vocab = f"memdir_pg_{fts}_vocab"
        lconn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{vocab} USING "
                      f"fts5vocab(main, '{fts}', 'instance')")  # fmt: skip
        # unicode61 without tokenchars makes no token holding what COPY text escapes.
        term = "term" if "tokenchars" not in TOKENIZE else _escaped("term")
        sums = ", ".join(f"sum(col = '{c}')" for c in cols) + ", 0" * (3 - len(cols))
        counted = f"SELECT {term}, doc, {sums} FROM temp.{vocab} GROUP BY term, doc"
        paths = {
            int(doc_id): str(path)
            for doc_id, path in lconn.execute(
                f"SELECT d.id, d.path FROM {fts} f JOIN docs d ON d.id = f.rowid"
            )
        }
        lengths = _lengths(lconn, fts, paths)
        # What each line holds around its term: the store and kind before, the path after,
        # and the row's length at the end (each term's row carries it: BM25 needs no join).
        head = f"{_copy_text(self.store)}\t{kind}\t"
        tails = {doc_id: f"\t{_copy_text(path)}\t" for doc_id, path in paths.items()}
        ends = {doc_id: f"\t{length}\n" for doc_id, length in lengths.items()}
        cur = lconn.cursor()
        cur.row_factory = None
        cur.execute(counted)
        with conn.cursor().copy(
            f"COPY {made['memdir_terms']} (store, kind, term, path, tf1, tf2, tf3, dl) FROM STDIN"
        ) as copy:
            while part := cur.fetchmany(20_000):
                part = [row for row in part if row[1] in tails]  # a row of a document
                copy.write(
                    "".join(
                        [f"{head}{t}{tails[d]}{a}\t{b}\t{c}{ends[d]}" for t, d, a, b, c in part]
                    )
                )
        with conn.cursor().copy(
            f"COPY {made['memdir_rows']} (store, kind, path, dl) FROM STDIN"
        ) as copy:
            for doc_id, path in paths.items():
                copy.write_row((self.store, kind, path, lengths[doc_id]))
        return len(paths), sum(lengths.values())

    # -- an incremental sync: the changed paths only

    def push(
        self,
        conn: Any,
        lconn: sqlite3.Connection,
        paths: list[str],
        model: str | None,
        stats: PgSyncStats,
    ) -> None:
        """Delete these paths' rows and write them again from the local index."""
        marks = ",".join("?" * len(paths))
        before = conn.execute(
            "SELECT kind, count(*), coalesce(sum(dl), 0) FROM memdir_rows "
            "WHERE store = %s AND path = ANY(%s) GROUP BY kind",
            (self.store, paths),
        ).fetchall()
        delta = {int(kind): (-int(n), -int(total)) for kind, n, total in before}
        for table in TABLES:
            if table == "memdir_vectors" and model is None:
                continue
            gone = conn.execute(
                f"DELETE FROM {table} WHERE store = %s AND path = ANY(%s)", (self.store, paths)
            )
            if table == "memdir_vectors":
                delta[VECTORS] = (-max(gone.rowcount, 0), 0)
        docs = lconn.execute(_DOC_ROWS + f" WHERE path IN ({marks})", paths).fetchall()
        stats.removed += len(paths) - len(docs)
        with conn.cursor().copy(
            "COPY memdir_docs (store, path, zone, hidden, memory_kind, type, thread, "
            '"user", created, fm) FROM STDIN'
        ) as copy:
            for v in docs:
                copy.write_row((self.store, v[0], int(v[1] or 0), int(v[2] or 0), *v[3:8],
                                _json(v[8])))  # fmt: skip
        stats.docs += len(docs)
        kinds = [DOCS, PASSAGES] if _has_passages(lconn) else [DOCS]
        for kind in kinds:
            n, total = self._push_rows(conn, lconn, kind, paths)
            gone_n, gone_total = delta.get(kind, (0, 0))
            delta[kind] = (gone_n + n, gone_total + total)
            if kind == PASSAGES:
                stats.passages += n
        for kind, (n, total) in delta.items():
            if kind != VECTORS:  # counted with the vectors written below
                self._count(conn, kind, n, total)
        pushed = 0
        if model is not None and _has_table(lconn, "chunks"):
            found = lconn.execute(_VECTOR_ROWS + f" AND d.path IN ({marks})", (model, *paths))
            with conn.cursor().copy(
                "COPY memdir_vectors (store, path, chunk_no, start_at, end_at, model, embedding) "
                "FROM STDIN"
            ) as copy:
                for path, chunk_no, start, end, vec in found:
                    copy.write_row((self.store, path, chunk_no, start, end, model, _vector(vec)))
                    pushed += 1
            stats.vectors += pushed
        if model is not None:
            vectors = self._count(conn, VECTORS, delta.get(VECTORS, (0, 0))[0] + pushed, 0)
            self._approximate_when_grown(conn, vectors)

    def _count(self, conn: Any, kind: int, n: int, total: int) -> int:
        """Add to the store's counts of one kind; returns the new number of rows."""
        row = conn.execute(
            "INSERT INTO memdir_counts AS c (store, kind, n, total) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (store, kind) DO UPDATE SET n = c.n + excluded.n, "
            "total = c.total + excluded.total RETURNING n",
            (self.store, kind, n, total),
        ).fetchone()
        return int(row[0])

    def _approximate_when_grown(self, conn: Any, vectors: int) -> None:
        """The HNSW index of a store that has just grown to enough vectors for one (a store
        under the threshold costs no query here)."""
        if self.approximate_from < 1 or vectors < self.approximate_from:
            return
        if conn.execute("SELECT 1 FROM memdir_ann WHERE store = %s", (self.store,)).fetchone():
            return  # kept up to date by Postgres as rows come and go
        parts = self._parts(conn, "memdir_vectors")
        if parts:
            self._approximate(conn, parts[0], vectors)

    def _push_rows(
        self, conn: Any, lconn: sqlite3.Connection, kind: int, paths: list[str]
    ) -> tuple[int, int]:
        """The BM25 rows of these paths (tokenized here, as FTS5 tokenizes them): their
        number and total length."""
        marks = ",".join("?" * len(paths))
        if kind == DOCS:
            select = "SELECT d.path, f.title, f.body, '' FROM docs_fts f "
        else:
            select = "SELECT d.path, f.title, f.body, f.context FROM passages_fts f "
        select += f"JOIN docs d ON d.id = f.rowid WHERE d.path IN ({marks})"
        rows = lconn.execute(select, paths).fetchall()
        counted = tokens_of([[str(t or "") for t in text] for _, *text in rows])
        cur = conn.cursor()
        with cur.copy("COPY memdir_rows (store, kind, path, dl) FROM STDIN") as copy:
            for (path, *_), (_, length) in zip(rows, counted, strict=True):
                copy.write_row((self.store, kind, path, length))
        with cur.copy(
            "COPY memdir_terms (store, kind, term, path, tf1, tf2, tf3, dl) FROM STDIN"
        ) as copy:
            for (path, *_), (terms, length) in zip(rows, counted, strict=True):
                for term, tf in terms.items():
                    copy.write_row((self.store, kind, term, path, *tf, length))
        return len(rows), sum(length for _, length in counted)


_DOC_ROWS = "SELECT path, zone, hidden, memory_kind, type, thread, user, created, fm FROM docs"
_VECTOR_ROWS = (
    "SELECT d.path, c.chunk_no, c.start, c.end, v.vec FROM chunks c "
    "JOIN docs d ON d.id = c.doc_id JOIN vectors v ON v.model = ? AND v.text_hash = c.text_hash"
)


def _sql(template: str, value: str) -> Any:
    """A statement with a string literal where ``{}`` stands (DDL takes no parameters)."""
    from psycopg import sql

    return sql.SQL(template).format(sql.Literal(value))


def _copy_text(value: str) -> str:
    """A value as COPY's text format writes it (backslash, tab, newline, CR escaped)."""
    return (
        value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
        .replace("\r", "\\r")
    )  # fmt: skip


def _escaped(column: str) -> str:
    """SQLite's expression for a column as COPY's text format writes it."""
    out = f"replace({column}, '\\', '\\\\')"
    for code, letter in ((9, "t"), (10, "n"), (13, "r")):
        out = f"replace({out}, char({code}), '\\{letter}')"
    return out


def _json(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value)
    try:
        json.loads(text)
    except ValueError:
        return json.dumps(text)
    return text.replace("\\u0000", "")  # Postgres jsonb refuses NUL characters


def _vector(blob: bytes) -> str:
    import numpy as np

    # As _vector_text writes it (repr of each float), without a numpy scalar per number.
    return "[" + ",".join(map(repr, np.frombuffer(blob, dtype=np.float32).tolist())) + "]"


def _lengths(conn: sqlite3.Connection, fts: str, paths: dict[int, str]) -> dict[int, int]:
    """Each row's length in tokens, as FTS5 keeps it (its ``_docsize`` table).

    A row's ``sz`` is one varint per column (seven bits a byte, high bit: more follow);
    the length is their sum, the number of tokens the row's terms count.
    """
    lengths = dict.fromkeys(paths, 0)
    for doc_id, blob in conn.execute(f"SELECT id, sz FROM {fts}_docsize"):
        if doc_id not in lengths:
            continue
        total = value = 0
        for byte in bytes(blob or b""):
            value = (value << 7) | (byte & 0x7F)
            if not byte & 0x80:
                total += value
                value = 0
        lengths[doc_id] = total
    return lengths


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    found = conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone()
    return found is not None


def _has_passages(conn: sqlite3.Connection) -> bool:
    return _has_table(conn, "passages_fts")
