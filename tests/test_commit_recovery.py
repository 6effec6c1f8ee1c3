"""Writes a process acknowledged but had not committed when it was killed reach git when
the store is next opened; hand edits to other files stay as they are."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from helpers import committed, killed_after, run_cli
from memdir.service import Memory

WRITER = textwrap.dedent(
    """
    import sys, time
    from memdir.service import Memory
    mem = Memory.open(sys.argv[1], overrides={"store": {"git_batch_seconds": 600}})
    for n in range(12):
        mem.write(f"notes/w{n}.md", f"# W{n}\\n\\nacknowledged {n}\\n", actor="writer")
    mem.record_turn(thread="t", input="acknowledged", output="turn", actor="agent")
    print("acknowledged", flush=True)
    time.sleep(120)
    """
)


def git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
    )
    return done.stdout


def test_a_killed_writers_acknowledged_writes_are_committed_on_open(store_root: Path) -> None:
    (store_root / "notes").mkdir()
    (store_root / "notes" / "hand.md").write_text("# Hand\n\nan edit of the owner\n")
    with killed_after(WRITER, store_root, b"acknowledged\n"):
        pass
    names = {f"notes/w{n}.md" for n in range(12)}
    assert not names & set(committed(store_root))  # the batching window had not ended
    with Memory.open(store_root):
        tracked = set(committed(store_root))
        assert names <= tracked
        assert any(p.startswith("episodes/turns/") and p.endswith(".md") for p in tracked)
        assert "notes/hand.md" not in tracked  # not a memdir write: left to its owner
    authors = git(store_root, "log", "--format=%an", "--", "notes/w0.md").split()
    assert authors == ["writer"]
    assert git(store_root, "status", "--porcelain").splitlines() == ["?? notes/hand.md"]
    assert list((store_root / ".memdir" / "journal").glob("*.commits")) == []


CRASH = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from memdir.files.store import Store
    from memdir.settings import load
    root = Path(sys.argv[1])
    store = Store(root, load(root, {"store": {"git_batch_seconds": 600}}))
    for n in range(3):
        store.write_files([(f"notes/c{n}.md", f"# crash {n}\\n")])
    (root / "wiki" / f".page.md.{os.getpid()}-abcd1234.tmp").write_text("half an article")
    os._exit(0)  # killed: no close, no flush
    """
)


def test_the_first_doctor_after_a_crash_is_clean_and_dead_temp_files_go(
    store_root: Path,
) -> None:
    live = store_root / "wiki" / f".live.md.{os.getpid()}-abcd1234.tmp"
    live.write_text("a live writer's file")
    assert run_cli("reindex", cwd=store_root).returncode == 0
    env = dict(os.environ)
    env.pop("MEMDIR_ROOT", None)
    subprocess.run([sys.executable, "-c", CRASH, str(store_root)], env=env, check=True)
    (store_root / "notes" / "c0.md").unlink()  # what a power loss may leave
    [orphan] = (store_root / "wiki").glob(".page.md.*.tmp")
    doctor = run_cli("doctor", cwd=store_root)
    assert doctor.returncode == 0, doctor.stdout.decode() + doctor.stderr.decode()
    assert (store_root / "notes" / "c0.md").read_text() == "# crash 0\n"
    assert not orphan.exists()
    assert live.read_text() == "a live writer's file"
    assert {f"notes/c{n}.md" for n in range(3)} <= set(committed(store_root))


MIDWRITE = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from memdir.files.store import Store
    from memdir.settings import load
    root = Path(sys.argv[1])
    store = Store(root, load(root))
    # killed after the rename of its first write, before anything indexed or queued it
    store.write_files(
        [("notes/renamed.md", "# Renamed\\n\\nthen killed\\n")],
        after_rename=lambda _written: os._exit(0),
    )
    """
)


def test_a_writer_killed_in_its_first_write_leaves_the_index_in_step(store_root: Path) -> None:
    assert run_cli("reindex", cwd=store_root).returncode == 0
    env = dict(os.environ)
    env.pop("MEMDIR_ROOT", None)
    subprocess.run([sys.executable, "-c", MIDWRITE, str(store_root)], env=env, check=True)
    doctor = run_cli("doctor", cwd=store_root)
    assert doctor.returncode == 0, doctor.stdout.decode() + doctor.stderr.decode()
    found = run_cli("search", "renamed then killed", "--mode", "bm25", cwd=store_root)
    assert b"notes/renamed.md" in found.stdout


COMMITTED_THEN_KILLED = textwrap.dedent(
    """
    import os, sys
    from memdir.service import Memory
    mem = Memory.open(sys.argv[1])
    mem.index.sync_paths = lambda *_a: os._exit(0)  # killed after the commit, before the index
    mem.write("notes/late.md", "# Late\\n\\ncommitted, never indexed\\n", actor="ana")
    """
)
RECOVERER_KILLED = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from memdir.settings import load
    from memdir.files.store import Store
    root = Path(sys.argv[1])
    Store(root, load(root))  # recovery runs; killed before its index sync
    os._exit(0)
    """
)


def test_a_recovery_killed_before_its_index_sync_is_redone(store_root: Path) -> None:
    assert run_cli("reindex", cwd=store_root).returncode == 0
    env = dict(os.environ)
    env.pop("MEMDIR_ROOT", None)
    for child in (COMMITTED_THEN_KILLED, RECOVERER_KILLED):
        subprocess.run([sys.executable, "-c", child, str(store_root)], env=env, check=True)
    assert "notes/late.md" in committed(store_root)
    doctor = run_cli("doctor", cwd=store_root)
    assert doctor.returncode == 0, doctor.stdout.decode() + doctor.stderr.decode()
