"""`memdir agent install|uninstall`: the user's own settings kept byte for byte."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from helpers import memdir_script, run_cli
from memdir.agents import install, wiring
from memdir.errors import ConfigError

# Someone's settings: their own hooks, odd spacing and tabs, unicode, no final newline.
SETTINGS = (
    '{\n\t"permissions" : { "allow": ["Bash(ls)"] },\n'
    '\t"hooks": {"Stop": [{"matcher": "", "hooks": [{"type": "command", '
    '"command": "notify-send \'fertig ✓\'"}]}],\n'
    '\t          "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", '
    '"command": "./guard.sh"}]}]},\n'
    '\t"env": {"GRÜSSE": "日本語"}\n}'
).encode()
MCP = b'{"mcpServers": {"github": {"command": "gh-mcp", "args": ["--ro"]}}}\n'
CODEX_CONFIG = b"""# my Codex settings, by hand
model = "o4-mini"   # the cheap one

[mcp_servers.docs]
command = "docs-mcp"
args = ["--port", "0"]  # keep this comment

[features]
# hooks are off unless I say so
web_search = true
"""
CODEX_HOOKS = b'{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "say done"}]}]}}'


@pytest.fixture
def home(tmp_path: Path) -> Path:
    folder = tmp_path / "home"
    folder.mkdir()
    return folder


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def env(home: Path, state: Path) -> dict[str, str]:
    return {"HOME": str(home), "XDG_STATE_HOME": str(state), "CODEX_HOME": ""}


def agent(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[bytes]:
    return run_cli("agent", *args, env=env)


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` with its bytes (the folders too, as empty values)."""
    out: dict[str, bytes] = {}
    for path in sorted(folder.rglob("*")):
        out[path.relative_to(folder).as_posix()] = path.read_bytes() if path.is_file() else b""
    return out


def memdir_hooks(value: dict[str, Any], name: str) -> dict[str, int]:
    """How many memdir hook entries each event holds."""
    counts: dict[str, int] = {}
    for event, groups in value.get("hooks", {}).items():
        for group in groups:
            for entry in group.get("hooks", []):
                if wiring.is_memdir_hook(entry.get("command"), name):
                    counts[event] = counts.get(event, 0) + 1
    return counts


def test_claude_code_project_install_twice_is_once_and_uninstall_restores_the_bytes(
    tmp_path: Path, env: dict[str, str], store_root: Path
) -> None:
    project = tmp_path / "project"
    (project / ".claude").mkdir(parents=True)
    (project / ".claude" / "settings.json").write_bytes(SETTINGS)
    (project / ".mcp.json").write_bytes(MCP)
    (project / "src.py").write_text("print(1)\n")
    before = snapshot(project)
    script = memdir_script(tmp_path / "bin")
    args = ["--project", str(project), "--root", str(store_root), "--memdir", str(script)]

    first = agent(env, "install", "claude-code", *args)
    assert first.returncode == 0, first.stderr
    installed = snapshot(project)
    settings = json.loads(installed[".claude/settings.json"])
    assert memdir_hooks(settings, "claude-code") == dict.fromkeys(wiring.CLAUDE_EVENTS, 1)
    # The user's own entries are all still there, in their order, with their unicode.
    assert settings["permissions"] == {"allow": ["Bash(ls)"]}
    assert settings["env"] == {"GRÜSSE": "日本語"}
    assert settings["hooks"]["Stop"][0]["hooks"][0]["command"] == "notify-send 'fertig ✓'"
    assert settings["hooks"]["PreToolUse"] == [
        {"matcher": "Bash", "hooks": [{"type": "command", "command": "./guard.sh"}]}
    ]
    assert "日本語".encode() in installed[".claude/settings.json"]  # not \\u-escaped
    assert installed[".claude/settings.json"].startswith(b'{\n\t"permissions"')  # its tabs
    servers = json.loads(installed[".mcp.json"])["mcpServers"]
    assert servers["github"] == {"command": "gh-mcp", "args": ["--ro"]}
    assert servers["memdir"]["args"] == ["agent", "mcp", "--root", str(store_root.absolute())]
    assert ".claude/skills/memdir/SKILL.md" in installed
    assert ".claude/commands/memdir-recall.md" in installed

    second = agent(env, "install", "claude-code", *args)
    assert second.returncode == 0 and b"nothing to install" in second.stdout
    assert snapshot(project) == installed

    removed = agent(env, "uninstall", "claude-code", "--project", str(project))
    assert removed.returncode == 0, removed.stderr
    assert snapshot(project) == before
    again = agent(env, "uninstall", "claude-code", "--project", str(project))
    assert again.returncode == 0 and snapshot(project) == before


def test_the_installed_hook_runs_from_the_settings_file(
    tmp_path: Path, env: dict[str, str], store_root: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    script = memdir_script(tmp_path / "bin")
    args = ["--project", str(project), "--root", str(store_root), "--memdir", str(script)]
    assert agent(env, "install", "claude-code", *args).returncode == 0
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    command = settings["hooks"]["SessionStart"][0]["hooks"][0]["command"]
    payload = json.dumps({"session_id": "s9", "source": "startup", "cwd": str(project)})
    clean = {k: v for k, v in os.environ.items() if k not in ("MEMDIR_ROOT", "PYTHONPATH")}
    done = subprocess.run(
        command, shell=True, input=payload.encode(), capture_output=True, env=clean, check=False
    )
    assert done.returncode == 0 and done.stderr == b""
    assert json.loads(done.stdout)["hookSpecificOutput"]["hookEventName"] == "SessionStart"


def test_user_install_writes_the_user_files_and_keeps_their_mode(
    home: Path, env: dict[str, str], state: Path
) -> None:
    claude_json = home / ".claude.json"
    claude_json.write_bytes(b'{"numStartups": 7, "projects": {"/x": {"allowedTools": []}}}')
    claude_json.chmod(0o600)
    before = snapshot(home)
    done = agent(env, "install", "claude-code", "--user", "--memdir", "memdir")
    assert done.returncode == 0, done.stderr
    assert (claude_json.stat().st_mode & 0o777) == 0o600
    value = json.loads(claude_json.read_bytes())
    assert value["numStartups"] == 7 and value["mcpServers"]["memdir"]["command"] == "memdir"
    hooks = json.loads((home / ".claude" / "settings.json").read_bytes())
    assert memdir_hooks(hooks, "claude-code") == dict.fromkeys(wiring.CLAUDE_EVENTS, 1)
    assert (home / ".claude" / "skills" / "memdir" / "SKILL.md").exists()
    assert agent(env, "uninstall", "claude-code", "--user").returncode == 0
    # Back as it was: no folder install made is left, and the install record is gone.
    assert snapshot(home) == before
    assert not (state / "memdir").exists()


def test_settings_that_are_not_json_are_refused_and_left_untouched(
    tmp_path: Path, env: dict[str, str]
) -> None:
    project = tmp_path / "project"
    (project / ".claude").mkdir(parents=True)
    broken = b'{"hooks": {"Stop": [ }, // a comment\n'
    (project / ".claude" / "settings.json").write_bytes(broken)
    before = snapshot(project)
    done = agent(env, "install", "claude-code", "--project", str(project), "--memdir", "memdir")
    assert done.returncode != 0
    error = done.stderr.decode()
    assert "settings.json is not valid JSON" in error and "nothing changed" in error
    assert error.count("\n") == 1  # one line, no traceback
    assert snapshot(project) == before  # not even .mcp.json or the skill
    (project / ".claude" / "settings.json").write_bytes(b'["a list"]')
    assert agent(env, "install", "claude-code", "--project", str(project)).returncode != 0
    (project / ".claude" / "settings.json").write_bytes(b'{"hooks": "none"}')
    refused = agent(env, "install", "claude-code", "--project", str(project))
    assert refused.returncode != 0 and b"'hooks' is not an object" in refused.stderr


def test_an_edit_after_install_is_kept_when_uninstalling(
    tmp_path: Path, env: dict[str, str]
) -> None:
    project = tmp_path / "project"
    (project / ".claude").mkdir(parents=True)
    settings = project / ".claude" / "settings.json"
    settings.write_bytes(SETTINGS)
    assert agent(env, "install", "claude-code", "--project", str(project)).returncode == 0
    value = json.loads(settings.read_bytes())
    value["model"] = "opus"
    value["hooks"]["Stop"].append({"hooks": [{"type": "command", "command": "echo later"}]})
    settings.write_text(json.dumps(value, indent="\t", ensure_ascii=False))
    assert agent(env, "uninstall", "claude-code", "--project", str(project)).returncode == 0
    after = json.loads(settings.read_bytes())
    assert memdir_hooks(after, "claude-code") == {}
    assert after["model"] == "opus"
    assert [g["hooks"][0]["command"] for g in after["hooks"]["Stop"]] == [
        "notify-send 'fertig ✓'",
        "echo later",
    ]
    assert set(after["hooks"]) == {"Stop", "PreToolUse"}  # events left empty are gone
    assert json.loads(SETTINGS)["permissions"] == after["permissions"]


def test_without_the_install_record_uninstall_still_takes_memdir_out(
    tmp_path: Path, env: dict[str, str], state: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / ".mcp.json").write_bytes(MCP)
    assert agent(env, "install", "claude-code", "--project", str(project)).returncode == 0
    (state / "memdir" / "installs.json").unlink()
    assert agent(env, "uninstall", "claude-code", "--project", str(project)).returncode == 0
    assert json.loads((project / ".mcp.json").read_bytes()) == json.loads(MCP)
    assert "hooks" not in json.loads((project / ".claude" / "settings.json").read_bytes())
    assert not (project / ".claude" / "skills" / "memdir" / "SKILL.md").exists()


def test_dry_run_prints_the_changes_and_writes_nothing(
    tmp_path: Path, env: dict[str, str], state: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / ".mcp.json").write_bytes(MCP)
    done = agent(env, "install", "claude-code", "--project", str(project), "--dry-run")
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode()
    assert f"would modify {project / '.mcp.json'}" in out
    assert f"would create {project / '.claude' / 'settings.json'}" in out
    assert '+    "memdir": {' in out and "hook claude-code Stop" in out
    assert sorted(p.name for p in project.iterdir()) == [".mcp.json"]
    assert not state.exists()


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "settings.json"
    target.write_bytes(SETTINGS)

    def crash(src: object, dst: object) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(install.os, "replace", crash)
    with pytest.raises(OSError, match="disk gone"):
        install.write_atomic(target, b"{}")
    assert target.read_bytes() == SETTINGS
    assert [p.name for p in tmp_path.iterdir()] == ["settings.json"]


def test_a_writer_killed_mid_way_leaves_the_old_or_the_new_file(tmp_path: Path) -> None:
    target = tmp_path / "settings.json"
    target.write_bytes(SETTINGS)
    new = b'{"a": "' + b"x" * (8 << 20) + b'"}\n'
    source = tmp_path / "new.bin"
    source.write_bytes(new)
    code = (
        "from pathlib import Path; from memdir.agents.install import write_atomic\n"
        f"write_atomic(Path({str(target)!r}), Path({str(source)!r}).read_bytes())\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 30
    # kill -9 while the new bytes are being written (its temp file exists).
    while not list(tmp_path.glob(".settings.json.*")) and time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        time.sleep(0.001)
    proc.kill()
    proc.wait()
    assert target.read_bytes() in (SETTINGS, new)
    subprocess.run([sys.executable, "-c", code], check=True)
    assert target.read_bytes() == new


def test_two_installs_at_once_wire_memdir_once(tmp_path: Path, env: dict[str, str]) -> None:
    project = tmp_path / "project"
    (project / ".claude").mkdir(parents=True)
    (project / ".claude" / "settings.json").write_bytes(SETTINGS)
    full = dict(os.environ, **env)
    full.pop("MEMDIR_ROOT", None)
    argv = [sys.executable, "-m", "memdir", "agent", "install", "claude-code"]
    procs = [
        subprocess.Popen([*argv, "--project", str(project)], env=full, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    codes = [p.wait(timeout=60) for p in procs]
    assert 0 in codes
    value = json.loads((project / ".claude" / "settings.json").read_bytes())
    assert memdir_hooks(value, "claude-code") == dict.fromkeys(wiring.CLAUDE_EVENTS, 1)


def test_codex_install_twice_is_once_and_uninstall_restores_the_bytes(
    home: Path, env: dict[str, str], store_root: Path
) -> None:
    codex = home / ".codex"
    codex.mkdir()
    (codex / "config.toml").write_bytes(CODEX_CONFIG)
    (codex / "hooks.json").write_bytes(CODEX_HOOKS)
    before = snapshot(home)
    args = ["--root", str(store_root), "--memdir", "memdir"]
    assert agent(env, "install", "codex", *args).returncode == 0
    text = (codex / "config.toml").read_text()
    config = tomllib.loads(text)
    assert config["mcp_servers"]["memdir"] == {
        "command": "memdir",
        "args": ["agent", "mcp", "--root", str(store_root.absolute())],
    }
    assert config["mcp_servers"]["docs"] == {"command": "docs-mcp", "args": ["--port", "0"]}
    assert config["features"] == {"web_search": True, "codex_hooks": True}
    for comment in ("# my Codex settings, by hand", "# the cheap one", "# keep this comment"):
        assert comment in text
    hooks = json.loads((codex / "hooks.json").read_bytes())
    assert memdir_hooks(hooks, "codex") == dict.fromkeys(wiring.CODEX_EVENTS, 1)
    assert hooks["hooks"]["Stop"][0]["hooks"][0]["command"] == "say done"
    installed = snapshot(home)
    assert agent(env, "install", "codex", *args).returncode == 0
    assert snapshot(home) == installed
    assert agent(env, "uninstall", "codex").returncode == 0
    assert snapshot(home) == before


def test_codex_home_and_project_scopes(tmp_path: Path, env: dict[str, str]) -> None:
    project = tmp_path / "repo"
    project.mkdir()
    assert agent(env, "install", "codex", "--project", str(project)).returncode == 0
    assert tomllib.loads((project / ".codex" / "config.toml").read_text())["mcp_servers"]
    codex_home = tmp_path / "codex-home"
    where = install.places("codex", None, {**env, "CODEX_HOME": str(codex_home)})
    assert where["config"] == codex_home / "config.toml"
    assert agent(env, "uninstall", "codex", "--project", str(project)).returncode == 0
    assert not (project / ".codex").exists()


def test_config_toml_that_does_not_parse_is_refused_untouched(
    home: Path, env: dict[str, str]
) -> None:
    codex = home / ".codex"
    codex.mkdir()
    broken = b'model = "o3"\n[mcp_servers.docs\ncommand = 1\n'
    (codex / "config.toml").write_bytes(broken)
    done = agent(env, "install", "codex")
    assert done.returncode != 0 and b"config.toml is not valid TOML" in done.stderr
    assert snapshot(home) == {".codex": b"", ".codex/config.toml": broken}
    with pytest.raises(ConfigError):
        install.plan("codex", True, memdir=["memdir"], env=env)


def test_project_and_user_together_are_refused(tmp_path: Path, env: dict[str, str]) -> None:
    done = agent(env, "install", "claude-code", "--project", str(tmp_path), "--user")
    assert done.returncode != 0 and b"not both" in done.stderr
    pinned = agent(env, "install", "claude-code", "--root", str(tmp_path / "nope"))
    assert pinned.returncode != 0 and b"is not a memdir store" in pinned.stderr


def test_doctor_fails_before_install_and_runs_the_wired_commands_after(
    tmp_path: Path, env: dict[str, str], store_root: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    before = agent(env, "doctor", "claude-code", "--project", str(project))
    assert before.returncode == 1 and b"FAIL no memdir hooks in" in before.stdout
    script = memdir_script(tmp_path / "bin")
    args = ["--project", str(project), "--root", str(store_root), "--memdir", str(script)]
    assert agent(env, "install", "claude-code", *args).returncode == 0
    after = agent(env, "doctor", "claude-code", "--project", str(project))
    out = after.stdout.decode()
    assert after.returncode == 0, out
    assert "ok   the SessionStart hook answered" in out
    assert "ok   the MCP server 'memdir' initialized" in out
    assert f"store {store_root.resolve()}" in out


def test_a_settings_file_that_is_a_symlink_stays_one(tmp_path: Path, env: dict[str, str]) -> None:
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    real = dotfiles / "claude-settings.json"
    real.write_bytes(SETTINGS)
    project = tmp_path / "project"
    (project / ".claude").mkdir(parents=True)
    link = project / ".claude" / "settings.json"
    link.symlink_to(real)
    assert agent(env, "install", "claude-code", "--project", str(project)).returncode == 0
    assert link.is_symlink() and memdir_hooks(json.loads(real.read_bytes()), "claude-code")
    assert agent(env, "uninstall", "claude-code", "--project", str(project)).returncode == 0
    assert link.is_symlink() and real.read_bytes() == SETTINGS
