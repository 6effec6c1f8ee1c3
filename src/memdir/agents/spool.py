"""The per-session folder of the hooks: ``.memdir/hooks/<agent>-<session>/``.

- ``lock``: held (``flock``, exclusive) while a hook records the session's turns, so two
  handlers of one session (a Stop that fires twice, a SessionEnd beside it) take turns and
  the second finds the turns recorded;
- ``state.json``: how far the session's transcript has been recorded (a byte offset, the
  prompts before it and the turn there), so a Stop reads only what came after;
- ``spool.jsonl``: one line per prompt (``UserPromptSubmit``) and per tool call
  (``PostToolUse``), each the event's JSON as received. Appending is all those hooks do, so
  they cost next to nothing; Stop reads the transcript and uses the spool only when the
  transcript cannot be read, and empties it once every turn so far is recorded. SessionEnd
  removes the folder.

The log of failed hooks is ``.memdir/hooks.log`` beside it (:func:`log_failure`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..doc.lazyregex import LazyRegex

HOOKS_DIR = "hooks"
HOOKS_LOG = "hooks.log"
STATE = "state.json"
LOG_LIMIT = 1 << 20  # bytes; past it the log is moved to hooks.log.1
LOCK_WAIT = 20.0  # seconds; Claude Code's hooks time out after 60 s by default
_SAFE = LazyRegex(r"[^A-Za-z0-9._-]")


def session_dir(root: Path, agent: str, session: str) -> Path:
    """The folder of one session (its name is safe whatever the session id holds)."""
    name = _SAFE.sub("_", session)[:80]
    if name != session or not name.strip("._"):
        import hashlib  # only for a session id that is not a safe name

        name = f"{name}-{hashlib.sha256(session.encode('utf-8')).hexdigest()[:12]}"
    return root / ".memdir" / HOOKS_DIR / f"{agent}-{name}"


class LockTimeout(OSError):
    """Another handler of the session held its lock for longer than the wait allowed."""


@contextlib.contextmanager
def session_lock(
    root: Path, agent: str, session: str, *, wait: float | None = None
) -> Iterator[None]:
    """Hold the session's lock, waiting up to ``wait`` seconds for another handler of the
    same session (a hook must not hang the agent behind one that hangs)."""
    folder = session_dir(root, agent, session)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + (LOCK_WAIT if wait is None else wait)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeout(f"session {session} is locked by another hook") from None
                time.sleep(0.01)
        yield
    finally:
        os.close(fd)


# The key under which UserPromptSubmit spools the time it was called (ms since the epoch).
ASKED_MS = "memdir_asked_ms"


def append(root: Path, agent: str, session: str, event: dict[str, Any]) -> None:
    """Append one event to the session's spool (one ``write`` of one line)."""
    folder = session_dir(root, agent, session)
    folder.mkdir(parents=True, exist_ok=True)
    line = json.dumps(event, ensure_ascii=False, separators=(",", ":")) + "\n"
    fd = os.open(folder / "spool.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, line.encode("utf-8", errors="surrogatepass"))
    finally:
        os.close(fd)


def read(root: Path, agent: str, session: str) -> list[dict[str, Any]]:
    """The spooled events of a session, oldest first (lines that do not parse are left out)."""
    try:
        data = (session_dir(root, agent, session) / "spool.jsonl").read_bytes()
    except OSError:
        return []
    out: list[dict[str, Any]] = []
    for line in data.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def load_state(root: Path, agent: str, session: str) -> dict[str, Any]:
    """The session's state (where its transcript was read up to), {} when none is readable."""
    try:
        value = json.loads((session_dir(root, agent, session) / STATE).read_bytes())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def save_state(root: Path, agent: str, session: str, state: dict[str, Any]) -> None:
    """Replace the session's state (a temp file renamed over it: never half written)."""
    folder = session_dir(root, agent, session)
    folder.mkdir(parents=True, exist_ok=True)
    temp = folder / f".{STATE}.{os.getpid()}.tmp"
    temp.write_text(json.dumps(state), encoding="utf-8")
    os.replace(temp, folder / STATE)


def clear(root: Path, agent: str, session: str) -> None:
    """Empty the session's spool (its turns are recorded; the lock and state stay)."""
    with contextlib.suppress(FileNotFoundError):
        (session_dir(root, agent, session) / "spool.jsonl").unlink()


def remove(root: Path, agent: str, session: str) -> None:
    """Take the session's folder away (its turns are recorded)."""
    import shutil  # not at the top: a hook needs none (test_hook_imports)

    shutil.rmtree(session_dir(root, agent, session), ignore_errors=True)


def log_failure(folder: Path, line: str) -> None:
    """Append one line to ``folder/hooks.log`` (``folder`` is a store's ``.memdir``)."""
    path = folder / HOOKS_LOG
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    text = f"{stamp} {' '.join(line.split())}\n"
    with contextlib.suppress(OSError):
        if path.stat().st_size > LOG_LIMIT:
            os.replace(path, folder / (HOOKS_LOG + ".1"))
    folder.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8", errors="replace") as handle:
        handle.write(text)
