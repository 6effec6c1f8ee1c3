"""What an engine run changed, kept so the run can be put back, even after its process died.

An engine run (consolidate, ingest, reflect, bundle add / remove) writes many files and
then commits them together. It is all or nothing: if it fails, every file is put back as it
was (:meth:`memdir.engine.files.Batch.all_or_nothing`). The facts that takes are noted here
before each change: what a file held before the run first changed it, a hash of each
content the run left there, the folders it made, the lines it appended (runs.tsv rows).

A process that dies in the middle (killed, out of memory, the machine stopped) cannot put
anything back, so while a run is open the same facts go to
``.memdir/journal/<pid>-<random>.undo`` too, before the change they describe, held under
an exclusive ``flock``. The file is removed when the run commits or has been put back.
When a store is opened, the undo files of processes that are gone are played back
(:func:`recover`), the same way a failed run is put back:

- a file that still holds one of the contents the run wrote gets its earlier content again
  (or is removed, if the run made it); a file that still holds its earlier content is left;
- a file that holds anything else was changed since by someone else and stays as it is;
- the appended lines are taken out (a file the run made and that holds only its header
  again is removed); the folders the run made are removed when empty.

Records use the journal's framing (:func:`memdir.files.journal.frame`): a JSON header, the bytes
after it. ``{"run": verb}`` opens the file; ``{"file": path, "after": [sha256 or null],
"before": length or null}`` carries the earlier bytes (``before`` only the first time a
path is named; null: there was no file; an ``after`` of null: the run deleted it);
``{"folder": path}``; ``{"line": text, "in": path, "created": bool, "header": text}``.
A torn last record was never acted on: each is written before its change.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

from .. import lazy
from . import journal

log = lazy.logger("memdir.undo")

SUFFIX = ".undo"

Write = Callable[[Path, bytes], None]  # writes a file atomically (the store's atomic write)


def _digest(data: bytes | None) -> str | None:
    import hashlib  # here, not at the top: a hook that only reads never hashes

    return None if data is None else hashlib.sha256(data).hexdigest()


def _read(target: Path) -> bytes | None:
    try:
        return target.read_bytes()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


class Undo:
    """The changes of one run, in memory and, once :meth:`keep_on_disk` is called, on disk."""

    def __init__(self, root: Path, *, durable: bool = True) -> None:
        self.root = root
        self.durable = durable  # sync each record before the change it describes
        self.run = ""
        self.before: dict[str, bytes | None] = {}  # path -> bytes before the first change
        self.after: dict[str, set[str | None]] = {}  # path -> hashes of what the run wrote
        self.folders: list[str] = []
        self.lines: list[tuple[str, str, bool, str]] = []  # (path, line, created, header)
        self._on_disk = False
        self._fd: int | None = None
        self._path: Path | None = None

    @property
    def empty(self) -> bool:
        return not (self.before or self.folders or self.lines)

    # -- noting changes (each before it is made) -------------------------------------

    def keep_on_disk(self, run: str) -> None:
        """From now on, also write each change to this run's undo file (made at the first)."""
        self.run = run
        self._on_disk = True
        if not self.empty:
            self._put(b"")

    def file(self, rel: str, before: bytes | None, after: bytes | None) -> None:
        """``rel`` is about to go from ``before`` to ``after`` (None: no file)."""
        first = rel not in self.before
        if first:
            self.before[rel] = before
        digest = _digest(after)
        self.after.setdefault(rel, set()).add(digest)
        if self._on_disk:
            header: dict[str, Any] = {"file": rel, "after": [digest]}
            if first:
                header["before"] = None if before is None else len(before)
            self._put(journal.frame(header, (before or b"") if first else b""))

    def folder(self, rel: str) -> None:
        """The run is about to make the folder ``rel``."""
        self.folders.append(rel)
        if self._on_disk:
            self._put(journal.frame({"folder": rel}))

    def line(self, rel: str, text: str, *, created: bool, header: str = "") -> None:
        """The run is about to append ``text`` to ``rel`` (``created``: and make it, with
        ``header`` first)."""
        self.lines.append((rel, text, created, header))
        if self._on_disk:
            head = {"line": text, "in": rel, "created": created, "header": header}
            self._put(journal.frame(head))

    def _state(self) -> bytes:
        out = [journal.frame({"run": self.run})]
        for rel, old in self.before.items():
            header = {
                "file": rel,
                "after": sorted(self.after[rel], key=str),
                "before": None if old is None else len(old),
            }
            out.append(journal.frame(header, old or b""))
        out += [journal.frame({"folder": rel}) for rel in self.folders]
        for rel, text, created, head in self.lines:
            out.append(journal.frame({"line": text, "in": rel, "created": created, "header": head}))
        return b"".join(out)

    def _put(self, record: bytes) -> None:
        if self._fd is None:
            self._open()
            record = self._state()  # the run's name and all noted so far, this change too
        assert self._fd is not None
        view = memoryview(record)
        while view:
            view = view[os.write(self._fd, view) :]
        if self.durable:
            os.fdatasync(self._fd)

    def _open(self) -> None:
        where = journal.folder(self.root)
        where.mkdir(parents=True, exist_ok=True)
        name = f"{os.getpid()}-{os.urandom(4).hex()}"
        # Locked under a temporary name, then renamed: a store opened meanwhile never sees
        # an undo file of a live run without its lock.
        fresh = where / f"{name}.undo-new"
        fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC)
        fcntl.flock(fd, fcntl.LOCK_EX)
        path = where / f"{name}{SUFFIX}"
        os.rename(fresh, path)
        if self.durable:
            dir_fd = os.open(where, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        self._fd, self._path = fd, path

    # -- putting back ------------------------------------------------------------------

    def put_back(self, write: Write) -> tuple[list[str], list[str]]:
        """Put every file back, take the lines out, remove the empty folders made.

        Returns the paths put back and the paths left as they are (changed by someone else
        since the run wrote them).
        """
        restored: list[str] = []
        kept: list[str] = []
        for rel, old in self.before.items():
            target = self.root / rel
            now = _read(target)
            if now == old:
                continue
            if _digest(now) not in self.after.get(rel, ()):
                kept.append(rel)
                continue
            if old is None:
                target.unlink()
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                write(target, old)
            restored.append(rel)
        by_file: dict[str, list[tuple[str, bool, str]]] = {}
        for rel, text, created, head in self.lines:
            by_file.setdefault(rel, []).append((text, created, head))
        for rel, entries in by_file.items():
            _take_out(self.root / rel, entries, write)
        for rel in sorted(self.folders, key=lambda f: len(Path(f).parts), reverse=True):
            with suppress(OSError):  # only when empty: a file put there stays
                (self.root / rel).rmdir()
        return restored, kept

    def close(self) -> None:
        """The run stands or was put back: remove its undo file."""
        fd, path = self._fd, self._path
        self._fd = self._path = None
        self._on_disk = False
        if fd is None:
            return
        if path is not None:
            with suppress(FileNotFoundError):
                path.unlink()
        os.close(fd)  # releases the lock

    def release(self) -> None:
        """Let go of the undo file without removing it (the next store opened plays it
        back): for a run that could not be put back in this process."""
        fd = self._fd
        self._fd = self._path = None
        self._on_disk = False
        if fd is not None:
            os.close(fd)

    @classmethod
    def load(cls, root: Path, blob: bytes) -> Undo:
        """An undo record read back from its file."""
        undo = cls(root, durable=False)
        for header, payload in journal.frames(blob):
            if "run" in header:
                undo.run = str(header["run"])
            elif "file" in header:
                rel = str(header["file"])
                if "before" in header and rel not in undo.before:
                    undo.before[rel] = None if header["before"] is None else payload
                undo.after.setdefault(rel, set()).update(header["after"])
            elif "folder" in header:
                undo.folders.append(str(header["folder"]))
            elif "line" in header:
                undo.lines.append(
                    (
                        str(header["in"]),
                        str(header["line"]),
                        bool(header["created"]),
                        str(header["header"]),
                    )
                )
        return undo


def _take_out(target: Path, entries: list[tuple[str, bool, str]], write: Write) -> None:
    """Remove each appended line (its last occurrence: lines appended since stay)."""
    raw = _read(target)
    if raw is None:
        return
    text = raw.decode("utf-8", errors="surrogateescape")
    before = text
    for line, _created, _header in reversed(entries):
        at = text.rfind(line)
        if at >= 0:
            text = text[:at] + text[at + len(line) :]
    if text == before:
        return
    made = any(created for _line, created, _header in entries)
    if made and text in {"", entries[0][2]}:
        target.unlink()  # the run made the file, and no other run added a line
    else:
        write(target, text.encode("utf-8", errors="surrogateescape"))


def pending(root: Path) -> bool:
    """Whether any undo file is there (of a live run or of one whose process is gone)."""
    try:
        return any(n.endswith(SUFFIX) for n in os.listdir(journal.folder(root)))
    except FileNotFoundError:
        return False


def recover(root: Path, write: Write) -> list[tuple[str, list[str], list[str]]]:
    """Put back the runs whose process died before they committed.

    Returns, for each, the run's verb, the paths put back and the paths left as they are.
    The caller holds the store's write lock.
    """
    done: list[tuple[str, list[str], list[str]]] = []
    for path, fd in journal.locked_owners(journal.folder(root), SUFFIX):
        undo = Undo.load(root, journal.read_all(fd))
        restored, kept = undo.put_back(write)
        with suppress(FileNotFoundError):
            path.unlink()
        verb = undo.run or "an engine run"
        log.warning(
            "%s stopped before it committed (its process is gone): %d file(s) put back%s",
            verb,
            len(restored),
            f", {len(kept)} changed since and left as they are" if kept else "",
        )
        done.append((verb, restored, kept))
    return done
