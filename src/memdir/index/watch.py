"""Keep the index in step as files change, so a command need not stat every file.

A stat walk is the only way to learn about an edit made by hand when nothing was
watching, and at 100k files it costs most of a second (one ``stat`` per file). A
:class:`Watcher` (``memdir watch``, or the thread ``memdir serve`` and ``memdir mcp``
start) asks the kernel for change events instead (Linux inotify), updates the index
for the changed paths only, and tells other processes it is there by holding an
exclusive ``flock`` on ``.memdir/watch.lock``.

A command that wants the index in step (:func:`confirm`) must not trust events the
watcher has not read yet. It creates a cookie file in ``.memdir/watch/``; inotify
delivers events in order, so when the watcher sees the cookie it has seen every
change made before it. The watcher then brings the index in step for what it saw
and deletes the cookie; the command waits for that (a millisecond or two) and skips
its stat walk. If the watcher does not answer in time, the command walks as before.

A watcher starts by watching every folder and then running one full stat-walk sync,
so nothing changed before it started is missed. An event queue overflow, a folder
removed or moved away, or a watch the kernel refuses all end in a full sync too.
Writes through ``mmap`` produce no inotify event and are not seen until a full sync.
"""

from __future__ import annotations

import errno
import fcntl
import itertools
import os
import struct
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..files import locks

if TYPE_CHECKING:
    from . import Index, SyncStats

# inotify(7)
IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000

FOLDER_MASK = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
)
COOKIE_MASK = IN_CREATE | IN_MOVED_TO | IN_ONLYDIR
_EVENT = struct.Struct("iIII")
_counter = itertools.count()


def lock_path(root: Path) -> Path:
    return root / ".memdir" / "watch.lock"


def cookie_dir(root: Path) -> Path:
    return root / ".memdir" / "watch"


def running(root: Path) -> bool:
    """True when a watcher holds the store's watch lock."""
    return locks.held_elsewhere(lock_path(root))


def confirm(root: Path, timeout: float = 2.0) -> bool:
    """Ask a running watcher to bring the index in step with every change made so far.

    True when it did (the index is in step); False when no watcher runs or it did not
    answer within ``timeout`` seconds (the caller then walks the files itself).
    """
    if not running(root):
        return False
    folder = cookie_dir(root)
    cookie = folder / f"{os.getpid()}-{threading.get_ident()}-{next(_counter)}"
    try:
        os.close(os.open(cookie, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o644))
    except OSError:
        return False
    deadline = time.monotonic() + timeout
    pause = 0.0002
    while os.path.lexists(cookie):
        if time.monotonic() > deadline or (pause >= 0.005 and not running(root)):
            try:
                os.unlink(cookie)
            except FileNotFoundError:
                return True  # answered at the last moment
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.005)
    return True


class _Inotify:
    """The few inotify calls the watcher needs, through libc."""

    def __init__(self) -> None:
        if not sys.platform.startswith("linux"):
            raise ConfigError("watching a store needs Linux inotify; commands walk the files")
        import ctypes
        import ctypes.util

        self._errno = ctypes.get_errno
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        self._add = libc.inotify_add_watch
        self._add.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self._add.restype = ctypes.c_int
        self._rm = libc.inotify_rm_watch
        self._rm.argtypes = [ctypes.c_int, ctypes.c_int]
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise ConfigError(f"inotify_init1 failed: {os.strerror(ctypes.get_errno())}")
        self.fd = int(fd)

    def add(self, path: str, mask: int) -> int:
        wd = int(self._add(self.fd, os.fsencode(path), mask))
        if wd < 0:
            err = self._errno()
            if err == errno.ENOSPC:
                raise ConfigError(
                    "the kernel's inotify watch limit is reached "
                    "(raise fs.inotify.max_user_watches)"
                )
            raise OSError(err, os.strerror(err), path)
        return wd

    def events(self) -> list[tuple[int, int, str]]:
        """Every event queued now: ``(wd, mask, name)``."""
        out: list[tuple[int, int, str]] = []
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return out
            offset = 0
            while offset < len(data):
                wd, mask, _cookie, size = _EVENT.unpack_from(data, offset)
                offset += _EVENT.size
                name = data[offset : offset + size].rstrip(b"\0")
                offset += size
                out.append((wd, mask, os.fsdecode(name)))

    def close(self) -> None:
        os.close(self.fd)


class Watcher:
    """Watch a store and keep its index in step (one per store at a time)."""

    def __init__(self, root: Path, index: Index, *, settle: float = 0.05) -> None:
        self.root = root
        self.index = index
        self.settle = settle  # how long changes may wait to be batched when nobody asks
        self.folders: dict[int, str] = {}  # watch descriptor -> folder ("" or "a/b/")
        self.synced = 0  # paths brought in step (for tests and the command's summary)
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._lock_fd: int | None = None
        self._inotify: _Inotify | None = None
        self._thread: threading.Thread | None = None
        self._cookie_wd = -1

    # -- life cycle ----------------------------------------------------------------

    def start(self) -> SyncStats:
        """Take the lock, watch every folder, then sync once (nothing is missed)."""
        lock = lock_path(self.root)
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ConfigError(f"a watcher already runs for {self.root}") from None
        self._lock_fd = fd
        try:
            self._inotify = _Inotify()
            folder = cookie_dir(self.root)
            folder.mkdir(parents=True, exist_ok=True)
            for stale in folder.iterdir():
                stale.unlink(missing_ok=True)
            self._cookie_wd = self._inotify.add(str(folder), COOKIE_MASK)
            self._watch_tree("")
            stats = self.index.sync()
        except BaseException:
            self.close()
            raise
        self._ready.set()
        return stats

    def run(self) -> None:
        """Handle events until :meth:`stop` (call :meth:`start` first)."""
        import select  # only the watcher waits on inotify

        assert self._inotify is not None
        pending: set[str] = set()
        full = False
        cookies: list[str] = []
        first_pending = 0.0
        while not self._stop.is_set():
            wait = 0.5 if not pending else max(0.0, first_pending + self.settle - time.monotonic())
            ready, _, _ = select.select([self._inotify.fd], [], [], wait)
            if ready:
                for wd, mask, name in self._inotify.events():
                    full |= self._event(wd, mask, name, pending, cookies)
                if pending and not first_pending:
                    first_pending = time.monotonic()
            due = pending and time.monotonic() >= first_pending + self.settle
            if full or cookies or due:
                try:
                    self._apply(pending, full)
                except Exception:
                    # Claim nothing it could not do: stop (the lock goes with it), leave the
                    # cookies, and commands walk the files themselves again.
                    import logging

                    logging.getLogger("memdir.watch").exception(
                        "the watcher could not update the index; it stops"
                    )
                    return
                pending.clear()
                full = False
                first_pending = 0.0
                for cookie in cookies:
                    (cookie_dir(self.root) / cookie).unlink(missing_ok=True)
                cookies.clear()

    def start_thread(self) -> SyncStats:
        """Start and run in a daemon thread (servers)."""
        stats = self.start()
        self._thread = threading.Thread(target=self._run_and_close, name="memdir-watch")
        self._thread.daemon = True
        self._thread.start()
        return stats

    def _run_and_close(self) -> None:
        try:
            self.run()
        finally:
            self.close()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def close(self) -> None:
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the lock: commands walk again
            self._lock_fd = None

    # -- events --------------------------------------------------------------------

    def _watch_tree(self, rel: str) -> None:
        """Watch ``rel`` and every folder under it (dot names skipped, like the index)."""
        assert self._inotify is not None
        stack = [rel]
        while stack:
            current = stack.pop()
            path = os.path.join(self.root, current) if current else str(self.root)
            try:
                wd = self._inotify.add(path, FOLDER_MASK)
            except (FileNotFoundError, NotADirectoryError):
                continue
            self.folders[wd] = current
            try:
                with os.scandir(path) as entries:
                    for entry in entries:
                        if entry.name[0] != "." and entry.is_dir(follow_symlinks=False):
                            stack.append(current + entry.name + "/")
            except (FileNotFoundError, NotADirectoryError):
                continue

    def _event(self, wd: int, mask: int, name: str, pending: set[str], cookies: list[str]) -> bool:
        """Record one event; True when only a full sync can account for it."""
        if mask & IN_Q_OVERFLOW:
            return True
        if wd == self._cookie_wd:
            if name and mask & (IN_CREATE | IN_MOVED_TO):
                cookies.append(name)
            return False
        folder = self.folders.get(wd)
        if folder is None:
            return False
        if mask & IN_IGNORED:
            del self.folders[wd]
            return False
        if mask & (IN_DELETE_SELF | IN_MOVE_SELF):
            return False  # the parent folder's event tells what happened
        if not name or name[0] == ".":
            return False
        rel = folder + name
        if mask & IN_ISDIR:
            if mask & (IN_CREATE | IN_MOVED_TO):
                self._watch_tree(rel + "/")
                pending.update(_markdown_under(self.root, rel + "/"))
                return False
            return bool(mask & IN_MOVED_FROM)  # moved away: the index still lists its files
        if name.lower().endswith(".md"):
            pending.add(rel)
        return False

    def _apply(self, pending: set[str], full: bool) -> None:
        if full:
            self.index.sync()
        elif pending:
            self.index.sync_paths(sorted(pending))
            self.synced += len(pending)


def _markdown_under(root: Path, rel: str) -> list[str]:
    out: list[str] = []
    for folder, dirs, files in os.walk(root / rel):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        base = os.path.relpath(folder, root).replace(os.sep, "/")
        prefix = "" if base == "." else base + "/"
        out += [prefix + f for f in files if f.lower().endswith(".md") and not f.startswith(".")]
    return out
