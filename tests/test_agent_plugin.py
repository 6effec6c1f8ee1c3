"""`memdir agent plugin claude-code`: the files, their commands run for real, validation."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from helpers import memdir_script, run_cli, text_of
from memdir.agents import plugin, wiring
from memdir.errors import Conflict
from memdir.service import Memory

REPO = Path(__file__).resolve().parents[1]
CACHED = REPO / ".cache" / "claude-cli" / "node_modules" / ".bin" / "claude"


def load(folder: Path, name: str) -> Any:
    return json.loads((folder / name).read_text("utf-8"))


def test_the_plugin_has_every_part_and_wires_every_event(tmp_path: Path, store_root: Path) -> None:
    out = tmp_path / "plugin"
    script = memdir_script(tmp_path / "my tools")
    args = ["--out", str(out), "--root", str(store_root), "--memdir", str(script)]
    result = run_cli("agent", "plugin", "claude-code", *args)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.decode().splitlines()
    listed = {Path(line).relative_to(out).as_posix() for line in lines}
    assert listed == set(plugin.files(["memdir"]))
    assert listed >= {
        ".claude-plugin/plugin.json",
        "hooks/hooks.json",
        ".mcp.json",
        "skills/memdir/SKILL.md",
        "commands/recall.md",
        "commands/consolidate.md",
    }
    manifest = load(out, ".claude-plugin/plugin.json")
    assert manifest["name"] == "memdir" and manifest["version"]
    hooks = load(out, "hooks/hooks.json")["hooks"]
    assert list(hooks) == list(wiring.CLAUDE_EVENTS)
    for event, groups in hooks.items():
        (entry,) = [h for g in groups for h in g["hooks"]]
        # A path with a space is quoted; the store is pinned by its absolute path.
        assert entry["command"] == (
            f"'{script}' hook claude-code {event} --root {store_root.absolute()}"
        )
        assert entry["type"] == "command" and entry["timeout"] >= 10
    server = load(out, ".mcp.json")["mcpServers"]["memdir"]
    assert server == {
        "command": str(script),
        "args": ["agent", "mcp", "--root", str(store_root.absolute())],
    }
    skill = (out / "skills/memdir/SKILL.md").read_text()
    assert skill.startswith("---\nname: memdir\ndescription: ")
    for taught in ("Mode one", "Mode two", "Cite", "consolidate --plan", "consolidate --apply"):
        assert taught in skill
    for command in ("recall", "consolidate"):
        text = (out / "commands" / f"{command}.md").read_text()
        assert text.startswith("---\ndescription: ") and "$ARGUMENTS" in text


def test_the_hook_commands_of_the_plugin_run_and_answer(tmp_path: Path, store_root: Path) -> None:
    with Memory.open(store_root) as mem:
        mem.record_turn(thread="earlier", user="ana", input="rotate the keys", output="done")
    out = tmp_path / "plugin"
    plugin.write(out, [str(memdir_script(tmp_path / "my bin"))], store_root)
    hooks = load(out, "hooks/hooks.json")["hooks"]
    command = hooks["UserPromptSubmit"][0]["hooks"][0]["command"]
    payload = {"session_id": "s1", "cwd": str(tmp_path), "prompt": "keys rotation?"}
    env = {k: v for k, v in os.environ.items() if k not in ("MEMDIR_ROOT", "PYTHONPATH")}
    env["MEMDIR_USER"] = "ana"
    stdin = json.dumps(payload).encode()
    done = subprocess.run(
        command, shell=True, input=stdin, capture_output=True, env=env, timeout=60, check=False
    )
    assert (done.returncode, done.stderr) == (0, b"")
    answer = json.loads(done.stdout)["hookSpecificOutput"]
    assert answer["hookEventName"] == "UserPromptSubmit"
    assert "rotate the keys" in answer["additionalContext"]


def test_the_mcp_server_of_the_plugin_serves_the_pinned_store(
    tmp_path: Path, store_root: Path
) -> None:
    with Memory.open(store_root) as mem:
        mem.write("wiki/ops/pager.md", "# Pager\n\nThe pager rotates weekly.\n", actor="t")
    out = tmp_path / "plugin"
    plugin.write(out, [str(memdir_script(tmp_path / "bin"))], store_root)
    server = load(out, ".mcp.json")["mcpServers"]["memdir"]
    env = {k: v for k, v in os.environ.items() if k != "MEMDIR_ROOT"}
    env["MEMDIR_EMBEDDINGS_ENABLED"] = "false"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    params = StdioServerParameters(
        command=server["command"], args=server["args"], env=env, cwd=str(elsewhere)
    )

    async def scenario() -> None:
        async with Client(params) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"search", "read", "walk", "turn_show", "consolidate_plan"} <= names
            found = await client.call_tool("search", {"query": "pager rotates"})
            assert "wiki/ops/pager.md" in text_of(found)

    anyio.run(scenario)


def test_memdir_agent_mcp_without_root_uses_the_hooks_store_rule(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    project = tmp_path / "project"
    project.mkdir()
    env = {"HOME": str(home), "XDG_DATA_HOME": "", "CLAUDE_PROJECT_DIR": str(project)}
    where = run_cli("agent", "where", cwd=project, env=env)
    assert where.returncode == 0, where.stderr
    # No store in the project: the user store, created on first use (as the hooks do).
    assert where.stdout.decode().strip() == str((home / ".memdir").resolve())
    assert (home / ".memdir" / ".memdir").is_dir()
    run_cli("init", str(project / ".memdir-store"))
    again = run_cli("agent", "where", cwd=tmp_path, env=env)
    assert again.stdout.decode().strip() == str((project / ".memdir-store").resolve())


def test_writing_the_plugin_again_replaces_it_and_a_foreign_folder_is_refused(
    tmp_path: Path,
) -> None:
    out = tmp_path / "plugin"
    plugin.write(out, ["memdir"])
    plugin.write(out, ["/usr/local/bin/memdir"])
    assert load(out, ".mcp.json")["mcpServers"]["memdir"]["command"] == "/usr/local/bin/memdir"
    project = tmp_path / "project"
    project.mkdir()
    (project / "main.py").write_text("print('mine')\n")
    with pytest.raises(Conflict, match="not empty"):
        plugin.write(project, ["memdir"])
    assert sorted(p.name for p in project.iterdir()) == ["main.py"]
    refused = run_cli("agent", "plugin", "claude-code", "--out", str(project))
    assert refused.returncode != 0 and b"not empty" in refused.stderr


def test_the_default_memdir_is_this_install_by_absolute_path() -> None:
    words = wiring.memdir_command()
    assert Path(words[0]).is_absolute()
    beside = Path(sys.executable).with_name("memdir")
    assert words == (
        [str(beside.absolute())] if beside.exists() else [sys.executable, "-m", "memdir"]
    )
    assert wiring.memdir_command("memdir") == ["memdir"]
    assert wiring.memdir_command("'/a b/python' -m memdir") == ["/a b/python", "-m", "memdir"]
    assert wiring.memdir_command(sys.executable) == [sys.executable]


def test_claude_plugin_validate_passes(tmp_path: Path) -> None:
    claude = str(CACHED) if CACHED.exists() else shutil.which("claude")
    if shutil.which("node") is None or claude is None:
        pytest.skip("no Claude Code CLI (make claude-cli needs node and npm)")
    out = tmp_path / "plugin"
    plugin.write(out, [str(memdir_script(tmp_path / "bin"))])
    env = dict(os.environ, HOME=str(tmp_path), DISABLE_AUTOUPDATER="1")
    validate = [claude, "plugin", "validate", str(out)]
    done = subprocess.run(validate, capture_output=True, env=env, timeout=120, check=False)
    text = (done.stdout + done.stderr).decode()
    assert done.returncode == 0 and "Validation passed" in text, text
    # A broken manifest fails, so the check above can fail too.
    (out / ".claude-plugin" / "plugin.json").write_text('{"version": "1"}')
    broken = subprocess.run(validate, capture_output=True, env=env, timeout=120, check=False)
    assert broken.returncode != 0
