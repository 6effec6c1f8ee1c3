"""Batched git commits: a write is never lost, even when close meets a running flush."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import threading
import time
from pathlib import Path

import pytest

from helpers import committed
from memdir.errors import GitError
from memdir.files.gitlog import GitLog
from memdir.files.store import Store


def tracked(root: Path) -> set[str]:
    return set(committed(root))


def slow_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """A real git that takes ``seconds`` longer per call, as on a loaded machine."""
    real = shutil.which("git")
    assert real
    folder = tmp_path / "bin"
    folder.mkdir()
    wrapper = folder / "git"
    wrapper.write_text(f'#!/bin/sh\nsleep {seconds}\nexec "{real}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


def test_close_waits_for_a_flush_already_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = Store.init(tmp_path / "s")
    slow_git(tmp_path, monkeypatch, 0.3)
    log = GitLog(root, batch_seconds=0.05)
    names = [f"f{n}.md" for n in range(3)]
    for name in names:
        (root / name).write_text(name)
        log.queue([name], "ana", f"write {name}")
    deadline = time.monotonic() + 5
    while log._pending and time.monotonic() < deadline:  # the waiter has taken the queue
        time.sleep(0.01)
    assert not log._pending
    log.close()  # must not return before the background commit is done
    assert set(names) <= tracked(root)


def test_a_failed_commit_keeps_its_paths_queued(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = Store.init(tmp_path / "s")
    log = GitLog(root)
    (root / "a.md").write_text("a")
    lock = root / ".git" / "index.lock"
    lock.write_text("")  # another git holds the index: it has the lock open
    holder = os.open(lock, os.O_RDONLY)
    with pytest.raises(GitError):
        log.queue(["a.md"], "ana", "write a")
    assert "a.md" not in tracked(root)
    os.close(holder)
    lock.unlink()
    log.flush()  # retried
    assert "a.md" in tracked(root)
    log.close()


def test_many_threads_many_writes_all_committed(tmp_path: Path) -> None:
    root = Store.init(tmp_path / "s")
    log = GitLog(root, batch_seconds=0.02)

    def writer(k: int) -> None:
        for n in range(15):
            name = f"w{k}-{n}.md"
            (root / name).write_text(name)
            log.queue([name], f"actor{k}", f"write {name}")

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log.close()
    assert {f"w{k}-{n}.md" for k in range(4) for n in range(15)} <= tracked(root)


def test_a_flush_writes_one_pack_and_takes_paths_literally(tmp_path: Path) -> None:
    root = Store.init(tmp_path / "s")
    (root / "wiki" / "loose.md").write_text("# not written through memdir\n")
    names = [f"wiki/t{i}.md" for i in range(60)] + ["wiki/*.md", "wiki/[t1].md"]
    for name in names:
        (root / name).write_text(f"# {name}\n")
    log = GitLog(root)
    log.queue(names, "agent", "many")
    log.flush()
    assert set(names) <= tracked(root)
    assert "wiki/loose.md" not in tracked(root)  # "*.md" named one file, not a pattern
    counts = dict(
        line.split(": ")
        for line in subprocess.run(
            ["git", "-C", str(root), "count-objects", "-v"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
    )
    assert int(counts["in-pack"]) >= len(names)  # the blobs went into a pack
    assert int(counts["count"]) < len(names)  # loose: the commit and its trees only


def test_a_commit_that_lost_its_staged_paths_stays_queued(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A git killed beside memdir can put back an older index: the commit then finds
    nothing staged, and the batch must not count as committed."""
    root = Store.init(tmp_path / "s")
    log = GitLog(root)
    real = subprocess.run

    def index_rewritten(args: list[str], **kwargs: object) -> object:
        if "commit" in args:
            real(["git", "-C", str(root), "reset", "-q"], check=True)  # the staging is gone
            return subprocess.CompletedProcess(args, 1, b"", b"nothing added to commit")
        return real(args, **kwargs)  # type: ignore[call-overload]

    (root / "a.md").write_text("a")
    monkeypatch.setattr(subprocess, "run", index_rewritten)
    with pytest.raises(GitError, match="made nothing"):
        log.queue(["a.md"], "ana", "write a")
    monkeypatch.undo()
    assert "a.md" not in tracked(root)
    log.flush()  # retried, now committed
    assert "a.md" in tracked(root)
    log.close()
