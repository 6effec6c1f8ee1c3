"""Walking the files of a store: markdown only, dot-names skipped at any depth."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path


def scan(root: Path) -> Iterator[tuple[str, int, int]]:
    """Yield ``(relpath, mtime_ns, size)`` for every indexed markdown file (any order)."""
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
                yield prefix + name, st.st_mtime_ns, st.st_size
