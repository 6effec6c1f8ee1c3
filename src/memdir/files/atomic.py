"""Atomic writes: a file is staged beside its target, synced, renamed over it, and its folder
synced; temp files a dead process left behind are found by the pid in their name."""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Iterable
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING

from .. import lazy
from ..doc.lazyregex import LazyRegex
from ..errors import Conflict

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

log = lazy.logger("memdir.store")  # the store's own log, as before

TEMP_NAME_BYTES = 40  # of the target's name kept in its temp file's name
TEMP_SUFFIX = ".tmp"
_TEMP_OWNER = LazyRegex(r"^\..*\.(\d+)-[^.]+\.tmp$")


def fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _make_folder(folder: Path) -> None:
    """``mkdir -p``, with a clear error when a file stands where a folder must go."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise Conflict(f"{folder.name} (in {folder.parent}) is a file, not a folder") from None


def _stage(target: Path, data: bytes) -> tuple[str, int]:
    """Write ``data`` to a new temp file beside ``target``; return its name and open fd."""
    _make_folder(target.parent)
    # The temp file's name must fit where the target's does: a name of 255 bytes is allowed.
    short = os.fsencode(target.name)[:TEMP_NAME_BYTES].decode("utf-8", errors="ignore")
    # The writer's pid in the name tells a dead writer's leftover from a live one's file.
    import tempfile  # not at the top: a hook needs none (test_hook_imports)

    fd, tmp = tempfile.mkstemp(
        prefix=f".{short}.{os.getpid()}-", suffix=TEMP_SUFFIX, dir=target.parent
    )
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fchmod(fd, 0o644)
    except BaseException:
        os.close(fd)
        with suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp, fd


_pool: tuple[int, ThreadPoolExecutor] | None = None
_pool_mutex = threading.Lock()


def _sync_pool() -> ThreadPoolExecutor:
    """Threads that run fsync calls beside the caller (made again after a fork)."""
    from concurrent.futures import ThreadPoolExecutor  # a process that never writes has none

    global _pool
    with _pool_mutex:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(4, thread_name_prefix="memdir-sync"))
        return _pool[1]


def run_all(calls: list[Callable[[], object]]) -> None:
    """Run the calls at once (the last in this thread); raise the first failure."""
    if len(calls) <= 1:
        for call in calls:
            call()
        return
    futures = [_sync_pool().submit(call) for call in calls[:-1]]
    try:
        calls[-1]()
    finally:
        errors = [f.exception() for f in futures]
    for error in errors:
        if error is not None:
            raise error


def stage_files(items: list[tuple[Path, bytes]], *, durable: bool = True) -> list[tuple[str, Path]]:
    """Write each item to a temp file beside its target; with ``durable``, sync their data,
    all at once (the kernel can share one journal commit among them). Renames nothing."""
    staged: list[tuple[str, Path]] = []
    fds: list[int] = []
    try:
        for target, data in items:
            tmp, fd = _stage(target, data)
            staged.append((tmp, target))
            fds.append(fd)
        if durable:
            run_all([functools.partial(os.fdatasync, fd) for fd in fds])
    except BaseException:
        discard_staged(staged)
        raise
    finally:
        for fd in fds:
            with suppress(OSError):
                os.close(fd)
    return staged


def discard_staged(staged: list[tuple[str, Path]]) -> None:
    for tmp, _target in staged:
        with suppress(OSError):
            os.unlink(tmp)


def rename_staged(staged: list[tuple[str, Path]]) -> None:
    """Move staged temp files over their targets (each rename is atomic)."""
    try:
        for tmp, target in staged:
            os.replace(tmp, target)
    except BaseException:
        discard_staged(staged)
        raise


def sync_folders(targets: Iterable[Path]) -> None:
    """Sync the folder of each target once (so renames into it are durable), all at once."""
    folders = list(dict.fromkeys(target.parent for target in targets))
    run_all([functools.partial(fsync_dir, folder) for folder in folders])


def atomic_write(target: Path, data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to ``target`` so a crash leaves the old or the new file, never half.

    With ``durable`` the data and the folder entry are synced to disk before returning.
    """
    atomic_write_many([(target, data)], durable=durable)


def atomic_write_many(items: list[tuple[Path, bytes]], *, durable: bool = True) -> None:
    """Write several files atomically: stage them and sync their data together, rename
    each, then sync each folder once."""
    staged = stage_files(items, durable=durable)
    rename_staged(staged)
    if durable:
        sync_folders(target for _tmp, target in staged)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def remove_dead_temp_files(root: Path) -> list[str]:
    """Remove the temp files (``.<name>.<pid>-<random>.tmp``) of writers that are gone.

    A writer killed between staging and renaming leaves one; a live writer's (its pid
    runs) is kept. Walks the store outside ``.git`` and ``.memdir``; run after a crash.
    """
    removed: list[str] = []
    for folder, dirs, names in os.walk(root):
        if folder == os.fspath(root):
            dirs[:] = [d for d in dirs if d not in (".git", ".memdir")]
        for name in names:
            found = _TEMP_OWNER.match(name)
            if found is None or _alive(int(found.group(1))):
                continue
            path = os.path.join(folder, name)
            with suppress(FileNotFoundError):
                os.unlink(path)
                removed.append(os.path.relpath(path, root))
    if removed:
        log.warning("removed %d temp file(s) of writers that are gone", len(removed))
    return removed
