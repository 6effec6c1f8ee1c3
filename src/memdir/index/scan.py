"""Walking the files of a store: markdown only, dot-names skipped at any depth."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from ..doc.paths import inside


def scan(root: Path) -> Iterator[tuple[str, int, int]]:
    """Yield ``(relpath, mtime_ns, size)`` for every indexed markdown file (any order)."""
    found, _seen = changes(root, {}, everything=True)
    yield from found


def changes(
    root: Path, stamps: dict[str, tuple[int, int]], *, everything: bool = False
) -> tuple[list[tuple[str, int, int]], int]:
    """The files whose ``(mtime_ns, size)`` differ from ``stamps``, and how many were seen.

    The same walk as :func:`scan`, comparing as it goes (one loop instead of a generator and
    a loop: at 100k files the per-file overhead is what remains besides ``stat``). Every
    path seen is popped from ``stamps``, so what is left there is gone from disk.
    """
    changed: list[tuple[str, int, int]] = []
    add = changed.append
    pop = stamps.pop
    seen = 0
    real_root = os.path.realpath(root)
    stack = [("", os.fspath(root))]
    while stack:
        prefix, directory = stack.pop()
        try:
            entries = os.scandir(directory)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        with entries:
            for entry in entries:
                name = entry.name
                if name[0] == ".":
                    continue
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append((prefix + name + "/", entry.path))
                        continue
                    if not name.lower().endswith(".md"):
                        continue
                    st = entry.stat()
                except OSError:
                    continue
                if not entry.is_file():
                    continue
                # A symlink that leads outside the store is not the store's (paths.inside).
                if entry.is_symlink() and not inside(real_root, entry.path):
                    continue
                seen += 1
                rel = prefix + name
                stamp = (st.st_mtime_ns, st.st_size)
                if pop(rel, None) != stamp or everything:
                    add((rel, stamp[0], stamp[1]))
    return changed, seen
