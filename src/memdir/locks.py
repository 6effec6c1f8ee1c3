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
from contextlib import contextmanager
from pathlib import Path

from .errors import Conflict


class FileLock:
    """A lock shared by threads and processes through one lock file."""

    def __init__(self, path: Path, timeout: float = 30.0) -> None:
        self.path = path
        self.timeout = timeout
        self._local = threading.local()

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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self._acquire(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
            self._local.depth = 1
            self._local.shared = shared
            try:
                yield
            finally:
                self._local.depth = 0
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

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
