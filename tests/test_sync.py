"""`memdir sync`: real git remotes (bare repositories on disk), two and three clones."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import run_cli
from memdir.errors import ConfigError, SyncError, UnsafePath
from memdir.files import sync as gitsync
from memdir.service import Memory

OFF = {"embeddings": {"enabled": False}}
ENV = {"MEMDIR_EMBEDDINGS_ENABLED": "0"}


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.strip()


def note(title: str, body: str) -> str:
    return f"# {title}\n\n{body}\n"


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    return bare


def first_store(tmp_path: Path, remote: Path, name: str = "a") -> Path:
    root = tmp_path / name
    Memory.init(root).close()
    git(root, "remote", "add", "origin", str(remote))
    with Memory.open(root, overrides=OFF) as mem:
        mem.sync(force=True)  # the index built once: later syncs only touch what arrives
        mem.git_sync()
    return root


def clone(remote: Path, target: Path) -> Path:
    done = run_cli("sync", "clone", str(remote), str(target), env=ENV)
    assert done.returncode == 0, done.stderr
    return target


def sync(root: Path) -> dict:
    with Memory.open(root, overrides=OFF) as mem:
        return mem.git_sync()


def paths_in(root: Path, folder: str) -> set[str]:
    base = root / folder
    return {p.relative_to(root).as_posix() for p in base.rglob("*.md")} if base.is_dir() else set()


def test_two_clones_exchange_writes_and_the_index_follows(tmp_path: Path, remote: Path) -> None:
    a = first_store(tmp_path, remote)
    b = clone(remote, tmp_path / "b")
    with Memory.open(a, overrides=OFF) as mem:
        mem.write("notes/alpha.md", note("Alpha", "the aardvark ledger"), provenance="run:a")
        ta = mem.record_turn(thread="t-a", input="hello from a", output="ok a").id
    with Memory.open(b, overrides=OFF) as mem:
        mem.write("notes/beta.md", note("Beta", "the bumblebee ledger"), provenance="run:b")
        tb = mem.record_turn(thread="t-b", input="hello from b", output="ok b").id
    sync(a)
    report = sync(b)
    assert report["arrived"] >= 1 and report["pushed"] >= 1
    assert "notes/alpha.md" in report["touched"]
    sync(a)
    for root in (a, b):
        with Memory.open(root, overrides=OFF) as mem:
            assert [h.path for h in mem.search("aardvark", mode="bm25")] == ["notes/alpha.md"]
            assert [h.path for h in mem.search("bumblebee", mode="bm25")] == ["notes/beta.md"]
            assert mem.turn_show(ta).thread == "t-a" and mem.turn_show(tb).thread == "t-b"
            assert mem.doctor().ok
        assert git(root, "status", "--porcelain") == ""
    assert git(a, "rev-parse", "HEAD") == git(b, "rev-parse", "HEAD")
    assert sync(a)["pushed"] == 0  # nothing left to do


def test_a_page_changed_on_both_sides_keeps_both_versions(tmp_path: Path, remote: Path) -> None:
    a = first_store(tmp_path, remote)
    b = clone(remote, tmp_path / "b")
    with Memory.open(a, overrides=OFF) as mem:
        mem.write("notes/plan.md", note("Plan", "first draft"), provenance="run:a")
    sync(a)
    sync(b)
    with Memory.open(a, overrides=OFF) as mem:
        mem.write("notes/plan.md", note("Plan", "the zebra version"), provenance="run:a")
    with Memory.open(b, overrides=OFF) as mem:
        mem.write("notes/plan.md", note("Plan", "the yak version"), provenance="run:b")
    sync(a)
    report = sync(b)  # b merges a's edit into its own
    assert [k["path"] for k in report["kept"]] == ["notes/plan.md"]
    b_text = (b / "notes/plan.md").read_text()
    assert "yak" in b_text  # this side's version stays in place
    copy = report["kept"][0]["copy"]
    assert copy.startswith("conflicts/") and "zebra" in (b / copy).read_text()
    with Memory.open(b, overrides=OFF) as mem:
        [open_one] = mem.sync_conflicts()
        assert open_one["path"] == "notes/plan.md" and open_one["kind"] == "both changed"
        # the other side's copy is kept out of search, like quarantine
        assert [h.path for h in mem.search("zebra", mode="bm25")] == []
        assert mem.refine()["sync_conflicts"] == ["notes/plan.md"]
    sync(a)  # the conflict travels
    with Memory.open(a, overrides=OFF) as mem:
        assert [c["path"] for c in mem.sync_conflicts()] == ["notes/plan.md"]
        done = mem.resolve_conflict("notes/plan.md", keep="other")
        assert done["resolved"] == 1
        assert mem.sync_conflicts() == []
        assert [h.path for h in mem.search("zebra", mode="bm25")] == ["notes/plan.md"]
    assert not (a / "conflicts").exists()
    assert git(a, "status", "--porcelain") == ""
    sync(a)
    sync(b)
    assert (b / "notes/plan.md").read_text() == (a / "notes/plan.md").read_text()
    assert not (b / "conflicts").exists()


def test_a_file_deleted_on_one_side_and_changed_on_the_other_keeps_the_change(
    tmp_path: Path, remote: Path
) -> None:
    a = first_store(tmp_path, remote)
    b = clone(remote, tmp_path / "b")
    with Memory.open(a, overrides=OFF) as mem:
        mem.write("notes/keep.md", note("Keep", "v1"), provenance="run:a")
    sync(a)
    sync(b)
    (a / "notes/keep.md").unlink()
    with Memory.open(b, overrides=OFF) as mem:
        mem.write("notes/keep.md", note("Keep", "v2 with the quokka"), provenance="run:b")
    sync(b)
    report = sync(a)  # a deleted it (a hand edit, committed by the sync), b changed it
    assert [(k["path"], k["kind"]) for k in report["kept"]] == [("notes/keep.md", "deleted here")]
    assert "quokka" in (a / "notes/keep.md").read_text()
    with Memory.open(a, overrides=OFF) as mem:
        assert [h.path for h in mem.search("quokka", mode="bm25")] == ["notes/keep.md"]
        mem.resolve_conflict("notes/keep.md", keep="other")  # the deletion, after all
        assert not (a / "notes/keep.md").exists()
        assert mem.search("quokka", mode="bm25") == []


def test_generated_files_are_written_again_not_kept_as_conflicts(
    tmp_path: Path, remote: Path
) -> None:
    a = first_store(tmp_path, remote)
    b = clone(remote, tmp_path / "b")
    for root, word in ((a, "walrus"), (b, "wombat")):
        with Memory.open(root, overrides=OFF) as mem:
            mem.episode_add(
                kind="life", situation=f"met a {word} at the zoo", insights=[f"{word}s are kind"]
            )
            mem.reflect()  # each side writes its own SNAPSHOT.md, LESSONS.md and router
    sync(a)
    report = sync(b)
    assert report["kept"] == []
    assert "SNAPSHOT.md" in report["regenerated"] or "LESSONS.md" in report["regenerated"]
    snapshot = (b / "SNAPSHOT.md").read_text()
    assert "walrus" in snapshot and "wombat" in snapshot
    sync(a)
    assert (a / "SNAPSHOT.md").read_text() == snapshot
    # each side's runs.tsv rows are kept
    rows = (a / ".memdir/runs.tsv").read_text().splitlines()
    assert sum("reflect" in r for r in rows) >= 2


def test_a_refused_push_loses_nothing_and_the_next_sync_pushes(
    tmp_path: Path, remote: Path
) -> None:
    a = first_store(tmp_path, remote)
    hook = remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'refused by the test' >&2\nexit 1\n")
    hook.chmod(0o755)
    with Memory.open(a, overrides=OFF) as mem:
        mem.write("notes/late.md", note("Late", "the pangolin"), provenance="run:a")
        with pytest.raises(SyncError) as err:
            mem.git_sync()
    assert "pushing to 'origin' failed" in err.value.message and "next sync" in err.value.message
    head = git(a, "rev-parse", "HEAD")
    assert git(a, "log", "-1", "--format=%s", head)  # the write's commit is here
    hook.unlink()
    assert sync(a)["pushed"] >= 1
    assert git(remote, "rev-parse", "refs/heads/main") == head


def test_an_unreachable_remote_is_one_clear_error(tmp_path: Path) -> None:
    root = tmp_path / "a"
    Memory.init(root).close()
    done = run_cli("--root", str(root), "sync", env=ENV)
    assert done.returncode == 2  # a configuration to fix, like any ConfigError
    assert done.stderr.decode().startswith("error: no git remote 'origin'")
    git(root, "remote", "add", "origin", str(tmp_path / "missing.git"))
    done = run_cli("--root", str(root), "sync", env=ENV)
    assert done.returncode == 1
    err = done.stderr.decode()
    assert err.startswith("error: fetching from 'origin' failed") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_sync_killed_in_its_merge_is_finished_by_the_next(tmp_path: Path, remote: Path) -> None:
    a = first_store(tmp_path, remote)
    b = clone(remote, tmp_path / "b")
    with Memory.open(a, overrides=OFF) as mem:
        mem.write("notes/from-a.md", note("From a", "the narwhal"), provenance="run:a")
    sync(a)
    with Memory.open(b, overrides=OFF) as mem:
        mem.write("notes/from-b.md", note("From b", "the ocelot"), provenance="run:b")
    # what a sync killed between its merge and its commit leaves
    git(b, "fetch", "-q", "origin")
    git(b, "merge", "--no-ff", "--no-commit", "origin/main")
    assert (b / ".git" / "MERGE_HEAD").exists()
    report = sync(b)
    assert report["resumed"] is True and report["pushed"] >= 1
    assert not (b / ".git" / "MERGE_HEAD").exists()
    with Memory.open(b, overrides=OFF) as mem:
        assert [h.path for h in mem.search("narwhal", mode="bm25")] == ["notes/from-a.md"]
        assert [h.path for h in mem.search("ocelot", mode="bm25")] == ["notes/from-b.md"]


def test_three_clones_writing_at_once_lose_no_turn(tmp_path: Path, remote: Path) -> None:
    a = first_store(tmp_path, remote)
    roots = [a, clone(remote, tmp_path / "b"), clone(remote, tmp_path / "c")]
    script = (
        "import sys\n"
        "from memdir.service import Memory\n"
        "from memdir.errors import SyncError\n"
        "root, name = sys.argv[1], sys.argv[2]\n"
        "with Memory.open(root, overrides={'embeddings': {'enabled': False}}) as mem:\n"
        "    for n in range(12):\n"
        "        mem.record_turn(thread=f'{name}-t', input=f'{name} says {n}', output='ok')\n"
        "        if n % 4 == 3:\n"
        "            try:\n"
        "                mem.git_sync()\n"
        "            except SyncError as exc:\n"
        "                print('retry later:', exc, file=sys.stderr)\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(root), root.name],
            env={**os.environ, **ENV},
            stderr=subprocess.PIPE,
        )
        for root in roots
    ]
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err.decode()
    for _ in range(2):  # two rounds bring every clone everything
        for root in roots:
            sync(root)
    expected = paths_in(a, "episodes/turns")
    assert len([p for p in expected if not p.endswith("/index.md")]) >= 36
    for root in roots:
        assert paths_in(root, "episodes/turns") == expected
        with Memory.open(root, overrides=OFF) as mem:
            assert mem.doctor().ok, root
            for name in ("a", "b", "c"):
                assert len(mem.thread(f"{name}-t")) == 12
        assert git(root, "status", "--porcelain") == ""


def test_the_other_sides_file_is_never_written_through_a_symlink(tmp_path: Path) -> None:
    root = tmp_path / "s"
    (root / "notes").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "notes" / "link").symlink_to(outside)
    with pytest.raises(UnsafePath):
        gitsync.target_of(root, "notes/link/evil.md")
    assert gitsync.target_of(root, ".memdir/runs.tsv") == root / ".memdir/runs.tsv"
    with pytest.raises(UnsafePath):
        gitsync.target_of(root, ".memdir/index.db")


def test_sync_without_git_or_a_branch_says_what_to_do(tmp_path: Path, remote: Path) -> None:
    root = tmp_path / "a"
    Memory.init(root).close()
    with Memory.open(root, overrides=OFF) as mem, pytest.raises(ConfigError) as err:
        mem.git_sync(remote="nope")
    assert "remote add nope URL" in err.value.message
    a = first_store(tmp_path, remote, "b")
    git(a, "checkout", "-q", "--detach")
    with Memory.open(a, overrides=OFF) as mem, pytest.raises(SyncError) as err2:
        mem.git_sync()
    assert "detached" in err2.value.message


def test_union_keeps_both_sides_lines_in_order() -> None:
    assert gitsync.union_lines(b"h\n1\n2", b"h\n1\n3\n") == b"h\n1\n2\n3\n"
    assert gitsync.union_lines(b"", b"x\n") == b"x\n"


def test_watch_syncs_at_once_then_after_each_quiet_commit(tmp_path: Path, remote: Path) -> None:
    from memdir.engine import remote as remote_sync

    a = first_store(tmp_path, remote)
    said: list[object] = []
    fast = {**OFF, "sync": {"debounce_seconds": 0.2, "interval_seconds": 3600}}
    with Memory.open(a, overrides=fast) as mem:
        mem.write("notes/w1.md", note("W1", "first"), provenance="run:w")

        def say(what: object) -> None:
            said.append(what)
            if len(said) == 1:  # a commit after the first round: the watcher must see it
                mem.write("notes/w2.md", note("W2", "second"), provenance="run:w")

        remote_sync.watch(mem.engine, say=say, stop=lambda: len(said) >= 2, poll_seconds=0.05)
    assert all(isinstance(s, dict) for s in said), said
    assert [s["pushed"] >= 1 for s in said] == [True, True]  # type: ignore[index]
    pushed = git(remote, "ls-tree", "-r", "--name-only", "refs/heads/main")
    assert "notes/w1.md" in pushed and "notes/w2.md" in pushed


def test_episode_names_are_unique_beyond_a_store_and_sort_by_time() -> None:
    from memdir.doc import ids

    morning, noon = 8 * 3_600_000, 12 * 3_600_000
    day = 20_000 * 86_400_000  # a day, in ms since the epoch
    tags = [ids.day_tag(day + morning + n) for n in range(50)] + [ids.day_tag(day + noon)]
    assert tags == sorted(tags)  # one ms apart: the time part orders them
    assert len(set(tags)) == len(tags)
    assert ids.day_tag(day + morning)[:6] == ids.day_tag(2 * day + morning)[:6]  # per day
    assert len({ids.day_tag(day + morning) for _ in range(200)}) > 150  # random part


def spy_on_regeneration(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """Count what a sync writes again (the real functions still run)."""
    from memdir.engine import experience, wiki

    calls: dict[str, list[str]] = {"bundles": [], "experience": []}
    bundle, reflect_into = wiki.regenerate, experience.Experience.reflect_into

    def one_bundle(batch, root, program, name):  # type: ignore[no-untyped-def]
        calls["bundles"].append(name)
        return bundle(batch, root, program, name)

    def reflected(self, batch, **kw):  # type: ignore[no-untyped-def]
        calls["experience"].append("reflect")
        return reflect_into(self, batch, **kw)

    monkeypatch.setattr(wiki, "regenerate", one_bundle)
    monkeypatch.setattr(experience.Experience, "reflect_into", reflected)
    return calls


def test_a_fast_forward_writes_no_generated_file_again(
    tmp_path: Path, remote: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = first_store(tmp_path, remote)
    b = clone(remote, tmp_path / "b")
    with Memory.open(a, overrides=OFF) as mem:
        mem.write("wiki/garden/soil.md", note("Soil", "loam and the earthworm"), provenance="run:r")
        for n in range(5):
            mem.record_turn(thread="t-ff", input=f"question {n}", output=f"answer {n}")
        mem.episode_add(kind="life", situation="sowed the beans", insights=["beans like sun"])
        mem.reflect()
    sync(a)
    calls = spy_on_regeneration(monkeypatch)
    report = sync(b)
    assert report["arrived"] >= 1 and "wiki/garden/soil.md" in report["touched"]
    assert calls == {"bundles": [], "experience": []} and report["regenerated"] == []
    for rel in ("SNAPSHOT.md", "LESSONS.md", "episodes/index.md"):
        assert (b / rel).read_bytes() == (a / rel).read_bytes()
    with Memory.open(b, overrides=OFF) as mem:
        assert [h.path for h in mem.search("earthworm", mode="bm25")] == ["wiki/garden/soil.md"]
    assert git(b, "rev-parse", "HEAD") == git(a, "rev-parse", "HEAD")  # no commit of its own


def test_a_merge_writes_again_only_what_its_paths_feed(
    tmp_path: Path, remote: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = first_store(tmp_path, remote)
    with Memory.open(a, overrides=OFF) as mem:
        mem.write("wiki/garden/soil.md", note("Soil", "loam"), provenance="run:r")
        mem.write("wiki/tools/spade.md", note("Spade", "steel"), provenance="run:r")
    sync(a)
    b = clone(remote, tmp_path / "b")
    with Memory.open(a, overrides=OFF) as mem:
        mem.write("wiki/garden/compost.md", note("Compost", "the hot heap"), provenance="run:r")
    sync(a)
    with Memory.open(b, overrides=OFF) as mem:  # b moved too: a real merge, not a fast-forward
        mem.write("notes/b-only.md", note("B", "a note of b's"), provenance="run:r")
    calls = spy_on_regeneration(monkeypatch)
    report = sync(b)
    assert "wiki/garden/compost.md" in report["touched"]
    assert calls == {"bundles": ["garden"], "experience": []}
    assert "compost" in (b / "wiki/garden/index.md").read_text().lower()
    assert git(b, "status", "--porcelain") == ""


def test_sync_watch_from_the_command_line_pushes_each_new_write(
    tmp_path: Path, remote: Path
) -> None:
    a = first_store(tmp_path, remote)
    env = {**os.environ, **ENV, "MEMDIR_SYNC_DEBOUNCE_SECONDS": "0.2"}
    env.pop("MEMDIR_ROOT", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "memdir", "sync", "--watch", "--json", "--root", str(a)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )

    def pushed() -> set[str]:
        listed = subprocess.run(
            ["git", "ls-tree", "-r", "--name-only", "refs/heads/main"],
            cwd=remote,
            capture_output=True,
            text=True,
            check=False,  # no branch yet before the first push
        )
        return set(listed.stdout.split())

    def wait_for(rel: str) -> None:
        deadline = time.monotonic() + 60
        while rel not in pushed():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, f"{rel} never pushed"
            time.sleep(0.1)

    try:
        done = run_cli("write", "notes/w1.md", "--root", str(a), stdin=b"# W1\n\nfirst\n", env=ENV)
        assert done.returncode == 0, done.stderr
        wait_for("notes/w1.md")
        done = run_cli("write", "notes/w2.md", "--root", str(a), stdin=b"# W2\n\nsecond\n", env=ENV)
        assert done.returncode == 0, done.stderr
        wait_for("notes/w2.md")
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    reports = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    assert reports and all("pushed" in r for r in reports)


def test_a_git_daemon_remote_syncs_two_clones(tmp_path: Path, remote: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    daemon = subprocess.Popen(
        [
            "git",
            "daemon",
            "--reuseaddr",
            "--export-all",
            "--enable=receive-pack",
            "--listen=127.0.0.1",
            f"--port={port}",
            f"--base-path={tmp_path}",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"git://127.0.0.1:{port}/{remote.name}"
    try:
        deadline = time.monotonic() + 30
        while subprocess.run(
            ["git", "ls-remote", url], capture_output=True, check=False
        ).returncode:
            assert daemon.poll() is None, daemon.stderr.read() if daemon.stderr else ""
            assert time.monotonic() < deadline, "git daemon did not answer"
            time.sleep(0.1)
        a = tmp_path / "a"
        Memory.init(a).close()
        git(a, "remote", "add", "origin", url)
        with Memory.open(a, overrides=OFF) as mem:
            mem.write("notes/over-the-wire.md", note("Wire", "the narwhal"), provenance="run:r")
            assert mem.git_sync()["pushed"] >= 1
        b = tmp_path / "b"
        done = run_cli("sync", "clone", url, str(b), env=ENV)
        assert done.returncode == 0, done.stderr
        with Memory.open(b, overrides=OFF) as mem:
            assert [h.path for h in mem.search("narwhal", mode="bm25")] == [
                "notes/over-the-wire.md"
            ]
            mem.record_turn(thread="t-wire", input="hello", output="over git://")
            mem.git_sync()
        report = sync(a)
        assert report["arrived"] >= 1
        with Memory.open(a, overrides=OFF) as mem:
            assert len(mem.thread("t-wire")) == 1
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
