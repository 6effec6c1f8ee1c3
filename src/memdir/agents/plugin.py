"""The Claude Code plugin: its files, built from the wiring and the texts in ``agents/data``.

``memdir agent plugin claude-code --out DIR`` writes them; ``claude --plugin-dir DIR`` loads
them. The JSON files are generated (they name the ``memdir`` to run and the store, see
:mod:`memdir.agents.wiring`); the skill and the commands are package data, the same bytes for
everyone.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import Conflict
from . import CLAUDE_CODE
from .wiring import SERVER_NAME, hooks_table, mcp_server

PLUGIN_NAME = "memdir"
# Package data file -> where it goes in the plugin.
TEXTS = {
    "SKILL.md": "skills/memdir/SKILL.md",
    "recall.md": "commands/recall.md",
    "consolidate.md": "commands/consolidate.md",
    "README.md": "README.md",
}


def text(name: str) -> bytes:
    """One of the texts shipped in ``memdir/agents/data``."""
    return resources.files(__package__).joinpath("data", name).read_bytes()


def dump(value: Any) -> bytes:
    """JSON as the plugin's files hold it: two-space indents, UTF-8, a final newline."""
    return (json.dumps(value, indent=2, ensure_ascii=False) + "\n").encode()


def files(memdir: list[str], root: str | Path | None = None) -> dict[str, bytes]:
    """Every file of the plugin, by its path inside the plugin folder."""
    manifest = {
        "name": PLUGIN_NAME,
        "version": __version__,
        "description": (
            "memdir memory in the loop: a bounded context pack at session start and with "
            "every prompt, one turn record per prompt, MCP search over the memory."
        ),
        "author": {"name": "memdir"},
        "license": "Apache-2.0",
        "keywords": ["memory", "markdown", "mcp"],
    }
    hooks = {
        "description": "memdir: context packs in, turn records out (memdir hook claude-code).",
        "hooks": hooks_table(CLAUDE_CODE, memdir, root),
    }
    out = {
        ".claude-plugin/plugin.json": dump(manifest),
        "hooks/hooks.json": dump(hooks),
        ".mcp.json": dump({"mcpServers": {SERVER_NAME: mcp_server(memdir, root)}}),
    }
    out.update({target: text(name) for name, target in TEXTS.items()})
    return out


def write(out: Path, memdir: list[str], root: str | Path | None = None) -> list[Path]:
    """Write the plugin into ``out`` (created when missing); the files written.

    A folder that holds anything but an earlier memdir plugin is refused, so a typo in
    ``--out`` cannot scatter files over a project."""
    out = out.expanduser()
    manifest = out / ".claude-plugin" / "plugin.json"
    if out.exists() and any(out.iterdir()):
        try:
            name = json.loads(manifest.read_text("utf-8")).get("name")
        except (OSError, ValueError, AttributeError):
            name = None
        if name != PLUGIN_NAME:
            raise Conflict(f"{out} is not empty and holds no memdir plugin: choose another --out")
    written = []
    for rel, data in files(memdir, root).items():
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(target)
        written.append(target)
    return written
