"""``memdir hook AGENT EVENT``: one handler for every hook of Claude Code and Codex.

It reads the event's JSON on stdin and answers on stdout in the agent's protocol (both agents
take ``{"hookSpecificOutput": {"hookEventName": EVENT, "additionalContext": TEXT}}``):

- ``SessionStart``: the context pack of the session's thread with no keywords (the snapshot,
  the routers, the user's recent turns, and on resume or compact this session's own turns);
- ``UserPromptSubmit``: the context pack (mode one) for thread = the session id, user = the
  user (``MEMDIR_USER``, else the OS user), keywords = the prompt's content words;
  the prompt is spooled too;
- ``PostToolUse``: the event appended to the session's spool, nothing more;
- ``Stop``, ``SubagentStop``, ``SessionEnd``, ``PreCompact``: the transcript's turns not yet
  recorded are recorded (:mod:`memdir.agents.record`); Stop records the turn just finished,
  the others only turns already over. SessionEnd then removes the session's spool.

A pack is never over its budget (default 1,500 tokens) and never over 9,000 characters
(Claude Code cuts hook output over 10,000 characters down to a short preview).

A hook never breaks the agent: whatever fails, the handler exits 0 with nothing on stdout or
stderr, and writes one line to ``.memdir/hooks.log`` of the store (:func:`run`).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..doc.lazyregex import LazyRegex
from . import AGENTS, spool

if TYPE_CHECKING:
    from ..service import Memory
    from .transcripts import Transcript

DEFAULT_BUDGET = 1500
MAX_CHARS = 9000
MAX_KEYWORDS = 12
MAX_KEYWORD_CHARS = 40
CONTEXT_EVENTS = ("SessionStart", "UserPromptSubmit")
RECORD_EVENTS = ("Stop", "SubagentStop", "SessionEnd", "PreCompact")
EVENTS = (*CONTEXT_EVENTS, "PostToolUse", *RECORD_EVENTS)
USER_ENV = "MEMDIR_USER"
_WORD = LazyRegex(r"[^\W_][\w'-]*[^\W_]", re.UNICODE)


# What a hook reads of stdin at most: an event is small; a runaway pipe is not an event.
STDIN_LIMIT = 16 << 20


class HookError(Exception):
    """A hook's input that cannot be handled (logged, never shown to the agent)."""


def run(
    agent: str,
    event: str,
    stdin: bytes,
    *,
    root: str | None = None,
    env: Mapping[str, str] | None = None,
    budget: int = DEFAULT_BUDGET,
    problems: list[str] | None = None,
    walk_later: list[Path] | None = None,
) -> str:
    """Handle one hook call; the text for stdout ("" for none). Never raises: a failure,
    and anything memdir would have printed on stderr, goes to ``.memdir/hooks.log``.
    ``problems``: what was wrong with the command's arguments (logged; the call goes on
    when agent and event are known). ``walk_later``: see :func:`handle`."""
    env = os.environ if env is None else env
    found: list[Path] = []
    notes: list[str] = [f"usage: {p}" for p in problems or ()]
    captured = io.StringIO()
    try:
        # memdir's log records go there too: no handler is set in a hook process, so
        # logging's last resort writes them to (the redirected) stderr.
        with contextlib.redirect_stderr(captured):
            out = handle(
                agent,
                event,
                stdin,
                root=root,
                env=env,
                budget=budget,
                found=found,
                notes=notes,
                walk_later=walk_later,
            )
    except Exception as exc:  # a hook must never fail the agent
        explicit = root or env.get("MEMDIR_ROOT")
        if explicit and not found:
            found.append(Path(explicit).expanduser())
        for note in notes:
            _log(found, env, agent, event, note, io.StringIO())
        _log(found, env, agent, event, f"error: {type(exc).__name__}: {exc}", captured)
        return ""
    for note in notes:
        _log(found, env, agent, event, note, io.StringIO())
    if captured.getvalue().strip():
        _log(found, env, agent, event, "note", captured)
    return out


def main(words: list[str]) -> int:
    """``memdir hook AGENT EVENT [--root DIR] [--budget N]`` as a whole process, without the
    command line's framework: the words after ``hook``; stdin in, the answer on stdout.
    Always 0 (Claude Code blocks the prompt when a hook exits 2)."""
    import sys

    agent, event, root, budget, problems = parse_words(words)
    try:
        data = sys.stdin.buffer.read(STDIN_LIMIT) if not sys.stdin.isatty() else b""
    except (OSError, ValueError, AttributeError):
        data = b""  # no stdin at all: the handler logs the event as not JSON
    later: list[Path] = []
    out = run(
        agent,
        event,
        data,
        root=root,
        budget=budget or DEFAULT_BUDGET,
        problems=problems,
        walk_later=later,
    )
    if out:
        with contextlib.suppress(OSError):  # the agent stopped reading: nothing to tell it
            sys.stdout.write(out + "\n")
            sys.stdout.flush()
    for store in later:
        # A turn's commit is in the child's hands: it waits for a walk running already.
        walk_detached(store, wait=event in RECORD_EVENTS)
    return 0


WALK_LOCK = "walk.lock"
# How long a Stop's queued git commit may wait in its process (never reached: the process
# hands it over to its child before it exits).
DEFER_SECONDS = 3600.0


def walk_detached(store: Path, *, wait: bool = False) -> bool:
    """Bring the index of ``store`` in step with its files (the stat walk) in a child the
    hook does not wait for: forked after the answer is written, in a session of its own,
    with stdin, stdout and stderr on /dev/null so the agent's pipes close when the hook
    exits. At most one such walk runs per store: the hook takes ``.memdir/hooks/walk.lock``
    before forking and the child holds it until the walk is over (so whoever waits for that
    lock after the hook exited waits for the walk). When a walk runs already, nothing is
    started (the next hook walks again), unless ``wait``: then the child waits for that
    walk to end and walks after it (a Stop's commit is left to its child, which commits it
    on opening the store). False when no child was started."""
    if not hasattr(os, "fork"):
        return False
    import fcntl
    import sys

    folder = store / ".memdir" / "hooks"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / WALK_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return False
    held = True
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                raise
            held = False  # the child takes it once the running walk let go
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
            sys.stderr.flush()
        pid = os.fork()
    except OSError:
        os.close(fd)
        return False
    if pid:
        os.close(fd)  # the child's copy keeps the lock
        return True
    code = 0
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for stream in (0, 1, 2):
            os.dup2(null, stream)
        if not held:
            fcntl.flock(fd, fcntl.LOCK_EX)
        _walk(store)
    except BaseException:  # the child must end here, whatever happened
        code = 1
    finally:
        os._exit(code)


def _walk(store: Path) -> None:
    """The child's work: open the store (which commits what a hook handed over, and walks
    when it did), walk unless that open did, close."""
    from ..service import Memory

    with Memory.open(store) as mem:
        if not mem.store.crashed:
            mem.index.sync()


def parse_words(words: list[str]) -> tuple[str, str, str | None, int | None, list[str]]:
    """AGENT, EVENT, --root and --budget from the words, and what was wrong with them."""
    positional: list[str] = []
    root: str | None = None
    budget: int | None = None
    problems: list[str] = []
    items = iter(words)
    for word in items:
        name, eq, value = word.partition("=")
        if name in ("--root", "--budget"):
            value = value if eq else next(items, "")
            if name == "--root":
                root = value or None
            elif value.isascii() and value.isdigit() and len(value) <= 9 and int(value) > 0:
                budget = int(value)
            else:
                problems.append(f"--budget must be a positive number of tokens, got {value!r}")
        elif word.startswith("-"):
            problems.append(f"unknown option {word}")
        else:
            positional.append(word)
    if len(positional) != 2:
        problems.append(f"expected AGENT EVENT, got {' '.join(positional) or 'nothing'}")
    agent, event = (positional + ["", ""])[:2]
    return agent, event, root, budget, problems


def handle(
    agent: str,
    event: str,
    stdin: bytes,
    *,
    root: str | None = None,
    env: Mapping[str, str] | None = None,
    budget: int = DEFAULT_BUDGET,
    found: list[Path] | None = None,
    notes: list[str] | None = None,
    walk_later: list[Path] | None = None,
) -> str:
    """Handle one hook call (raises on failure; :func:`run` is the entry point that does not).

    ``found`` gets the store once it is known, ``notes`` what is worth a line in hooks.log
    though nothing failed (a turn memdir refused and skipped).

    ``walk_later``: when a list, the event is answered from the index as it stands (what
    the last walk saw plus every write made through memdir since, which indexes its own
    paths) instead of stat-ing every file of the store first, and the store is appended to
    the list: the caller walks after answering (:func:`walk_detached`). An index that has
    not walked the whole store once yet (new, rebuilt, or the files written before it was
    opened) is walked here all the same."""
    from .locate import locate

    env = os.environ if env is None else env
    if agent not in AGENTS:
        raise HookError(f"unknown agent {agent!r} (known: {', '.join(AGENTS)})")
    payload = _payload(stdin)
    if event not in EVENTS:
        return ""  # an event this handler does not use: nothing to do, nothing to say
    session = payload.get("session_id")
    if not isinstance(session, str) or not session.strip():
        raise HookError("the event has no session_id")
    cwd = payload.get("cwd") if isinstance(payload.get("cwd"), str) else None
    store = locate(root, cwd=cwd, env=env)
    if found is not None:
        found.append(store)
    if event == "PostToolUse":
        spool.append(store, agent, session, payload)
        return ""
    if event == "UserPromptSubmit":
        # The time it was asked: a turn recorded from the spool is dated by it.
        spool.append(store, agent, session, {**payload, spool.ASKED_MS: _now_ms()})
    from ..index import WALKED
    from ..service import Memory

    # A Stop handed to a child afterwards (walk_later) leaves its git commit to that child:
    # the write is queued, not committed at once, and handed over below.
    defer = walk_later is not None and event in RECORD_EVENTS
    later = {"store": {"git_batch_seconds": DEFER_SECONDS}} if defer else None
    with Memory.open(store, overrides=later) as mem:
        if walk_later is not None and mem.index.meta(WALKED) is not None:
            mem.hold_sync()
            walk_later.append(store)
        elif walk_later is not None:
            walk_later.append(store)  # walked here; the child still commits what is queued
        if event in CONTEXT_EVENTS:
            prompt = payload.get("prompt") if event == "UserPromptSubmit" else ""
            text = pack_text(mem, session, user_of(env), str(prompt or ""), budget)
            return _answer(event, text)
        try:
            skipped = _record(mem, agent, event, session, payload, env)
        finally:
            if defer:
                # The turn file is on disk (written durably); its commit is in the book,
                # which the child (or any later open, if the child dies) commits.
                mem.store.git.hand_over()
    if notes is not None:
        notes.extend(f"skipped turn {key}: {why}" for key, why in skipped if "refused" in why)
    if event == "SessionEnd":
        spool.remove(store, agent, session)
    return ""


def _payload(stdin: bytes) -> dict[str, Any]:
    try:
        value = json.loads(stdin or b"{}")
    except ValueError as exc:
        raise HookError(f"stdin is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise HookError("stdin is not a JSON object")
    return value


def user_of(env: Mapping[str, str]) -> str:
    """The user turns are recorded for: ``MEMDIR_USER``, else the OS user ("" if neither)."""
    name = env.get(USER_ENV, "").strip()
    if not name:
        with contextlib.suppress(Exception):
            import getpass

            name = getpass.getuser()
    return name if name and "/" not in name and "\\" not in name and name.isprintable() else ""


def keywords_of(prompt: str, most: int = MAX_KEYWORDS) -> list[str]:
    """The prompt's content words: lower case, stopwords and short words left out, in order."""
    from ..engine.terms import STOPWORDS

    out: list[str] = []
    for word in _WORD.findall(prompt.lower()):
        if not 3 <= len(word) <= MAX_KEYWORD_CHARS or word in STOPWORDS or word.isdigit():
            continue  # a pasted hash or blob is no keyword (and too long for one)
        if word in out:
            continue
        out.append(word)
        if len(out) == most:
            break
    return out


def pack_text(mem: Memory, thread: str, user: str, prompt: str, budget: int) -> str:
    """The pack for a hook: within ``budget`` tokens and :data:`MAX_CHARS` characters."""
    pack = mem.context(thread, user=user, keywords=keywords_of(prompt), budget=budget)
    return clip(pack.text)


def clip(text: str, most: int = MAX_CHARS) -> str:
    """``text`` cut to ``most`` characters: before the last item that does not fit whole,
    or, when that would leave less than half, at the last line end that fits."""
    if len(text) <= most:
        return text
    cut = text.rfind("\n## ", 0, most)
    if cut < most // 2:
        cut = text.rfind("\n", 0, most)
    return text[:cut].rstrip() if cut > 0 else text[:most]


def _answer(event: str, text: str) -> str:
    if not text.strip():
        return ""
    body = {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}
    return json.dumps(body, ensure_ascii=False)


def _record(
    mem: Memory,
    agent: str,
    event: str,
    session: str,
    payload: dict[str, Any],
    env: Mapping[str, str],
) -> list[tuple[str, str]]:
    from .record import OPEN, OVER, record_transcript

    stop = event == "Stop"
    last = payload.get("last_assistant_message") if stop else None
    path = payload.get("transcript_path")
    with spool.session_lock(mem.root, agent, session):
        # Only the transcript's tail from the first turn not recorded yet is read again.
        state = spool.load_state(mem.root, agent, session)
        start, prompts, previous = _resume(state, path)
        try:
            if not isinstance(path, str) or not path:
                raise OSError("the event names no transcript")
            # A transcript waited for once in vain is not waited for again.
            wait = TRANSCRIPT_WAIT_SECONDS if state.get("missing") != path else 0.0
            transcript = _read_transcript(path, agent, session, start, prompts, wait)
        except OSError:
            if not stop:
                return []
            # No transcript to read: what the hooks spooled still makes the turn.
            transcript = from_spool(spool.read(mem.root, agent, session), agent, session)
            if isinstance(path, str) and path:
                spool.save_state(mem.root, agent, session, {**state, "missing": path})
            path = None
        outcome = record_transcript(
            mem,
            transcript,
            user=user_of(env),
            last_output=last if isinstance(last, str) else None,
            last=OVER if event in ("Stop", "SessionEnd") else OPEN,
            previous=previous,
        )
        if path is not None:
            left = outcome.left
            state = {
                "transcript": path,
                "offset": transcript.end if left is None else left.start,
                "prompts": prompts
                + (len(transcript.turns) if left is None else transcript.turns.index(left)),
                "previous": outcome.previous,
            }
            spool.save_state(mem.root, agent, session, state)
        if event == "Stop" and outcome.left is None:
            # Every turn so far is recorded: what was spooled for them is not needed.
            spool.clear(mem.root, agent, session)
    return outcome.skipped


# How long a recording hook waits for a transcript the event names but that is not on disk
# yet: under load Claude Code has called Stop for a new session's first prompt before the
# file appeared. Recorded from the spool instead, the turn would have the spool's time and
# a poorer work log (a later read of the transcript finds it by its prompt id and does not
# record it again, see memdir.agents.record). A session whose transcript never appears (not
# kept on disk) waits once, at its first Stop.
TRANSCRIPT_WAIT_SECONDS = 3.0


def _read_transcript(
    path: str, agent: str, session: str, start: int, prompts: int, wait: float
) -> Any:
    import time

    from . import transcripts

    # Only Claude Code writes the transcript after calling the hook; another agent's missing
    # file is not waited for.
    deadline = time.monotonic() + (wait if agent == "claude-code" else 0.0)
    while True:
        try:
            return transcripts.read(path, agent, session, start=start, prompts=prompts)
        except FileNotFoundError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def _resume(state: dict[str, Any], path: object) -> tuple[int, int, str | None]:
    """Where to start reading ``path`` again: (byte offset, prompts before it, the turn
    before it), from the session's state when it is about this transcript and still holds
    (the file is at least that long and a line begins there); else from the start."""
    offset, prompts, previous = state.get("offset"), state.get("prompts"), state.get("previous")
    if (
        state.get("transcript") != path
        or not isinstance(path, str)
        or not isinstance(offset, int)
        or not isinstance(prompts, int)
        or offset <= 0
        or prompts < 0
        or (previous is not None and not isinstance(previous, str))
    ):
        return 0, 0, None
    try:
        with open(path, "rb") as handle:
            handle.seek(offset - 1)
            if handle.read(1) != b"\n":
                return 0, 0, None
    except OSError:
        return 0, 0, None
    return offset, prompts, previous


def from_spool(events: list[dict[str, Any]], agent: str, session: str) -> Transcript:
    """Turns from the spool: each spooled prompt, then the tool calls spooled after it.

    A turn is keyed on its prompt id as a transcript's turn is (``prompt:<id>``), so either
    reader finds the other's record, and dated by when the hook spooled the prompt (a line
    spooled without that time: now)."""
    from .transcripts import Transcript, Turn, prompt_key

    turns: list[Turn] = []
    for event in events:
        name = event.get("hook_event_name")
        if name == "UserPromptSubmit" and isinstance(event.get("prompt"), str):
            asked = event.get(spool.ASKED_MS)
            ms = asked if isinstance(asked, int) and asked > 0 else _now_ms()
            pid = event.get("prompt_id")
            if isinstance(pid, str) and pid:
                key = prompt_key(pid)
            else:
                key = f"spool:{event.get('turn_id') or f'#{len(turns) + 1}'}"
            turns.append(Turn(key, event["prompt"], ms))
        elif name == "PostToolUse" and turns:
            line = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
            turns[-1].worklog.append(line.encode("utf-8") + b"\n")
            turns[-1].tool_calls += 1
    return Transcript(agent, session, turns)


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)


def _log(
    found: list[Path],
    env: Mapping[str, str],
    agent: str,
    event: str,
    what: str,
    captured: io.StringIO,
) -> None:
    """One line in the store's ``.memdir/hooks.log`` (the user store's, or the temp folder's,
    when no store was found)."""
    from .locate import user_store

    extra = captured.getvalue().strip()
    line = f"{agent} {event} {what}" + (f" | {extra}" if extra else "")
    candidates = [*(p / ".memdir" for p in found), user_store(env) / ".memdir"]
    for folder in candidates:
        if folder.is_dir():
            with contextlib.suppress(OSError):
                spool.log_failure(folder, line)
                return
    with contextlib.suppress(OSError):
        import tempfile

        spool.log_failure(Path(tempfile.gettempdir()) / "memdir-hooks", line)
