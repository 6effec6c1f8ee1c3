"""Index upkeep below the Index class: clearing every derived table for a rebuild, merging an
FTS5 table's segments, counting its levels, and zeroing free pages after a purge."""

from __future__ import annotations

import re
import sqlite3

from ..doc.lazyregex import LazyRegex
from . import postings

# The meta counters caches key on; a rebuild keeps them and moves them on.
COUNTERS = ("generation", postings.DOCS.seq_key, postings.PASSAGES.seq_key)

# What a rebuild keeps (see clear): the schema, and the vector side of the index, whose
# tables the vector sync keeps in step (memdir.vectors.index, memdir.index.passages), keyed by
# document id and content hash.
_KEPT_TABLES = (
    "migrations",
    "vectors",
    "chunks",
    "embedded",
    "passages_fts",
    "passage_links",
    "threads_fts",
    "thread_rows",
)
_KEPT_META = (*COUNTERS, "vectors_model", "passages_version")

# The storage of an FTS5 table, dropped with it.
_FTS5_SHADOWS = ("data", "idx", "content", "docsize", "config")
_VIRTUAL = LazyRegex(r"\s*CREATE\s+VIRTUAL\s", re.IGNORECASE)
_USING_FTS5 = LazyRegex(r"\sUSING\s+fts5\s*\(", re.IGNORECASE)


def clear(conn: sqlite3.Connection) -> None:
    """Empty the tables derived from the files (in the caller's transaction).

    An FTS5 table is dropped and made again (deleting its rows one by one costs as much
    as adding them); other virtual tables (fts5vocab) hold nothing. The counters stay
    (the caller moves them on), and so does the vector side: it is keyed by document id
    and content hash, a rebuild keeps each path's id, so the next vector sync brings it
    in step as after any sync (re-embedding only what changed), and hybrid search keeps
    its whole answer across the commit. ``memdir reindex --vectors`` rebuilds that side.
    """
    tables = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    ).fetchall()
    virtual = {str(n): str(sql) for n, sql in tables if _VIRTUAL.match(str(sql))}
    fts5 = {name: sql for name, sql in virtual.items() if _USING_FTS5.search(sql)}
    shadows = {f"{n}_{suffix}" for n in fts5 for suffix in _FTS5_SHADOWS}
    for name, sql in fts5.items():
        if name not in _KEPT_TABLES:
            conn.execute(f'DROP TABLE "{name}"')
            conn.execute(sql)
    for name, _sql in tables:
        if name in virtual or name in shadows or name in _KEPT_TABLES:
            continue
        if name == "meta":
            marks = ",".join("?" * len(_KEPT_META))
            conn.execute(f"DELETE FROM meta WHERE key NOT IN ({marks})", _KEPT_META)
        else:
            conn.execute(f'DELETE FROM "{name}"')


# The levels of an FTS5 table past which a purge rebuilds the table instead of merging it.
# An ``optimize`` that meets segments on two levels writes the merged segment on a new
# level above them, and SQLite 3.40 puts no cap on that. Once the merged segment is larger
# than a write's (a small table is pulled back down instead), each purge after writes adds
# levels, and past 2,000 FTS5 can no longer open the table ("vtable constructor failed",
# "database disk image is malformed"): about 1,000 purges. A rebuild starts from one level
# again; it reads every row, so it is paid only once the levels pass the bound.
FTS_LEVELS_BOUND = 32


def merge_fts(conn: sqlite3.Connection, fts: str) -> str:
    """Leave the FTS5 table ``fts`` with no deleted row's words in it; returns the command.

    ``optimize`` (merge every segment into one) while the table has few levels, else
    ``rebuild`` (index every row again from the table's own content, from one level).
    """
    levels = fts_levels(conn, fts)
    command = "optimize" if levels is not None and levels < FTS_LEVELS_BOUND else "rebuild"
    conn.execute(f"INSERT INTO {fts}({fts}) VALUES (?)", (command,))
    return command


def fts_levels(conn: sqlite3.Connection, fts: str) -> int | None:
    """How many levels the FTS5 table ``fts`` has (None when its record cannot be read).

    The structure record is row 10 of ``<table>_data``: a 4-byte cookie, in newer
    versions a 4-byte format mark ``ff 00 00 01``, then the level count as a varint
    (big-endian groups of 7 bits, the high bit set on every byte but the last).
    """
    row = conn.execute(f"SELECT block FROM {fts}_data WHERE id = 10").fetchone()
    if row is None or not isinstance(row[0], bytes):
        return None
    block: bytes = row[0]
    at = 8 if block[4:8] == b"\xff\x00\x00\x01" else 4
    value = 0
    for byte in block[at : at + 8]:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value
    return None


SCRUB_BLOB_BYTES = 64 * 1024 * 1024  # the zero blobs that overwrite free pages, each


def zero_free_pages(conn: sqlite3.Connection) -> None:
    """Overwrite every page on SQLite's free list with zeros (they keep deleted bytes).

    A table of zero blobs as large as the free list takes its pages (SQLite reuses free
    pages first) and writes zeros into them; dropped, they go back to the list zeroed.
    """
    free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    if not free:
        return
    size = free * int(conn.execute("PRAGMA page_size").fetchone()[0])
    conn.execute("CREATE TABLE memdir_scrub(b BLOB)")
    while size > 0:
        part = min(size, SCRUB_BLOB_BYTES)
        conn.execute("INSERT INTO memdir_scrub(b) VALUES (zeroblob(?))", (part,))
        size -= part
    conn.execute("DROP TABLE memdir_scrub")
