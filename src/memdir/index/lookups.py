"""What search asks of documents it already holds by id or path: their ids, the columns and
body a pointer shows, FTS5's matching window, and the created time, user and thread the
hybrid signals weigh (with a turn's neighbours in its thread).

Each is one query per call (the neighbours one per candidate), over the ids given; the
callers in :mod:`memdir.retrieval` do the scoring.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from .search import Filters

# What FTS5 puts where it cuts a window (``snippet()``): a pointer's snippet shows it too.
ELLIPSIS = " … "


def ids_for(conn: sqlite3.Connection, paths: list[str]) -> dict[str, int]:
    """The id of each of ``paths`` the index holds."""
    if not paths:
        return {}
    marks = ",".join("?" * len(paths))
    rows = conn.execute(f"SELECT path, id FROM docs WHERE path IN ({marks})", paths).fetchall()
    return {str(r[0]): int(r[1]) for r in rows}


def pointer_rows(conn: sqlite3.Connection, doc_ids: list[int]) -> list[sqlite3.Row]:
    """What a pointer shows of each document: ``id``, ``path``, ``title``, ``type``,
    ``memory_kind``, ``thread``, ``user``, ``created``, ``episode_id`` and the indexed
    ``body``; in no set order."""
    marks = ",".join("?" * len(doc_ids))
    return conn.execute(
        "SELECT d.id, d.path, d.title, d.type, d.memory_kind, d.thread, d.user, d.created, "
        f"d.episode_id, f.body FROM docs d JOIN docs_fts f ON f.rowid = d.id "
        f"WHERE d.id IN ({marks})",
        doc_ids,
    ).fetchall()


def match_windows(
    conn: sqlite3.Connection, match: str, doc_ids: list[int]
) -> list[tuple[int, str | None]]:
    """``(id, window)``: FTS5's window of 16 tokens of each document's body that matches the
    FTS5 query ``match``, the words unmarked, cut ends shown as :data:`ELLIPSIS`."""
    marks = ",".join("?" * len(doc_ids))
    return conn.execute(
        f"SELECT rowid, snippet(docs_fts, 1, '', '', '{ELLIPSIS}', 16) FROM docs_fts "
        f"WHERE docs_fts MATCH ? AND rowid IN ({marks})",
        (match, *doc_ids),
    ).fetchall()


def created(conn: sqlite3.Connection, keys: list[int]) -> list[tuple[int, str | None]]:
    """``(id, created)`` of each document."""
    marks = ",".join("?" * len(keys))
    return conn.execute(f"SELECT id, created FROM docs WHERE id IN ({marks})", keys).fetchall()


def users(conn: sqlite3.Connection, keys: list[int]) -> list[tuple[int, str]]:
    """``(id, user)`` of each document that names a user."""
    marks = ",".join("?" * len(keys))
    return conn.execute(
        f"SELECT id, user FROM docs WHERE id IN ({marks}) AND user IS NOT NULL", keys
    ).fetchall()


def visible_users(conn: sqlite3.Connection) -> list[str]:
    """Every user a visible document names (turn speakers), once each, in no set order."""
    return [
        str(r[0])
        for r in conn.execute(
            "SELECT DISTINCT user FROM docs WHERE user IS NOT NULL AND user != '' "
            "AND hidden = 0 AND zone = 0"
        )
    ]


def threads_of(
    conn: sqlite3.Connection, keys: list[int], *, shared: bool = False
) -> dict[int, str]:
    """The thread of each document that has one.

    ``shared``: only threads with another visible document. The thread signals lift a
    document by what its thread holds; a thread of one document holds only that
    document, whose own match would then count twice (a one-turn thread's turn
    outranked a note that matched better on every signal).
    """
    marks = ",".join("?" * len(keys))
    others = (
        " AND EXISTS (SELECT 1 FROM docs o WHERE o.thread = d.thread AND o.id != d.id "
        "AND o.hidden = 0 AND o.zone = 0)"
        if shared
        else ""
    )
    return {
        int(r[0]): str(r[1])
        for r in conn.execute(
            f"SELECT d.id, d.thread FROM docs d WHERE d.id IN ({marks}) "
            f"AND d.thread IS NOT NULL{others}",
            keys,
        )
    }


def thread_neighbours(
    conn: sqlite3.Connection, keys: Sequence[int], flt: Filters
) -> list[tuple[int, list[int]]]:
    """For each document of ``keys`` in a thread, the documents of its thread just before and
    just after it by ``created`` that pass ``flt`` (none, one or two ids).

    One query for the threads, then one per document in a thread.
    """
    marks = ",".join("?" * len(keys))
    rows = conn.execute(
        f"SELECT id, thread, created FROM docs WHERE id IN ({marks}) AND thread IS NOT NULL",
        list(keys),
    ).fetchall()
    condition, params = flt.sql("d")
    found: list[tuple[int, list[int]]] = []
    for row in rows:
        doc_id, thread, made = int(row[0]), row[1], row[2]
        neighbours = conn.execute(
            "SELECT id FROM (SELECT d.id, d.created FROM docs d WHERE d.thread = ? "
            f"AND d.created < ?{condition} ORDER BY d.created DESC LIMIT 1) "
            "UNION ALL SELECT id FROM (SELECT d.id FROM docs d WHERE d.thread = ? "
            f"AND d.created > ?{condition} ORDER BY d.created LIMIT 1)",
            (thread, made, *params, thread, made, *params),
        ).fetchall()
        found.append((doc_id, [int(n[0]) for n in neighbours]))
    return found
