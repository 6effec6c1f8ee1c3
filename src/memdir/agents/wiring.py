"""How an agent runs memdir: the hook commands and the MCP server entry its config holds.

One place builds them, for the plugin (:mod:`memdir.agents.plugin`) and for the installer
(:mod:`memdir.agents.install`), so the two can never disagree.

Which ``memdir`` runs: an agent starts hooks and MCP servers with its own PATH, which is often
not the user's shell PATH (a GUI launch, a login shell that never read ``~/.bashrc``, a venv not
activated). So the command is an absolute path by default: the ``memdir`` script beside the
Python that runs this code (the install the user just ran), else that Python with ``-m memdir``.
``--memdir CMD`` overrides it (``--memdir memdir`` leaves it to PATH, for a plugin shared between
machines).
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Any

from . import CLAUDE_CODE, CODEX

# Every event the handler uses, per agent, and how long the agent may wait for it (seconds).
# A record waits at most 20 s for the session's lock, so the recording events get 30 s.
CLAUDE_EVENTS = (
    "SessionStart",
    "UserPromptSubmit",
    "PostToolUse",
    "Stop",
    "SubagentStop",
    "PreCompact",
    "SessionEnd",
)
# Codex's hooks.json knows SessionStart, PreToolUse, PermissionRequest, PostToolUse,
# UserPromptSubmit, Stop, PreCompact and PostCompact (docs/agents.md, "Codex CLI").
CODEX_EVENTS = ("SessionStart", "UserPromptSubmit", "PostToolUse", "Stop", "PreCompact")
EVENTS = {CLAUDE_CODE: CLAUDE_EVENTS, CODEX: CODEX_EVENTS}
TIMEOUTS = {"SessionStart": 15, "UserPromptSubmit": 15, "PostToolUse": 10}
RECORD_TIMEOUT = 30
SERVER_NAME = "memdir"


def memdir_command(explicit: str | None = None) -> list[str]:
    """The words that run memdir: ``explicit`` (a file's path, or else a command line split
    as a shell would), else the absolute ``memdir`` beside this Python, else this Python
    with ``-m memdir``."""
    if explicit is not None and explicit.strip():
        given = Path(explicit).expanduser()
        if given.is_file():
            return [str(given.absolute())]
        return shlex.split(explicit)
    script = Path(sys.executable).with_name("memdir")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script.absolute())]
    return [str(Path(sys.executable).absolute()), "-m", "memdir"]


def root_words(root: str | Path | None) -> list[str]:
    """``--root STORE`` with the store's absolute path, or nothing."""
    if root is None or not str(root).strip():
        return []
    return ["--root", str(Path(root).expanduser().absolute())]


def hook_command(agent: str, event: str, memdir: list[str], root: str | Path | None) -> str:
    """The shell command line of one hook: ``memdir hook AGENT EVENT [--root STORE]``."""
    return shlex.join([*memdir, "hook", agent, event, *root_words(root)])


def hooks_table(agent: str, memdir: list[str], root: str | Path | None) -> dict[str, Any]:
    """The ``hooks`` object of a settings or hooks.json file: every event wired to the
    handler (no matcher: every tool, every source)."""
    table: dict[str, Any] = {}
    for event in EVENTS[agent]:
        entry = {
            "type": "command",
            "command": hook_command(agent, event, memdir, root),
            "timeout": TIMEOUTS.get(event, RECORD_TIMEOUT),
        }
        table[event] = [{"hooks": [entry]}]
    return table


def mcp_server(memdir: list[str], root: str | Path | None) -> dict[str, Any]:
    """The stdio MCP server entry: ``memdir agent mcp``, which serves the store the hooks
    use (same rule, same ``--root``)."""
    return {"command": memdir[0], "args": [*memdir[1:], "agent", "mcp", *root_words(root)]}


def is_memdir_hook(command: object, agent: str) -> bool:
    """Whether a hook's command line is memdir's handler for ``agent``."""
    if not isinstance(command, str):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    for i in range(len(words) - 1):
        if words[i] == "hook" and words[i + 1] == agent and i > 0:
            return Path(words[i - 1]).name in ("memdir", "memdir.exe") or words[i - 1] == "memdir"
    return False
