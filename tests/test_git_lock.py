"""A git killed while it held .git/index.lock blocks no later write, and a write whose commit
git refuses is still acknowledged whole: on disk, indexed, journaled, committed later."""

from __future__ import annotations

import os
import time
from pathlib import Path

from helpers import committed, run_cli
from memdir.files import journal
from memdir.service import Memory


def stale_lock(root: Path, age: float = 30.0) -> Path:
    """What a git killed in the middle of ``git add`` leaves: index.lock, closed, old."""
    lock = root / ".git" / "index.lock"
    lock.write_bytes(b"DIRC half written")
    then = time.time() - age
    os.utime(lock, (then, then))
    return lock


def test_a_stale_index_lock_is_cleared_and_the_write_committed(mem: Memory) -> None:
    lock = stale_lock(mem.root)
    result = mem.write("notes/a.md", "# A\n\nafter a killed git\n", actor="ana")
    assert result.path == "notes/a.md"
    assert not lock.exists()
    assert "notes/a.md" in committed(mem.root)
    turn = mem.record_turn(thread="t", input="after", output="the lock")
    assert turn.path in committed(mem.root)


def test_a_live_index_lock_is_kept_and_the_writes_are_acknowledged_whole(mem: Memory) -> None:
    lock = stale_lock(mem.root)
    holder = os.open(lock, os.O_RDONLY)  # a git still running: it has the lock open
    try:
        written = mem.write("notes/b.md", "# B\n\nwhile git runs\n", actor="ana")
        turn = mem.record_turn(thread="t", input="while git", output="runs", actor="bo")
        assert lock.exists()  # never taken from a live git
        assert written.path not in committed(mem.root)
        assert (mem.root / "notes/b.md").read_text() == "# B\n\nwhile git runs\n"
        assert [h.path for h in mem.search("while git runs", mode="bm25")][:1] == ["notes/b.md"]
        assert turn.path in [h.path for h in mem.search("runs", mode="bm25", limit=10)]
        [log] = journal.folder(mem.root).glob("*.log")
        assert turn.path in [rel for files in journal.decode(log.read_bytes()) for rel, _ in files]
    finally:
        os.close(holder)
        lock.unlink()
    mem.store.commit_pending()  # the queued commits go in once git is free
    assert {written.path, turn.path} <= set(committed(mem.root))


def test_a_cli_write_while_git_is_busy_succeeds_and_is_committed_at_the_next_open(
    store_root: Path,
) -> None:
    lock = stale_lock(store_root)
    holder = os.open(lock, os.O_RDONLY)  # git is busy for the whole command
    try:
        done = run_cli("write", "notes/c.md", "--actor", "cy", cwd=store_root, stdin=b"# C\n")
        assert done.returncode == 0, done.stderr.decode()
        assert (store_root / "notes" / "c.md").read_text() == "# C\n"
        assert "notes/c.md" not in committed(store_root)
    finally:
        os.close(holder)
        lock.unlink()
    Memory.open(store_root).close()  # the command's queued commit, from its book
    assert "notes/c.md" in committed(store_root)


def test_a_stale_head_lock_of_a_killed_commit_is_cleared(mem: Memory) -> None:
    """git commit killed between locking HEAD and renaming the lock leaves HEAD.lock (and
    the branch's lock): every later commit fails until they go."""
    for lock in (mem.root / ".git" / "HEAD.lock", mem.root / ".git" / "refs/heads/main.lock"):
        lock.write_text("0" * 40 + "\n")
        os.utime(lock, (time.time() - 30, time.time() - 30))
    mem.write("notes/h.md", "# H\n\nafter a killed commit\n", actor="ana")
    assert "notes/h.md" in committed(mem.root)
    assert not (mem.root / ".git" / "HEAD.lock").exists()
