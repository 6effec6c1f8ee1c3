"""Running git for the store: one subprocess call with memdir's identity and a clean message,
and telling a git lock file that a killed git left behind from one git still holds."""

from __future__ import annotations

import os
import time
from contextlib import suppress
from pathlib import Path

from .. import lazy
from ..doc.lazyregex import LazyRegex
from ..errors import GitError

log = lazy.logger("memdir.git")  # the git log's own logger

STALE_LOCK_SECONDS = 2.0  # git holds index.lock open while it works; a closed one this old is left


MAX_MESSAGE_CHARS = 4096  # one write's message
MAX_COMMIT_MESSAGE_CHARS = 16384  # a whole commit message (a batch lists its writes' messages)
MAX_NAME_CHARS = 200
_SAFE_NAME = LazyRegex(r"[^A-Za-z0-9._+-]+")
_SURROGATES = LazyRegex("[\ud800-\udfff]")
_MESSAGE_CONTROLS = LazyRegex(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")  # all but newline
_NAME_CONTROLS = LazyRegex(r"[\x00-\x1f\x7f-\x9f<>]")
_SPACES = LazyRegex(r"\s+")
_CRUD = frozenset(" .,:;<>\"\\'")  # what git strips from the ends of a name (ident.c)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def clean_message(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """A commit message git accepts, from any string.

    The rule: lone surrogates (not encodable as UTF-8) become U+FFFD; line ends become
    newlines; every other control character (C0, DEL, C1: NUL, tab, escape ...) becomes a
    space; the result is stripped and cut to ``limit`` characters (ending in "…"). It may
    be empty: the caller supplies a default, as git refuses an empty message.
    """
    text = _SURROGATES.sub("\ufffd", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _MESSAGE_CONTROLS.sub(" ", text).strip()
    return _cut(text, limit)


def clean_name(text: str) -> str:
    """An author name git accepts, from any actor string.

    The rule: lone surrogates become U+FFFD; control characters (newline included) and
    ``<``/``>`` become spaces; runs of white space become one space; the result is stripped
    and cut to ``MAX_NAME_CHARS``. A name with nothing left but what git strips from a name
    (spaces and ``.,:;"'\\``) is ``anonymous``.
    """
    text = _SURROGATES.sub("\ufffd", text)
    text = _SPACES.sub(" ", _NAME_CONTROLS.sub(" ", text)).strip()
    text = _cut(text, MAX_NAME_CHARS)
    if all(ch in _CRUD for ch in text):
        return "anonymous"
    return text


def identity_env(actor: str) -> dict[str, str]:
    env = dict(os.environ)
    name = clean_name(actor)
    email_local = _SAFE_NAME.sub("-", name).strip("-.")[:64] or "anonymous"
    env.update(
        LC_ALL="C",
        GIT_AUTHOR_NAME=name,
        GIT_AUTHOR_EMAIL=f"{email_local}@memdir.local",
        GIT_COMMITTER_NAME="memdir",
        GIT_COMMITTER_EMAIL="memdir@memdir.local",
    )
    return env


# Blobs added by memdir go straight into one pack per ``git add`` ("bulk check-in", which git
# uses for files over this size) instead of one loose object file each: a flush of 2,000
# turn files then creates two files under .git instead of 2,000. Only the add uses it, so
# diffs and later repacks see the repository's own settings. Paths are literal: a file named
# ``*.md`` is that file, not a pattern.
ADD = ("--literal-pathspecs", "-c", "core.bigFileThreshold=1", "add")
FROM_STDIN = ("--pathspec-from-file=-", "--pathspec-file-nul")


def run_git(
    root: Path,
    *args: str,
    actor: str = "memdir",
    check: bool = True,
    stdin: str | bytes | None = None,
    keep: tuple[int, ...] = (),
) -> str:
    """Run git in ``root`` as ``actor``; its output, decoded (bytes that are not UTF-8 as U+FFFD).

    A ``str`` stdin is encoded as UTF-8 (file names from the file system keep their bytes).
    ``keep``: descriptors git inherits (memdir's git lock, so a git outliving its caller
    still holds it).
    """
    data = stdin.encode("utf-8", "surrogateescape") if isinstance(stdin, str) else stdin
    try:
        import subprocess  # not at the top: a hook runs no git (test_hook_imports)

        proc = subprocess.run(
            ["git", "-C", str(root), *args],
            input=data,
            capture_output=True,
            env=identity_env(actor),
            check=False,
            pass_fds=keep,
        )
    except FileNotFoundError:
        raise GitError("git is not installed; set store.git_commit = false") from None
    out = proc.stdout.decode("utf-8", "replace")
    if check and proc.returncode != 0:
        verb = next((a for a in args if not a.startswith("-") and "=" not in a), "")
        err = proc.stderr.decode("utf-8", "replace").strip()
        raise GitError(f"git {verb} failed: {err or out.strip()}")
    return out


def clear_stale_git_locks(root: Path) -> list[Path]:
    """Remove the lock files a killed git left (``index.lock``, ``HEAD.lock``, the current
    branch's ``.lock``, ``packed-refs.lock``): while one is there git refuses to commit.
    Returns those removed.

    Call it holding memdir's git lock: every git memdir runs holds it too (it inherits the
    descriptor), so no memdir git runs, and a lock that no process has open belongs to a
    git that is gone. One younger than ``STALE_LOCK_SECONDS`` is waited for first: a git of
    the user's may be between closing it and renaming it into place.
    """
    git_dir = root / ".git"
    candidates = [git_dir / "index.lock", git_dir / "HEAD.lock", git_dir / "packed-refs.lock"]
    with suppress(OSError, UnicodeDecodeError):
        head = (git_dir / "HEAD").read_text().strip()
        if head.startswith("ref: refs/"):
            candidates.append(git_dir / (head[5:] + ".lock"))
    found: dict[Path, float] = {}
    for lock in candidates:
        with suppress(FileNotFoundError):
            found[lock] = time.time() - lock.stat().st_mtime
    if not found:
        return []
    young = max(STALE_LOCK_SECONDS - age for age in found.values())
    if young > 0:
        time.sleep(young)
    removed: list[Path] = []
    for lock, age in found.items():
        if not lock.exists() or _held_open(lock):
            continue
        with suppress(FileNotFoundError):
            lock.unlink()
            removed.append(lock)
            log.warning(
                "removed a stale %s (%.0f s old, no process had it open)",
                lock,
                max(age, STALE_LOCK_SECONDS),
            )
    return removed


def _held_open(path: Path) -> bool:
    """Whether any process this user can see has ``path`` open (Linux /proc; True where
    that cannot be told, so a lock is never taken from a live git)."""
    proc = Path("/proc")
    if not (proc / "self" / "fd").is_dir():
        return True
    wanted = os.fspath(path.resolve())
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        try:
            fds = os.scandir(os.path.join(entry.path, "fd"))
        except OSError:
            continue  # another user's process, or gone
        with fds:
            for fd in fds:
                with suppress(OSError):
                    if os.readlink(fd.path) == wanted:
                        return True
    return False
