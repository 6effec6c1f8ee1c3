"""The derived index: SQLite (WAL) at ``.memdir/index.db``, rebuildable from the files.

Every verb calls :meth:`Index.sync` first. A sync stats every markdown file and
reads and hashes only those whose size or mtime changed; unchanged content is
never re-parsed. Writes made through memdir update the index for their paths
only (:meth:`Index.sync_paths`).
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from ..doc.paths import inside
from ..doc.text import content_hash
from ..doc.turnrecord import TURN_TYPE
from ..errors import IndexBusy
from ..files import locks
from ..records import field, recordclass, replace
from . import db, postings
from .db import connect
from .documents import DocRow, analyze
from .maintenance import COUNTERS, clear, merge_fts, zero_free_pages
from .scan import changes, scan

__all__ = ["DocRow", "Index", "SyncStats", "analyze"]

# A meta key set by the first sync that walked the whole store: from then on the index has
# seen every file at least once (memdir.agents.hooks answers before walking only then).
WALKED = "walked"
BULK_CHANGES = 1000  # a sync changing this many files checkpoints the log afterwards


@recordclass
class SyncStats:
    scanned: int = 0
    added: int = 0
    updated: int = 0
    touched: int = 0
    removed: int = 0
    seconds: float = 0.0
    changed_paths: list[str] = field(default_factory=list)

    @property
    def changed(self) -> int:
        return self.added + self.updated + self.removed


@recordclass
class Difference:
    missing_in_index: list[str] = field(default_factory=list)
    missing_on_disk: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    invalid_yaml: list[tuple[str, str]] = field(default_factory=list)
    invalid_utf8: list[str] = field(default_factory=list)
    fts_rows: int = 0
    doc_rows: int = 0

    @property
    def in_step(self) -> bool:
        return not (
            self.missing_in_index
            or self.missing_on_disk
            or self.stale
            or self.fts_rows != self.doc_rows
        )


def _drop_turn(conn: sqlite3.Connection, doc_id: int, eid: str | None, kind: str | None) -> None:
    """Remove a document's rows from the turn graph (when it was indexed as a turn)."""
    if kind == TURN_TYPE and eid:
        conn.execute("DELETE FROM turn_nodes WHERE eid = ? AND doc_id = ?", (eid, doc_id))
        conn.execute("DELETE FROM turn_edges WHERE child = ? AND doc_id = ?", (eid, doc_id))


class Index:
    """The SQLite index of one store. Thread-safe: one connection per thread."""

    def __init__(self, root: Path, db_path: Path | None = None) -> None:
        self.root = root
        self.path = db_path or root / ".memdir" / "index.db"
        self._local = threading.local()
        self._write_mutex = threading.RLock()
        self._all: list[sqlite3.Connection] = []
        # While a rebuild runs (it holds the write mutex): the id each known path keeps,
        # and the next id for a new one.
        self._kept_ids: dict[str, int] | None = None
        self._next_id = 0

    @property
    def conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path)
            self._local.conn = conn
            self._all.append(conn)
        return conn

    def close(self) -> None:
        for conn in self._all:
            with suppress(sqlite3.Error):
                conn.close()
        self._all.clear()
        self._local = threading.local()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One writer at a time (threads by a mutex, processes by SQLite's lock).

        Inside another transaction of this thread (a rebuild's), it is a savepoint of it:
        nothing commits before the outer one does.
        """
        with self._write_mutex:
            conn = self.conn
            if getattr(self._local, "writing", False):
                with self._savepoint(conn):
                    yield conn
                return
            self._begin(conn)
            self._local.writing = True
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            finally:
                self._local.writing = False
            conn.execute("COMMIT")

    def _begin(self, conn: sqlite3.Connection) -> None:
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc):
                raise
            raise IndexBusy(
                f"another process held the write lock of the index {self.path} for over "
                f"{db.BUSY_SECONDS:g} s (a full rebuild of a large store can); this change "
                "did not reach the index, and the next sync brings it in step"
            ) from None

    @staticmethod
    @contextmanager
    def _savepoint(conn: sqlite3.Connection) -> Iterator[None]:
        conn.execute("SAVEPOINT nested")
        try:
            yield
        except BaseException:
            conn.execute("ROLLBACK TO nested")
            conn.execute("RELEASE nested")
            raise
        conn.execute("RELEASE nested")

    # -- meta ----------------------------------------------------------------------

    def meta(self, key: str, default: str | None = None) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return str(row[0]) if row else default

    def set_meta(self, conn: sqlite3.Connection, key: str, value: str) -> None:
        conn.execute(
            "INSERT INTO meta(key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    @property
    def generation(self) -> int:
        """A counter bumped by every change to the index; caches key on it."""
        return int(self.meta("generation", "0") or 0)

    def _bump(self, conn: sqlite3.Connection) -> None:
        conn.execute(
            "INSERT INTO meta(key, value) VALUES ('generation', '1') "
            "ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1"
        )

    # -- sync ----------------------------------------------------------------------

    def _known(self) -> dict[str, tuple[int, int, str]]:
        return {
            row[0]: (row[1], row[2], row[3])
            for row in self.conn.execute("SELECT path, mtime_ns, size, hash FROM docs")
        }

    def _stamps(self) -> dict[str, tuple[int, int]]:
        """``path -> (mtime_ns, size)`` of every indexed document (plain tuples: fast)."""
        cur = self.conn.cursor()
        cur.row_factory = None
        rows = cur.execute("SELECT path, mtime_ns, size FROM docs")
        return {path: (mtime_ns, size) for path, mtime_ns, size in rows}

    def sync(self, *, full: bool = False) -> SyncStats:
        """Bring the index in step with the files: stat all, read only what changed."""
        started = time.perf_counter()
        stats = SyncStats()
        stamps = self._stamps()
        changed, stats.scanned = changes(self.root, stamps, everything=full)
        # In path order, so a rebuild adds turns (date folders, time-sortable ids) oldest
        # first and row order stays time order, as recording keeps it; the walk order is
        # the file system's.
        changed.sort()
        gone = list(stamps)  # indexed, not seen on disk
        if self.meta(WALKED) is None:  # the walk is done: every file is seen (memdir hook)
            with self.transaction() as conn:  # (set before applying: a bulk sync checkpoints)
                self.set_meta(conn, WALKED, "1")
        if changed or gone:
            known = self._hashes([rel for rel, _, _ in changed]) if not full else {}
            self._apply(changed, gone, known, stats, force=full)
        stats.seconds = time.perf_counter() - started
        return stats

    def _hashes(self, rels: list[str]) -> dict[str, tuple[int, int, str]]:
        """The stored ``(mtime_ns, size, hash)`` of the given paths (those indexed)."""
        if len(rels) > 2000:
            return self._known()
        out: dict[str, tuple[int, int, str]] = {}
        for rel in rels:
            row = self.conn.execute(
                "SELECT mtime_ns, size, hash FROM docs WHERE path = ?", (rel,)
            ).fetchone()
            if row:
                out[rel] = (row[0], row[1], row[2])
        return out

    def sync_paths(self, rels: Iterable[str]) -> SyncStats:
        """Update the index for the given paths only (after a write made through memdir)."""
        started = time.perf_counter()
        stats = SyncStats()
        changed: list[tuple[str, int, int]] = []
        gone: list[str] = []
        wanted = list(dict.fromkeys(rels))
        real_root = os.path.realpath(self.root)
        known: dict[str, tuple[int, int, str]] = {}
        for rel in wanted:
            row = self.conn.execute(
                "SELECT mtime_ns, size, hash FROM docs WHERE path = ?", (rel,)
            ).fetchone()
            if row:
                known[rel] = (row[0], row[1], row[2])
            try:
                st = os.stat(self.root / rel)
                if not inside(real_root, os.fspath(self.root / rel)):
                    raise FileNotFoundError(rel)  # a symlink out of the store: not indexed
            except FileNotFoundError:
                if row:
                    gone.append(rel)
                continue
            if _indexable(rel):
                changed.append((rel, st.st_mtime_ns, st.st_size))
        stats.scanned = len(wanted)
        if changed or gone:
            self._apply(changed, gone, known, stats, force=False)
        stats.seconds = time.perf_counter() - started
        return stats

    def _apply(
        self,
        changed: list[tuple[str, int, int]],
        gone: list[str],
        known: dict[str, tuple[int, int, str]],
        stats: SyncStats,
        *,
        force: bool,
    ) -> None:
        """Read, parse and store changed files in batches (bounded memory), then deletions."""
        batch = 1000
        for start in range(0, len(changed), batch):
            rows: list[DocRow] = []
            touched: list[tuple[str, int, int]] = []
            for rel, mtime_ns, _size in changed[start : start + batch]:
                try:
                    raw = (self.root / rel).read_bytes()
                except (FileNotFoundError, IsADirectoryError, PermissionError):
                    continue
                old = known.get(rel)
                if not force and old is not None and old[2] == content_hash(raw):
                    touched.append((rel, mtime_ns, len(raw)))
                else:
                    rows.append(analyze(rel, raw, mtime_ns, len(raw)))
            with self.transaction() as conn:
                written: list[int] = []
                for row in rows:
                    doc_id, new = self._upsert(conn, row)
                    written.append(doc_id)
                    if new:
                        stats.added += 1
                    else:
                        stats.updated += 1
                    stats.changed_paths.append(row.path)
                postings.note_changes(conn, written)
                if touched:
                    self._touch(conn, touched)
                stats.touched += len(touched)
                if rows or touched:
                    self._bump(conn)
        if gone:
            with self.transaction() as conn:
                deleted: list[int] = []
                for rel in gone:
                    gone_id = self._delete(conn, rel)
                    if gone_id is not None:
                        deleted.append(gone_id)
                        stats.removed += 1
                        stats.changed_paths.append(rel)
                postings.note_changes(conn, deleted)
                self._bump(conn)
        if len(changed) + len(gone) >= BULK_CHANGES and not getattr(self._local, "writing", False):
            self._checkpoint()  # a rebuild checkpoints after its commit

    def _checkpoint(self) -> None:
        """Fold a large write-ahead log into the database file and empty it.

        After a bulk sync, every read would otherwise look its pages up in tens of MB of
        log (a 100k-turn rebuild: ancestors p95 11.6 ms before, 9.7 ms after). Tried
        once, without waiting: a busy reader or writer just leaves it for SQLite's own
        checkpoints.
        """
        conn = self.conn
        timeout = conn.execute("PRAGMA busy_timeout").fetchone()[0]
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.OperationalError:
            pass
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(timeout)}")

    def _touch(self, conn: sqlite3.Connection, touched: list[tuple[str, int, int]]) -> None:
        """Same content, new mtime: update the stamp and the mtime the report uses."""
        for rel, mtime_ns, size in touched:
            found = conn.execute("SELECT facts FROM docs WHERE path = ?", (rel,)).fetchone()
            if found is None:
                continue
            from ..kiwi.report import FileFacts  # here: ~15 ms of a hook's import otherwise

            facts = replace(FileFacts.from_json(found[0]), mtime=mtime_ns / 1e9)
            conn.execute(
                "UPDATE docs SET mtime_ns = ?, size = ?, facts = ? WHERE path = ?",
                (mtime_ns, size, facts.to_json(), rel),
            )

    def _upsert(self, conn: sqlite3.Connection, row: DocRow) -> tuple[int, bool]:
        """Insert or replace one document: its id, and True when it is new."""
        existing = conn.execute(
            "SELECT id, episode_id, type FROM docs WHERE path = ?", (row.path,)
        ).fetchone()
        values = (
            row.walk_key,
            row.hash,
            row.mtime_ns,
            row.size,
            row.fm,
            int(row.fm_ok),
            row.title,
            row.memory_kind,
            row.type,
            row.status,
            row.episode_id,
            row.thread,
            row.user,
            row.created,
            int(row.hidden),
            row.zone,
            row.facts,
        )
        if existing:
            doc_id = int(existing[0])
            conn.execute(
                "UPDATE docs SET walk_key=?, hash=?, mtime_ns=?, size=?, fm=?, fm_ok=?, "
                "title=?, memory_kind=?, type=?, status=?, episode_id=?, thread=?, user=?, "
                "created=?, hidden=?, zone=?, facts=? WHERE id=?",
                (*values, doc_id),
            )
            conn.execute("DELETE FROM links WHERE src = ?", (doc_id,))
            conn.execute("DELETE FROM docs_fts WHERE rowid = ?", (doc_id,))
            _drop_turn(conn, doc_id, existing[1], existing[2])
        else:
            cur = conn.execute(
                "INSERT INTO docs(walk_key, hash, mtime_ns, size, fm, fm_ok, title, "
                "memory_kind, type, status, episode_id, thread, user, created, hidden, zone, "
                "facts, path, id) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (*values, row.path, self._rebuild_id(row.path)),
            )
            doc_id = int(cur.lastrowid or 0)
        conn.execute(
            "INSERT INTO docs_fts(rowid, title, body) VALUES (?, ?, ?)",
            (doc_id, row.title, row.body),
        )
        if row.links:
            conn.executemany(
                "INSERT INTO links(src, kind, target, label) VALUES (?, ?, ?, ?)",
                [(doc_id, kind, target, label) for kind, target, label in row.links],
            )
        if row.type == TURN_TYPE and row.episode_id:
            conn.execute(
                "INSERT INTO turn_nodes(eid, doc_id, path, thread, user, created, hidden) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    row.episode_id,
                    doc_id,
                    row.path,
                    row.thread,
                    row.user,
                    row.created,
                    int(row.hidden),
                ),
            )
            parents = {target for kind, target, _label in row.links if kind == "parent"}
            if parents:
                conn.executemany(
                    "INSERT INTO turn_edges(child, parent, doc_id) VALUES (?, ?, ?)",
                    [(row.episode_id, parent, doc_id) for parent in sorted(parents)],
                )
        return doc_id, existing is None

    def _rebuild_id(self, rel: str) -> int | None:
        """The id a rebuild gives ``rel`` (the one it had), or None: SQLite's next rowid."""
        if self._kept_ids is None:
            return None
        kept = self._kept_ids.get(rel)
        if kept is not None:
            return kept
        self._next_id += 1
        return self._next_id

    def _delete(self, conn: sqlite3.Connection, rel: str) -> int | None:
        """Drop one document's rows; its id, or None when it was not indexed."""
        row = conn.execute(
            "SELECT id, episode_id, type FROM docs WHERE path = ?", (rel,)
        ).fetchone()
        if not row:
            return None
        doc_id = int(row[0])
        _drop_turn(conn, doc_id, row[1], row[2])
        conn.execute("DELETE FROM links WHERE src = ?", (doc_id,))
        conn.execute("DELETE FROM docs_fts WHERE rowid = ?", (doc_id,))
        conn.execute("DELETE FROM docs WHERE id = ?", (doc_id,))
        return doc_id

    def remove(self, rels: Iterable[str]) -> int:
        """Drop index rows for paths (used by purge)."""
        with self.transaction() as conn:
            deleted = [d for d in (self._delete(conn, rel) for rel in rels) if d is not None]
            postings.note_changes(conn, deleted)
            if deleted:
                self._bump(conn)
        return len(deleted)

    def scrub(self) -> None:
        """After a purge: leave no byte of a deleted row in the index's files.

        FTS5 keeps a deleted row's words in its segments until they are merged, and
        SQLite keeps deleted bytes in free pages and in the write-ahead log. So, with
        ``secure_delete`` on (deleted cells are zeroed): every full-text table is merged
        into one segment (:func:`merge_fts`; FTS5's ``secure-delete`` needs SQLite 3.42), cached
        postings of words no row holds any more are dropped, the work-log rows
        of purged turns go, every free page is overwritten with zeros (a zero blob as large
        as the free list, then dropped), the log is folded into the file and emptied, and
        copies of a damaged index set aside earlier are deleted.
        """
        conn = self.conn
        conn.execute("PRAGMA secure_delete = ON")
        try:
            with self.transaction() as tx:
                tables = {
                    str(row[0])
                    for row in tx.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                }
                tx.execute(
                    "DELETE FROM worklog_fts WHERE rowid IN (SELECT w.doc_id FROM worklogs w "
                    "LEFT JOIN docs d ON d.id = w.doc_id AND d.path = w.path WHERE d.id IS NULL)"
                )
                tx.execute("DELETE FROM worklogs WHERE doc_id NOT IN (SELECT id FROM docs)")
                for fts in ("docs_fts", "worklog_fts", "passages_fts", "threads_fts"):
                    if fts in tables:
                        merge_fts(tx, fts)
                for table in (postings.DOCS, postings.PASSAGES):
                    if table.postings in tables and table.fts in tables:
                        postings.forget_absent_terms(tx, table)
                zero_free_pages(tx)
                self._bump(tx)
        finally:
            conn.execute("PRAGMA secure_delete = FAST")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        db.remove_set_aside(self.path)  # it holds what the store held then, purged text too

    def rebuild(self) -> SyncStats:
        """Index every file again from nothing, in one write transaction on the live index.

        Readers, in this process and in others, answer from the old index until the
        transaction commits (WAL gives each read a snapshot), and then from the new one:
        no connection is closed and no file replaced under them. A rebuild killed midway
        leaves the old index (SQLite rolls the transaction back); two rebuilds, or a
        rebuild and a write, take turns on the write lock, so writes wait for the commit.
        Each path keeps its document id, so a reader holding ids from before the commit
        finds the same documents after it and the vector side stays (see :func:`clear`);
        the counters caches key on (the generation, the postings sequences) go on
        upwards, so nothing computed from the old index matches the new one.
        """
        started = time.perf_counter()
        with self._rebuild_lock(), self.transaction() as conn:
            rows = conn.execute("SELECT path, id FROM docs").fetchall()
            kept = {str(path): int(doc_id) for path, doc_id in rows}
            # Bulk load: the secondary indexes are built once at the end (one sort each)
            # instead of row by row (100k files: 65 s -> 49 s, docs/experiments.md).
            later = conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'index' "
                "AND tbl_name IN ('docs', 'links', 'turn_edges') AND sql IS NOT NULL"
            ).fetchall()
            for name, _sql in later:
                conn.execute(f'DROP INDEX "{name}"')
            clear(conn)
            self._kept_ids, self._next_id = kept, max(kept.values(), default=0)
            try:
                stats = self.sync(full=True)
            finally:
                self._kept_ids = None
            for _name, sql in later:
                conn.execute(sql)
            for key in COUNTERS:
                conn.execute(
                    "INSERT INTO meta(key, value) VALUES (?, '1') "
                    "ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1",
                    (key,),
                )
        self._checkpoint()
        stats.seconds = time.perf_counter() - started  # the whole rebuild, not its sync
        return stats

    def _rebuild_lock_path(self) -> Path:
        return self.path.parent / "rebuild.lock"

    @contextmanager
    def _rebuild_lock(self) -> Iterator[None]:
        """Hold the store's rebuild lock (an exclusive ``flock``) while rebuilding.

        Rebuilds in other threads and processes wait for it; :meth:`rebuilding` tells
        readers one runs.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._rebuild_lock_path(), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock, as a process that dies does

    def rebuilding(self) -> bool:
        """True while a full rebuild runs, in another thread of this process or elsewhere."""
        return locks.held_elsewhere(self._rebuild_lock_path())

    # -- verification -----------------------------------------------------------------

    def compare(self) -> Difference:
        """Compare the index with the files without changing either (for doctor)."""
        diff = Difference()
        known = self._known()
        seen: set[str] = set()
        for rel, _mtime_ns, _size in scan(self.root):
            seen.add(rel)
            try:
                raw = (self.root / rel).read_bytes()
            except OSError:
                continue
            row = analyze(rel, raw, 0, len(raw))
            if not row.fm_ok:
                diff.invalid_yaml.append((rel, row.fm_error or "invalid YAML"))
            if not row.utf8_ok:
                diff.invalid_utf8.append(rel)
            old = known.get(rel)
            if old is None:
                diff.missing_in_index.append(rel)
            elif old[2] != row.hash:
                diff.stale.append(rel)
        diff.missing_on_disk = sorted(rel for rel in known if rel not in seen)
        diff.missing_in_index.sort()
        diff.stale.sort()
        diff.invalid_yaml.sort()
        diff.doc_rows = int(self.conn.execute("SELECT count(*) FROM docs").fetchone()[0])
        diff.fts_rows = int(self.conn.execute("SELECT count(*) FROM docs_fts").fetchone()[0])
        return diff


def _indexable(rel: str) -> bool:
    return rel.lower().endswith(".md") and not any(p.startswith(".") for p in rel.split("/"))
