"""Agents' transcripts read into turns: Claude Code's session JSONL and Codex's rollout JSONL.

A turn runs from one prompt of the user to the next. What it keeps of the transcript:

- ``prompt``: the user's text;
- ``worklog``: the transcript's own lines of this turn's tool calls and their results, byte for
  byte (for Claude Code the ``assistant`` records holding a ``tool_use`` block and the ``user``
  records holding a ``tool_result``; for Codex the ``response_item`` records of type
  ``function_call``, ``custom_tool_call``, ``local_shell_call`` and their outputs);
- ``output``: the text of the last assistant message of the turn;
- ``started_ms``: the prompt's timestamp;
- ``key``: what names the turn in its session whatever reads it (a hook, an import, twice,
  the spool): for Claude Code the prompt's id (``prompt:<promptId>``, which the hooks' events
  carry as ``prompt_id`` too; the record's ``uuid`` when it has none), for Codex the prompt's
  position; ``legacy_key``: the key memdir gave the turn before (the record's ``uuid``), so a
  turn recorded then is found;
- ``reads``: the memdir documents and turns the agent read during the turn, through memdir's
  MCP tools (``read`` and ``turn_show``, whatever the server's prefix: ``mcp__memdir__read``,
  ``mcp__plugin_memdir_memdir__read``) or a ``memdir read`` / ``memdir turn show`` command.

Nothing here opens a store: :mod:`memdir.agents.record` turns these into turn records.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from ..doc.turnrecord import is_turn_id
from ..records import field, recordclass
from . import AGENTS, CLAUDE_CODE, CODEX

__all__ = ["AGENTS", "CLAUDE_CODE", "CODEX", "Transcript", "Turn", "parse", "read"]

# memdir's MCP tools that put a document or a turn in front of the agent.
_READ_TOOLS = {"read": "path", "turn_show": "turn_id"}
_TURN_FILE = re.compile(r"(?:^|/)([0-9a-hjkmnp-tv-z]{26})(?:\.md|\.worklog\.jsonl)$")
# User records that are not a prompt of the user: hook feedback Claude Code sends the model,
# and the output of a local command (/compact, /model) shown in the transcript.
_NOT_A_PROMPT = (
    "<system-reminder>",
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<local-command-caveat>",
)
# Flags of user records Claude Code writes itself (a compaction's summary, a skill's text).
_NOT_A_PROMPT_FLAGS = ("isMeta", "isCompactSummary", "isVisibleInTranscriptOnly")
_CODEX_CALLS = {"function_call", "custom_tool_call", "local_shell_call", "web_search_call"}
_CODEX_RESULTS = {"function_call_output", "custom_tool_call_output"}


PROMPT_KEY = "prompt:"


def prompt_key(prompt_id: str) -> str:
    """The key of the turn a prompt of this id began (Claude Code's ``promptId``)."""
    return PROMPT_KEY + prompt_id


@recordclass
class Turn:
    """One prompt-to-answer turn of a transcript."""

    key: str
    prompt: str
    started_ms: int
    start: int = 0  # where the prompt's line begins in the transcript, in bytes
    output: str = ""
    worklog: list[bytes] = field(default_factory=list)
    tool_calls: int = 0
    reads: list[str] = field(default_factory=list)
    legacy_key: str = ""  # the key an earlier memdir gave this turn (see the module's text)

    def read_turns(self) -> list[str]:
        """The turn ids among ``reads`` (a turn id, or the path of a turn record)."""
        out: list[str] = []
        for ref in self.reads:
            match = _TURN_FILE.search(ref)
            ident = match.group(1) if match else ref
            if is_turn_id(ident) and ident not in out:
                out.append(ident)
        return out

    def read_documents(self) -> list[str]:
        """The paths among ``reads`` that are not turns."""
        turns = set(self.read_turns())
        return [r for r in self.reads if r not in turns and not _TURN_FILE.search(r)]


@recordclass
class Transcript:
    """A transcript read into turns; ``skipped`` lists (line number, reason); ``end`` is
    where its last whole line ends, in bytes (what a later read can start from)."""

    agent: str
    session: str
    turns: list[Turn]
    skipped: list[tuple[int, str]] = field(default_factory=list)
    end: int = 0


def read(
    path: str | Path, agent: str, session: str = "", *, start: int = 0, prompts: int = 0
) -> Transcript:
    """Read the transcript at ``path``; ``session`` as for :func:`parse`, and when neither
    it nor the file names the session, the file's name does. ``start`` and ``prompts``
    read only the tail from byte ``start`` on, after ``prompts`` prompts (see :func:`parse`).
    """
    with open(path, "rb") as handle:
        handle.seek(start)
        data = handle.read()
    found = parse(data, agent, session, start=start, prompts=prompts)
    if not found.session:
        found.session = Path(path).stem
    return found


def parse(
    data: bytes, agent: str, session: str = "", *, start: int = 0, prompts: int = 0
) -> Transcript:
    """Read transcript bytes into turns. A line that is not a JSON object is skipped and
    reported; the last line is skipped as ``truncated`` when it has no newline and does not
    parse (a transcript still being written).

    The session is ``session`` when given (a hook's ``session_id``), else the first one the
    file names (Claude Code's ``sessionId``, Codex's ``session_meta``), so a stray record
    cannot move the turns to another thread.

    ``data`` may be the tail of a transcript from byte ``start`` on (a turn's first line),
    after ``prompts`` prompts: the turns and their keys are those a read of the whole file
    gives from there."""
    if agent not in AGENTS:
        raise ValueError(f"unknown agent {agent!r} (known: {', '.join(AGENTS)})")
    reader = _Claude(session, prompts) if agent == CLAUDE_CODE else _Codex(session, prompts)
    skipped: list[tuple[int, str]] = []
    for number, offset, raw, record in _records(data, skipped):
        reader.at = start + offset
        reader.take(number, raw, record)
    end = start + data.rfind(b"\n") + 1
    return Transcript(agent, reader.session, reader.finish(), skipped, end)


def _records(data: bytes, skipped: list[tuple[int, str]]) -> Iterator[tuple[int, int, bytes, Any]]:
    lines = data.split(b"\n")
    last = len(lines)
    offset = 0
    for number, body in enumerate(lines, start=1):
        at, offset = offset, offset + len(body) + 1
        if not body.strip():
            continue
        complete = number < last  # the piece after the last newline is still being written
        try:
            record = json.loads(body)
        except ValueError:
            skipped.append((number, "not JSON" if complete else "truncated last line"))
            continue
        if not isinstance(record, dict):
            skipped.append((number, "not a JSON object"))
            continue
        yield number, at, body + b"\n" if complete else body, record


def _ms(stamp: object) -> int | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return int(when.timestamp() * 1000)


def _text(content: object, kinds: tuple[str, ...] = ("text",)) -> str:
    """The text of a message's content: a string, or the text blocks of a list."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = [
        str(block.get("text") or "")
        for block in content
        if isinstance(block, dict) and block.get("type") in kinds
    ]
    return "\n\n".join(p for p in parts if p)


def memdir_tool(name: object) -> str | None:
    """The memdir MCP tool a tool name calls (``read`` for ``mcp__memdir__read``), or None."""
    if not isinstance(name, str) or "__" not in name:
        return None
    parts = name.split("__")
    server, tool = parts[-2], parts[-1]
    if server == "memdir" or server.endswith("_memdir"):
        return tool
    return None


def _tool_reads(name: object, arguments: object) -> list[str]:
    """What a tool call read of memdir: an MCP read tool's argument, or a memdir command's."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            arguments = {"command": arguments}
    if not isinstance(arguments, dict):
        return []
    tool = memdir_tool(name)
    if tool in _READ_TOOLS:
        value = arguments.get(_READ_TOOLS[tool])
        return [value] if isinstance(value, str) and value else []
    command = arguments.get("command") or arguments.get("cmd")
    if isinstance(command, list):
        command = " ".join(shlex.quote(str(part)) for part in command)
    return command_reads(command) if isinstance(command, str) else []


def command_reads(command: str) -> list[str]:
    """The paths of ``memdir read PATH`` and the ids of ``memdir turn show ID`` in a shell
    command line (each command of a pipeline or list)."""
    try:
        tokens = shlex.split(command)
    except ValueError:
        return []
    out: list[str] = []
    for at, token in enumerate(tokens):
        if token != "memdir" and not token.endswith("/memdir"):
            continue
        args = _without_options(tokens[at + 1 :])
        if len(args) >= 2 and args[0] == "read":
            out.append(args[1])
        elif len(args) >= 3 and args[:2] == ["turn", "show"]:
            out.append(args[2])
    return out


def _without_options(tokens: list[str]) -> list[str]:
    """The words of one command up to its end (``|``, ``;``, ``&&``), options taken out."""
    words: list[str] = []
    skip = False
    for token in tokens:
        if token in ("|", ";", "&&", "||", "&"):
            break
        if skip:
            skip = False
            continue
        if token in ("--root", "--section"):
            skip = True
            continue
        if token.startswith("-"):
            continue
        words.append(token)
    return words


class _Claude:
    """Claude Code: one record per content block; prompts are ``user`` records with text."""

    def __init__(self, session: str, prompts: int = 0) -> None:
        self.session = session
        self.turns: list[Turn] = []
        self.prompts = prompts
        self.at = 0
        self.last_ms = 0
        self.answer_id: object = None
        self.calls: dict[str, tuple[str, Any]] = {}

    def take(self, number: int, raw: bytes, record: dict[str, Any]) -> None:
        kind = record.get("type")
        if kind not in ("user", "assistant") or record.get("isSidechain"):
            return
        if not self.session and isinstance(record.get("sessionId"), str):
            self.session = record["sessionId"]
        self.last_ms = _ms(record.get("timestamp")) or self.last_ms
        message = record.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
        if kind == "user":
            self._user(number, raw, record, content, blocks)
        elif self.turns:
            self._assistant(raw, message, blocks)

    def _user(
        self, number: int, raw: bytes, record: dict[str, Any], content: object, blocks: list[Any]
    ) -> None:
        if any(b.get("type") == "tool_result" for b in blocks):
            if self.turns:
                self.turns[-1].worklog.append(raw)
            return
        text = _text(content)
        if any(record.get(flag) for flag in _NOT_A_PROMPT_FLAGS):
            return
        if not text.strip() or text.lstrip().startswith(_NOT_A_PROMPT):
            return
        uuid = record.get("uuid") if isinstance(record.get("uuid"), str) else None
        pid = record.get("promptId")
        key = prompt_key(pid) if isinstance(pid, str) and pid else uuid
        ordinal = self.prompts + len(self.turns) + 1
        turn = Turn(key or f"#{ordinal}", text, self.last_ms, self.at)
        if key != uuid and uuid:
            turn.legacy_key = uuid
        self.turns.append(turn)
        self.answer_id = None

    def _assistant(self, raw: bytes, message: Any, blocks: list[Any]) -> None:
        turn = self.turns[-1]
        uses = [b for b in blocks if b.get("type") == "tool_use"]
        if uses:
            turn.worklog.append(raw)
            turn.tool_calls += len(uses)
            for use in uses:
                for ref in _tool_reads(use.get("name"), use.get("input")):
                    if ref not in turn.reads:
                        turn.reads.append(ref)
        text = _text(blocks)
        if text.strip():
            ident = message.get("id") if isinstance(message, dict) else None
            if ident is not None and ident == self.answer_id:
                turn.output = f"{turn.output}\n\n{text}" if turn.output else text
            else:
                turn.output = text
            self.answer_id = ident if ident is not None else object()

    def finish(self) -> list[Turn]:
        return self.turns


class _Codex:
    """Codex: ``{timestamp, type, payload}`` lines; a prompt is an ``event_msg`` of type
    ``user_message`` (the ``response_item`` user messages also carry injected context)."""

    def __init__(self, session: str, prompts: int = 0) -> None:
        self.session = session
        self.turns: list[Turn] = []
        self.prompts = prompts
        self.at = 0
        self.last_ms = 0

    def take(self, number: int, raw: bytes, record: dict[str, Any]) -> None:
        kind = record.get("type")
        payload = record.get("payload")
        if not isinstance(payload, dict):
            return
        self.last_ms = _ms(record.get("timestamp")) or self.last_ms
        sub = payload.get("type")
        if kind == "session_meta":
            if not self.session and isinstance(payload.get("id"), str):
                self.session = payload["id"]
        elif kind == "event_msg" and sub == "user_message":
            text = payload.get("message")
            if isinstance(text, str) and text.strip():
                ordinal = self.prompts + len(self.turns) + 1
                self.turns.append(Turn(f"#{ordinal}", text, self.last_ms, self.at))
        elif kind == "response_item" and self.turns:
            self._item(raw, sub, payload)

    def _item(self, raw: bytes, sub: object, payload: dict[str, Any]) -> None:
        turn = self.turns[-1]
        if sub in _CODEX_CALLS:
            turn.worklog.append(raw)
            turn.tool_calls += 1
            arguments = payload.get("arguments", payload.get("input", payload.get("action")))
            for ref in _tool_reads(payload.get("name"), arguments):
                if ref not in turn.reads:
                    turn.reads.append(ref)
        elif sub in _CODEX_RESULTS:
            turn.worklog.append(raw)
        elif sub == "message" and payload.get("role") == "assistant":
            text = _text(payload.get("content"), ("output_text", "text"))
            if text.strip():
                turn.output = text

    def finish(self) -> list[Turn]:
        return self.turns
