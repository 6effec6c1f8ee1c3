"""The rows the vector index keeps in the index (chunks, vectors, embedded, and the passages
beside them): what a vector sync reads and writes, what a search loads, and the pruning of
documents that are gone, hidden or out of the searchable zone.

Tables (migration ``vectors_0001`` in ``index/schema.py``): ``chunks`` maps each visible
document to the character ranges of its chunks and the sha256 of each chunk's text;
``vectors`` holds one float32 BLOB per (model id, chunk text hash); ``embedded`` records
which content hash of a document was chunked for which model. ``vector_doc_log`` and
``vector_chunk_log`` (migration ``vectors_0002_change_logs``) are the doc log and the
chunk log that :mod:`memdir.vectors.index` follows.

That module decides what to embed and when; every query it needs is here, each run on
the connection (or in the transaction) the caller passes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from . import passages, pglog, postings
from .passages import batches, has_passages
from .search import Filters

_VISIBLE = "SELECT id FROM docs WHERE hidden = 0 AND zone = 0"

# One chunk row as read from the index: (doc id, chunk no, start, end, float32 bytes).
ChunkRow = tuple[int, int, int, int, bytes]
# One chunk of a document as a sync writes it: (chunk no, start, end, text hash).
ChunkEntry = tuple[int, int, int, str]


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


# -- state ---------------------------------------------------------------------------


def chunk_count(conn: sqlite3.Connection) -> int:
    """How many chunk rows the index holds (every model's documents)."""
    return int(conn.execute("SELECT count(*) FROM chunks").fetchone()[0])


def vector_count(conn: sqlite3.Connection, model: str) -> int:
    """How many vectors of this model the index holds."""
    row = conn.execute("SELECT count(*) FROM vectors WHERE model = ?", (model,)).fetchone()
    return int(row[0])


def docs_size(conn: sqlite3.Connection, doc_ids: list[int]) -> int:
    """The bytes of these documents' files, summed."""
    size = 0
    for part in batches(doc_ids, 500):
        marks = ",".join("?" * len(part))
        row = conn.execute(
            f"SELECT coalesce(sum(size), 0) FROM docs WHERE id IN ({marks})", part
        ).fetchone()
        size += int(row[0])
    return size


def unembedded(
    conn: sqlite3.Connection, model: str, among: Sequence[int] | None = None
) -> list[tuple[int, str]]:
    """(id, content hash) of visible documents without vectors of this model for their
    content, by id.

    ``among``: look at these documents only; None: all.
    """
    query = (
        "SELECT d.id, d.hash FROM docs d LEFT JOIN embedded e ON e.doc_id = d.id "
        "WHERE d.hidden = 0 AND d.zone = 0 "
        "AND (e.doc_id IS NULL OR e.hash != d.hash OR e.model != ?)"
    )
    if among is None:
        rows = conn.execute(query + " ORDER BY d.id", (model,)).fetchall()
    else:
        rows = []
        for part in batches(sorted(among), 500):
            marks = ",".join("?" * len(part))
            rows += conn.execute(f"{query} AND d.id IN ({marks})", (model, *part))
        rows.sort(key=lambda r: int(r[0]))
    return [(int(r[0]), str(r[1])) for r in rows]


def doc_log_since(conn: sqlite3.Connection, seq: int) -> list[tuple[int, int]]:
    """(document id, seq) of the doc log's entries after ``seq``."""
    rows = conn.execute("SELECT doc_id, seq FROM vector_doc_log WHERE seq > ?", (seq,))
    return [(int(r[0]), int(r[1])) for r in rows]


def docs_above(conn: sqlite3.Connection, doc_id: int) -> list[int]:
    """The ids of documents above this id (those added since it was the largest)."""
    return [int(r[0]) for r in conn.execute("SELECT id FROM docs WHERE id > ?", (doc_id,))]


def absent_docs(conn: sqlite3.Connection, doc_ids: Sequence[int]) -> list[int]:
    """The ids among these that no document has (deleted), in their order."""
    found: set[int] = set()
    for part in batches(list(doc_ids), 500):
        marks = ",".join("?" * len(part))
        found.update(
            int(r[0]) for r in conn.execute(f"SELECT id FROM docs WHERE id IN ({marks})", part)
        )
    return [d for d in doc_ids if d not in found]


def doc_log_top(conn: sqlite3.Connection) -> tuple[int, int]:
    """(last seq of the doc log, largest document id): what a sync now would cover."""
    row = conn.execute(
        "SELECT (SELECT coalesce(max(seq), 0) FROM vector_doc_log), "
        "(SELECT coalesce(max(id), 0) FROM docs)"
    ).fetchone()
    return int(row[0]), int(row[1])


def max_doc_id(conn: sqlite3.Connection) -> int:
    """The largest document id (0 with no documents)."""
    return int(conn.execute("SELECT coalesce(max(id), 0) FROM docs").fetchone()[0])


def raise_meta(conn: sqlite3.Connection, key: str, value: int) -> None:
    """Set an integer meta key to ``value`` unless it already holds a larger one."""
    conn.execute(
        "INSERT INTO meta(key, value) VALUES (?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value = "
        "max(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER))",
        (key, str(value)),
    )


# -- sync writes -----------------------------------------------------------------------


def known_hashes(conn: sqlite3.Connection, model: str, hashes: list[str]) -> set[str]:
    """The text hashes among these that already have a vector of this model."""
    found: set[str] = set()
    for lo in range(0, len(hashes), 500):
        part = hashes[lo : lo + 500]
        marks = ",".join("?" * len(part))
        found.update(
            str(r[0])
            for r in conn.execute(
                f"SELECT text_hash FROM vectors WHERE model = ? AND text_hash IN ({marks})",
                (model, *part),
            )
        )
    return found


def store_vectors(
    conn: sqlite3.Connection, model: str, dim: int, rows: list[tuple[str, bytes]]
) -> None:
    """Write (text hash, float32 bytes) vectors of this model and dimension, replacing any."""
    conn.executemany(
        "INSERT OR REPLACE INTO vectors(model, text_hash, dim, vec) VALUES (?,?,?,?)",
        [(model, text_hash, dim, vec) for text_hash, vec in rows],
    )


def store_chunks(
    conn: sqlite3.Connection,
    model: str,
    doc_id: int,
    doc_hash: str,
    entries: list[ChunkEntry],
) -> None:
    """Replace a document's chunk rows and record its content as chunked for this model."""
    conn.execute("DELETE FROM chunks WHERE doc_id = ?", (doc_id,))
    conn.executemany(
        "INSERT INTO chunks(doc_id, chunk_no, start, end, text_hash) VALUES (?,?,?,?,?)",
        [(doc_id, no, start, end, h) for no, start, end, h in entries],
    )
    conn.execute(
        "INSERT OR REPLACE INTO embedded(doc_id, hash, model) VALUES (?,?,?)",
        (doc_id, doc_hash, model),
    )


def drop_all(conn: sqlite3.Connection) -> None:
    """Delete every chunk, vector (all models), passage and sync mark, and the chunk log.

    The caller sets a new ``vectors_epoch`` in the same transaction, so every loaded
    matrix, in any process, loads afresh.
    """
    conn.execute("DELETE FROM chunks")
    conn.execute("DELETE FROM embedded")
    conn.execute("DELETE FROM vectors")
    if has_passages(conn):
        for table in passages.NAMES:
            conn.execute(f"DELETE FROM {table}")
    postings.drop(conn, postings.PASSAGES)
    pglog.renew(conn)  # every passage went: the Postgres engine rebuilds
    conn.execute(
        "DELETE FROM meta WHERE key IN "
        "('vectors_model', 'vectors_generation', 'vectors_doc_seq', 'vectors_doc_max')"
    )
    conn.execute("DELETE FROM vector_chunk_log")


# -- search ----------------------------------------------------------------------------

_ROWS = (
    "SELECT c.doc_id, c.chunk_no, c.start, c.end, v.vec FROM chunks c "
    "JOIN vectors v ON v.text_hash = c.text_hash AND v.model = ?"
)


def chunk_log_top(conn: sqlite3.Connection) -> tuple[str | None, int]:
    """(epoch of the chunk log, its last seq): where a loaded matrix would stand now."""
    row = conn.execute(
        "SELECT (SELECT value FROM meta WHERE key = 'vectors_epoch'), "
        "(SELECT coalesce(max(seq), 0) FROM vector_chunk_log)"
    ).fetchone()
    return (None if row[0] is None else str(row[0])), int(row[1])


def chunk_log_since(conn: sqlite3.Connection, seq: int) -> list[tuple[int, int]]:
    """(document id, seq) of the chunk log's entries after ``seq``."""
    rows = conn.execute("SELECT doc_id, seq FROM vector_chunk_log WHERE seq > ?", (seq,))
    return [(int(r[0]), int(r[1])) for r in rows]


def chunk_rows(conn: sqlite3.Connection, model: str) -> list[ChunkRow]:
    """Every chunk row with its vector of this model, by document and chunk number."""
    found = conn.execute(_ROWS + " ORDER BY c.doc_id, c.chunk_no", (model,))
    return [(int(r[0]), int(r[1]), int(r[2]), int(r[3]), r[4]) for r in found]


def chunk_rows_of(conn: sqlite3.Connection, model: str, doc_ids: list[int]) -> list[ChunkRow]:
    """The chunk rows of these documents (ids in order), by document and chunk number."""
    out: list[ChunkRow] = []
    for part in batches(doc_ids, 500):
        marks = ",".join("?" * len(part))
        out.extend(
            (int(r[0]), int(r[1]), int(r[2]), int(r[3]), r[4])
            for r in conn.execute(
                f"{_ROWS} WHERE c.doc_id IN ({marks}) ORDER BY c.doc_id, c.chunk_no",
                (model, *part),
            )
        )
    return out


def visible_among(conn: sqlite3.Connection, doc_ids: list[int], filters: Filters) -> set[int]:
    """The ids among ``doc_ids`` that pass the filters (hidden docs never do by default)."""
    condition, params = filters.sql("d")
    found: set[int] = set()
    for part in batches(doc_ids, 500):
        marks = ",".join("?" * len(part))
        found.update(
            int(r[0])
            for r in conn.execute(
                f"SELECT d.id FROM docs d WHERE d.id IN ({marks}){condition}",
                (*part, *params),
            )
        )
    return found
