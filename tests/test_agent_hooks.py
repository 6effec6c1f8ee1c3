"""`memdir hook AGENT EVENT`: payloads of every event, turns checked on disk, never a failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agentlog import ClaudeSession, CodexSession
from memdir.agents import hooks, spool
from memdir.agents.imports import import_transcripts
from memdir.agents.locate import PROJECT_STORE, locate, user_store
from memdir.agents.record import OVER, record_transcript, turn_id
from memdir.agents.spool import session_dir
from memdir.agents.transcripts import Transcript, parse
from memdir.doc.ids import id_time_ms
from memdir.doc.tokencount import counter
from memdir.doc.turnrecord import turn_path
from memdir.files.store import Store
from memdir.records import replace
from memdir.service import Memory


@pytest.fixture
def home(tmp_path: Path) -> Path:
    folder = tmp_path / "home"
    folder.mkdir()
    return folder


@pytest.fixture
def env(store_root: Path, home: Path) -> dict[str, str]:
    return {"HOME": str(home), "MEMDIR_ROOT": str(store_root), "MEMDIR_USER": "ana"}


def hook(env: dict[str, str], agent: str, event: str, payload: dict[str, Any]) -> str:
    return hooks.run(agent, event, json.dumps(payload).encode(), env=env)


def hook_process(
    env: dict[str, str], agent: str, event: str, payload: dict[str, Any] | bytes
) -> subprocess.Popen[bytes]:
    """The real handler, `python -m memdir hook AGENT EVENT`, started with the event on stdin."""
    full = {k: v for k, v in os.environ.items() if k != "MEMDIR_ROOT"}
    full.update(env)
    proc = subprocess.Popen(
        [sys.executable, "-m", "memdir", "hook", agent, event],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=full,
    )
    assert proc.stdin is not None
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    proc.stdin.write(data)
    proc.stdin.close()
    return proc


def finish(proc: subprocess.Popen[bytes]) -> tuple[int, bytes, bytes]:
    assert proc.stdout is not None and proc.stderr is not None
    out, err = proc.stdout.read(), proc.stderr.read()
    return proc.wait(timeout=120), out, err


def turn_files(root: Path) -> list[Path]:
    return sorted((root / "episodes" / "turns").rglob("*.md"))


def recorded_inputs(root: Path) -> list[str]:
    """The prompts of the turns the store holds, sorted."""
    with Memory.open(root) as mem:
        return sorted(mem.turn_show(p.stem).input for p in turn_files(root))


def context_of(out: str, event: str) -> str:
    body = json.loads(out)
    assert body["hookSpecificOutput"]["hookEventName"] == event
    text = body["hookSpecificOutput"]["additionalContext"]
    assert isinstance(text, str)
    return text


def test_user_prompt_submit_answers_with_the_pack_in_a_real_process(
    store_root: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    with Memory.open(store_root) as mem:
        earlier = mem.record_turn(
            thread="older-session",
            user="ana",
            input="how do we roll back the billing service?",
            output="flip the blue switch in the console",
        )
    session = ClaudeSession(home, tmp_path / "proj")
    session.prompt("the billing deploy failed, roll back please")
    rc, out, err = finish(
        hook_process(env, "claude-code", "UserPromptSubmit", session.payload("UserPromptSubmit"))
    )
    assert (rc, err) == (0, b"")
    text = context_of(out.decode(), "UserPromptSubmit")
    assert "flip the blue switch in the console" in text
    assert earlier.id in text
    assert f"thread {session.session}" in text and "user ana" in text
    assert "billing" in text.split("\n\n")[1]  # the prompt's words are the pack's keywords
    # The prompt is spooled, nothing is recorded.
    spooled = session_dir(store_root, "claude-code", session.session) / "spool.jsonl"
    assert json.loads(spooled.read_text())["prompt"] == session.prompts[-1][0]
    assert len(turn_files(store_root)) == 1


def test_the_pack_stays_within_its_budget_and_9000_characters(
    store_root: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    with Memory.open(store_root) as mem:
        for n in range(40):
            mem.record_turn(
                thread="s-old",
                user="ana",
                input=f"deploy question {n} " * 30,
                output="deploy answer " * 80,
            )
        count = counter(mem.settings.turns.token_counter)
    session = ClaudeSession(home, tmp_path / "proj")
    session.prompt("deploy again")
    text = context_of(
        hook(env, "claude-code", "UserPromptSubmit", session.payload("UserPromptSubmit")),
        "UserPromptSubmit",
    )
    assert count.count(text + "\n") <= hooks.DEFAULT_BUDGET
    assert "deploy answer" in text
    large = hooks.run(
        "claude-code",
        "UserPromptSubmit",
        json.dumps(session.payload("UserPromptSubmit")).encode(),
        env=env,
        budget=50_000,
    )
    wide = context_of(large, "UserPromptSubmit")
    assert len(wide) <= hooks.MAX_CHARS and "deploy answer" in wide
    # A pack over 9,000 characters (a large snapshot, a large budget) is cut to fit.
    rules = "".join(f"- rule {n}: deploy from main, never on a Friday\n" for n in range(300))
    (store_root / "SNAPSHOT.md").write_text("# Snapshot\n\n" + rules)
    with Memory.open(store_root) as mem:
        keywords = hooks.keywords_of("deploy again")
        full = mem.context(session.session, "ana", keywords, budget=50_000).text
    cut = context_of(
        hooks.run(
            "claude-code",
            "UserPromptSubmit",
            json.dumps(session.payload("UserPromptSubmit")).encode(),
            env=env,
            budget=50_000,
        ),
        "UserPromptSubmit",
    )
    assert len(full) > hooks.MAX_CHARS >= len(cut) > hooks.MAX_CHARS - 100
    assert full.startswith(cut) and "- rule 1: deploy" in cut


def test_session_start_gives_the_snapshot_and_on_resume_the_session_recap(
    store_root: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    (store_root / "SNAPSHOT.md").write_text("# Snapshot\n\nThe api deploys from main.\n")
    session = ClaudeSession(home, tmp_path / "proj")
    start = context_of(
        hook(env, "claude-code", "SessionStart", session.payload("SessionStart")), "SessionStart"
    )
    assert "The api deploys from main." in start
    session.prompt("what broke last night?")
    session.reply("the cron job ran twice")
    assert hook(env, "claude-code", "Stop", session.payload("Stop")) == ""
    resumed = context_of(
        hook(env, "claude-code", "SessionStart", session.payload("SessionStart", source="resume")),
        "SessionStart",
    )
    assert "The api deploys from main." in resumed
    assert "the cron job ran twice" in resumed and "what broke last night?" in resumed


def test_post_tool_use_only_appends_to_the_spool(
    store_root: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    session = ClaudeSession(home, tmp_path / "proj")
    session.prompt("list the files")
    use = session.tool("Bash", {"command": "ls"}, "a.txt")
    payload = session.payload(
        "PostToolUse",
        tool_name="Bash",
        tool_input={"command": "ls"},
        tool_use_id=use,
        duration_ms=12,
        tool_response={"stdout": "a.txt", "stderr": "", "interrupted": False, "isImage": False},
    )
    assert hook(env, "claude-code", "PostToolUse", payload) == ""
    assert hook(env, "claude-code", "PostToolUse", payload) == ""
    lines = session_dir(store_root, "claude-code", session.session) / "spool.jsonl"
    assert [json.loads(x)["tool_use_id"] for x in lines.read_text().splitlines()] == [use, use]
    assert turn_files(store_root) == []
    assert not (store_root / ".memdir" / "hooks.log").exists()


def test_stop_records_the_turn_its_work_log_and_its_parents(
    store_root: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    with Memory.open(store_root) as mem:
        shown = mem.record_turn(
            thread="other", input="the staging password rule", output="rotate monthly"
        )
        opened = mem.record_turn(thread="other", input="the deploy runbook", output="see ops")
        mem.write("wiki/ops/deploys.md", "# Deploys\n")
    session = ClaudeSession(home, tmp_path / "proj")
    session.prompt("deploy the api")
    session.tool("Bash", {"command": "make deploy"}, "deployed", say="Deploying.")
    session.reply("Deployed.")
    rc, out, err = finish(hook_process(env, "claude-code", "Stop", session.payload("Stop")))
    assert (rc, out, err) == (0, b"", b"")
    first = turn_id(
        "claude-code", session.session, parse(session.path.read_bytes(), "claude-code").turns[0]
    )
    session.prompt("and the staging password?")
    session.tool("mcp__memdir__turn_show", {"turn_id": shown.id}, json.dumps({"id": shown.id}))
    session.tool("mcp__plugin_memdir_memdir__read", {"path": opened.path}, "# runbook")
    session.tool("mcp__memdir__read", {"path": "wiki/ops/deploys.md"}, "# Deploys")
    session.tool("mcp__memdir__read", {"path": "wiki/ops/missing.md"}, "not found")
    session.tool("mcp__memdir__read", {"path": "../outside.md"}, "refused")
    session.tool("Bash", {"command": f"memdir --root /x turn show {opened.id} | head"}, "ok")
    session.reply("Rotate it monthly.")
    rc, out, err = finish(hook_process(env, "claude-code", "Stop", session.payload("Stop")))
    assert (rc, out, err) == (0, b"", b"")

    with Memory.open(store_root) as mem:
        records = [mem.turn_show(p.stem) for p in turn_files(store_root)]
        mine = sorted((r for r in records if r.thread == session.session), key=lambda r: r.id)
        assert [r.input for r in mine] == ["deploy the api", "and the staging password?"]
        assert [r.output for r in mine] == ["Deployed.", "Rotate it monthly."]
        assert mine[0].id == first and mine[0].parents == ()
        # The turns it read, then the documents that exist (a missing one is no parent).
        assert list(mine[1].parents) == [first, shown.id, opened.id, "wiki/ops/deploys.md"]
        assert {r.user for r in mine} == {"ana"} and {r.channel for r in mine} == {"claude-code"}
        assert mine[1].created == session.prompts[1][1].strftime("%Y-%m-%dT%H:%M:%S.000Z")
        # The work log: this turn's tool calls and results, the transcript's lines as written.
        assert mem.turn_worklog(mine[0].id) == b"".join(session.worklogs[0])
        assert mem.turn_worklog(mine[1].id) == b"".join(session.worklogs[1])
        assert mine[1].extra["tool_calls"] == 12


def test_a_stop_that_fires_twice_records_once(
    store_root: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    session = ClaudeSession(home, tmp_path / "proj")
    session.prompt("check the logs")
    session.reply("They are clean.")
    assert hook(env, "claude-code", "Stop", session.payload("Stop")) == ""
    again = session.payload("Stop", stop_hook_active=True)
    assert hook(env, "claude-code", "Stop", again) == ""
    assert hook(env, "claude-code", "SessionEnd", session.payload("SessionEnd")) == ""
    assert len(turn_files(store_root)) == 1
    assert not session_dir(store_root, "claude-code", session.session).exists()


def test_two_stops_racing_in_two_processes_record_once(
    store_root: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    session = ClaudeSession(home, tmp_path / "proj")
    session.prompt("summarise the incident")
    session.tool("Bash", {"command": "cat incident.md"}, "db failover at 02:00")
    session.reply("The database failed over at 02:00.")
    payload = session.payload("Stop")
    procs = [hook_process(env, "claude-code", "Stop", payload) for _ in range(2)]
    assert [finish(p) for p in procs] == [(0, b"", b""), (0, b"", b"")]
    files = turn_files(store_root)
    assert len(files) == 1
    assert not (store_root / ".memdir" / "hooks.log").exists()
    with Memory.open(store_root) as mem:
        assert mem.turn_show(files[0].stem).output == "The database failed over at 02:00."


def test_a_broken_store_exits_0_silently_with_a_line_in_hooks_log(
    store_root: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    (store_root / ".memdir" / "config.toml").write_text("[store\nbroken = \n")
    session = ClaudeSession(home, tmp_path / "proj")
    session.prompt("anything")
    session.reply("something")
    for event in ("UserPromptSubmit", "Stop"):
        rc, out, err = finish(hook_process(env, "claude-code", event, session.payload(event)))
        assert (rc, out, err) == (0, b"", b"")
    lines = (store_root / ".memdir" / "hooks.log").read_text().splitlines()
    assert len(lines) == 2
    assert "claude-code UserPromptSubmit error:" in lines[0]
    assert "claude-code Stop error:" in lines[1] and "config" in lines[1].lower()


def test_bad_input_is_logged_not_shown(store_root: Path, env: dict[str, str]) -> None:
    rc, out, err = finish(hook_process(env, "claude-code", "Stop", b"{not json"))
    assert (rc, out, err) == (0, b"", b"")
    assert hooks.run("gemini", "Stop", b"{}", env=env) == ""
    assert hooks.run("claude-code", "Notification", b'{"session_id": "s"}', env=env) == ""
    log = (store_root / ".memdir" / "hooks.log").read_text().splitlines()
    assert "stdin is not JSON" in log[0] and "unknown agent 'gemini'" in log[1]
    assert len(log) == 2  # an event the handler does not use is no failure


def test_stop_without_a_transcript_records_from_the_spool(
    store_root: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    session = ClaudeSession(home, tmp_path / "proj")
    session.prompt("run the tests")
    assert hook(env, "claude-code", "UserPromptSubmit", session.payload("UserPromptSubmit"))
    post = session.payload(
        "PostToolUse",
        tool_name="Bash",
        tool_input={"command": "pytest"},
        tool_response={"stdout": "3 passed"},
    )
    hook(env, "claude-code", "PostToolUse", post)
    session.answer = "All 3 tests pass."
    assert hook(env, "claude-code", "Stop", session.payload("Stop", transcript_path="")) == ""
    with Memory.open(store_root) as mem:
        (record,) = [mem.turn_show(p.stem) for p in turn_files(store_root)]
        assert (record.input, record.output) == ("run the tests", "All 3 tests pass.")
        assert json.loads(mem.turn_worklog(record.id))["tool_input"] == {"command": "pytest"}


def test_stop_waits_for_a_transcript_claude_code_has_not_written_yet(
    store_root: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """Under load Claude Code can call Stop before a new session's transcript is on disk. The
    turn must come from the transcript (its id is the one every later read gives it), not
    from the spool, or the next read records it a second time."""
    import threading

    session = ClaudeSession(home, tmp_path / "proj")
    session.prompt("first prompt of a session")
    session.reply("first answer")
    written = session.path.read_bytes()
    session.path.unlink()
    assert hook(env, "claude-code", "UserPromptSubmit", session.payload("UserPromptSubmit"))
    later = threading.Timer(0.4, session.path.write_bytes, args=(written,))
    later.start()
    try:
        assert hook(env, "claude-code", "Stop", session.payload("Stop")) == ""
    finally:
        later.join()
    session.prompt("second prompt")
    session.reply("second answer")
    assert hook(env, "claude-code", "Stop", session.payload("Stop")) == ""
    assert recorded_inputs(store_root) == ["first prompt of a session", "second prompt"]


def test_a_transcript_that_never_appears_is_waited_for_once(
    store_root: Path,
    home: Path,
    env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A session whose transcript is never written (not kept on disk) pays the wait at its first
    Stop only; every turn still comes from the spool."""
    monkeypatch.setattr(hooks, "TRANSCRIPT_WAIT_SECONDS", 0.6)
    session = ClaudeSession(home, tmp_path / "proj")
    took = []
    for n in range(2):
        session.prompt(f"prompt {n}")
        assert hook(env, "claude-code", "UserPromptSubmit", session.payload("UserPromptSubmit"))
        session.answer = f"answer {n}"
        session.path.unlink()
        started = time.monotonic()
        assert hook(env, "claude-code", "Stop", session.payload("Stop")) == ""
        took.append(time.monotonic() - started)
    assert took[0] >= 0.6 > took[1]
    assert recorded_inputs(store_root) == ["prompt 0", "prompt 1"]


def test_a_turn_from_the_spool_is_dated_when_it_was_asked(
    store_root: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """It used to be dated 1970-01-01 (time 0): the first of every list of recent turns."""
    session = ClaudeSession(home, tmp_path / "proj")
    session.prompt("what changed?")
    before = int(time.time() * 1000)
    assert hook(env, "claude-code", "UserPromptSubmit", session.payload("UserPromptSubmit"))
    after = int(time.time() * 1000)
    session.answer = "Nothing."
    assert hook(env, "claude-code", "Stop", session.payload("Stop", transcript_path="")) == ""
    (path,) = turn_files(store_root)
    assert before <= id_time_ms(path.stem) <= after
    assert path.parent == store_root / turn_path(path.stem).rsplit("/", 1)[0]
    assert path.parts[-4] != "1970"


def _spool_then_transcript(
    session: ClaudeSession, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first turn recorded from the spool (its transcript was not on disk at Stop), then
    the transcript there for the second turn's Stop."""
    monkeypatch.setattr(hooks, "TRANSCRIPT_WAIT_SECONDS", 0.0)
    session.clock = datetime.now(UTC)  # the spool dates a prompt by the real clock
    session.prompt("first prompt")
    session.reply("first answer")
    written = session.path.read_bytes()
    session.path.unlink()
    assert hook(env, "claude-code", "UserPromptSubmit", session.payload("UserPromptSubmit"))
    assert hook(env, "claude-code", "Stop", session.payload("Stop")) == ""
    session.path.write_bytes(written)


def test_a_turn_recorded_from_the_spool_is_not_recorded_again_from_the_transcript(
    store_root: Path,
    home: Path,
    env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    session = ClaudeSession(home, tmp_path / "proj")
    _spool_then_transcript(session, env, monkeypatch)
    (spooled,) = turn_files(store_root)
    session.prompt("second prompt")
    assert hook(env, "claude-code", "UserPromptSubmit", session.payload("UserPromptSubmit"))
    session.reply("second answer")
    assert hook(env, "claude-code", "Stop", session.payload("Stop")) == ""
    with Memory.open(store_root) as mem:
        records = sorted((mem.turn_show(p.stem) for p in turn_files(store_root)), key=str)
        inputs = sorted(r.input for r in records)
        second = next(r for r in records if r.input == "second prompt")
        assert inputs == ["first prompt", "second prompt"]
        # The next turn follows the spooled one in the DAG.
        assert second.parents == (spooled.stem,)
        # And an import of the whole transcript afterwards finds both.
        summary = import_transcripts(mem, "claude-code", [session.path])
    assert (summary.turns_added, summary.turns_present) == (0, 2)
    assert len(turn_files(store_root)) == 2


def test_a_turn_recorded_from_the_transcript_is_not_recorded_again_from_the_spool(
    store_root: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """A SubagentStop records the turns before the one in progress and leaves the spool;
    a Stop that then finds no transcript records the spooled prompts (the first has a tool
    call spooled, so it is a turn there too): not the first again."""
    session = ClaudeSession(home, tmp_path / "proj")
    session.clock = datetime.now(UTC)
    session.prompt("first")
    assert hook(env, "claude-code", "UserPromptSubmit", session.payload("UserPromptSubmit"))
    session.tool("Bash", {"command": "ls"}, "a.txt")
    post = session.payload(
        "PostToolUse", tool_name="Bash", tool_input={"command": "ls"}, tool_response="a.txt"
    )
    hook(env, "claude-code", "PostToolUse", post)
    session.reply("done first")
    session.prompt("second, with a subagent")
    assert hook(env, "claude-code", "UserPromptSubmit", session.payload("UserPromptSubmit"))
    session.tool("Task", {"description": "look around", "prompt": "list files"}, "a.txt")
    payload = session.payload("SubagentStop", stop_hook_active=False, agent_id="a1")
    assert hook(env, "claude-code", "SubagentStop", payload) == ""
    assert len(turn_files(store_root)) == 1
    session.answer = "done second"
    assert hook(env, "claude-code", "Stop", session.payload("Stop", transcript_path="")) == ""
    assert recorded_inputs(store_root) == ["first", "second, with a subagent"]


def test_a_turn_recorded_under_its_key_of_before_is_found(
    store_root: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """Before turns were keyed on their prompt id, a Claude Code turn was keyed on its
    record's uuid: a store holding such a turn must not get it a second time."""
    session = ClaudeSession(home, tmp_path / "proj")
    session.prompt("an old turn")
    session.reply("recorded by an earlier memdir")
    (turn,) = parse(session.path.read_bytes(), "claude-code").turns
    assert turn.key.startswith("prompt:") and turn.legacy_key
    old = Transcript("claude-code", session.session, [replace(turn, key=turn.legacy_key)])
    with Memory.open(store_root) as mem:
        (before,) = record_transcript(mem, old, last=OVER).added
    session.prompt("a new turn")
    session.reply("recorded now")
    assert hook(env, "claude-code", "Stop", session.payload("Stop")) == ""
    with Memory.open(store_root) as mem:
        records = [mem.turn_show(p.stem) for p in turn_files(store_root)]
    assert sorted(r.input for r in records) == ["a new turn", "an old turn"]
    assert next(r for r in records if r.input == "a new turn").parents == (before,)


def test_a_log_record_of_a_hook_process_goes_to_hooks_log(
    store_root: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """No logging handler is set in a hook process: a warning memdir logs while handling the
    event reaches hooks.log through logging's last resort (the redirected stderr), and the
    agent sees nothing."""
    probe = (
        "import sys\n"
        "from memdir import lazy\n"
        "from memdir.agents import hooks\n"
        "real = hooks.handle\n"
        "def handle(*a, **k):\n"
        "    lazy.logger('memdir.store').warning('a warning while handling %s', 'it')\n"
        "    return real(*a, **k)\n"
        "hooks.handle = handle\n"
        "sys.exit(hooks.main(['claude-code', 'PostToolUse']))\n"
    )
    session = ClaudeSession(home, tmp_path / "proj")
    session.prompt("p")
    payload = session.payload(
        "PostToolUse", tool_name="Bash", tool_input={"command": "ls"}, tool_response={}
    )
    full = {k: v for k, v in os.environ.items() if k != "MEMDIR_ROOT"} | env
    done = subprocess.run(
        [sys.executable, "-c", probe],
        input=json.dumps(payload).encode(),
        capture_output=True,
        env=full,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    log = (store_root / ".memdir" / "hooks.log").read_text()
    assert "a warning while handling it" in log


def test_codex_hooks_give_the_pack_and_record_the_turn(
    store_root: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    session = CodexSession(home, tmp_path / "proj")
    session.prompt("why is the build red?")
    start = hook(env, "codex", "UserPromptSubmit", session.payload("UserPromptSubmit"))
    assert f"thread {session.session}" in context_of(start, "UserPromptSubmit")
    session.tool("shell", {"command": ["bash", "-lc", "make test"]}, "1 failed")
    session.tool("memdir__read", {"path": "wiki/ci.md"}, "# CI")
    session.reply("One test fails: test_login.")
    assert hook(env, "codex", "Stop", session.payload("Stop")) == ""
    with Memory.open(store_root) as mem:
        (record,) = [mem.turn_show(p.stem) for p in turn_files(store_root)]
        assert (record.thread, record.channel) == (session.session, "codex")
        assert (record.input, record.output) == (
            "why is the build red?",
            "One test fails: test_login.",
        )
        assert mem.turn_worklog(record.id) == b"".join(session.worklogs[0])


def test_session_end_records_a_finished_turn_whose_stop_never_ran(
    store_root: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    session = ClaudeSession(home, tmp_path / "proj")
    session.prompt("first question")
    session.reply("first answer")
    session.prompt("second question")  # its Stop never came (the agent was killed)
    session.reply("second answer")
    assert hook(env, "claude-code", "PreCompact", session.payload("PreCompact")) == ""
    with Memory.open(store_root) as mem:
        assert [mem.turn_show(p.stem).input for p in turn_files(store_root)] == ["first question"]
    assert hook(env, "claude-code", "SessionEnd", session.payload("SessionEnd")) == ""
    with Memory.open(store_root) as mem:
        records = sorted(
            (mem.turn_show(p.stem) for p in turn_files(store_root)), key=lambda r: r.id
        )
        assert [r.output for r in records] == ["first answer", "second answer"]
        assert records[1].parents == (records[0].id,)


# -- which store -----------------------------------------------------------------


def test_the_store_rule(tmp_path: Path, home: Path) -> None:
    explicit = Store.init(tmp_path / "explicit")
    from_env = Store.init(tmp_path / "from-env")
    project = Store.init(tmp_path / "work" / "proj")
    nested = tmp_path / "work" / "other" / "src" / "pkg"
    nested.mkdir(parents=True)
    kept_inside = Store.init(tmp_path / "work" / "other" / PROJECT_STORE)
    base = {"HOME": str(home)}
    assert locate(str(explicit), env={**base, "MEMDIR_ROOT": str(from_env)}) == explicit
    assert locate(None, cwd=str(project), env={**base, "MEMDIR_ROOT": str(from_env)}) == from_env
    assert locate(None, cwd=str(home), env={**base, "CLAUDE_PROJECT_DIR": str(project)}) == project
    assert locate(None, cwd=str(project / "wiki"), env=base) == project
    assert locate(None, cwd=str(nested), env=base) == kept_inside
    # No store around the project: the user store, created on first use.
    lone = tmp_path / "lone"
    lone.mkdir()
    assert not user_store(base).exists()
    made = locate(None, cwd=str(lone), env=base)
    assert made == (home / ".memdir").resolve() and (made / ".memdir" / "config.toml").is_file()
    xdg = {**base, "XDG_DATA_HOME": str(tmp_path / "xdg")}
    assert locate(None, cwd=str(lone), env=xdg) == (tmp_path / "xdg" / "memdir").resolve()


def test_keywords_are_the_prompts_content_words() -> None:
    assert hooks.keywords_of("How do we roll back the Billing deploy? (see #42)") == [
        "roll",
        "back",
        "billing",
        "deploy",
        "see",
    ]
    assert hooks.keywords_of("a an the to of") == []
    blob = "QUJD" * 100  # a pasted key: one word of 400 characters
    assert hooks.keywords_of(f"why does {blob} fail to decode") == ["fail", "decode"]


def test_a_prompt_with_a_pasted_blob_still_gets_its_pack(
    store_root: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    session = ClaudeSession(home, tmp_path / "proj")
    session.prompt("decode this: " + "QUJD" * 100)
    out = hook(env, "claude-code", "UserPromptSubmit", session.payload("UserPromptSubmit"))
    assert "keywords decode_" in context_of(out, "UserPromptSubmit")
    assert not (store_root / ".memdir" / "hooks.log").exists()


def test_a_record_of_another_session_does_not_move_the_turn(
    store_root: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    session = ClaudeSession(home, tmp_path / "proj")
    session.prompt("tidy the changelog")
    session.reply("Tidied.")
    with session.path.open("a") as handle:  # e.g. a record copied in from a forked session
        stray = {
            "type": "user",
            "sessionId": "another-session",
            "uuid": "u-1",
            "message": {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t", "content": ""}],
            },
        }
        handle.write(json.dumps(stray) + "\n")
    assert hook(env, "claude-code", "Stop", session.payload("Stop")) == ""
    with Memory.open(store_root) as mem:
        (record,) = [mem.turn_show(p.stem) for p in turn_files(store_root)]
        assert record.thread == session.session
    assert parse(session.path.read_bytes(), "claude-code").session == session.session


def test_subagent_stop_leaves_the_turn_in_progress_to_its_stop(
    store_root: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    session = ClaudeSession(home, tmp_path / "proj")
    session.prompt("first")
    session.reply("done first")
    session.prompt("second, with a subagent")
    session.tool("Task", {"description": "look around", "prompt": "list files"}, "a.txt")
    payload = session.payload("SubagentStop", stop_hook_active=False, agent_id="a1")
    assert hook(env, "claude-code", "SubagentStop", payload) == ""
    with Memory.open(store_root) as mem:
        assert [mem.turn_show(p.stem).input for p in turn_files(store_root)] == ["first"]
    session.reply("done second")
    assert hook(env, "claude-code", "Stop", session.payload("Stop")) == ""
    assert len(turn_files(store_root)) == 2


def test_a_stop_behind_a_hung_handler_gives_up_and_logs(
    store_root: Path, home: Path, env: dict[str, str], tmp_path: Path, monkeypatch: Any
) -> None:
    session = ClaudeSession(home, tmp_path / "proj")
    session.prompt("anything")
    session.reply("done")
    monkeypatch.setattr(spool, "LOCK_WAIT", 0.2)
    with spool.session_lock(store_root, "claude-code", session.session):  # the hung one
        assert hook(env, "claude-code", "Stop", session.payload("Stop")) == ""
    assert turn_files(store_root) == []
    (line,) = (store_root / ".memdir" / "hooks.log").read_text().splitlines()
    assert "Stop error: LockTimeout" in line and session.session in line
    assert hook(env, "claude-code", "Stop", session.payload("Stop")) == ""
    assert len(turn_files(store_root)) == 1


def test_four_sessions_stopping_at_once_on_one_store_lose_no_turn(
    store_root: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    sessions = [ClaudeSession(home, tmp_path / f"proj{n}") for n in range(4)]
    for n, session in enumerate(sessions):
        for k in range(3):
            session.prompt(f"session {n} question {k}")
            session.tool("Bash", {"command": f"echo {n}-{k}"}, f"{n}-{k}")
            session.reply(f"session {n} answer {k}")
    # Each session's Stop fires twice, all eight handlers at once; each records the
    # session's turns not yet recorded (here all three).
    procs = [hook_process(env, "claude-code", "Stop", s.payload("Stop")) for s in sessions * 2]
    assert [finish(p) for p in procs] == [(0, b"", b"")] * 8
    assert not (store_root / ".memdir" / "hooks.log").exists()
    with Memory.open(store_root) as mem:
        records = [mem.turn_show(p.stem) for p in turn_files(store_root)]
        for n, session in enumerate(sessions):
            mine = sorted((r for r in records if r.thread == session.session), key=lambda r: r.id)
            assert [r.output for r in mine] == [f"session {n} answer {k}" for k in range(3)]
            assert [r.parents for r in mine] == [(), (mine[0].id,), (mine[1].id,)]
            assert [mem.turn_worklog(r.id) for r in mine] == [b"".join(w) for w in session.worklogs]
    assert len(records) == 12


def test_a_turn_memdir_refuses_does_not_keep_the_next_ones_out(
    store_root: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    session = ClaudeSession(home, tmp_path / "proj")
    session.prompt("broken \ud800 text")  # a lone surrogate: no UTF-8 file can hold it
    session.reply("answer one")
    session.prompt("second question")
    session.reply("answer two")
    assert hook(env, "claude-code", "Stop", session.payload("Stop")) == ""
    with Memory.open(store_root) as mem:
        (record,) = [mem.turn_show(p.stem) for p in turn_files(store_root)]
        assert (record.input, record.parents) == ("second question", ())
    (line,) = (store_root / ".memdir" / "hooks.log").read_text().splitlines()
    assert "claude-code Stop skipped turn" in line and "refused" in line


def test_post_tool_use_loads_neither_the_service_nor_the_transcript_reader(
    store_root: Path, env: dict[str, str]
) -> None:
    """It runs after every tool call, so it only appends: nothing heavy is imported."""
    script = (
        "import json, sys\n"
        "from memdir.cli import main\n"
        "sys.argv = ['memdir', 'hook', 'claude-code', 'PostToolUse']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = [m for m in ('memdir.service', 'memdir.agents.transcripts', 'memdir.index',"
        " 'yaml') if m in sys.modules]\n"
        "print(json.dumps(heavy), file=sys.stderr)\n"
    )
    payload = {
        "session_id": "s1",
        "transcript_path": "",
        "cwd": "/",
        "tool_name": "Bash",
        "hook_event_name": "PostToolUse",
        "tool_input": {"command": "ls"},
    }
    full = {**os.environ, **env}
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(payload).encode(),
        capture_output=True,
        env=full,
        check=True,
        timeout=60,
    )
    assert (done.stdout, json.loads(done.stderr)) == (b"", [])
    assert len(spool.read(store_root, "claude-code", "s1")) == 1


def test_a_stop_reads_only_the_transcript_after_the_turns_recorded(
    store_root: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    session = ClaudeSession(home, tmp_path / "proj")
    session.prompt("first question")
    session.reply("first answer")
    assert hook(env, "claude-code", "Stop", session.payload("Stop")) == ""
    # Blank out what was recorded, keeping its length: a Stop that read the whole file
    # again would find no first turn and give the second one no parent.
    data = session.path.read_bytes()
    session.path.write_bytes(b" " * (len(data) - 1) + b"\n")
    session.prompt("second question")
    session.reply("second answer")
    assert hook(env, "claude-code", "Stop", session.payload("Stop")) == ""
    with Memory.open(store_root) as mem:
        records = sorted(
            (mem.turn_show(p.stem) for p in turn_files(store_root)), key=lambda r: r.id
        )
    assert [r.input for r in records] == ["first question", "second question"]
    assert records[1].parents == (records[0].id,)


def test_turns_recorded_from_the_tail_are_those_an_import_finds(
    store_root: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    from memdir.agents.imports import import_transcripts

    session = CodexSession(home, tmp_path / "proj")  # Codex turns are keyed by position
    for n in range(3):
        session.prompt(f"question {n}")
        session.tool("shell", {"command": ["echo", str(n)]}, str(n))
        session.reply(f"answer {n}")
        assert hook(env, "codex", "Stop", session.payload("Stop")) == ""
    assert hook(env, "codex", "PreCompact", session.payload("PreCompact")) == ""
    with Memory.open(store_root) as mem:
        summary = import_transcripts(mem, "codex", [session.path])
        assert (summary.turns_added, summary.turns_present) == (0, 3)
        chain = [mem.turn_show(p.stem) for p in turn_files(store_root)]
    ordered = sorted(chain, key=lambda r: r.id)
    assert [r.parents for r in ordered] == [(), (ordered[0].id,), (ordered[1].id,)]


def test_a_stop_that_recorded_every_turn_empties_the_spool(
    store_root: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    session = ClaudeSession(home, tmp_path / "proj")
    session.prompt("print the big log")
    hook(env, "claude-code", "UserPromptSubmit", session.payload("UserPromptSubmit"))
    use = session.tool("Bash", {"command": "cat big.log"}, "line\n" * 1000)
    post = session.payload(
        "PostToolUse",
        tool_name="Bash",
        tool_use_id=use,
        tool_input={"command": "cat big.log"},
        tool_response={"stdout": "line\n" * 1000},
    )
    hook(env, "claude-code", "PostToolUse", post)
    assert len(spool.read(store_root, "claude-code", session.session)) == 2
    assert hook(env, "claude-code", "PreCompact", session.payload("PreCompact")) == ""
    assert len(spool.read(store_root, "claude-code", session.session)) == 2  # turn not over
    session.reply("It has 1000 lines.")
    assert hook(env, "claude-code", "Stop", session.payload("Stop")) == ""
    assert spool.read(store_root, "claude-code", session.session) == []
    assert len(turn_files(store_root)) == 1


def test_arguments_the_hook_cannot_use_never_exit_2(
    store_root: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """Claude Code blocks the prompt when a UserPromptSubmit hook exits 2 (a usage error)."""
    session = ClaudeSession(home, tmp_path / "proj")
    session.prompt("deploy?")
    data = json.dumps(session.payload("UserPromptSubmit")).encode()
    full = {**{k: v for k, v in os.environ.items() if k != "MEMDIR_ROOT"}, **env}
    for args in (["claude-code", "UserPromptSubmit", "--budget", "lots", "--verbose"], []):
        done = subprocess.run(
            [sys.executable, "-m", "memdir", "hook", *args],
            input=data,
            capture_output=True,
            env=full,
            timeout=60,
            check=False,
        )
        assert (done.returncode, done.stderr) == (0, b"")
        if args:  # agent and event known: the pack still comes, the rest is logged
            assert "thread " + session.session in context_of(
                done.stdout.decode(), "UserPromptSubmit"
            )
        else:
            assert done.stdout == b""
    log = (store_root / ".memdir" / "hooks.log").read_text()
    assert "usage: --budget must be a positive number of tokens, got 'lots'" in log
    assert "usage: unknown option --verbose" in log
    assert "usage: expected AGENT EVENT, got nothing" in log and "unknown agent ''" in log
