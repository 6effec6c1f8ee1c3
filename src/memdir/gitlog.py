"""Git history of a store: every write can become a commit authored by its actor.

Commits go through the ``git`` command (the fastest option measured). Writes
are queued; :meth:`GitLog.flush` commits everything queued, one commit per
actor. With ``store.git_batch_seconds`` > 0 a background thread flushes after
that quiet period, so bursts share commits; otherwise each write flushes at
once. Nothing queued is dropped: ``flush`` runs at close and at exit, and a
path staged by one process and committed by another is still committed.
"""

from __future__ import annotations

import atexit
import os
import re
import subprocess
import threading
import time
from pathlib import Path

from .errors import GitError
from .locks import FileLock

MAX_DELAY_FACTOR = 10
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._+-]+")


def _identity_env(actor: str) -> dict[str, str]:
    env = dict(os.environ)
    email_local = _SAFE_NAME.sub("-", actor).strip("-") or "anonymous"
    env.update(
        LC_ALL="C",
        GIT_AUTHOR_NAME=actor or "anonymous",
        GIT_AUTHOR_EMAIL=f"{email_local}@memdir.local",
        GIT_COMMITTER_NAME="memdir",
        GIT_COMMITTER_EMAIL="memdir@memdir.local",
    )
    return env


# Blobs added by memdir go straight into one pack per ``git add`` ("bulk check-in", which git
# uses for files over this size) instead of one loose object file each: a flush of 2,000
# turn files then creates two files under .git instead of 2,000. Only the add uses it, so
# diffs and later repacks see the repository's own settings. Paths are literal: a file named
# ``*.md`` is that file, not a pattern.
_ADD = ("--literal-pathspecs", "-c", "core.bigFileThreshold=1", "add")


def run_git(
    root: Path,
    *args: str,
    actor: str = "memdir",
    check: bool = True,
    stdin: str | None = None,
) -> str:
    try:
        proc = subprocess.run(
            ["git", "-C", str(root), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=_identity_env(actor),
            check=False,
        )
    except FileNotFoundError:
        raise GitError("git is not installed; set store.git_commit = false") from None
    if check and proc.returncode != 0:
        verb = next((a for a in args if not a.startswith("-") and "=" not in a), "")
        raise GitError(f"git {verb} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


class GitLog:
    """Queue of paths to commit, with their actor and message."""

    def __init__(self, root: Path, batch_seconds: float = 0.0, lock_timeout: float = 60.0) -> None:
        self.root = root
        self.batch_seconds = batch_seconds
        self._lock = FileLock(root / ".memdir" / "git.lock", timeout=lock_timeout)
        self._pending: dict[str, tuple[set[str], list[str]]] = {}
        self._mutex = threading.Lock()
        self._flushing = threading.Lock()  # one flush at a time; close waits for a running one
        self._waiter: threading.Thread | None = None
        self._deadline = 0.0
        self._first = 0.0
        self._registered = False

    @property
    def enabled(self) -> bool:
        return (self.root / ".git").exists()

    def queue(self, paths: list[str], actor: str, message: str) -> None:
        if not self.enabled:
            return
        with self._mutex:
            entry = self._pending.setdefault(actor, (set(), []))
            entry[0].update(paths)
            if message not in entry[1]:
                entry[1].append(message)
            if not self._registered:
                atexit.register(self.flush)
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
        self.flush()

    def flush(self) -> None:
        """Commit everything queued (one commit per actor).

        Returns only when every write queued before the call is committed, even when a
        background flush had already taken it. A failed commit puts its paths back in
        the queue (a later flush retries them) and raises.
        """
        with self._flushing:
            with self._mutex:
                pending, self._pending = self._pending, {}
            if not pending:
                return
            done: list[str] = []
            try:
                with self._lock.hold():
                    for actor, (paths, messages) in pending.items():
                        self._commit(sorted(paths), actor, messages)
                        done.append(actor)
            except BaseException:
                with self._mutex:
                    for actor, (paths, messages) in pending.items():
                        if actor not in done:
                            entry = self._pending.setdefault(actor, (set(), []))
                            entry[0].update(paths)
                            entry[1][:0] = [m for m in messages if m not in entry[1]]
                raise

    def close(self) -> None:
        self.flush()
        self._lock.close()

    def commit_now(self, paths: list[str], actor: str, message: str) -> None:
        """Commit these paths at once, in one commit, after anything already queued."""
        if not self.enabled or not paths:
            return
        self.flush()
        with self._lock.hold():
            self._commit(sorted(set(paths)), actor, [message])

    def _commit(self, paths: list[str], actor: str, messages: list[str]) -> None:
        # One ``git add`` reads every path from stdin (no argument limit, one pack). A path
        # that is gone from disk is removed from the git index (ignored if git never knew it).
        present = [p for p in paths if os.path.lexists(self.root / p)]
        seen = set(present)
        missing = [p for p in paths if p not in seen]
        if present:
            run_git(
                self.root,
                *_ADD,
                "-A",
                "--pathspec-from-file=-",
                "--pathspec-file-nul",
                actor=actor,
                stdin="".join(f"{p}\0" for p in present),
            )
        for start in range(0, len(missing), 500):
            chunk = missing[start : start + 500]
            run_git(
                self.root,
                "--literal-pathspecs",
                "rm",
                "-q",
                "--cached",
                "--ignore-unmatch",
                "--",
                *chunk,
            )
        if len(messages) == 1:
            message = messages[0]
        else:
            head = f"{len(paths)} changes by {actor}"
            message = head + "\n\n" + "\n".join(f"- {m}" for m in messages[:200])
        env = _identity_env(actor)
        done = subprocess.run(
            ["git", "-C", str(self.root), "commit", "-q", "--no-verify", "-m", message],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        if done.returncode != 0:
            # Nothing to commit is fine (another flush already committed these paths);
            # anything else is an error.
            staged = subprocess.run(
                ["git", "-C", str(self.root), "diff", "--cached", "--quiet"],
                capture_output=True,
                env=env,
                check=False,
            )
            if staged.returncode != 0:
                reason = (done.stderr or done.stdout).strip()
                raise GitError(f"git commit failed: {reason}")
