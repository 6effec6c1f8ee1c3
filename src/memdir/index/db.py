"""Opening the index database and applying migrations."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import sqlite3
import sys
import time
from pathlib import Path

from ..errors import ConfigError
from .schema import MIGRATIONS

# How long a writer waits for the write lock another process holds (a full rebuild holds it
# from start to end) before it gives up with memdir.errors.IndexBusy.
BUSY_SECONDS = 60.0


def connect(path: Path) -> sqlite3.Connection:
    """Open (creating when needed) the index in WAL mode and migrate it.

    The index is derived from the files: one that SQLite cannot read (not a database, a
    damaged image, someone else's schema) is moved aside as ``index.db.damaged-<time>``,
    with a note on stderr, and a new one is made; the next sync fills it from the files.
    """
    try:
        return _connect(path)
    except sqlite3.DatabaseError as exc:
        if not _is_damage(exc):
            raise  # "database is locked" and the like are not damage
        first = exc
    # One process at a time sets a damaged index aside. Each opens it again under the lock
    # first: another may have replaced it meanwhile, and moving that new index aside would
    # leave the other process writing into the copy.
    try:
        lock = os.open(f"{path}.repair.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        raise first from None  # a read-only folder: nothing can be repaired, SQLite's error
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return _connect(path)
        except sqlite3.DatabaseError as exc:
            if not _is_damage(exc):
                raise
            _set_aside(path, exc)
        return _connect(path)
    finally:
        os.close(lock)


def _is_damage(exc: sqlite3.DatabaseError) -> bool:
    return any(sign in str(exc) for sign in _DAMAGED)


def remove_set_aside(path: Path) -> None:
    """Delete every index once found damaged and set aside beside ``path`` (a folder whole:
    :func:`connect` moves a damaged folder too)."""
    for aside in path.parent.glob(f"{path.name}.damaged-*"):
        if aside.is_dir() and not aside.is_symlink():
            import shutil  # not at the top: a hook needs none (test_hook_imports)

            shutil.rmtree(aside, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                aside.unlink()


def _set_aside(path: Path, exc: sqlite3.DatabaseError) -> None:
    """Move the damaged index and its log aside, the log first.

    A process that opens the index between two of the renames then meets the damaged
    file without its log (damage again, so it waits on the repair lock), never a new
    file paired with the old log, which SQLite would play into it.
    """
    stamp = time.strftime("%Y%m%dT%H%M%S")
    aside = path.with_name(f"{path.name}.damaged-{stamp}-{os.getpid()}")
    try:
        for suffix in ("-wal", "-shm", ""):
            with contextlib.suppress(FileNotFoundError):
                os.replace(f"{path}{suffix}", f"{aside}{suffix}")  # a folder moves too
    except OSError:
        raise exc from None  # cannot be moved (a read-only folder): SQLite's own error
    sys.stderr.write(
        f"memdir: the index {path} could not be read ({exc}); it was moved to "
        f"{aside.name} and is rebuilt from the files\n"
    )


# What SQLite says of a file that is not a readable memdir index.
_DAMAGED = (
    "not a database",
    "malformed",
    "already exists",
    "no such table",
    "no such column",
    "unable to open database file",
    "vtable constructor failed",
)


def _connect(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(
        path, timeout=BUSY_SECONDS, isolation_level=None, check_same_thread=False
    )
    try:
        return _prepare(conn, path)
    except BaseException:
        conn.close()
        raise


def _prepare(conn: sqlite3.Connection, path: Path) -> sqlite3.Connection:
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {int(BUSY_SECONDS * 1000)}")
    mode = switch_to_wal(conn)
    if mode != "wal":
        raise ConfigError(f"the index at {path} could not switch to WAL mode ({mode})")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA temp_store = MEMORY")
    # Deleted cells are zeroed in their page (no extra I/O), so a purge leaves no bytes
    # behind in pages still in use (memdir.index.Index.scrub clears the free pages).
    conn.execute("PRAGMA secure_delete = FAST")
    conn.execute("PRAGMA cache_size = -32000")
    migrate(conn)
    probe_full_text(conn)
    if conn.execute("SELECT 1 FROM meta WHERE key = ?", (PENDING_INDEXES,)).fetchone():
        conn.execute("BEGIN IMMEDIATE")
        try:
            create_pending_indexes(conn)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return conn


def probe_full_text(conn: sqlite3.Connection) -> None:
    """Raise SQLite's error when a full-text table of the index cannot be searched.

    A damaged FTS5 structure record ("vtable constructor failed") leaves the rest of the
    file readable and ``integrity_check`` content, but every write that reaches the table
    fails; found here, the index is moved aside and rebuilt like any other damage.
    """
    names = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE '%USING fts5(%'"
    ).fetchall()
    for (name,) in names:
        conn.execute(f'SELECT rowid FROM "{name}" WHERE "{name}" MATCH ? LIMIT 1', ("probe",))


PENDING_INDEXES = "pending_indexes"

# How long to keep asking for the lock that switching a new index to WAL takes.
WAL_SWITCH_SECONDS = 60.0


def switch_to_wal(conn: sqlite3.Connection) -> str:
    """Put the database in WAL mode (kept in the file) and return the mode it is in.

    Switching needs an exclusive lock, and SQLite reports "database is locked" at once,
    without waiting, when another process opening the same new index holds a shared one
    (waiting could deadlock both). So the switch is retried here until it is done or
    another process has done it.
    """
    deadline = time.monotonic() + WAL_SWITCH_SECONDS
    pause = 0.005
    while True:
        try:
            mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
            if mode == "wal":
                return mode
            return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.2)


def create_pending_indexes(conn: sqlite3.Connection) -> None:
    """Create the indexes a bulk rebuild dropped (in the caller's transaction)."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (PENDING_INDEXES,)).fetchone()
    if row is None:
        return
    for sql in json.loads(row[0]):
        conn.execute(re.sub(r"^CREATE (UNIQUE )?INDEX ", r"CREATE \1INDEX IF NOT EXISTS ", sql))
    conn.execute("DELETE FROM meta WHERE key = ?", (PENDING_INDEXES,))


_MIGRATIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
)


def applied_migrations(conn: sqlite3.Connection) -> list[str]:
    """The migrations applied to this index, in order (none for a new file).

    Only reads: a write outside a transaction that began as a read can fail with "database
    is locked" at once when another process migrates the same new index.
    """
    known = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'migrations'"
    ).fetchone()
    if known is None:
        return []
    return [row[0] for row in conn.execute("SELECT name FROM migrations ORDER BY rowid")]


def migrate(conn: sqlite3.Connection) -> list[str]:
    """Apply the migrations not yet applied, in order; returns their names."""
    done = set(applied_migrations(conn))
    todo = [(name, sql) for name, sql in MIGRATIONS if name not in done]
    if not todo:
        return []
    conn.execute("BEGIN IMMEDIATE")  # waits for another process migrating the same index
    try:
        conn.execute(_MIGRATIONS_TABLE)
        done = {row[0] for row in conn.execute("SELECT name FROM migrations")}
        applied = []
        for name, sql in todo:
            if name in done:
                continue
            for statement in _statements(sql):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO migrations(name, applied_at) VALUES (?, datetime('now'))", (name,)
            )
            applied.append(name)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return applied


def _statements(script: str) -> list[str]:
    parts: list[str] = []
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            if buffer.strip():
                parts.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        parts.append(buffer.strip())
    return parts
