"""Writes a process acknowledged but had not committed when it was killed reach git when
the store is next opened; hand edits to other files stay as they are."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import committed
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
    env = dict(os.environ)
    env.pop("MEMDIR_ROOT", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(store_root)], stdout=subprocess.PIPE, env=env
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"acknowledged\n"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
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
