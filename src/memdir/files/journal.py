"""A write-ahead journal for new files: one sync per write instead of one per file and folder.

With ``store.durability = full`` a write must survive a power loss once it is
acknowledged. Syncing each new file and its folder costs three syncs for a turn (its
record and its work log), most of the time a turn takes. For writes that only create
files (turn records are always new), the store appends the files' bytes to this
process's journal and syncs that one file instead; the files themselves are then
written and renamed into place without syncs. The kernel writes them out on its own,
and :meth:`Journal.checkpoint` (when the journal grows past a bound, and at close)
syncs the files (the whole file system when there are many) and empties the journal.

Each process has its own journal, ``.memdir/journal/<pid>-<random>.log``, and holds an
exclusive ``flock`` on it. When a store is opened, every journal whose owner is gone
(a crash, a power loss, a killed process) is replayed: each file it names is written
again, durably, when it is missing, empty, or a truncated copy of the journaled bytes
(what a power loss leaves of a write that was not synced). A file with other content
is newer than the journal and kept. The replayed paths are queued for a git commit.

A delete made through the store leaves a tombstone (``deleted.tsv``: the time and the
path, synced) and empties this process's journal (:meth:`Journal.checkpoint`), so a purged
file's bytes stay in no journal of this process, and replay never brings back a path
deleted after its record was written (each record carries its time, ``at``).

Record: ``MDJ1``, the payload's length and CRC-32 (two little-endian u32), the payload:
a JSON header line ``{"files": [[path, size], ...]}`` then the bytes of each file. A
torn last record (bad length or CRC) was never acknowledged and ends the replay.
"""

from __future__ import annotations

import fcntl
import json
import os
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

MAGIC = b"MDJ1"
_HEAD = struct.Struct("<4sII")
CHECKPOINT_BYTES = 32 * 1024 * 1024  # a journal this large is synced and emptied


SYNC_EACH_UP_TO = 64  # a checkpoint syncs this many files one by one, more with syncfs


def _sync_each(paths: Sequence[Path]) -> None:
    """fsync each file that still exists, then each of their folders once."""
    for path in [*dict.fromkeys(paths), *dict.fromkeys(p.parent for p in paths)]:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue  # gone since: a later write or a delete made its own state durable
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def folder(root: Path) -> Path:
    return root / ".memdir" / "journal"


def _syncfs(fd: int) -> None:
    """Flush every file of the file system holding ``fd`` (os.sync where syncfs is missing)."""
    try:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        if libc.syncfs(fd) == 0:
            return
    except (OSError, AttributeError):
        pass
    os.sync()


def frame(header: Mapping[str, Any], payload: bytes = b"") -> bytes:
    """One record: the magic, the body's length and CRC-32, then a JSON header line and
    ``payload``."""
    body = json.dumps(header).encode() + b"\n" + payload
    return _HEAD.pack(MAGIC, len(body), zlib.crc32(body)) + body


def frames(blob: bytes) -> Iterator[tuple[dict[str, Any], bytes]]:
    """Every whole record of ``blob`` as (header, payload), in order; a torn tail ends it."""
    offset = 0
    while offset + _HEAD.size <= len(blob):
        magic, size, crc = _HEAD.unpack_from(blob, offset)
        start = offset + _HEAD.size
        body = blob[start : start + size]
        if magic != MAGIC or len(body) != size or zlib.crc32(body) != crc:
            return
        head, _, payload = body.partition(b"\n")
        yield json.loads(head), payload
        offset = start + size


def encode(files: Sequence[tuple[str, bytes]]) -> bytes:
    header = {"files": [[rel, len(data)] for rel, data in files], "at": time.time_ns()}
    return frame(header, b"".join(data for _rel, data in files))


def decode(blob: bytes) -> list[list[tuple[str, bytes]]]:
    """Every whole record of a journal, in order (a torn tail is dropped)."""
    return [files for _at, files in _records(blob)]


def _records(blob: bytes) -> Iterator[tuple[int, list[tuple[str, bytes]]]]:
    """Each whole record as (its time in ns, 0 when it has none; its files)."""
    for header, rest in frames(blob):
        files: list[tuple[str, bytes]] = []
        at = 0
        for rel, length in header["files"]:
            files.append((str(rel), rest[at : at + int(length)]))
            at += int(length)
        yield int(header.get("at", 0)), files


TOMBSTONES = "deleted.tsv"


def tombstone(root: Path, rels: Sequence[str]) -> None:
    """Note that ``rels`` were deleted now (synced): replay must not bring them back."""
    where = folder(root)
    where.mkdir(parents=True, exist_ok=True)
    stamp = time.time_ns()
    lines = "".join(f"{stamp}\t{json.dumps(rel)}\n" for rel in rels).encode()
    fd = os.open(where / TOMBSTONES, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, lines)  # one small append: whole even with writers in other processes
        os.fdatasync(fd)
    finally:
        os.close(fd)


def tombstones(root: Path) -> dict[str, int]:
    """The time of the last delete of each path that has a tombstone."""
    try:
        text = (folder(root) / TOMBSTONES).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return {}
    found: dict[str, int] = {}
    for line in text.splitlines():
        stamp, sep, name = line.partition("\t")
        try:
            rel, at = str(json.loads(name)), int(stamp)
        except ValueError:
            continue  # a torn last line
        if sep:
            found[rel] = max(at, found.get(rel, 0))
    return found


def locked_owners(where: Path, suffix: str) -> Iterator[tuple[Path, int]]:
    """The files named ``*suffix`` in ``where`` whose process is gone, each locked.

    Yields (path, fd) with an exclusive flock on fd; a file whose owner still holds its lock
    is passed over. The caller reads it and removes it; the fd is closed after.
    """
    try:
        names = sorted(os.listdir(where))
    except FileNotFoundError:
        return
    for name in names:
        if not name.endswith(suffix):
            continue
        path = where / name
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its process is alive
            yield path, fd
        finally:
            os.close(fd)


def any_dead_owner(where: Path, suffixes: tuple[str, ...]) -> bool:
    """Whether a file named ``*suffix`` in ``where`` belongs to a process that is gone."""
    for suffix in suffixes:
        for _path, _fd in locked_owners(where, suffix):
            return True
    return False


def read_all(fd: int) -> bytes:
    with open(fd, "rb", closefd=False) as handle:
        handle.seek(0)
        return handle.read()


class Journal:
    """This process's journal of one store (opened on first use)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._mutex = threading.Lock()
        self._fd: int | None = None
        self._pid = 0
        self._path: Path | None = None
        self._size = 0
        self._files: list[Path] = []  # written since the last checkpoint

    def _open(self) -> int:
        if self._fd is not None and self._pid == os.getpid():
            return self._fd
        # A forked child gets a journal of its own (the parent's lock is not its own).
        where = folder(self.root)
        where.mkdir(parents=True, exist_ok=True)
        path = where / f"{os.getpid()}-{os.urandom(4).hex()}.log"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        dir_fd = os.open(where, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the journal's own name must survive a crash
        finally:
            os.close(dir_fd)
        self._fd, self._pid, self._path, self._size = fd, os.getpid(), path, 0
        return fd

    def append(self, files: Sequence[tuple[str, bytes]]) -> None:
        """Write one record and sync it: from here on the files survive a crash."""
        record = encode(files)
        with self._mutex:
            fd = self._open()
            view = memoryview(record)
            while view:
                view = view[os.write(fd, view) :]
            os.fdatasync(fd)
            self._size += len(record)
            self._files += [self.root / rel for rel, _data in files]
            full = self._size >= CHECKPOINT_BYTES
        if full:
            self.checkpoint()

    def checkpoint(self) -> None:
        """Make the journaled files durable, then empty the journal.

        A few files (a command that recorded one turn) are synced one by one with their
        folders; many are synced with the whole file system at once (``syncfs``).
        """
        with self._mutex:
            fd = self._fd
            if fd is None or self._pid != os.getpid() or self._size == 0:
                return
            if len(self._files) <= SYNC_EACH_UP_TO:
                _sync_each(self._files)
            else:
                _syncfs(fd)
            os.ftruncate(fd, 0)
            os.fdatasync(fd)
            self._size = 0
            self._files = []

    def close(self) -> None:
        """Checkpoint and remove this process's journal."""
        self.checkpoint()
        with self._mutex:
            fd, path = self._fd, self._path
            if fd is None or self._pid != os.getpid():
                return
            if path is not None:
                with suppress(FileNotFoundError):
                    path.unlink()
            os.close(fd)  # releases the lock
            self._fd = None


def recover(root: Path, write: Callable[[str, bytes], None]) -> list[str]:
    """Replay the journals of processes that are gone; returns the paths they named.

    ``write(rel, data)`` writes one file durably (the store's atomic write).
    """
    named: list[str] = []
    deleted = tombstones(root)
    for path, fd in locked_owners(folder(root), ".log"):
        for at, files in _records(read_all(fd)):
            for rel, data in files:
                if deleted.get(rel, -1) >= at:
                    continue  # deleted (or purged) after it was journaled: stays deleted
                named.append(rel)
                if _torn(root / rel, data):
                    write(rel, data)
        with suppress(FileNotFoundError):
            path.unlink()
    _drop_tombstones(root)
    return list(dict.fromkeys(named))


def _drop_tombstones(root: Path) -> None:
    """Empty the tombstones once no journal is left that they could apply to."""
    where = folder(root)
    with suppress(FileNotFoundError):
        if not any(name.endswith(".log") for name in os.listdir(where)):
            with suppress(FileNotFoundError):
                (where / TOMBSTONES).unlink()


def _torn(target: Path, data: bytes) -> bool:
    """True when ``target`` is what a crash leaves of writing ``data``: nothing, or a prefix."""
    try:
        current = target.read_bytes()
    except (FileNotFoundError, IsADirectoryError):
        return True
    return len(current) < len(data) and data.startswith(current)
