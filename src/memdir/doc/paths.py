"""Path rules: confinement to the store, and which files are visible to walks.

Pure functions over strings plus one filesystem check (symlinks), so both the
store and the index use the same rules.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..errors import UnsafePath

PRIVATE_DIRS = frozenset({".git", ".memdir"})
HIDDEN_ZONES = ("quarantine/", "conflicts/")  # conflicts/: the other side of a sync (files/sync.py)
# What file systems allow for one name, and a depth no memory needs (deeper paths made
# a RecursionError in mkdir before they reached the file system's own limit).
MAX_NAME_BYTES = 255
MAX_DEPTH = 64
# The longest full path (the store's own folder included) a file may have: Linux allows
# 4095 bytes, and the temp file a write makes beside its target needs room for its name.
MAX_PATH_BYTES = 4000


def normalize(rel: str) -> str:
    """Validate a store-relative path given by a user and return it in ``a/b.md`` form.

    Refuses empty paths, absolute paths, ``..``, control characters and the
    private folders ``.git/`` and ``.memdir/`` at any depth.
    """
    if not isinstance(rel, str) or not rel.strip():
        raise UnsafePath("path is empty")
    if any(ord(c) < 32 or c == "\x7f" for c in rel):
        raise UnsafePath(f"path has control characters: {rel!r}")
    candidate = rel.replace("\\", "/")
    if candidate.startswith("/") or (len(candidate) > 1 and candidate[1] == ":"):
        raise UnsafePath(f"absolute paths are not allowed: {rel}")
    parts = [p for p in candidate.split("/") if p not in ("", ".")]
    if not parts:
        raise UnsafePath(f"path names no file: {rel}")
    if len(parts) > MAX_DEPTH:
        raise UnsafePath(f"path is more than {MAX_DEPTH} folders deep: {rel[:80]}…")
    for part in parts:
        if part == "..":
            raise UnsafePath(f"path has a '..' part (paths are relative to the store root): {rel}")
        if _private(part):
            raise UnsafePath(f"path is inside the private folder {part}/: {rel}")
        try:
            size = len(part.encode("utf-8"))
        except UnicodeEncodeError:
            raise UnsafePath(f"path is not valid Unicode text: {rel!r}") from None
        if size > MAX_NAME_BYTES:
            raise UnsafePath(f"a name in the path is over {MAX_NAME_BYTES} bytes: {part[:40]}…")
    return "/".join(parts)


def _private(part: str) -> bool:
    """``.git`` or ``.memdir`` as a file system that ignores case, or trailing dots and spaces
    (macOS, Windows), would read it."""
    return part.rstrip(". ").lower() in PRIVATE_DIRS


def confine(root: Path, rel: str) -> tuple[str, Path]:
    """Normalise ``rel`` and resolve it under ``root``; refuse symlinks that lead outside,
    symlink loops and paths longer than a file system holds.

    A path that goes through a symlink inside the store is answered with its real path.
    """
    norm = normalize(rel)
    target = _short_enough(root / norm, rel)
    if not _symlink_below(root, norm):
        return norm, target  # nothing under the root to follow: it stays inside
    # Resolve every symlink of the part that exists; the result must stay under the root,
    # and the file is then named by its real path (what git and the index know it by).
    real_root = os.path.realpath(root)
    real_target = os.path.realpath(target)
    if not real_target.startswith(real_root + os.sep):
        raise UnsafePath(f"path resolves outside the store through a symlink: {rel}")
    canonical = normalize(os.path.relpath(real_target, real_root).replace(os.sep, "/"))
    if _symlink_below(root, canonical):
        # realpath leaves a symlink in place only when following it comes back to itself
        raise UnsafePath(f"path goes through a symlink loop: {rel}")
    return canonical, _short_enough(root / canonical, rel)


def _short_enough(target: Path, rel: str) -> Path:
    if len(os.fsencode(target)) > MAX_PATH_BYTES:
        raise UnsafePath(
            f"path is too long: with the store's folder it is over {MAX_PATH_BYTES} bytes: "
            f"{rel[:80]}…"
        )
    return target


def inside(real_root: str, path: str) -> bool:
    """Whether ``path``, every symlink followed, is under ``real_root`` (itself a realpath)
    and not in one of its private folders (``.git``, ``.memdir``).

    The walk that indexes the store skips a symlink that leads anywhere else: search or grep
    would show its content where ``read`` refuses it.
    """
    real = os.path.realpath(path)
    if not real.startswith(real_root + os.sep):
        return False
    rel = real[len(real_root) + 1 :]
    return not any(_private(part) for part in rel.split(os.sep))


def real_rel(real_root: str, path: str) -> str | None:
    """The store-relative path (``a/b.md``) of what ``path`` is, every symlink followed;
    None when that is outside ``real_root`` (itself a realpath) or in a private folder."""
    if not inside(real_root, path):
        return None
    return os.path.realpath(path)[len(real_root) + 1 :].replace(os.sep, "/")


def shown_within(root: Path, rel: str, prefix: str | None) -> bool:
    """Whether the store file ``rel`` may be shown to a caller confined to ``prefix``: the
    file it really is, every symlink followed, lies under ``prefix`` too (not only its name).

    Confinement applies to what a result shows: ``episodes/peek.md`` linked to
    ``wiki/secret.md`` shows the wiki's text, so it is outside ``episodes/``.
    """
    if not prefix:
        return True
    real = real_rel(os.path.realpath(root), os.path.join(root, rel))
    return real is not None and real.startswith(prefix.lstrip("/"))


def links_out(root: Path, prefix: str) -> list[str]:
    """The paths under ``prefix`` (by name) that lead out of it: each symlink, to a file or a
    folder, whose target is not under ``prefix``; a folder ends in ``/``.

    One ``scandir`` walk of the prefix's folders (a symlink is known from the entry, without
    a ``stat``); symlinked folders are not entered. When the prefix's own folder is reached
    through a symlink, the prefix itself is returned: all of it leads out.
    """
    prefix = prefix.lstrip("/")
    real_root = os.path.realpath(root)
    folder = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
    start = os.path.join(root, folder) if folder else os.fspath(root)
    if folder and not os.path.isdir(start):
        return []
    if folder and real_rel(real_root, start) != folder:
        return [folder + "/"]
    out: list[str] = []
    stack = [(folder + "/" if folder else "", start)]
    while stack:
        here, directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            rel = here + entry.name
            if not rel.startswith(prefix):
                continue  # beside the prefix in its folder ("episodes/x" for "episodes/e")
            if entry.is_symlink():
                real = real_rel(real_root, entry.path)
                folder_link = os.path.isdir(entry.path)
                shown = real is not None and (real + "/" * folder_link).startswith(prefix)
                if not shown:
                    out.append(rel + "/" * folder_link)
            elif entry.is_dir(follow_symlinks=False):
                stack.append((rel + "/", entry.path))
    return out


def through_symlinks(root: Path, rels: Iterable[str]) -> set[str]:
    """The paths among ``rels`` with a symlink (or a component that cannot be checked) below
    ``root``; each folder is looked at once, so paths that share folders cost one ``lstat``
    each."""
    folders: dict[str, bool] = {}
    out: set[str] = set()
    for rel in rels:
        parts = rel.split("/")
        current = ""
        linked = False
        for depth, part in enumerate(parts):
            current = f"{current}/{part}" if current else part
            last = depth == len(parts) - 1
            if not last and current in folders:
                linked = folders[current]
            else:
                linked = _is_link(os.path.join(root, current))
                if not last:
                    folders[current] = linked
            if linked:
                break
        if linked:
            out.add(rel)
    return out


def _is_link(path: str) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # cannot tell: treat it as one


def readable(real_root: str, path: str) -> bool:
    """Whether a walk of the store may read ``path``: a regular file (a pipe would block the
    reader for ever), ``inside`` the store (see :func:`inside`)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
    except OSError:
        return False
    return inside(real_root, path)


def readable_files(root: Path, rels: Iterable[str]) -> Iterator[str]:
    """The store-relative paths of ``rels`` a walk of the store may read (:func:`readable`)."""
    real_root = os.path.realpath(root)
    for rel in rels:
        if readable(real_root, os.path.join(root, rel)):
            yield rel


def _symlink_below(root: Path, norm: str) -> bool:
    """True when a component of ``norm`` under ``root`` is a symlink (or cannot be checked).

    One ``lstat`` per existing component below the root; the components of the root itself
    are not looked at, since a path with no symlink below the root cannot leave it.
    """
    current = os.fspath(root)
    for part in norm.split("/"):
        current = os.path.join(current, part)
        try:
            mode = os.lstat(current).st_mode
        except (FileNotFoundError, NotADirectoryError):
            return False  # nothing deeper exists
        except OSError:
            return True  # cannot tell: take the careful path
        if stat.S_ISLNK(mode):
            return True
    return False


def is_markdown(rel: str) -> bool:
    return rel.lower().endswith(".md")


def has_dot_component(rel: str) -> bool:
    return any(part.startswith(".") for part in rel.split("/"))


def in_hidden_zone(rel: str) -> bool:
    """True for files that search and walks never return (quarantine, dot folders)."""
    return rel.startswith(HIDDEN_ZONES) or has_dot_component(rel)
