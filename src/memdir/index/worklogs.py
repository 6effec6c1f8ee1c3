"""The raw work logs of turns in the index: ``worklogs`` (which turn row each log was read for)
and ``worklog_fts`` (their text), kept in step on demand and searched with BM25.

Nothing here reads a file: :meth:`memdir.turns.verbs.TurnLog.sync_worklogs` reads the
sidecars and hands their text to :func:`put`.
"""

from __future__ import annotations

import sqlite3

from .search import Filters


def pending(conn: sqlite3.Connection) -> tuple[list[tuple[int, str]], list[int]]:
    """The turns whose work log is not indexed for their current path (``(id, path)``), and the
    ids of indexed work logs whose turn row is gone or has moved."""
    todo = conn.execute(
        "SELECT d.id, d.path FROM docs d LEFT JOIN worklogs w "
        "ON w.doc_id = d.id AND w.path = d.path WHERE d.type = 'turn' AND w.doc_id IS NULL"
    ).fetchall()
    stale = conn.execute(
        "SELECT w.doc_id FROM worklogs w LEFT JOIN docs d "
        "ON d.id = w.doc_id AND d.path = w.path WHERE d.id IS NULL"
    ).fetchall()
    return [(int(r[0]), str(r[1])) for r in todo], [int(r[0]) for r in stale]


def drop(tx: sqlite3.Connection, doc_id: int) -> None:
    """Forget the work log indexed for turn row ``doc_id`` (inside the caller's transaction)."""
    tx.execute("DELETE FROM worklog_fts WHERE rowid = ?", (doc_id,))
    tx.execute("DELETE FROM worklogs WHERE doc_id = ?", (doc_id,))


def put(
    tx: sqlite3.Connection, doc_id: int, path: str, text: str, size: int, mtime_ns: int
) -> None:
    """Index ``text`` as the work log of turn row ``doc_id`` at ``path``, replacing any before.

    ``size`` and ``mtime_ns`` are the sidecar's (0 when it could not be read).
    """
    tx.execute("DELETE FROM worklog_fts WHERE rowid = ?", (doc_id,))
    tx.execute("INSERT INTO worklog_fts(rowid, body) VALUES (?, ?)", (doc_id, text))
    tx.execute(
        "INSERT OR REPLACE INTO worklogs(doc_id, path, size, mtime_ns) VALUES (?, ?, ?, ?)",
        (doc_id, path, size, mtime_ns),
    )


def search(conn: sqlite3.Connection, match: str, filters: Filters, limit: int) -> list[sqlite3.Row]:
    """The best ``limit`` work logs for the FTS5 query ``match``, best first (ties by turn id).

    Each row has the turn's ``path`` and ``episode_id``, ``snip`` (FTS5's window with the
    words in brackets) and ``score`` (``bm25()``, lower is better). ``filters`` apply to the
    turn the work log belongs to.
    """
    where, params = filters.sql("d")
    return conn.execute(
        "SELECT d.path, d.episode_id, snippet(worklog_fts, 0, '[', ']', ' … ', 16) AS snip, "
        "bm25(worklog_fts) AS score FROM worklog_fts JOIN docs d ON d.id = worklog_fts.rowid "
        f"WHERE worklog_fts MATCH ? AND d.type = 'turn'{where} "
        "ORDER BY score, d.episode_id LIMIT ?",
        (match, *params, limit),
    ).fetchall()
