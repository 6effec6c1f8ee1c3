"""The agent-loop example runs offline and leaves a linked thread of turns."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers import committed
from memdir.files.store import Store
from memdir.service import Memory

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "agent_loop.py"


def test_agent_loop_example_runs(tmp_path: Path) -> None:
    root = Store.init(tmp_path / "s")
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("turn ")]
    assert len(lines) == 4
    ids = [ln.split()[1] for ln in lines]
    with Memory.open(root) as mem:
        support = [n.id for n in mem.thread("support", last=10)]
        assert support == [ids[3], ids[1], ids[0]]
        last = mem.turn_show(ids[3])
        assert ids[1] in last.parents  # the thread's previous turn is a parent
        assert "search" in last.compact and "Tools" in last.compact
        chain = {n.id for n in mem.ancestors(ids[3], depth=5)}
        assert {ids[0], ids[1]} <= chain
        assert mem.turn_worklog(ids[3]).count(b"\n") >= 2
    # the records are committed to git
    tracked = committed(root, "episodes/turns")
    names = {path.rsplit("/", 1)[-1] for path in tracked}
    for ident in ids:
        assert f"{ident}.md" in names and f"{ident}.worklog.jsonl" in names
