"""The real Claude Code CLI, headless, with memdir's plugin, against a scripted fake model.

`make claude-cli` installs the npm package into .cache/claude-cli; the test uses that, else a
`claude` on PATH, and skips (saying why) when there is neither or no `node`. The fake Messages
API (tests/fake_anthropic.py) runs on loopback in this process; Claude Code starts the plugin's
hooks and its MCP server (`memdir agent mcp`) as real processes, through a `memdir` script
that runs this checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fake_anthropic import FakeAnthropic, request_text, serving, tool_results, user_text
from memdir.agents import plugin
from memdir.files.store import Store
from memdir.service import Memory

REPO = Path(__file__).resolve().parents[1]
CACHED = REPO / ".cache" / "claude-cli" / "node_modules" / ".bin" / "claude"
SERVER = "mcp__plugin_memdir_memdir__"
DOC = "wiki/ops/deploys.md"
ASK = "How do we roll back a deploy?"
ANSWER = f"Roll back with the blue switch ({DOC})."


def claude_binary() -> str:
    if shutil.which("node") is None:
        pytest.skip("node is missing: the Claude Code CLI needs it (then run make claude-cli)")
    found = str(CACHED) if CACHED.exists() else shutil.which("claude")
    if found is None:
        pytest.skip("no Claude Code CLI: run `make claude-cli` (npm) or put `claude` on PATH")
    return found


@dataclass
class Rig:
    claude: str
    store: Path
    plugin: Path
    home: Path
    work: Path
    tmp: Path


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    claude = claude_binary()
    store = tmp_path / "store"
    Store.init(store)
    with Memory.open(store) as mem:
        mem.write(DOC, "# Deploys\n\nRoll back with the blue switch.\n", actor="test")
    # The memdir the agent runs: this checkout, whatever memdir the PATH may hold.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    memdir = bin_dir / "memdir"
    memdir.write_text(
        f'#!/bin/sh\nPYTHONPATH={REPO / "src"} exec {sys.executable} -m memdir "$@"\n'
    )
    memdir.chmod(0o755)
    folder = tmp_path / "plugin"
    plugin.write(folder, [str(memdir)], store)
    for name in ("home", "work", "tmp"):
        (tmp_path / name).mkdir()
    yield Rig(claude, store, folder, tmp_path / "home", tmp_path / "work", tmp_path / "tmp")


def run_claude(
    rig: Rig, fake: FakeAnthropic, prompt: str, *, session: str, resume: bool = False
) -> dict[str, Any]:
    """One `claude -p` run; its JSON result."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(rig.home),
        "TMPDIR": str(rig.tmp),
        "LANG": "C.UTF-8",
        "ANTHROPIC_BASE_URL": fake.url,
        "ANTHROPIC_API_KEY": "test-key",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "ENABLE_TOOL_SEARCH": "false",  # the MCP tools are offered with their schemas
        "MEMDIR_USER": "ana",
    }
    argv = [rig.claude, "-p", prompt, "--output-format", "json", "--plugin-dir", str(rig.plugin)]
    argv += ["--allowedTools", f"{SERVER}search {SERVER}read"]
    argv += ["--resume", session] if resume else ["--session-id", session]
    done = subprocess.run(
        argv, cwd=rig.work, env=env, capture_output=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    result = json.loads(done.stdout)
    assert isinstance(result, dict) and not result.get("is_error"), result
    return result


def tool_use(name: str, kind: str, given: dict[str, Any]) -> dict[str, Any]:
    """A tool_use block whose id says which step of the script it is."""
    return {"type": "tool_use", "id": f"toolu_{kind}{uuid.uuid4().hex[:12]}", "name": name,
            "input": given}  # fmt: skip


def script(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The fake model: search memdir, read what it found, answer; other prompts get text."""
    search = [
        {"type": "text", "text": "Let me look in memory."},
        tool_use(f"{SERVER}search", "search", {"query": "roll back", "limit": 5}),
    ]
    for result in tool_results(body):
        used = str(result.get("tool_use_id", ""))
        if used.startswith("toolu_wait"):
            return search
        if used.startswith("toolu_search"):
            return [tool_use(f"{SERVER}read", "read", {"path": DOC})]
        if used.startswith("toolu_read"):
            return [{"type": "text", "text": ANSWER}]
    messages = [m for m in body.get("messages") or [] if m.get("role") == "user"]
    last = user_text(messages[-1]) if messages else ""
    if ASK in last:
        offered = {t.get("name") for t in body.get("tools") or []}
        if f"{SERVER}search" not in offered and "WaitForMcpServers" in offered:
            # Claude Code does not wait for an MCP server still starting (Python and the MCP
            # SDK on a busy machine); like a real model, the script waits for it first.
            return [tool_use("WaitForMcpServers", "wait", {})]
        return search
    return [{"type": "text", "text": "Noted, answered: " + last.strip().splitlines()[-1][:60]}]


def turns_of(store: Path, thread: str) -> list[Any]:
    with Memory.open(store) as mem:
        files = sorted((store / "episodes" / "turns").rglob("*.md"))
        records = [mem.turn_show(p.stem) for p in files]
        return sorted((r for r in records if r.thread == thread), key=lambda r: r.id)


def requests_of(fake: FakeAnthropic, prompt: str) -> list[dict[str, Any]]:
    """The requests made while ``prompt`` was the newest prompt."""
    return [b for b in fake.requests if prompt in request_text(b)]


def test_claude_code_with_the_plugin_gets_packs_searches_and_records_turns(rig: Rig) -> None:
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    follow_up = "Thanks. Who owns the pager this week?"
    later = "What did we settle about deploys last time?"
    with serving(script) as fake:
        result = run_claude(rig, fake, ASK, session=first)
        assert result["result"] == ANSWER
        asked = requests_of(fake, ASK)
        # Mode one: the pack is in the model's first request, for this session's thread.
        shown = request_text(asked[0])
        assert "UserPromptSubmit hook additional context" in shown
        assert "# memdir context" in shown and f"_thread {first}; user ana" in shown
        # The memdir MCP tools are offered, and the scripted search ran and found the file.
        offered = {t.get("name") for b in asked for t in b.get("tools") or []}
        assert {f"{SERVER}search", f"{SERVER}read"} <= offered
        searched = [
            r
            for b in asked
            for r in tool_results(b)
            if str(r.get("tool_use_id")).startswith("toolu_search")
        ]
        assert searched and DOC in json.dumps(searched[0]["content"])
        assert not searched[0].get("is_error")

        run_claude(rig, fake, follow_up, session=first, resume=True)
        run_claude(rig, fake, later, session=second)
        # The second session's first prompt gets the first session's turn in its pack.
        pack = request_text(requests_of(fake, later)[0])
        turns = turns_of(rig.store, first)
        assert f"**Input:** {ASK}" in pack and turns[0].id in pack

    # Stop recorded one turn per prompt, with its tool calls and parents, on disk.
    assert [t.input for t in turns] == [ASK, follow_up]
    assert turns[0].output == ANSWER
    assert turns[0].parents == (DOC,)  # the document the agent read through memdir's MCP
    assert turns[1].parents[0] == turns[0].id  # the session's previous turn
    with Memory.open(rig.store) as mem:
        worklog = mem.turn_worklog(turns[0].id).decode()
        assert f"{SERVER}search" in worklog and f"{SERVER}read" in worklog
        assert SERVER.encode() not in (mem.turn_worklog(turns[1].id) or b"")
    assert [t.input for t in turns_of(rig.store, second)] == [later]
    log = rig.store / ".memdir" / "hooks.log"
    assert not log.exists() or "error" not in log.read_text()


def test_four_claude_sessions_at_once_record_every_turn_once(rig: Rig) -> None:
    sessions = [str(uuid.uuid4()) for _ in range(4)]
    prompts = {s: [f"parallel job {i} step {k}" for k in (1, 2)] for i, s in enumerate(sessions)}

    def session(s: str) -> None:
        run_claude(rig, fake, prompts[s][0], session=s)
        run_claude(rig, fake, prompts[s][1], session=s, resume=True)

    with serving(script) as fake, ThreadPoolExecutor(4) as pool:
        list(pool.map(session, sessions))
    for s in sessions:
        turns = turns_of(rig.store, s)
        assert [t.input for t in turns] == prompts[s]
        assert turns[1].parents[0] == turns[0].id
    files = list((rig.store / "episodes" / "turns").rglob("*.md"))
    assert len(files) == 8
