"""Git history of a store: every write can become a commit authored by its actor.

Commits go through the ``git`` command (the fastest option measured). Writes
are queued; :meth:`GitLog.flush` commits everything queued, one commit per
actor. With ``store.git_batch_seconds`` > 0 a background thread flushes after
that quiet period, so bursts share commits; otherwise each write flushes at
once. Nothing queued is dropped: ``flush`` runs at close and at exit, and a
path staged by one process and committed by another is still committed.

What a write says cannot break a commit. Its message and its actor's name are
cleaned before they reach git (:func:`clean_message`, :func:`clean_name`), and
paths the repository's ``.gitignore`` excludes are left out of the commit
rather than failing it. When git still refuses a batch (a hook that rejects
it, say), the same files are committed at once under a generic message by
``memdir`` (the files are on disk and end up in git), and the refusal is
logged as a warning on the ``memdir.git`` logger with the batch's actor and
messages. Only when that commit fails too (the repository refuses any commit:
a held ``index.lock``, a full disk) does the batch stay queued: its paths are
unstaged, it keeps its own actor and messages, is kept apart from later
writes (which get batches and commits of their own), is retried first by
every later flush, and that flush raises :class:`~memdir.errors.GitError`
after committing the other batches. A background flush, and the flush before
:meth:`GitLog.commit_now`, log such an error on the same logger instead.

The queue survives a crash. Each queued write is also appended to this process's book,
``.memdir/journal/<pid>-<random>.commits`` (held under an exclusive ``flock``, one JSON
line per write: actor, message, paths); a flush that leaves nothing queued empties it.
Opening a store commits what the books of dead processes name
(:meth:`GitLog.recover_books`), so a write acknowledged before a kill -9 reaches git when
the store is next opened.

A ``git`` killed while it held ``.git/index.lock`` (or ``HEAD.lock``, a branch's lock)
leaves the lock behind, and git then refuses every command. memdir runs git only under its
own lock (``.memdir/git.lock``), and each git it runs inherits that lock, so a lock file
found while holding it belongs to no memdir git: when no process has it open and it is
``STALE_LOCK_SECONDS`` old (a younger one is waited for) it is removed (and logged) before
the commit (:func:`clear_stale_git_locks`).
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

from .. import lazy
from ..errors import Conflict, GitError
from ..records import field, recordclass
from . import claims, journal
from .gitrun import (
    ADD,
    FROM_STDIN,
    MAX_COMMIT_MESSAGE_CHARS,
    clean_message,
    clean_name,
    clear_stale_git_locks,
    identity_env,
    run_git,
)
from .locks import FileLock

BOOK_SUFFIX = ".commits"
MAX_DELAY_FACTOR = 10


log = lazy.logger("memdir.git")


def _nul_list(paths: list[str]) -> bytes:
    return b"".join(name + b"\0" for p in paths if (name := _on_disk(p)) is not None)


def _on_disk(path: str) -> bytes | None:
    """The file-system name of ``path``; None for a string no file can be named."""
    try:
        name = os.fsencode(path)
    except UnicodeEncodeError:
        return None
    return None if b"\0" in name else name


@recordclass
class _Batch:
    """Paths written by one actor, with the messages of the writes."""

    actor: str
    paths: set[str] = field(default_factory=set)
    messages: list[str] = field(default_factory=list)


class GitLog:
    """Queue of paths to commit, with their actor and message."""

    def __init__(self, root: Path, batch_seconds: float = 0.0, lock_timeout: float = 60.0) -> None:
        self.root = root
        self.batch_seconds = batch_seconds
        self._lock = FileLock(root / ".memdir" / "git.lock", timeout=lock_timeout)
        self._pending: dict[str, _Batch] = {}  # open batches, one per actor
        self._failed: list[_Batch] = []  # batches git refused, oldest first; never merged
        self._mutex = threading.Lock()
        self._flushing = threading.Lock()  # one flush at a time; close waits for a running one
        self._waiter: threading.Thread | None = None
        self._deadline = 0.0
        self._first = 0.0
        self._registered = False
        self._book: tuple[int, int, Path] | None = None  # (pid, fd, path) of the queue on disk

    @property
    def enabled(self) -> bool:
        return (self.root / ".git").exists()

    @property
    def lock(self) -> FileLock:
        """The store's git lock: every commit of memdir's holds it (so does ``memdir sync``)."""
        return self._lock

    def queue(self, paths: list[str], actor: str, message: str) -> None:
        message = claims.annotate(message)  # an unchecked X-Actor, beside the token's name
        if not self.enabled:
            return
        with self._mutex:
            self._note(paths, actor, message)
            entry = self._pending.setdefault(actor, _Batch(actor))
            entry.paths.update(paths)
            if message not in entry.messages:
                entry.messages.append(message)
            if not self._registered:
                atexit.register(self._flush_at_exit)
                self._registered = True
            if self.batch_seconds > 0:
                # One waiter thread per quiet period: each write pushes the deadline back,
                # but never more than MAX_DELAY_FACTOR periods after the first queued write.
                now = time.monotonic()
                if self._waiter is None:
                    self._first = now
                cap = self._first + self.batch_seconds * MAX_DELAY_FACTOR
                self._deadline = min(now + self.batch_seconds, cap)
                if self._waiter is None:
                    self._waiter = threading.Thread(target=self._wait_then_flush, daemon=True)
                    self._waiter.start()
                return
        self.flush()

    def _wait_then_flush(self) -> None:
        while True:
            with self._mutex:
                left = self._deadline - time.monotonic()
                if left <= 0:
                    self._waiter = None
                    break
            time.sleep(left)
        try:
            self.flush()
        except Exception as exc:
            log.error("background git commit failed; the next flush retries it: %s", exc)

    def flush(self) -> None:
        """Commit everything queued (one commit per batch).

        Returns only when every write queued before the call is committed, even when a
        background flush had already taken it. A batch git refuses is committed under a
        generic message; one that cannot be committed at all stays queued (a later flush
        retries it) and the flush raises GitError once the other batches are committed.
        """
        with self._flushing:
            with self._mutex:
                batches = [*self._failed, *self._pending.values()]
                self._failed, self._pending = [], {}
            if not batches:
                return
            errors: list[GitError] = []
            committed: set[int] = set()
            try:
                with self._lock.hold():
                    clear_stale_git_locks(self.root)
                    for n, batch in enumerate(batches):
                        try:
                            self._commit_batch(sorted(batch.paths), batch.actor, batch.messages)
                        except GitError as exc:
                            errors.append(exc)
                        else:
                            committed.add(n)
            finally:
                left = [batch for n, batch in enumerate(batches) if n not in committed]
                with self._mutex:
                    self._failed[:0] = left
                    self._rewrite_book()
            if errors:
                raise errors[0]

    def _flush_at_exit(self) -> None:
        try:
            self.flush()
        except (GitError, Conflict) as exc:  # the book keeps it: the next open commits it
            log.error("git commit failed at exit; the next open commits it: %s", exc)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._lock.close()
            self._close_book()

    # -- the book: the queue on disk, for the next open after a crash ----------------------

    def _note(self, paths: list[str], actor: str, message: str) -> None:
        """Append one queued write to this process's book (called under ``_mutex``)."""
        line = json.dumps({"actor": actor, "message": message, "paths": list(paths)})
        try:
            fd = self._book_fd()
            os.write(fd, line.encode("utf-8", "surrogateescape") + b"\n")
        except OSError as exc:  # the queue in memory still holds it
            log.warning("could not note a queued commit in the journal: %s", exc)

    def _book_fd(self) -> int:
        if self._book is not None and self._book[0] == os.getpid():
            return self._book[1]
        # A forked child gets a book of its own (the parent's lock is not its own).
        where = journal.folder(self.root)
        where.mkdir(parents=True, exist_ok=True)
        path = where / f"{os.getpid()}-{os.urandom(4).hex()}{BOOK_SUFFIX}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        self._book = (os.getpid(), fd, path)
        return fd

    def _rewrite_book(self) -> None:
        """After a flush: the book holds what is still queued, nothing when nothing is.

        What is left is written to a new book before the old one goes, so a kill at any
        point leaves every queued write in one of them (a duplicate commits nothing).
        """
        if self._book is None or self._book[0] != os.getpid():
            return
        _pid, fd, path = self._book
        left = [*self._failed, *self._pending.values()]
        if not left:
            with suppress(OSError):
                os.ftruncate(fd, 0)
            return
        self._book = None
        try:
            for batch in left:
                for message in batch.messages or [""]:
                    self._note(sorted(batch.paths), batch.actor, message)
        finally:
            with suppress(OSError):
                path.unlink()
            with suppress(OSError):
                os.close(fd)

    def _close_book(self) -> None:
        """Remove an empty book; keep one that names writes still queued (the next open
        commits them)."""
        book, self._book = self._book, None
        if book is None or book[0] != os.getpid():
            return
        _pid, fd, path = book
        with self._mutex:
            left = self._failed or self._pending
        if not left:
            with suppress(OSError):
                path.unlink()
        with suppress(OSError):
            os.close(fd)

    def hand_over(self) -> None:
        """Leave what is queued uncommitted, in this process's book, for another process to
        commit: the book is closed (its lock released) and kept, and the queue in memory is
        emptied, so neither a flush nor the exit commits it. The next open of the store
        commits it (:meth:`recover_books`), as after a kill. ``memdir hook`` (Stop) hands its
        turn's commit to the child it leaves running (memdir.agents.hooks)."""
        with self._mutex:
            book, self._book = self._book, None
            self._pending.clear()
            self._failed.clear()
        if book is not None and book[0] == os.getpid():
            with suppress(OSError):
                os.fsync(book[1])
            with suppress(OSError):
                os.close(book[1])

    def open_book(self) -> None:
        """Open this process's book now (before a write): a writer killed in the middle of
        its first write then leaves a book, which tells the next open that it died."""
        if self.enabled:
            with self._mutex:
                self._book_fd()

    def recover_books(self) -> tuple[int, list[str]]:
        """Queue again what the books of dead processes name; returns how many books there
        were and the paths they name.

        Their writes were acknowledged, so they are committed even though the process that
        queued them died before its flush. Each book is removed once its entries are in
        this process's queue (and book); the caller flushes.
        """
        named: list[str] = []
        books = 0
        for path, fd in journal.locked_owners(journal.folder(self.root), BOOK_SUFFIX):
            books += 1
            for actor, message, paths in _book_entries(journal.read_all(fd)):
                with self._mutex:  # queued without a flush: the caller flushes them all once
                    self._note(paths, actor, message)
                    entry = self._pending.setdefault(actor, _Batch(actor))
                    entry.paths.update(paths)
                    if message not in entry.messages:
                        entry.messages.append(message)
                named += paths
            with suppress(FileNotFoundError):
                path.unlink()
        return books, list(dict.fromkeys(named))

    def queue_quietly(self, paths: list[str], actor: str, message: str) -> None:
        """Queue, and keep a failed commit queued without raising (logged on memdir.git).

        For writes that are already done: the write stands, its commit comes later.
        """
        try:
            self.queue(paths, actor, message)
        except (GitError, Conflict) as exc:  # git refused it, or its lock timed out
            log.error("git commit failed; the write is kept and its commit retried: %s", exc)

    def commit_now(self, paths: list[str], actor: str, message: str) -> None:
        """Commit these paths at once, in one commit, after anything already queued.

        An earlier batch that cannot be committed is logged (it stays queued) and does not
        stop this commit. If these paths cannot be committed at all they are queued (a
        later flush retries them) and GitError is raised.
        """
        message = claims.annotate(message)
        if not self.enabled or not paths:
            return
        try:
            self.flush()
        except GitError as exc:
            log.error("an earlier git commit failed; the next flush retries it: %s", exc)
        batch = _Batch(actor, set(paths), [message])
        try:
            with self._lock.hold():
                clear_stale_git_locks(self.root)
                self._commit_batch(sorted(batch.paths), actor, batch.messages)
        except BaseException:
            with self._mutex:
                self._failed.append(batch)
                self._note(sorted(batch.paths), actor, message)
            raise

    def _commit_batch(self, paths: list[str], actor: str, messages: list[str]) -> None:
        """Commit as ``actor``; if git refuses, the same files under a generic message.

        Raises GitError when neither commit is made (the paths are then unstaged).
        """
        try:
            self._commit(paths, actor, _commit_message(paths, actor, messages))
            return
        except Exception as exc:
            log.warning(
                "git refused the commit of %d path(s) by %r (%s); committing them again as "
                "memdir under a generic message; their messages were: %r",
                len(paths),
                actor,
                exc,
                messages[:20],
            )
        try:
            self._commit(paths, "memdir", f"{len(paths)} changes whose own commit git refused")
        except Exception as exc:
            # Unstage the batch (it stays queued), so that the next batch's commit neither
            # carries these paths under its author nor fails with them.
            run_git(
                self.root,
                "--literal-pathspecs",
                "reset",
                "-q",
                *FROM_STDIN,
                stdin=_nul_list(paths),
                check=False,
                keep=self._keep(),
            )
            if isinstance(exc, GitError):
                raise
            raise GitError(f"git commit failed: {exc}") from exc

    def _keep(self) -> tuple[int, ...]:
        """The git lock's descriptor of this thread, for the git it runs to inherit."""
        fd = self._lock.held_fd()
        return () if fd is None else (fd,)

    def _commit(self, paths: list[str], actor: str, message: str) -> None:
        # One ``git add`` reads every path from stdin (no argument limit, one pack). A path
        # that is gone from disk is removed from the git index (ignored if git never knew it).
        named = [p for p in paths if _on_disk(p) is not None]
        present = [p for p in named if os.path.lexists(self.root / p)]
        seen = set(present)
        missing = [p for p in named if p not in seen]
        if present:
            try:
                run_git(
                    self.root,
                    *ADD,
                    "-A",
                    *FROM_STDIN,
                    actor=actor,
                    stdin=_nul_list(present),
                    keep=self._keep(),
                )
            except GitError:
                # git adds the rest but fails for a path .gitignore excludes: leave those out.
                ignored = self._ignored(present)
                if not ignored:
                    raise
                kept = [p for p in present if p not in ignored]
                if kept:
                    run_git(
                        self.root, *ADD, "-A", *FROM_STDIN, actor=actor,
                        stdin=_nul_list(kept), keep=self._keep(),
                    )  # fmt: skip
        if missing:
            run_git(
                self.root,
                "--literal-pathspecs",
                "rm",
                "-q",
                "--cached",
                "--ignore-unmatch",
                *FROM_STDIN,
                stdin=_nul_list(missing),
                keep=self._keep(),
            )
        env = identity_env(actor)
        import subprocess  # not at the top: a hook runs no git (test_hook_imports)

        done = subprocess.run(
            ["git", "-C", str(self.root), "commit", "-q", "--no-verify", "-F", "-"],
            input=message.encode("utf-8"),
            capture_output=True,
            env=env,
            check=False,
            pass_fds=self._keep(),
        )
        if done.returncode != 0:
            # Nothing to commit is fine (another flush already committed these paths);
            # anything else is an error.
            staged = subprocess.run(
                ["git", "-C", str(self.root), "diff", "--cached", "--quiet"],
                capture_output=True,
                env=env,
                check=False,
                pass_fds=self._keep(),
            )
            if staged.returncode != 0:
                reason = (done.stderr or done.stdout).decode("utf-8", "replace").strip()
                raise GitError(f"git commit failed: {reason}")
            # Nothing staged: make sure that is because the paths are committed, not because
            # the staged entries were lost (an index rewritten by a git killed beside us).
            left = run_git(
                self.root, *ADD, "-A", "--dry-run", "--ignore-missing", *FROM_STDIN,
                stdin=_nul_list(named), check=False, keep=self._keep(),
            )  # fmt: skip
            if left.strip():
                raise GitError(f"git commit made nothing, yet {len(named)} path(s) differ")

    def _ignored(self, paths: list[str]) -> set[str]:
        import subprocess  # not at the top: a hook runs no git (test_hook_imports)

        out = subprocess.run(
            ["git", "-C", str(self.root), "check-ignore", "-z", "--stdin"],
            input=_nul_list(paths),
            capture_output=True,
            check=False,
            pass_fds=self._keep(),
        ).stdout
        return {os.fsdecode(name) for name in out.split(b"\0") if name}


def _book_entries(blob: bytes) -> Iterator[tuple[str, str, list[str]]]:
    """(actor, message, paths) of each whole line of a book; a torn last line is skipped."""
    for line in blob.split(b"\n"):
        try:
            entry = json.loads(line.decode("utf-8", "surrogateescape"))
            yield str(entry["actor"]), str(entry["message"]), [str(p) for p in entry["paths"]]
        except (ValueError, KeyError, TypeError):
            continue


def _commit_message(paths: list[str], actor: str, messages: list[str]) -> str:
    """The message of a batch's commit: its one message, or a count and a list of them."""
    cleaned = [m for m in (clean_message(m) for m in messages) if m]
    head = f"{len(paths)} changes by {clean_name(actor)}"
    if len(cleaned) == 1 and len(messages) == 1:
        return cleaned[0]
    if not cleaned:
        return head
    body: list[str] = []
    size = len(head) + 2
    for n, text in enumerate(cleaned):
        item = f"- {text}"
        if size + len(item) + 1 > MAX_COMMIT_MESSAGE_CHARS - 40:
            body.append(f"- … and {len(cleaned) - n} more")
            break
        body.append(item)
        size += len(item) + 1
    return head + "\n\n" + "\n".join(body)
