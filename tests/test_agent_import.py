"""`memdir import claude-code|codex`: past sessions become turns, once, whatever reads them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from agentlog import ClaudeSession, CodexSession
from helpers import run_cli
from memdir.agents import hooks
from memdir.agents.imports import import_transcripts, transcript_files
from memdir.service import Memory


def commits(root: Path) -> int:
    out = subprocess.run(
        ["git", "-C", str(root), "rev-list", "--count", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout)


def records(root: Path) -> list[dict[str, object]]:
    with Memory.open(root) as mem:
        found = [mem.turn_show(p.stem) for p in (root / "episodes" / "turns").rglob("*.md")]
        return [
            {**r.to_dict(), "worklog_bytes": mem.turn_worklog(r.id)}
            for r in sorted(found, key=lambda r: r.id)
        ]


def test_import_twice_adds_nothing_and_a_grown_transcript_adds_its_new_turns(
    store_root: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    one = ClaudeSession(home, tmp_path / "proj")
    one.prompt("what is the deploy command?")
    one.tool("Bash", {"command": "cat Makefile"}, "deploy: ./ship")
    one.reply("make deploy")
    one.prompt("and the rollback?")
    one.reply("make rollback")
    two = ClaudeSession(home, tmp_path / "proj")
    two.prompt("hello")
    two.reply("hi")
    folder = home / ".claude" / "projects"
    before = commits(store_root)
    result = run_cli("--root", str(store_root), "import", "claude-code", str(folder))
    assert result.returncode == 0, result.stderr
    assert commits(store_root) == before + 1  # a burst of turns shares its git commit
    assert not subprocess.run(
        ["git", "-C", str(store_root), "status", "--porcelain"], capture_output=True, check=True
    ).stdout
    assert result.stdout.decode().splitlines()[0] == (
        "2 sessions: added 3 turns, 0 already recorded, 0 skipped"
    )
    first = records(store_root)
    mine = [r for r in first if r["thread"] == one.session]
    assert [r["input"] for r in mine] == ["what is the deploy command?", "and the rollback?"]
    assert [r["output"] for r in mine] == ["make deploy", "make rollback"]
    assert mine[1]["parents"] == [mine[0]["id"]]
    assert mine[0]["worklog_bytes"] == b"".join(one.worklogs[0])
    assert mine[0]["created"] == one.prompts[0][1].strftime("%Y-%m-%dT%H:%M:%S.000Z")

    again = run_cli("--root", str(store_root), "import", "claude-code", str(folder), "--json")
    assert json.loads(again.stdout)["turns_added"] == 0
    assert records(store_root) == first

    one.prompt("and the logs?")
    one.reply("journalctl -u api")
    with Memory.open(store_root) as mem:
        summary = import_transcripts(mem, "claude-code", transcript_files([folder]))
    assert (summary.turns_added, summary.turns_present) == (1, 3)
    newest = [r for r in records(store_root) if r["thread"] == one.session][-1]
    assert newest["input"] == "and the logs?" and newest["parents"] == [mine[1]["id"]]


def test_turns_the_hooks_recorded_are_not_imported_again(store_root: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    session = ClaudeSession(home, tmp_path / "proj")
    session.prompt("check the queue")
    session.reply("it is empty")
    env = {"HOME": str(home), "MEMDIR_ROOT": str(store_root), "MEMDIR_USER": "ana"}
    assert (
        hooks.run("claude-code", "Stop", json.dumps(session.payload("Stop")).encode(), env=env)
        == ""
    )
    with Memory.open(store_root) as mem:
        summary = import_transcripts(mem, "claude-code", [session.path])
    assert (summary.turns_added, summary.turns_present) == (0, 1)
    assert len(records(store_root)) == 1


def test_a_truncated_last_line_is_skipped_and_reported(store_root: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    session = ClaudeSession(home, tmp_path / "proj")
    session.prompt("first")
    session.reply("one")
    session.prompt("second")
    with session.path.open("ab") as handle:
        handle.write(b'{"type":"assistant","message":{"content":[{"type":"te')
    dry = run_cli(
        "--root", str(store_root), "import", "claude-code", str(session.path), "--dry-run"
    )
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.decode().splitlines()
    assert lines[0] == "1 sessions: would add 1 turns, 0 already recorded, 2 skipped"
    count = len(session.path.read_bytes().split(b"\n"))
    assert lines[1] == f"  skipped {session.path}:{count}: truncated last line"
    assert lines[2].endswith(": not over yet") and " turn " in lines[2]
    assert records(store_root) == []
    done = run_cli("--root", str(store_root), "import", "claude-code", str(session.path))
    assert done.returncode == 0 and [r["input"] for r in records(store_root)] == ["first"]


def test_import_codex_sessions(store_root: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    session = CodexSession(home, tmp_path / "proj")
    session.prompt("run the linter")
    session.tool("shell", {"command": ["ruff", "check"]}, "All checks passed!")
    session.reply("The linter is clean.")
    session.prompt("and the types?")
    session.reply("mypy is clean too.")
    result = run_cli("--root", str(store_root), "import", "codex", str(home / ".codex"), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["turns_added"] == 2
    found = records(store_root)
    assert [(r["thread"], r["channel"]) for r in found] == [(session.session, "codex")] * 2
    assert [r["output"] for r in found] == ["The linter is clean.", "mypy is clean too."]
    assert found[0]["worklog_bytes"] == b"".join(session.worklogs[0])
    assert found[1]["parents"] == [found[0]["id"]]


def test_records_claude_code_writes_itself_are_no_prompts(store_root: Path, tmp_path: Path) -> None:
    session = ClaudeSession(tmp_path / "home", tmp_path / "proj")
    session.prompt("first question")
    session.reply("first answer")
    session.injected("<command-name>/compact</command-name>")
    session.injected("<local-command-stdout>Compacted</local-command-stdout>")
    session.injected(
        "This session is being continued ... summary",
        isCompactSummary=True,
        isVisibleInTranscriptOnly=True,
    )
    session.injected("<system-reminder>Stop hook feedback: check the tests</system-reminder>")
    session.injected("Base directory for this skill: ...", isMeta=True)
    session.prompt("second question")
    session.reply("second answer")
    with Memory.open(store_root) as mem:
        summary = import_transcripts(mem, "claude-code", [session.path])
    found = records(store_root)
    assert [(r["input"], r["output"]) for r in found] == [
        ("first question", "first answer"),
        ("second question", "second answer"),
    ]
    assert found[1]["parents"] == [found[0]["id"]]
    # The /compact command is a prompt nothing answered: skipped, and said so.
    assert summary.turns_added == 2 and [s["reason"] for s in summary.skipped] == ["no answer"]


def test_a_long_session_is_written_in_batches_with_its_chain_whole(
    store_root: Path, tmp_path: Path
) -> None:
    """Turns are written together, many at a time; each still names the turn before it, across
    the batches, and a second import adds nothing."""
    from memdir.agents import record

    home = tmp_path / "home"
    session = ClaudeSession(home, tmp_path / "proj")
    total = record.BATCH_TURNS * 2 + 5
    for n in range(total):
        session.prompt(f"question number {n}?")
        if n % 10 == 0:
            session.tool("Bash", {"command": f"echo {n}"}, str(n))
        session.reply(f"answer number {n}")
    folder = home / ".claude" / "projects"
    with Memory.open(store_root) as mem:
        first = import_transcripts(mem, "claude-code", transcript_files([folder]))
        again = import_transcripts(mem, "claude-code", transcript_files([folder]))
    assert (first.turns_added, again.turns_added, again.turns_present) == (total, 0, total)
    found = sorted(records(store_root), key=lambda r: str(r["input"]).split()[-1].zfill(5))
    assert [r["input"] for r in found] == [f"question number {n}?" for n in range(total)]
    assert found[0]["parents"] == []
    for before, turn in zip(found, found[1:], strict=False):
        assert turn["parents"] == [before["id"]]
    assert [bool(r["worklog_bytes"]) for r in found] == [n % 10 == 0 for n in range(total)]


def test_turns_the_store_refuses_keep_no_other_of_their_batch_out(
    store_root: Path, tmp_path: Path
) -> None:
    """The store refuses a record over its size limit when the batch is written; the batch is
    then written turn by turn, and only the refused turns are left out (and reported)."""
    home = tmp_path / "home"
    session = ClaudeSession(home, tmp_path / "proj")
    for n in range(6):
        session.prompt(f"question {n}?")
        session.reply("x" * 9000 if n in (3, 4) else f"answer {n}")
    files = transcript_files([home / ".claude" / "projects"])
    with Memory.open(store_root, overrides={"store": {"max_file_bytes": 4096}}) as mem:
        summary = import_transcripts(mem, "claude-code", files)
    assert summary.turns_added == 4
    assert [s["reason"][:8] for s in summary.skipped] == ["refused:", "refused:"]
    found = {str(r["input"]): r for r in records(store_root)}
    assert sorted(found) == [f"question {n}?" for n in (0, 1, 2, 5)]
    # The turn after the two refused ones names the turn before them, as the chain had it.
    assert found["question 5?"]["parents"] == [found["question 2?"]["id"]]
    assert found["question 2?"]["parents"] == [found["question 1?"]["id"]]
