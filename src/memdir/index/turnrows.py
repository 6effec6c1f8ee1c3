"""The rows of ``docs`` the context pack and the turn verbs read: the routers, a thread's and a
user's latest turns, the recent turns that match keywords, and turns by id.

Every query here is bounded (a LIMIT or a list of ids) and runs on an index of ``docs``, so
the pack's cost does not grow with the store. The callers rank and budget what they get.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

# The columns of a turn the pack reads (a row of each is a pack candidate).
_TURN_COLS = "d.path, d.episode_id, d.thread, d.user, d.created"
# A visible turn; the ``+`` keeps the planner off ``docs_type`` (on the thread, user or rowid).
_VISIBLE_TURN = "+d.type = 'turn' AND d.hidden = 0 AND d.zone = 0"
# The same condition as the partial index ``docs_routers`` (schema 0100), so it is used.
_ROUTER_WHERE = "(path = 'index.md' OR path LIKE '%/index.md')"


def routers(conn: sqlite3.Connection, limit: int) -> list[str]:
    """The paths of the visible routers (``index.md`` files), shallowest first, then by path."""
    return [
        str(row[0])
        for row in conn.execute(
            f"SELECT path FROM docs WHERE {_ROUTER_WHERE} AND hidden = 0 AND zone = 0 "
            "ORDER BY length(path) - length(replace(path, '/', '')), path LIMIT ?",
            (limit,),
        )
    ]


def thread_latest(conn: sqlite3.Connection, thread: str, limit: int) -> list[sqlite3.Row]:
    """Up to ``limit`` visible turns of ``thread`` by ``created``, newest first (ties unordered)."""
    return conn.execute(
        f"SELECT {_TURN_COLS} FROM docs d WHERE d.thread = ? AND {_VISIBLE_TURN} "
        "ORDER BY d.created DESC LIMIT ?",
        (thread, limit),
    ).fetchall()


def user_latest(
    conn: sqlite3.Connection, user: str, other_than: str, limit: int
) -> list[sqlite3.Row]:
    """Up to ``limit`` visible turns of ``user`` outside thread ``other_than``, newest first.

    Read from the (user, created) index newest first; the turns of ``other_than`` are
    skipped in SQL so only the rows used are fetched. Ties of ``created`` are unordered.
    """
    return conn.execute(
        f"SELECT {_TURN_COLS} FROM docs d WHERE d.user = ? AND {_VISIBLE_TURN} "
        "AND +d.thread IS NOT ? ORDER BY d.created DESC LIMIT ?",
        (user, other_than, limit),
    ).fetchall()


def matching_turns(conn: sqlite3.Connection, match: str, limit: int) -> list[int]:
    """The ids of the ``limit`` last-indexed visible turns matching the FTS5 query ``match``.

    Read by rowid from the top, so the cost is bounded by ``limit``, not by the matches.
    """
    return [
        int(r[0])
        for r in conn.execute(
            "SELECT f.rowid FROM docs_fts f JOIN docs d ON d.id = f.rowid "
            f"WHERE docs_fts MATCH ? AND {_VISIBLE_TURN} ORDER BY f.rowid DESC LIMIT ?",
            (match, limit),
        )
    ]


def matches_from(conn: sqlite3.Connection, match: str, low: int) -> set[int]:
    """The ids at or above ``low`` of every document matching the FTS5 query ``match``."""
    return {
        int(r[0])
        for r in conn.execute(
            "SELECT rowid FROM docs_fts WHERE docs_fts MATCH ? AND rowid >= ?", (match, low)
        )
    }


def sort_keys(
    conn: sqlite3.Connection, doc_ids: Sequence[int]
) -> list[tuple[int, str | None, str | None]]:
    """``(id, created, episode_id)`` of each document: plain tuples, to sort them cheaply."""
    cur = conn.cursor()
    cur.row_factory = None
    marks = ",".join("?" * len(doc_ids))
    return cur.execute(
        f"SELECT d.id, d.created, d.episode_id FROM docs d WHERE d.id IN ({marks})", doc_ids
    ).fetchall()


def turns_by_id(conn: sqlite3.Connection, doc_ids: Sequence[int]) -> dict[int, sqlite3.Row]:
    """The pack's columns (path, episode_id, thread, user, created) of each document by id."""
    marks = ",".join("?" * len(doc_ids))
    return {
        int(r["id"]): r
        for r in conn.execute(
            f"SELECT d.id, {_TURN_COLS} FROM docs d WHERE d.id IN ({marks})", doc_ids
        )
    }


def by_episode(conn: sqlite3.Connection, episode_ids: Sequence[str]) -> list[sqlite3.Row]:
    """``episode_id``, ``path`` and ``type`` of every document with one of these episode ids."""
    marks = ",".join("?" * len(episode_ids))
    return conn.execute(
        f"SELECT episode_id, path, type FROM docs WHERE episode_id IN ({marks})",
        list(episode_ids),
    ).fetchall()
