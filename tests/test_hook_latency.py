"""What keeps `memdir hook` short: each event imports only what it needs, and the pack a hook
process answers with is still exactly what `Memory.context` builds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
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
    "memdir.http",
    "uvicorn",
    "starlette",
    # memdir declares records without dataclasses (memdir.records), which bring inspect too.
    "dataclasses",
    "inspect",
)
# A pack is read from the index: nothing reads a file's facts for the memory report, and
# nothing starts git, copies trees or makes temporary files (each costs milliseconds to import).
NOT_FOR_A_PACK = (
    *NEVER,
    "yaml",
    "ruamel",
    "memdir.kiwi.report",
    "subprocess",
    "shutil",
    "tempfile",
    "secrets",
    # Nothing logs, hashes, formats a float or runs a thread pool, and the document verbs
    # are not built (the pack holds the sync the hook walks after answering).
    "logging",
    "hashlib",
    "decimal",
    "concurrent.futures",
    "memdir.documents.verbs",
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
# A module bound through memdir.lazy and never read is in sys.modules but never ran.
ran = lambda: sorted(n for n, m in sys.modules.items() if type(m).__name__ != "_LazyModule")
atexit.register(lambda: open(out, "w").write(json.dumps(ran())))
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


@pytest.mark.parametrize("walked", [False, True])
def test_the_hook_pack_is_memory_context_and_imports_little(
    session_env: tuple[dict[str, str], ClaudeSession],
    store_root: Path,
    tmp_path: Path,
    walked: bool,
) -> None:
    env, session = session_env
    if walked:  # the hook answers from the index without walking first (docs/agents.md)
        with Memory.open(store_root) as mem:
            mem.sync()
    prompt = "the billing deploy failed, roll back please"
    session.prompt(prompt)
    payload = session.payload("UserPromptSubmit")
    rc, out, err, modules = run_hook(
        env, ["hook", "claude-code", "UserPromptSubmit"], payload, tmp_path / "modules.json"
    )
    assert (rc, err) == (0, "")
    assert "memdir.turns.pack" in modules
    # Nothing changed since the index was last in step: no frontmatter is parsed, so no YAML.
    # A first walk (not walked) indexes files, which reads their facts for the report.
    banned = NOT_FOR_A_PACK if walked else (*NEVER, "yaml", "ruamel")
    assert sorted(m for m in banned if m in modules) == []
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
    with Memory.open(store_root) as mem:  # in step, as after the session's first hook
        mem.sync()
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
    assert sorted(m for m in NOT_FOR_A_PACK if m in fast[3]) == []


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
    # Recording a turn looks its compactor up among the plugins, so pluggy (and the inspect
    # it imports) is loaded here.
    assert sorted(m for m in NEVER if m in modules and m not in ("pluggy", "inspect")) == []
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


@pytest.mark.parametrize(
    "extra",
    [["--budget", "-3"], ["--bogus"], ["--budget=x"], ["--budget=²"], ["--budget", "9" * 5000]],
)
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


def _wait_for_the_walk(root: Path) -> None:
    """Block until the stat walk a hook left running is over (it holds this lock)."""
    import fcntl

    lock = root / ".memdir" / "hooks" / "walk.lock"
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)


def test_an_edit_made_outside_memdir_reaches_the_index_after_the_hook(
    session_env: tuple[dict[str, str], ClaudeSession], store_root: Path, tmp_path: Path
) -> None:
    """A hook answers from the index as it stands and walks the store after answering: an
    edit made in place behind memdir's back (same inode, the folder's mtime unchanged) is
    in the next full open at once, and in the index once the hook's walk ran."""
    from memdir.index import Index

    env, session = session_env
    with Memory.open(store_root) as mem:
        mem.write("notes/deploy.md", "# Deploy\n\nthe blue switch\n")
        mem.sync()  # the index has walked the whole store once
    note = store_root / "notes" / "deploy.md"
    folder_mtime = note.parent.stat().st_mtime_ns
    with note.open("r+", encoding="utf-8") as handle:  # in place, as many editors save
        handle.truncate(0)
        handle.write("# Deploy\n\nnow the red lever, not the switch\n")
    assert note.parent.stat().st_mtime_ns == folder_mtime
    with Memory.open(store_root) as mem:  # any full open walks first
        assert [h.path for h in mem.search("lever", mode="bm25")] == ["notes/deploy.md"]
    with note.open("r+", encoding="utf-8") as handle:
        handle.truncate(0)
        handle.write("# Deploy\n\na purple knob these days\n")
    index = Index(store_root)
    try:
        before = index._stamps()["notes/deploy.md"]
    finally:
        index.close()
    st = note.stat()
    assert before != (st.st_mtime_ns, st.st_size)
    rc, out, err, _ = run_hook(
        env,
        ["hook", "claude-code", "UserPromptSubmit"],
        session.payload("UserPromptSubmit"),
        tmp_path / "m.json",
    )
    assert (rc, err) == (0, "") and out
    _wait_for_the_walk(store_root)
    index = Index(store_root)
    try:
        assert index._stamps()["notes/deploy.md"] == (st.st_mtime_ns, st.st_size)
    finally:
        index.close()


def test_a_hook_on_an_index_that_never_walked_walks_first(
    session_env: tuple[dict[str, str], ClaudeSession], store_root: Path, tmp_path: Path
) -> None:
    """Files the index never saw (a store cloned, an index deleted) are in the first pack."""
    env, session = session_env
    (store_root / ".memdir" / "index.db").unlink()
    for extra in store_root.glob(".memdir/index.db-*"):
        extra.unlink()
    rc, out, err, _ = run_hook(
        env,
        ["hook", "claude-code", "SessionStart"],
        session.payload("SessionStart", source="startup"),
        tmp_path / "m.json",
    )
    assert (rc, err) == (0, "") and "blue switch" in out


def test_the_hook_exits_while_its_walk_still_runs(
    session_env: tuple[dict[str, str], ClaudeSession], store_root: Path, tmp_path: Path
) -> None:
    """The walk holds none of the agent's pipes: the hook's stdout closes when it exits, and
    a walk killed with SIGKILL leaves an index the next open brings in step."""
    env, session = session_env
    with Memory.open(store_root) as mem:
        mem.sync()
    lock = store_root / ".memdir" / "hooks" / "walk.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    import fcntl

    # A walk "running" (this test holds its lock): the hook must not wait for it.
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        (store_root / "notes").mkdir(exist_ok=True)
        (store_root / "notes" / "later.md").write_text("# Later\n\nthe green door\n")
        rc, out, err, _ = run_hook(
            env,
            ["hook", "claude-code", "UserPromptSubmit"],
            session.payload("UserPromptSubmit"),
            tmp_path / "m.json",
        )
        assert (rc, err) == (0, "") and out
    with Memory.open(store_root) as mem:
        assert [h.path for h in mem.search("green door", mode="bm25")] == ["notes/later.md"]


def _committed(root: Path) -> set[str]:
    done = subprocess.run(
        ["git", "-C", str(root), "log", "--name-only", "--format="],
        capture_output=True,
        text=True,
        check=True,
    )
    return {line for line in done.stdout.splitlines() if line}


def _stop(env: dict[str, str], session: ClaudeSession, tmp_path: Path) -> None:
    session.prompt("roll back billing now")
    session.tool("Bash", {"command": "make rollback"}, "rolled back")
    session.reply("Rolled back with the blue switch.")
    rc, out, err, _ = run_hook(
        env, ["hook", "claude-code", "Stop"], session.payload("Stop"), tmp_path / "m.json"
    )
    assert (rc, out, err) == (0, "", "")


def test_stop_leaves_its_commit_to_the_child(
    session_env: tuple[dict[str, str], ClaudeSession], store_root: Path, tmp_path: Path
) -> None:
    env, session = session_env
    with Memory.open(store_root) as mem:
        mem.sync()
    _stop(env, session, tmp_path)
    _wait_for_the_walk(store_root)
    turns = {p for p in _committed(store_root) if "/turns/" in f"/{p}"}
    on_disk = {
        str(p.relative_to(store_root)) for p in store_root.rglob("*.md") if "turns" in p.parts
    }
    assert on_disk and on_disk <= turns  # every turn file, the new one too, is in git
    assert list(store_root.glob(".memdir/journal/*.commits")) == []  # no commit left queued


def _children_named(marker: str) -> list[int]:
    """The live processes whose command line holds ``marker`` (unique to one test)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker.encode() in words:
            found.append(int(entry.name))
    return found


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")
def test_a_stop_whose_child_is_killed_loses_nothing(
    session_env: tuple[dict[str, str], ClaudeSession], store_root: Path, tmp_path: Path
) -> None:
    """The turn is on disk when the hook answers; its child, killed with SIGKILL before it
    committed (here while it waits for a walk: this test holds the walk lock), loses
    nothing: the next open commits and indexes the turn."""
    import fcntl
    import signal

    env, session = session_env
    with Memory.open(store_root) as mem:
        mem.sync()
    before = _committed(store_root)
    lock = store_root / ".memdir" / "hooks" / "walk.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    probe = tmp_path / "stop-probe.json"
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        session.prompt("roll back billing now")
        session.reply("Rolled back with the blue switch.")
        rc, out, err, _ = run_hook(
            env, ["hook", "claude-code", "Stop"], session.payload("Stop"), probe
        )
        assert (rc, out, err) == (0, "", "")
        deadline = time.monotonic() + 30
        while not (waiting := _children_named(str(probe))) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(waiting) == 1  # the hook exited; its child waits for the walk lock
        os.kill(waiting[0], signal.SIGKILL)
        new = [
            p
            for p in store_root.rglob("*.md")
            if "turns" in p.parts and str(p.relative_to(store_root)) not in before
        ]
        assert len(new) == 1 and "roll back billing now" in new[0].read_text()
        while _children_named(str(probe)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert str(new[0].relative_to(store_root)) not in _committed(store_root)
    with Memory.open(store_root) as mem:
        (turn,) = mem.thread(session.session, last=5)
        assert mem.turn_show(turn.id).output == "Rolled back with the blue switch."
    assert str(new[0].relative_to(store_root)) in _committed(store_root)


def test_four_sessions_stopping_at_once_each_commit_their_turn(
    session_env: tuple[dict[str, str], ClaudeSession], store_root: Path, tmp_path: Path
) -> None:
    """Four Stops at the same moment, each forking its child (one walks, the others wait
    for its lock): every turn is recorded once, and each child commits what it was left."""
    env, _ = session_env
    with Memory.open(store_root) as mem:
        mem.sync()
    full = {k: v for k, v in os.environ.items() if k != "MEMDIR_ROOT"}
    full.update(env)
    sessions = []
    procs = []
    for n in range(4):
        session = ClaudeSession(tmp_path / "home", tmp_path / f"proj{n}")
        session.prompt(f"parallel question {n}")
        session.reply(f"parallel answer {n}")
        sessions.append(session)
    for _ in sessions:
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "memdir", "hook", "claude-code", "Stop"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=full,
            )
        )
    for proc, session in zip(procs, sessions, strict=True):
        out, err = proc.communicate(json.dumps(session.payload("Stop")).encode(), timeout=120)
        assert (proc.returncode, out, err) == (0, b"", b"")
    deadline = time.monotonic() + 60
    while list(store_root.glob(".memdir/journal/*.commits")) and time.monotonic() < deadline:
        time.sleep(0.05)  # the children commit on their own, one after the other
    assert list(store_root.glob(".memdir/journal/*.commits")) == []
    _wait_for_the_walk(store_root)
    with Memory.open(store_root) as mem:
        for n, session in enumerate(sessions):
            (turn,) = mem.thread(session.session, last=5)
            assert mem.turn_show(turn.id).output == f"parallel answer {n}"
    on_disk = {
        str(p.relative_to(store_root)) for p in store_root.rglob("*.md") if "turns" in p.parts
    }
    assert on_disk <= _committed(store_root)
    assert list(store_root.glob(".memdir/journal/*.commits")) == []
