"""The local index's change log of what the Postgres engine mirrors (docs/postgres.md).

``pg_log`` (migration ``pg_0001_change_log``) holds one row per path whose document row,
FTS rows, chunks or vectors changed, with the sequence number of its last change; the
meta key ``pg_log_epoch`` names the log. Triggers on ``docs``, ``chunks`` and ``vectors``
keep it, in every process that writes the index; the passages (FTS5 rows, which take no
triggers) are noted by :mod:`memdir.index.passages` through :func:`note_ids`. Nothing is
logged until the Postgres engine calls :func:`enable`: an index used with SQLite only
logs nothing. A local rebuild empties the log and removes the epoch (the Postgres
engine then rebuilds the store's rows), and a change too broad to log row by row (every
passage dropped) starts a new epoch (:func:`renew`) with the same effect.

Postgres records, per store, the epoch and seq it was last brought in step with; the
next sync pushes only the paths logged after that seq (:mod:`memdir.index.postgres`).
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Sequence

__all__ = ["enable", "note_ids", "renew", "since", "top"]

EPOCH = "pg_log_epoch"


def _epoch(conn: sqlite3.Connection) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (EPOCH,)).fetchone()
    return None if row is None else str(row[0])


def _has_log(conn: sqlite3.Connection) -> bool:
    row = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'pg_log'").fetchone()
    return row is not None


def top(conn: sqlite3.Connection) -> tuple[str | None, int]:
    """(epoch, last seq) of the log; epoch None while nothing is logged."""
    if not _has_log(conn):
        return None, 0
    row = conn.execute(
        f"SELECT (SELECT value FROM meta WHERE key = '{EPOCH}'), "
        "(SELECT coalesce(max(seq), 0) FROM pg_log)"
    ).fetchone()
    return (None if row[0] is None else str(row[0])), int(row[1])


def enable(conn: sqlite3.Connection) -> str:
    """Start logging (in the caller's transaction) unless already on; returns the epoch."""
    epoch = _epoch(conn)
    if epoch is None:
        epoch = secrets.token_hex(8)
        conn.execute("DELETE FROM pg_log")
        conn.execute("INSERT INTO meta(key, value) VALUES (?, ?)", (EPOCH, epoch))
    return epoch


def renew(conn: sqlite3.Connection) -> None:
    """Start a new epoch (the next sync rebuilds the store's rows), if the log is on."""
    if _has_log(conn) and _epoch(conn) is not None:
        conn.execute("DELETE FROM pg_log")
        conn.execute("UPDATE meta SET value = ? WHERE key = ?", (secrets.token_hex(8), EPOCH))


def note_ids(conn: sqlite3.Connection, doc_ids: Sequence[int]) -> None:
    """Log the paths of these documents (their passages changed), if the log is on."""
    if not doc_ids or not _has_log(conn) or _epoch(conn) is None:
        return
    for lo in range(0, len(doc_ids), 500):
        part = list(doc_ids[lo : lo + 500])
        marks = ",".join("?" * len(part))
        conn.execute(
            "INSERT INTO pg_log(path, seq) SELECT path, "
            "(SELECT coalesce(max(seq), 0) + 1 FROM pg_log) "
            f"FROM docs WHERE id IN ({marks}) ON CONFLICT(path) DO UPDATE SET seq = excluded.seq",
            part,
        )


def since(conn: sqlite3.Connection, seq: int) -> list[str]:
    """The paths logged after ``seq``, in path order."""
    rows = conn.execute("SELECT path FROM pg_log WHERE seq > ? ORDER BY path", (seq,))
    return [str(r[0]) for r in rows]
