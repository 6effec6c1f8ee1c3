"""What keeps `memdir hook` short: each event imports only what it needs, and the pack a hook
process answers with is still exactly what `Memory.context` builds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentlog import ClaudeSession
from memdir.agents import hooks
from memdir.service import Memory

# Modules no hook needs: the command line's framework, the models, the engine, search by
# meaning, the servers. tiktoken's encoder is loaded only for text memdir's own cl100k
# counter leaves to it (none of the text below).
NEVER = (
    "click",
    "numpy",
    "onnxruntime",
    "tokenizers",
    "tiktoken",
    "pluggy",
    "fastapi",
    "jinja2",
    "memdir.cli",
    "memdir.engine.verbs",
    "memdir.retrieval.verbs",
    "memdir.vectors.embedder",
    "memdir.vectors.index",
)
# PostToolUse appends to the spool and nothing more: no index, no store, no YAML.
NOT_FOR_THE_SPOOL = (
    *NEVER,
    "sqlite3",
    "yaml",
    "memdir.service",
    "memdir.index",
    "memdir.files.store",
)

_PROBE = """
import atexit, json, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv = ["memdir", *sys.argv[1:]]
from memdir.__main__ import main
main()
"""


def run_hook(
    env: dict[str, str], words: list[str], payload: dict[str, Any] | bytes, probe: Path
) -> tuple[int, str, str, set[str]]:
    """`memdir hook ...` through the console entry point, in a fresh process; its exit code,
    stdout, stderr and the modules it had imported when it exited."""
    full = {k: v for k, v in os.environ.items() if k != "MEMDIR_ROOT"}
    full.update(env)
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(probe), *words],
        input=data,
        capture_output=True,
        env=full,
        timeout=120,
        check=False,
    )
    modules = set(json.loads(probe.read_text())) if probe.exists() else set()
    return done.returncode, done.stdout.decode(), done.stderr.decode(), modules


@pytest.fixture
def session_env(store_root: Path, tmp_path: Path) -> tuple[dict[str, str], ClaudeSession]:
    home = tmp_path / "home"
    home.mkdir()
    with Memory.open(store_root) as mem:
        for n in range(12):
            mem.record_turn(
                thread="older-session",
                user="ana",
                input=f"how do we roll back the billing service, attempt {n}?",
                output=f"flip the blue switch in the console, then wait {n} minutes",
            )
        mem.write("SNAPSHOT.md", "# Snapshot\n\nBilling deploys go through the blue switch.\n")
    session = ClaudeSession(home, tmp_path / "proj")
    env = {"HOME": str(home), "MEMDIR_ROOT": str(store_root), "MEMDIR_USER": "ana"}
    return env, session


def test_post_tool_use_touches_only_the_spool(
    session_env: tuple[dict[str, str], ClaudeSession], store_root: Path, tmp_path: Path
) -> None:
    env, session = session_env
    session.prompt("roll back billing")
    session.tool("Bash", {"command": "make rollback"}, "rolled back")
    before = sorted(p.relative_to(store_root) for p in store_root.rglob("*") if p.is_file())
    rc, out, err, modules = run_hook(
        env,
        ["hook", "claude-code", "PostToolUse"],
        session.payload("PostToolUse", tool_name="Bash", tool_input={"command": "ls"}),
        tmp_path / "modules.json",
    )
    assert (rc, out, err) == (0, "", "")
    assert "memdir.agents.spool" in modules  # the probe saw the handler run
    assert sorted(m for m in NOT_FOR_THE_SPOOL if m in modules) == []
    after = sorted(p.relative_to(store_root) for p in store_root.rglob("*") if p.is_file())
    assert [p for p in after if p not in before] == [
        p for p in after if p.parts[:2] == (".memdir", "hooks") and p not in before
    ]
    spooled = next(store_root.glob(".memdir/hooks/*/spool.jsonl")).read_text()
    assert json.loads(spooled.splitlines()[-1])["tool_input"] == {"command": "ls"}


def test_the_hook_pack_is_memory_context_and_imports_little(
    session_env: tuple[dict[str, str], ClaudeSession], store_root: Path, tmp_path: Path
) -> None:
    env, session = session_env
    prompt = "the billing deploy failed, roll back please"
    session.prompt(prompt)
    payload = session.payload("UserPromptSubmit")
    rc, out, err, modules = run_hook(
        env, ["hook", "claude-code", "UserPromptSubmit"], payload, tmp_path / "modules.json"
    )
    assert (rc, err) == (0, "")
    assert "memdir.turns.pack" in modules
    # Nothing changed since the index was last in step: no frontmatter is parsed, so no YAML.
    assert sorted(m for m in (*NEVER, "yaml", "ruamel") if m in modules) == []
    text = json.loads(out)["hookSpecificOutput"]["additionalContext"]
    with Memory.open(store_root) as mem:
        pack = mem.context(
            session.session,
            user="ana",
            keywords=hooks.keywords_of(prompt),
            budget=hooks.DEFAULT_BUDGET,
        )
    assert text == hooks.clip(pack.text)
    assert "blue switch" in text and pack.tokens <= hooks.DEFAULT_BUDGET


def test_session_start_answers_the_same_through_either_entry(
    session_env: tuple[dict[str, str], ClaudeSession], store_root: Path, tmp_path: Path
) -> None:
    """`memdir hook ...` (no click) and `memdir --root STORE hook ...` (the click CLI) agree."""
    env, session = session_env
    payload = session.payload("SessionStart", source="startup")
    fast = run_hook(env, ["hook", "claude-code", "SessionStart"], payload, tmp_path / "a.json")
    slow = run_hook(
        env,
        ["--root", str(store_root), "hook", "claude-code", "SessionStart"],
        payload,
        tmp_path / "b.json",
    )
    assert fast[:3] == slow[:3]
    assert fast[0] == 0 and "Billing deploys go through the blue switch." in fast[1]
    assert "click" in slow[3] and "click" not in fast[3]


def test_stop_records_the_turn_without_the_engine(
    session_env: tuple[dict[str, str], ClaudeSession], store_root: Path, tmp_path: Path
) -> None:
    env, session = session_env
    session.prompt("roll back billing now")
    session.tool("Bash", {"command": "make rollback"}, "rolled back")
    session.reply("Rolled back with the blue switch.")
    rc, out, err, modules = run_hook(
        env, ["hook", "claude-code", "Stop"], session.payload("Stop"), tmp_path / "m.json"
    )
    assert (rc, out, err) == (0, "", "")
    # Recording a turn looks its compactor up among the plugins, so pluggy is loaded here.
    assert sorted(m for m in NEVER if m in modules and m != "pluggy") == []
    with Memory.open(store_root) as mem:
        (turn,) = mem.thread(session.session, last=5)
        shown = mem.turn_show(turn.id)
    assert shown.input == "roll back billing now"
    assert shown.output == "Rolled back with the blue switch."


@pytest.mark.parametrize(
    "words",
    [
        ["hook"],
        ["hook", "claude-code"],
        ["hook", "nobody", "Stop"],
        ["hook", "claude-code", "UserPromptSubmit", "--root", "/nonexistent/store"],
    ],
)
def test_the_fast_entry_never_fails_the_agent(
    session_env: tuple[dict[str, str], ClaudeSession], tmp_path: Path, words: list[str]
) -> None:
    env, session = session_env
    session.prompt("anything")
    for payload in (session.payload("UserPromptSubmit"), b"\xff not json", b""):
        rc, out, err, _ = run_hook(env, words, payload, tmp_path / "m.json")
        assert (rc, out, err) == (0, "", "")


@pytest.mark.parametrize("extra", [["--budget", "-3"], ["--bogus"], ["--budget=x"]])
def test_a_bad_option_is_logged_and_the_prompt_still_gets_its_pack(
    session_env: tuple[dict[str, str], ClaudeSession],
    store_root: Path,
    tmp_path: Path,
    extra: list[str],
) -> None:
    env, session = session_env
    session.prompt("roll back billing")
    words = ["hook", "claude-code", "UserPromptSubmit", *extra]
    rc, out, err, _ = run_hook(env, words, session.payload("UserPromptSubmit"), tmp_path / "m")
    assert (rc, err) == (0, "")
    assert "blue switch" in json.loads(out)["hookSpecificOutput"]["additionalContext"]
    logged = (store_root / ".memdir" / "hooks.log").read_text()
    assert "usage:" in logged and extra[0].split("=")[0] in logged


def test_hook_help_still_goes_to_the_cli(tmp_path: Path) -> None:
    rc, out, err, modules = run_hook({}, ["hook", "--help"], b"", tmp_path / "m.json")
    assert rc == 0 and "AGENT EVENT" in out and "click" in modules
