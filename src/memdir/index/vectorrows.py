"""The rows the vector index keeps in the index (chunks, vectors, embedded, and the passages
beside them), pruned of documents that are gone, hidden or out of the searchable zone."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from . import passages
from .passages import batches, has_passages

_VISIBLE = "SELECT id FROM docs WHERE hidden = 0 AND zone = 0"


def drop_unindexed(conn: sqlite3.Connection) -> int:
    """Forget chunks, vectors and passages of documents that are gone, hidden or out of zone.

    Needs no embedder (purge calls it); vectors of every model whose text no chunk
    holds any more are deleted. Returns how many documents lost their chunks.
    """
    cur = conn.execute(f"DELETE FROM chunks WHERE doc_id NOT IN ({_VISIBLE})")
    removed = cur.rowcount or 0
    conn.execute(f"DELETE FROM embedded WHERE doc_id NOT IN ({_VISIBLE})")
    if removed:
        conn.execute("DELETE FROM vectors WHERE text_hash NOT IN (SELECT text_hash FROM chunks)")
    if has_passages(conn):
        gone = conn.execute(
            f"SELECT doc_id, thread FROM passage_links WHERE doc_id NOT IN ({_VISIBLE})"
        ).fetchall()
        passages.drop(conn, [(int(r[0]), r[1]) for r in gone])
    return removed


def drop_docs(conn: sqlite3.Connection, doc_ids: Sequence[int]) -> int:
    """:func:`drop_unindexed` for these documents only (those of the doc log).

    Vectors whose text was held only by the chunks dropped are deleted. Returns how
    many of the documents lost their chunks.
    """
    gone: list[int] = []
    for part in batches(list(doc_ids), 500):
        marks = ",".join("?" * len(part))
        visible = {
            int(r[0])
            for r in conn.execute(
                f"SELECT id FROM docs WHERE id IN ({marks}) AND hidden = 0 AND zone = 0", part
            )
        }
        gone.extend(d for d in part if d not in visible)
    removed = 0
    orphans: set[str] = set()
    for part in batches(gone, 500):
        marks = ",".join("?" * len(part))
        orphans.update(
            str(r[0])
            for r in conn.execute(f"SELECT text_hash FROM chunks WHERE doc_id IN ({marks})", part)
        )
        removed += int(
            conn.execute(
                f"SELECT count(DISTINCT doc_id) FROM chunks WHERE doc_id IN ({marks})", part
            ).fetchone()[0]
        )
        conn.execute(f"DELETE FROM chunks WHERE doc_id IN ({marks})", part)
        conn.execute(f"DELETE FROM embedded WHERE doc_id IN ({marks})", part)
    conn.executemany(
        "DELETE FROM vectors WHERE text_hash = ? "
        "AND NOT EXISTS (SELECT 1 FROM chunks WHERE text_hash = ?)",
        [(h, h) for h in sorted(orphans)],
    )
    if gone and has_passages(conn):
        found: list[tuple[int, str | None]] = []
        for part in batches(gone, 500):
            marks = ",".join("?" * len(part))
            found.extend(
                (int(r[0]), r[1])
                for r in conn.execute(
                    f"SELECT doc_id, thread FROM passage_links WHERE doc_id IN ({marks})", part
                )
            )
        passages.drop(conn, found)
    return removed
