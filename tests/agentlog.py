"""Agent transcripts and hook payloads built by the tests, shaped like the real ones.

Claude Code (2.1.x, run headless): a session's transcript is JSONL under
``HOME/.claude/projects/<cwd with / as ->/<session>.jsonl``; every line has ``type`` and
``sessionId``; conversation records chain ``uuid``/``parentUuid`` and carry a ``timestamp``;
an assistant message is written one record per content block; tool results are ``user``
records with a ``tool_result`` block; bookkeeping records (``queue-operation``,
``attachment``, ``system``, ``last-prompt``) sit between them. Hook payloads carry
``session_id``, ``transcript_path``, ``cwd`` and ``hook_event_name`` plus each event's fields.

Codex: a rollout is JSONL of ``{timestamp, type, payload}``: ``session_meta``,
``turn_context``, ``event_msg`` (``user_message``, ``agent_message``) and ``response_item``
(``message``, ``function_call``, ``function_call_output``).
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

START = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)


def _stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


class ClaudeSession:
    """A Claude Code session: appends records to its transcript as the agent would."""

    def __init__(self, home: Path, cwd: Path, session: str | None = None) -> None:
        self.session = session or str(uuid.uuid4())
        self.cwd = str(cwd)
        folder = home / ".claude" / "projects" / self.cwd.replace("/", "-")
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"{self.session}.jsonl"
        self.clock = START
        self.parent: str | None = None
        self.prompt_id = ""
        self.prompts: list[tuple[str, datetime]] = []
        self.worklogs: list[list[bytes]] = []  # per prompt: the tool lines, as written
        self.answer = ""

    # -- writing -------------------------------------------------------------

    def _tick(self) -> str:
        self.clock += timedelta(milliseconds=1500)
        return _stamp(self.clock)

    def _line(self, record: dict[str, Any]) -> bytes:
        text = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
        try:
            line = text.encode() + b"\n"
        except UnicodeEncodeError:  # a lone surrogate: Node's JSON.stringify escapes it
            line = json.dumps(record, separators=(",", ":")).encode() + b"\n"
        with self.path.open("ab") as handle:
            handle.write(line)
        return line

    def _conversation(self, kind: str, **fields: Any) -> tuple[dict[str, Any], str]:
        ident = str(uuid.uuid4())
        record = {
            "parentUuid": self.parent,
            "isSidechain": False,
            "userType": "external",
            "cwd": self.cwd,
            "sessionId": self.session,
            "version": "2.1.332",
            "gitBranch": "",
            "entrypoint": "sdk-cli",
            "type": kind,
            "uuid": ident,
            "timestamp": self._tick(),
            **fields,
        }
        self.parent = ident
        return record, ident

    def bookkeeping(self) -> None:
        """Records that are not the conversation (they must not become turns or work)."""
        stamp = _stamp(self.clock)
        self._line(
            {
                "type": "queue-operation",
                "operation": "dequeue",
                "timestamp": stamp,
                "sessionId": self.session,
            }
        )
        record, _ = self._conversation(
            "attachment",
            attachment={"type": "hook_additional_context", "content": ["# memdir context"]},
        )
        self._line(record)

    def prompt(self, text: str) -> str:
        self.prompt_id = str(uuid.uuid4())
        self.bookkeeping()
        record, _ = self._conversation(
            "user",
            message={"role": "user", "content": text},
            promptId=self.prompt_id,
            permissionMode="default",
            promptSource="sdk",
        )
        self._line(record)
        self.prompts.append((text, self.clock))
        self.worklogs.append([])
        self.answer = ""
        return self.prompt_id

    def injected(self, text: str, **flags: Any) -> None:
        """A user record Claude Code writes itself (a compaction's summary, a local command's
        output, hook feedback): no prompt of the user."""
        record, _ = self._conversation("user", message={"role": "user", "content": text}, **flags)
        self._line(record)

    def tool(self, name: str, arguments: dict[str, Any], result: str, *, say: str = "") -> str:
        """One tool call and its result (with a text block before it when ``say``)."""
        message_id = f"msg_{uuid.uuid4().hex[:20]}"
        use_id = f"toolu_{uuid.uuid4().hex[:20]}"
        base = {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": "claude-opus-5-5",
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
        if say:
            record, _ = self._conversation(
                "assistant",
                message={**base, "content": [{"type": "text", "text": say}]},
                requestId="req_1",
                apiBlockIndex=0,
            )
            self._line(record)
        use = {"type": "tool_use", "id": use_id, "name": name, "input": arguments}
        record, use_uuid = self._conversation(
            "assistant",
            message={**base, "content": [use]},
            requestId="req_1",
            apiBlockIndex=1 if say else 0,
        )
        self.worklogs[-1].append(self._line(record))
        block = {"type": "tool_result", "tool_use_id": use_id, "content": result, "is_error": False}
        record, _ = self._conversation(
            "user",
            message={"role": "user", "content": [block]},
            toolUseResult=result,
            sourceToolAssistantUUID=use_uuid,
            permissionDecision={"decision": "accept", "source": "config", "ruleSource": "cliArg"},
            promptId=self.prompt_id,
        )
        self.worklogs[-1].append(self._line(record))
        return use_id

    def reply(self, text: str) -> None:
        message = {
            "id": f"msg_{uuid.uuid4().hex[:20]}",
            "type": "message",
            "role": "assistant",
            "model": "claude-opus-5-5",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
        record, _ = self._conversation(
            "assistant", message=message, requestId="req_2", apiBlockIndex=0
        )
        self._line(record)
        self._line(
            {
                "type": "system",
                "subtype": "stop_hook_summary",
                "hookCount": 1,
                "hookInfos": [],
                "hookErrors": [],
                "preventedContinuation": False,
                "sessionId": self.session,
                "timestamp": _stamp(self.clock),
            }
        )
        self.answer = text

    # -- hook payloads -------------------------------------------------------

    def payload(self, event: str, **extra: Any) -> dict[str, Any]:
        """The stdin of a hook for ``event``, with the fields Claude Code sends."""
        body: dict[str, Any] = {
            "session_id": self.session,
            "transcript_path": str(self.path),
            "cwd": self.cwd,
            "hook_event_name": event,
        }
        if event == "SessionStart":
            body["source"] = "startup"
        if event in ("UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop", "SessionEnd"):
            body["prompt_id"] = self.prompt_id
        if event in ("UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop"):
            body["permission_mode"] = "default"
        if event == "UserPromptSubmit":
            body["prompt"] = self.prompts[-1][0] if self.prompts else ""
        if event in ("PreToolUse", "PostToolUse", "Stop"):
            body["effort"] = {"level": "high"}
        if event == "Stop":
            body.update(
                stop_hook_active=False,
                last_assistant_message=self.answer,
                background_tasks=[],
                session_crons=[],
            )
        if event == "SessionEnd":
            body["reason"] = "other"
        body.update(extra)
        return body


class CodexSession:
    """A Codex rollout file, written as Codex writes it."""

    def __init__(self, home: Path, cwd: Path, session: str | None = None) -> None:
        self.session = session or str(uuid.uuid4())
        folder = home / ".codex" / "sessions" / "2026" / "11" / "30"
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"rollout-2026-11-30T10-00-00-{self.session}.jsonl"
        self.cwd = str(cwd)
        self.clock = START
        self.worklogs: list[list[bytes]] = []
        self.prompts: list[tuple[str, datetime]] = []
        self.answer = ""
        self._write(
            "session_meta",
            {
                "id": self.session,
                "timestamp": _stamp(START),
                "cwd": self.cwd,
                "originator": "codex_cli_rs",
                "cli_version": "0.120.0",
                "source": "cli",
            },
        )

    def _write(self, kind: str, payload: dict[str, Any]) -> bytes:
        self.clock += timedelta(milliseconds=1200)
        line = (
            json.dumps(
                {"timestamp": _stamp(self.clock), "type": kind, "payload": payload},
                separators=(",", ":"),
            ).encode()
            + b"\n"
        )
        with self.path.open("ab") as handle:
            handle.write(line)
        return line

    def prompt(self, text: str) -> None:
        self._write(
            "response_item",
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "<environment_context>cwd</environment_context>"}
                ],
            },
        )
        self._write(
            "response_item",
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
        )
        self._write("event_msg", {"type": "user_message", "message": text, "kind": "plain"})
        self.prompts.append((text, self.clock))
        self._write("turn_context", {"cwd": self.cwd, "model": "gpt-5-codex"})
        self.worklogs.append([])

    def tool(self, name: str, arguments: dict[str, Any], result: str) -> None:
        call = f"call_{uuid.uuid4().hex[:12]}"
        self.worklogs[-1].append(
            self._write(
                "response_item",
                {
                    "type": "function_call",
                    "name": name,
                    "arguments": json.dumps(arguments),
                    "call_id": call,
                },
            )
        )
        self.worklogs[-1].append(
            self._write(
                "response_item",
                {
                    "type": "function_call_output",
                    "call_id": call,
                    "output": json.dumps({"output": result, "metadata": {"exit_code": 0}}),
                },
            )
        )

    def reply(self, text: str) -> None:
        self._write("event_msg", {"type": "agent_message", "message": text})
        self._write(
            "response_item",
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text}],
            },
        )
        self.answer = text

    def payload(self, event: str, **extra: Any) -> dict[str, Any]:
        body: dict[str, Any] = {
            "session_id": self.session,
            "transcript_path": str(self.path),
            "cwd": self.cwd,
            "hook_event_name": event,
            "model": "gpt-5-codex",
            "permission_mode": "default",
            "turn_id": f"turn-{len(self.prompts)}",
        }
        if event == "UserPromptSubmit":
            body["prompt"] = self.prompts[-1][0]
        if event == "Stop":
            body.update(stop_hook_active=False, last_assistant_message=self.answer)
        body.update(extra)
        return body
