"""A batch of engine writes: atomic files under the store lock, then one git commit."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ..store import Store, atomic_write

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

    def write(self, rel: str, text: str) -> str:
        """Write ``text`` (checked as every write is: Store.check_document) if it changed."""
        norm, target = self.store.resolve(rel)
        raw = self.store.check_document(norm, text)
        target.parent.mkdir(parents=True, exist_ok=True)
        current = target.read_bytes() if target.is_file() else None
        if current != raw:
            with self.store.lock():
                atomic_write(target, raw)
            self.paths.append(norm)
        return norm

    def delete(self, rel: str) -> None:
        norm, target = self.store.resolve(rel)
        if target.is_file():
            with self.store.lock():
                target.unlink()
            self.paths.append(norm)

    def add_private(self, name: str) -> None:
        """A file under ``.memdir/`` that is committed (config, runs.tsv)."""
        self.paths.append(f".memdir/{name}")

    def commit(self, message: str, actor: str = "memdir-engine") -> bool:
        """One commit of everything written (False when git is off or nothing changed)."""
        if self.index is not None and self.paths:
            self.index.sync_paths([p for p in self.paths if not p.startswith(".memdir/")])
        if not self.store.settings.store.git_commit or not self.paths:
            return False
        if not (self.store.root / ".git").exists():
            return False
        self.store.git.commit_now(self.paths, actor, message)
        self.paths = []
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
