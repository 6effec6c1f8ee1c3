"""A batch of engine writes: atomic files under the store lock, then one git commit.

A batch remembers what each file held before its first change, so a run that fails part
way can put every file back (:meth:`Batch.all_or_nothing`): nothing half-done is left.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..doc import paths
from ..errors import MemdirError
from ..files.atomic import atomic_write
from ..files.store import Store
from ..files.undo import Undo
from . import runs

if TYPE_CHECKING:
    from ..index import Index


class Batch:
    """Collects the files an engine run writes, so the run ends in one commit.

    With an ``index``, :meth:`commit` first brings it in step for the written paths: a
    command syncs once when it starts, so a file written later would otherwise stay out
    of the index until the next command.
    """

    def __init__(self, store: Store, index: Index | None = None) -> None:
        self.store = store
        self.index = index
        self.paths: list[str] = []
        self._undo = Undo(store.root, durable=store.durable)

    def _make_folder(self, folder: Path) -> None:
        missing = []
        while not folder.exists():
            missing.append(folder)
            folder = folder.parent
        for made in reversed(missing):
            self._undo.folder(made.relative_to(self.store.root).as_posix())
        if missing:
            missing[0].mkdir(parents=True, exist_ok=True)

    def write(self, rel: str, text: str) -> str:
        """Write ``text`` (checked as every write is: Store.check_document) if it changed."""
        norm, target = self.store.resolve(rel)
        raw = self.store.check_document(norm, text)
        self._make_folder(target.parent)
        current = target.read_bytes() if target.is_file() else None
        if current != raw:
            self._undo.file(norm, current, raw)
            with self.store.lock():
                atomic_write(target, raw)
            self.paths.append(norm)
        return norm

    def delete(self, rel: str) -> None:
        norm, target = self.store.resolve(rel)
        if target.is_file():
            self._undo.file(norm, target.read_bytes(), None)
            with self.store.lock():
                target.unlink()
            self.paths.append(norm)

    def add_private(self, name: str) -> None:
        """A file under ``.memdir/`` that is committed (config, runs.tsv)."""
        self.paths.append(f".memdir/{name}")

    def log_run(
        self, verb: str, status: str, notes: Mapping[str, Any], *, head: str = ""
    ) -> runs.Run:
        """Append a row to ``.memdir/runs.tsv`` (committed with the batch; taken out again
        by :meth:`rollback`, leaving rows other processes added meanwhile)."""
        line = runs.format_row(verb, status, notes, head=head)
        created = not runs.path_of(self.store.root).is_file()
        self._undo.line(".memdir/runs.tsv", line, created=created, header=runs.HEADER)
        row = runs.append_row(self.store.root, line)
        self.add_private("runs.tsv")
        return row

    @contextmanager
    def all_or_nothing(self, verb: str) -> Iterator[None]:
        """Run the block; if it raises, :meth:`rollback` and re-raise, saying so.

        From here until :meth:`commit`, what the batch changes is also noted on disk
        (memdir.files.undo), so a process that dies before the commit is put back the next time
        the store is opened.

        A :class:`MemdirError` keeps its class (and so its code) with the message prefixed;
        any other error becomes a MemdirError naming it. Interrupts pass through unchanged.
        """
        self._undo.keep_on_disk(verb)
        try:
            yield
        except BaseException as exc:
            try:
                restored, kept = self.rollback()
            except Exception as undo:
                self._undo.release()  # the next store opened tries again
                raise MemdirError(
                    f"{verb} failed ({type(exc).__name__}: {exc}), and putting its files back "
                    f"failed too ({type(undo).__name__}: {undo}); `git status` shows what is left"
                ) from exc
            if not isinstance(exc, Exception):
                raise
            head = f"{verb} failed and changed nothing ({len(restored)} file(s) put back)"
            if kept:
                head = (
                    f"{verb} failed; {len(restored)} file(s) put back, but "
                    f"{', '.join(kept)} changed meanwhile and stayed as it is"
                )
            if isinstance(exc, MemdirError):
                exc.message = f"{head}: {exc.message}"
                exc.args = (exc.message,)
                raise
            raise MemdirError(f"{head}: {type(exc).__name__}: {exc}") from exc

    def rollback(self) -> tuple[list[str], list[str]]:
        """Put every file this batch changed back as it was, remove the folders it made,
        take its rows out of runs.tsv and bring the index in step for those paths.

        A file changed by someone else since this batch wrote it is left alone. Returns the
        paths put back and the paths left alone.
        """
        with self.store.lock():
            restored, kept = self._undo.put_back(atomic_write)
        touched = list(self._undo.before)
        if self.index is not None and touched:
            self.index.sync_paths(touched)
        self._forget()
        return restored, kept

    def _forget(self) -> None:
        self._undo.close()
        self.paths = []
        self._undo = Undo(self.store.root, durable=self.store.durable)

    def commit(self, message: str, actor: str = "memdir-engine") -> bool:
        """One commit of everything written (False when git is off or nothing changed).

        Past this point the run stands: a commit git refuses stays queued and is retried
        (memdir.files.gitlog), the files being complete.
        """
        paths = self.paths
        self._forget()
        if self.index is not None and paths:
            self.index.sync_paths([p for p in paths if not p.startswith(".memdir/")])
        if not self.store.settings.store.git_commit or not paths:
            return False
        if not (self.store.root / ".git").exists():
            return False
        self.store.git.commit_now(paths, actor, message)
        return True


def markdown_under(root: Path, folder: str) -> Iterator[str]:
    """Store-relative ``.md`` paths under ``folder`` (dot-names skipped), sorted: only the
    regular files of the store (:func:`memdir.doc.paths.readable`), so an engine walk never reads
    through a symlink out of the store or into ``.git/``, nor waits on a pipe."""
    base = root / folder
    if not base.is_dir():
        return
    out = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in filenames:
            if name.startswith(".") or not name.lower().endswith(".md"):
                continue
            out.append(Path(dirpath, name).relative_to(root).as_posix())
    yield from paths.readable_files(root, sorted(out))
