"""What the verbs read of the ``docs`` table as a list: the paths and rows under filters in walk
order, every document's report facts, and whether one path is searchable."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

from .search import Filters

_LISTED = (
    "d.path, d.title, d.type, d.memory_kind, d.size, d.thread, d.user, d.created, d.episode_id"
)


def paths(conn: sqlite3.Connection, flt: Filters) -> list[str]:
    """The paths ``flt`` lets through, in walk order.

    All of them at once: a cursor left open by an error would hold its read snapshot, and
    this thread's next write would fail with "database is locked".
    """
    condition, params = flt.sql()
    sql = f"SELECT d.path FROM docs d WHERE 1 = 1{condition} ORDER BY d.walk_key"
    return [str(rel) for (rel,) in conn.execute(sql, params)]


def rows(conn: sqlite3.Connection, flt: Filters) -> list[sqlite3.Row]:
    """The rows ``ls`` shows (path, title, type, kind, size, and a turn's thread, user, time
    and id for its title), in walk order."""
    condition, params = flt.sql()
    sql = f"SELECT {_LISTED} FROM docs d WHERE 1 = 1{condition} ORDER BY d.walk_key"
    return list(conn.execute(sql, params))


def facts(conn: sqlite3.Connection) -> Iterator[str]:
    """Every document's memory-report facts (JSON text), in walk order."""
    cur = conn.cursor()
    cur.row_factory = None
    for (text,) in cur.execute("SELECT facts FROM docs ORDER BY walk_key"):
        yield str(text)


def searchable(conn: sqlite3.Connection, rel: str) -> bool:
    """True when ``rel`` is indexed, not forgotten and outside quarantine/ and inbox/."""
    row = conn.execute(
        "SELECT 1 FROM docs WHERE path = ? AND hidden = 0 AND zone = 0", (rel,)
    ).fetchone()
    return row is not None
