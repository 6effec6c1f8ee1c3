"""A batch of engine writes: atomic files under the store lock, then one git commit.

A batch remembers what each file held before its first change, so a run that fails part
way can put every file back (:meth:`Batch.all_or_nothing`): nothing half-done is left.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import MemdirError
from ..store import Store, atomic_write
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
        self._before: dict[str, bytes | None] = {}  # path -> bytes before (None: no file)
        self._wrote: dict[str, bytes | None] = {}  # path -> what this batch left there
        self._folders: list[Path] = []  # folders this batch created
        self._rows: list[str] = []  # lines this batch appended to runs.tsv
        self._runs_existed = True  # whether runs.tsv was there before the first of them

    def _remember(self, norm: str, target: Path) -> None:
        if norm not in self._before:
            self._before[norm] = target.read_bytes() if target.is_file() else None

    def _make_folder(self, folder: Path) -> None:
        missing = []
        while not folder.exists():
            missing.append(folder)
            folder = folder.parent
        if missing:
            missing[0].mkdir(parents=True, exist_ok=True)
            self._folders += missing

    def write(self, rel: str, text: str) -> str:
        """Write ``text`` (checked as every write is: Store.check_document) if it changed."""
        norm, target = self.store.resolve(rel)
        raw = self.store.check_document(norm, text)
        self._make_folder(target.parent)
        current = target.read_bytes() if target.is_file() else None
        if current != raw:
            self._remember(norm, target)
            with self.store.lock():
                atomic_write(target, raw)
            self._wrote[norm] = raw
            self.paths.append(norm)
        return norm

    def delete(self, rel: str) -> None:
        norm, target = self.store.resolve(rel)
        if target.is_file():
            self._remember(norm, target)
            with self.store.lock():
                target.unlink()
            self._wrote[norm] = None
            self.paths.append(norm)

    def add_private(self, name: str) -> None:
        """A file under ``.memdir/`` that is committed (config, runs.tsv)."""
        self.paths.append(f".memdir/{name}")

    def log_run(
        self, verb: str, status: str, notes: Mapping[str, Any], *, head: str = ""
    ) -> runs.Run:
        """Append a row to ``.memdir/runs.tsv`` (committed with the batch; taken out again
        by :meth:`rollback`, leaving rows other processes added meanwhile)."""
        if not self._rows:
            self._runs_existed = runs.path_of(self.store.root).is_file()
        row = runs.append(self.store.root, verb, status, notes, head=head)
        self._rows.append(row.raw + "\n")
        self.add_private("runs.tsv")
        return row

    @contextmanager
    def all_or_nothing(self, verb: str) -> Iterator[None]:
        """Run the block; if it raises, :meth:`rollback` and re-raise, saying so.

        A :class:`MemdirError` keeps its class (and so its code) with the message prefixed;
        any other error becomes a MemdirError naming it. Interrupts pass through unchanged.
        """
        try:
            yield
        except BaseException as exc:
            try:
                restored, kept = self.rollback()
            except Exception as undo:
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
        restored: list[str] = []
        kept: list[str] = []
        root = self.store.root
        with self.store.lock():
            for norm, old in self._before.items():
                target = root / norm
                now = target.read_bytes() if target.is_file() else None
                if now == old:
                    continue
                if now != self._wrote.get(norm):
                    kept.append(norm)
                    continue
                if old is None:
                    target.unlink()
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    atomic_write(target, old)
                restored.append(norm)
            if self._rows:
                self._drop_rows(runs.path_of(root))
            for folder in sorted(self._folders, key=lambda f: len(f.parts), reverse=True):
                with contextlib.suppress(OSError):  # only when empty: a file put there stays
                    folder.rmdir()
        if self.index is not None and self._before:
            self.index.sync_paths(list(self._before))
        self._forget()
        return restored, kept

    def _forget(self) -> None:
        self.paths, self._before, self._wrote, self._folders, self._rows = [], {}, {}, [], []

    def _drop_rows(self, target: Path) -> None:
        if not target.is_file():
            return
        text = target.read_text(encoding="utf-8", errors="surrogateescape")
        for row in reversed(self._rows):
            at = text.rfind(row)
            if at >= 0:
                text = text[:at] + text[at + len(row) :]
        if text == runs.HEADER and not self._runs_existed:
            target.unlink()  # the batch made the file, and no other run added a row
        else:
            atomic_write(target, text.encode("utf-8", errors="surrogateescape"))

    def commit(self, message: str, actor: str = "memdir-engine") -> bool:
        """One commit of everything written (False when git is off or nothing changed).

        Past this point the run stands: a commit git refuses stays queued and is retried
        (memdir.gitlog), the files being complete.
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
    """Store-relative ``.md`` paths under ``folder`` (dot-names skipped), sorted."""
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
    yield from sorted(out)
