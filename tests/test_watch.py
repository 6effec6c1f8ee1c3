"""The watcher keeps the index in step with edits made by hand, without a stat walk."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import run_cli
from memdir.errors import ConfigError
from memdir.index import watch
from memdir.index.watch import Watcher
from memdir.service import Memory

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify")


def indexed(mem: Memory) -> dict[str, str]:
    rows = mem.index.conn.execute("SELECT path, hash FROM docs").fetchall()
    return {str(r[0]): str(r[1]) for r in rows}


def found(mem: Memory, word: str) -> list[str]:
    return [h.path for h in mem.search(word, mode="bm25", limit=50)]


@pytest.fixture
def watched(mem: Memory) -> Iterator[tuple[Memory, Watcher]]:
    (mem.root / "notes").mkdir()
    (mem.root / "notes" / "a.md").write_text("---\ntitle: A\n---\nalpha text\n")
    watcher = Watcher(mem.root, mem.index)
    watcher.start_thread()
    yield mem, watcher
    watcher.stop()


def test_hand_edits_reach_the_index_without_a_walk(watched: tuple[Memory, Watcher]) -> None:
    mem, watcher = watched
    root = mem.root
    assert watch.running(root)
    assert "notes/a.md" in indexed(mem)  # the start-up sync
    # edited in place, created in a new folder, deleted, renamed
    with open(root / "notes" / "a.md", "w") as f:
        f.write("---\ntitle: A\n---\nbravo text\n")
    (root / "notes" / "deep" / "er").mkdir(parents=True)
    (root / "notes" / "deep" / "er" / "b.md").write_text("charlie\n")
    (root / "notes" / "gone.md").write_text("delta\n")
    stats = mem.sync()
    assert stats.scanned == 0  # answered by the watcher
    assert found(mem, "bravo") == ["notes/a.md"] and found(mem, "alpha") == []
    assert found(mem, "charlie") == ["notes/deep/er/b.md"]
    (root / "notes" / "gone.md").unlink()
    os.rename(root / "notes" / "deep" / "er" / "b.md", root / "notes" / "c.md")
    assert mem.sync().scanned == 0
    paths = indexed(mem)
    assert "notes/gone.md" not in paths and "notes/deep/er/b.md" not in paths
    assert found(mem, "charlie") == ["notes/c.md"]
    assert watcher.synced >= 5
    assert mem.doctor().ok


def test_a_moved_folder_is_followed(watched: tuple[Memory, Watcher]) -> None:
    mem, _ = watched
    root = mem.root
    (root / "notes" / "sub").mkdir()
    (root / "notes" / "sub" / "x.md").write_text("echo\n")
    mem.sync()
    os.rename(root / "notes" / "sub", root / "notes" / "moved")
    mem.sync()
    assert found(mem, "echo") == ["notes/moved/x.md"]
    (root / "notes" / "moved" / "x.md").write_text("foxtrot\n")
    mem.sync()
    assert found(mem, "foxtrot") == ["notes/moved/x.md"]
    assert mem.doctor().ok


def test_one_watcher_per_store_and_none_after_stop(mem: Memory) -> None:
    first = Watcher(mem.root, mem.index)
    first.start_thread()
    try:
        with pytest.raises(ConfigError, match="already runs"):
            Watcher(mem.root, mem.index).start()
    finally:
        first.stop()
    assert not watch.running(mem.root)
    assert not watch.confirm(mem.root)
    (mem.root / "late.md").write_text("golf\n")
    assert mem.sync().scanned > 0  # no watcher: the walk
    assert found(mem, "golf") == ["late.md"]


def test_an_overflow_asks_for_a_full_sync(mem: Memory) -> None:
    watcher = Watcher(mem.root, mem.index)
    assert watcher._event(-1, watch.IN_Q_OVERFLOW, "", set(), [])
    pending: set[str] = set()
    assert not watcher._event(-1, watch.IN_CLOSE_WRITE, "x.md", pending, [])
    assert pending == set()  # unknown watch descriptor: ignored


def test_the_watch_command(store_root: Path) -> None:
    env = dict(os.environ)
    env.pop("MEMDIR_ROOT", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "memdir", "--root", str(store_root), "watch"],
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline().decode()
        assert line.startswith("watching "), line
        (store_root / "hand.md").write_text("---\ntitle: Hand\n---\nhotel india\n")
        out = run_cli("--root", str(store_root), "search", "hotel", "--json")
        assert out.returncode == 0, out.stderr
        assert b"hand.md" in out.stdout
        assert watch.running(store_root)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    deadline = time.monotonic() + 5
    while watch.running(store_root) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not watch.running(store_root)


def test_serve_watches_the_store(store_root: Path) -> None:
    import httpx

    from helpers import wait_for_health
    from http_server import free_port

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, MEMDIR_EMBEDDINGS_ENABLED="false")
    env.pop("MEMDIR_ROOT", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "memdir", "--root", str(store_root), "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        wait_for_health(url, proc)
        with httpx.Client(base_url=url, timeout=60) as client:
            assert client.get("/v1/search", params={"q": "anything"}).status_code == 200
            assert watch.running(store_root)
            # by hand, then at once: no walk interval to wait for
            (store_root / "by-hand.md").write_text("---\ntitle: By hand\n---\nkilo lima\n")
            hits = client.get("/v1/search", params={"q": "kilo", "mode": "bm25"}).json()
            assert [h["path"] for h in hits] == ["by-hand.md"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert not watch.running(store_root)


def test_a_watcher_that_cannot_update_the_index_stops(watched: tuple[Memory, Watcher]) -> None:
    mem, watcher = watched
    wal = mem.index.path.parent / (mem.index.path.name + "-wal")
    # a real failure: the kernel refuses every write to the index's log, even for root
    refused = subprocess.run(["chattr", "+i", str(wal)], capture_output=True, check=False)
    if refused.returncode != 0:
        pytest.skip("chattr +i is not available here")
    try:
        (mem.root / "notes" / "refused.md").write_text("mike\n")
        deadline = time.monotonic() + 10
        while watch.running(mem.root) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not watch.running(mem.root)  # it stopped rather than claim the index in step
        assert not watch.confirm(mem.root)
    finally:
        subprocess.run(["chattr", "-i", str(wal)], check=True)
    assert mem.sync().scanned > 0  # commands walk again
    assert found(mem, "mike") == ["notes/refused.md"]


def test_a_watcher_of_another_process_beats_the_walk_interval(store_root: Path) -> None:
    from memdir.index import Index

    # as `memdir watch` would run it; it batches for 30 s unless a command asks (a cookie)
    watcher = Watcher(store_root, Index(store_root), settle=30.0)
    watcher.start_thread()
    slow = Memory.open(store_root, overrides={"store": {"sync_interval_seconds": 3600.0}})
    try:
        slow.sync()
        (store_root / "fresh.md").write_text("november\n")
        assert slow.sync().scanned == 0  # no walk, and no hour-long wait either
        assert found(slow, "november") == ["fresh.md"]
    finally:
        slow.close()
        watcher.stop()
