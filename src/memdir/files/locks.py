"""Inter-process locks on files (fcntl.flock), re-entrant within a thread.

A :class:`FileLock` can be held exclusively or shared. The store uses one
store-wide lock (exclusive for whole-store work, shared by single-path writers)
and a small set of striped per-path locks, so writers of different files run
in parallel while two writers of the same file never interleave.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from ..errors import Conflict


class FileLock:
    """A lock shared by threads and processes through one lock file."""

    def __init__(self, path: Path, timeout: float = 30.0) -> None:
        self.path = path
        self.timeout = timeout
        self._local = threading.local()
        self._mutex = threading.Lock()
        self._fds: list[int] = []

    @contextmanager
    def hold(self, *, shared: bool = False) -> Iterator[None]:
        depth = getattr(self._local, "depth", 0)
        if depth:
            if not shared and getattr(self._local, "shared", False):
                raise Conflict(f"cannot upgrade a shared hold of {self.path} to exclusive")
            self._local.depth = depth + 1
            try:
                yield
            finally:
                self._local.depth -= 1
            return
        fd = self._fd()
        self._acquire(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        self._local.depth = 1
        self._local.shared = shared
        try:
            yield
        finally:
            self._local.depth = 0
            fcntl.flock(fd, fcntl.LOCK_UN)

    def held_fd(self) -> int | None:
        """This thread's descriptor of the lock file while it holds the lock, else None."""
        if not getattr(self._local, "depth", 0):
            return None
        fd: int | None = getattr(self._local, "fd", None)
        return fd

    def _fd(self) -> int:
        """This thread's descriptor of the lock file, opened once and kept.

        Each thread has its own open file description, so flock excludes threads of
        one process from each other exactly as it excludes processes.
        """
        fd: int | None = getattr(self._local, "fd", None)
        if fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            self._local.fd = fd
            with self._mutex:
                self._fds.append(fd)
        return fd

    def close(self) -> None:
        """Close every thread's descriptor (call when no thread holds the lock)."""
        with self._mutex:
            fds, self._fds = self._fds, []
        for fd in fds:
            with suppress(OSError):
                os.close(fd)
        self._local = threading.local()

    def _acquire(self, fd: int, mode: int) -> None:
        deadline = time.monotonic() + self.timeout
        delay = 0.0005
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise Conflict(
                        f"timed out after {self.timeout:g}s waiting for the lock {self.path}"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.02)


def held_elsewhere(path: Path) -> bool:
    """True when some open file holds an exclusive ``flock`` on ``path`` (a probe: it takes
    a shared hold without waiting and lets it go at once)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases a shared hold taken just now
    return False
