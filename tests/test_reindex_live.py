"""A full reindex while the store is in use: readers never fail and never see half an index.

The rebuild runs in one write transaction over the live index (memdir.index.Index.rebuild),
so readers in this process and in others keep answering from the old index until it commits.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from helpers import run_cli
from http_server import live_server
from memdir.errors import IndexBusy
from memdir.index import Index, db, watch
from memdir.index.search import Filters, bm25
from memdir.service import Memory

DOCS = 40


def fill(mem: Memory, count: int = DOCS) -> list[str]:
    """``count`` notes that all hold the word "common"; their paths, sorted."""
    paths = [f"notes/n{n:03d}.md" for n in range(count)]
    for n, path in enumerate(paths):
        mem.write(path, f"# Note {n}\n\ncommon word, and token{n} alone.\n")
    mem.sync(force=True)
    return paths


def bulk(root: Path, count: int) -> None:
    folder = root / "bulk"
    folder.mkdir()
    for n in range(count):
        (folder / f"b{n:04d}.md").write_text(f"# B{n}\n\nplenty bulk row {n}\n")


def read_round(mem: Memory, paths: list[str], n: int) -> None:
    """One reader's round: every answer must be the whole answer."""
    hits = mem.search("common", mode="bm25", limit=100)
    assert sorted(h.path for h in hits) == paths, f"search gave {len(hits)} of {len(paths)}"
    listed = [row["path"] for row in mem.ls("notes")]
    assert listed == paths, f"ls gave {len(listed)} of {len(paths)}"
    one = paths[n % len(paths)]
    only = mem.search(f"token{n % len(paths)}", mode="bm25")
    assert [h.path for h in only] == [one]
    assert f"token{n % len(paths)} alone" in mem.read(one).content


def under_rebuilds(
    rebuild: Callable[[], object], reader: Callable[[int], None], threads: int, seconds: float
) -> tuple[int, int, list[str]]:
    """Run ``reader`` in ``threads`` threads while ``rebuild`` loops: (reads, rebuilds, errors)."""
    stop = threading.Event()
    errors: list[str] = []
    reads = [0] * threads

    def loop(slot: int) -> None:
        n = 0
        while not stop.is_set():
            try:
                reader(n)
                reads[slot] += 1
            except Exception as exc:  # every failure is a finding, not a crash of the test
                errors.append(f"{type(exc).__name__}: {exc}")
            n += 1

    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    rebuilds = 0
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            rebuild()
            rebuilds += 1
    finally:
        stop.set()
        for worker in workers:
            worker.join(timeout=30)
    return sum(reads), rebuilds, errors


def test_readers_in_threads_never_fail_during_full_rebuilds(mem: Memory) -> None:
    paths = fill(mem)
    reads, rebuilds, errors = under_rebuilds(
        lambda: mem.reindex(full=True), lambda n: read_round(mem, paths, n), 3, 2.0
    )
    assert errors == []
    assert rebuilds >= 2 and reads >= 10
    assert mem.doctor().ok


def test_rebuilds_at_once_take_turns(mem: Memory) -> None:
    paths = fill(mem)
    count = mem.index.conn.execute("SELECT count(*) FROM docs").fetchone()[0]
    results: list[int] = []
    errors: list[str] = []

    def rebuild() -> None:
        try:
            results.append(mem.reindex(full=True).added)
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")

    workers = [threading.Thread(target=rebuild) for _ in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert errors == [] and results == [count] * 3
    assert [row["path"] for row in mem.ls("notes")] == paths
    assert mem.doctor().ok


def test_a_rebuild_keeps_document_ids_and_moves_the_counters_on(mem: Memory) -> None:
    """A reader holding ids from before the commit finds the same documents after it, and
    no cache keyed on the generation or a postings sequence matches the new index."""
    fill(mem)
    conn = mem.index.conn
    ids = dict(conn.execute("SELECT path, id FROM docs").fetchall())
    counters = ("generation", "fts_seq")
    before = {k: int(mem.index.meta(k) or 0) for k in counters}
    (mem.root / "notes" / "n005.md").unlink()
    (mem.root / "notes" / "new.md").write_text("# New\n\ncommon and fresh.\n")
    mem.reindex(full=True)
    after = dict(conn.execute("SELECT path, id FROM docs").fetchall())
    assert {p: after[p] for p in after if p in ids} == {p: ids[p] for p in ids if p in after}
    assert "notes/n005.md" not in after and after["notes/new.md"] > max(ids.values())
    assert all(int(mem.index.meta(k) or 0) > before[k] for k in counters)


def test_a_rebuild_keeps_the_vector_side_and_embeds_nothing_again(
    toy: None, store_root: Path
) -> None:
    with Memory.open(store_root, overrides={"embeddings": {"provider": "letters"}}) as mem:
        fill(mem, 8)
        assert mem.embed().embedded > 0
        conn = mem.index.conn
        tables = ("vectors", "chunks", "embedded", "passages_fts", "passage_links")
        counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}
        found = [(h.path, h.score) for h in mem.search("note word", mode="hybrid", limit=5)]
        mem.reindex(full=True)
        assert {
            t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables
        } == counts
        assert [(h.path, h.score) for h in mem.search("note word", mode="hybrid", limit=5)] == found
        assert mem.embed().documents == 0
        (mem.root / "notes" / "n002.md").write_text("# Note 2\n\nnow about something else\n")
        mem.reindex(full=True)
        again = mem.embed()
        assert again.documents == 1 and again.embedded > 0  # only the note that changed


def http_read_round(client: httpx.Client, paths: list[str], n: int) -> None:
    """One reader's round over HTTP: every answer whole, as :func:`read_round` asks."""
    hits = client.get("/v1/search", params={"q": "common", "mode": "bm25", "limit": 100})
    assert hits.status_code == 200, hits.text
    assert sorted(h["path"] for h in hits.json()) == paths
    listed = client.get("/v1/ls", params={"prefix": "notes"})
    assert listed.status_code == 200, listed.text
    assert [row["path"] for row in listed.json()] == paths
    one = paths[n % len(paths)]
    read = client.get(f"/v1/files/{one}")
    assert read.status_code == 200 and f"token{n % len(paths)} alone" in read.json()["content"]


def http_readers(url: str, paths: list[str]) -> Callable[[int], None]:
    """A reader for :func:`under_rebuilds`: each thread keeps its own client."""
    local = threading.local()

    def reader(n: int) -> None:
        if not hasattr(local, "client"):
            local.client = httpx.Client(base_url=url, timeout=60)
        http_read_round(local.client, paths, n)

    return reader


def test_http_readers_never_fail_while_the_server_rebuilds(store_root: Path) -> None:
    with live_server(store_root, mcp=False) as live:
        assert live.mem.start_watcher()
        paths = fill(live.mem)
        admin = live.client()

        def rebuild() -> None:
            done = admin.post("/v1/reindex", json={"full": True})
            assert done.status_code == 200 and done.json()["added"] >= len(paths), done.text
            # a hand edit during the rebuilds reaches the index through the watcher
            (store_root / "hand.md").write_text(f"# Hand\n\nedited by hand {time.time_ns()}\n")

        reads, rebuilds, errors = under_rebuilds(rebuild, http_readers(live.url, paths), 2, 3.0)
        assert errors == []
        assert rebuilds >= 2 and reads >= 10
        assert watch.running(store_root), "the watcher stopped"
        stamp = (store_root / "hand.md").read_text().split()[-1]
        deadline = time.monotonic() + 10
        while not admin.get("/v1/search", params={"q": stamp, "mode": "bm25"}).json():
            assert time.monotonic() < deadline, "the hand edit never reached the index"
            time.sleep(0.05)
        assert admin.get("/v1/doctor").json()["ok"]


def test_cli_rebuilds_beside_a_serving_process(store_root: Path) -> None:
    """Two processes: `memdir reindex --full` in a loop while a server answers readers."""
    with live_server(store_root, mcp=False) as live:
        paths = fill(live.mem)

        def rebuild() -> None:
            done = run_cli("--root", str(store_root), "reindex", "--full")
            assert done.returncode == 0, done.stderr.decode()

        reads, rebuilds, errors = under_rebuilds(rebuild, http_readers(live.url, paths), 2, 3.0)
        assert errors == []
        assert rebuilds >= 1 and reads >= 10
        # what the server writes after the rebuilds reaches the index the CLI reads
        put = live.client().put("/v1/files/notes/after.md", json={"content": "# After\n"})
        assert put.status_code == 201, put.text
        doctor = run_cli("--root", str(store_root), "doctor")
        assert doctor.returncode == 0, doctor.stdout.decode()


KILLED_REBUILD = """
import os, signal, sys
from pathlib import Path

import memdir.index as index
from memdir.service import Memory

real, seen = index.analyze, [0]


def analyze(*args, **kwargs):
    seen[0] += 1
    if seen[0] == int(sys.argv[2]):
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*args, **kwargs)


index.analyze = analyze
with Memory.open(Path(sys.argv[1])) as mem:
    mem.reindex(full=True)
"""


def test_a_rebuild_killed_midway_leaves_the_old_index(store_root: Path) -> None:
    bulk(store_root, 1500)
    with Memory.open(store_root) as mem:
        mem.sync(force=True)
        conn = mem.index.conn
        count = conn.execute("SELECT count(*) FROM docs").fetchone()[0]
        schema = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
        generation = mem.index.generation
    # killed after 1200 files: past the first batch of 1000 a sync commits on its own
    child = subprocess.run(
        [sys.executable, "-c", KILLED_REBUILD, str(store_root), "1200"],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    index = Index(store_root)  # read as it is, without a sync
    try:
        conn = index.conn
        assert conn.execute("SELECT count(*) FROM docs").fetchone()[0] == count
        assert conn.execute("SELECT count(*) FROM docs_fts").fetchone()[0] == count
        assert (
            conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
            == schema
        )
        assert index.generation == generation
        assert len(bm25(conn, "bulk", Filters(), 2000)) == 1500
    finally:
        index.close()


def test_a_writer_kept_waiting_by_another_process_gets_index_busy(
    store_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process's rebuild holds the write lock from start to end; a writer that
    waits longer than the busy timeout gets a clear error, and the file still reaches the
    index at the next sync."""
    monkeypatch.setattr(db, "BUSY_SECONDS", 0.3)
    with live_server(store_root, mcp=False) as live:
        fill(live.mem, 2)
        other = sqlite3.connect(store_root / ".memdir" / "index.db", isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # what a rebuild in another process holds
        try:
            with pytest.raises(IndexBusy, match="write lock of the index"):
                live.mem.write("notes/late.md", "# Late\n\nlate arrival\n")
            put = live.client().put("/v1/files/notes/later.md", json={"content": "# Later\n"})
            assert put.status_code == 503 and put.json()["error"]["code"] == "index_busy"
            report = live.client().get("/v1/memory/report")
            assert report.status_code == 503  # its sync finds the new files: it must write
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert (store_root / "notes" / "late.md").is_file()
        assert [h.path for h in live.mem.search("late arrival", mode="bm25")] == ["notes/late.md"]
        assert live.mem.doctor().ok


def test_a_verb_answers_at_once_while_this_process_rebuilds(
    mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hand edit during a rebuild does not make readers wait for the commit."""
    import memdir.index as index_module

    bulk(mem.root, 300)
    paths = fill(mem)
    paused, resume = threading.Event(), threading.Event()
    real = index_module.analyze

    def analyze(rel: str, *args: object, **kwargs: object) -> object:
        if rel == "bulk/b0150.md":
            paused.set()
            resume.wait(30)
        return real(rel, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(index_module, "analyze", analyze)
    rebuild = threading.Thread(target=mem.reindex, kwargs={"full": True})
    rebuild.start()
    try:
        assert paused.wait(30)
        assert mem.index.rebuilding()
        (mem.root / "notes" / "n001.md").write_text("# Note 1\n\nedited by hand mid-rebuild\n")
        reader = threading.Thread(target=read_round, args=(mem, paths, 3))
        started = time.monotonic()
        reader.start()
        reader.join(timeout=10)
        assert not reader.is_alive() and time.monotonic() - started < 5
    finally:
        resume.set()
        rebuild.join(timeout=60)
    assert not mem.index.rebuilding()
    assert [h.path for h in mem.search("mid-rebuild", mode="bm25")] == ["notes/n001.md"]


PAUSED_REBUILD = """
import sys, time
from pathlib import Path

import memdir.index as index
from memdir.service import Memory

real = index.analyze


def analyze(rel, *args, **kwargs):
    if rel == "bulk/b0150.md":
        Path(sys.argv[2]).write_text("paused")
        time.sleep(float(sys.argv[3]))
    return real(rel, *args, **kwargs)


index.analyze = analyze
with Memory.open(Path(sys.argv[1])) as mem:
    mem.reindex(full=True)
"""


def test_a_verb_answers_at_once_while_another_process_rebuilds(store_root: Path) -> None:
    bulk(store_root, 300)
    marker = store_root.parent / "paused"
    with Memory.open(store_root) as mem:
        paths = fill(mem)
        child = subprocess.Popen(
            [sys.executable, "-c", PAUSED_REBUILD, str(store_root), str(marker), "4"]
        )
        try:
            deadline = time.monotonic() + 60
            while not marker.exists():
                assert time.monotonic() < deadline and child.poll() is None
                time.sleep(0.02)
            assert mem.index.rebuilding()
            (store_root / "notes" / "n001.md").write_text("# Note 1\n\nedited mid-rebuild\n")
            started = time.monotonic()
            read_round(mem, paths, 3)
            assert time.monotonic() - started < 2  # the child holds the lock for 4 s
        finally:
            assert child.wait(timeout=60) == 0
        assert [h.path for h in mem.search("mid-rebuild", mode="bm25")] == ["notes/n001.md"]


def test_rebuilds_in_two_processes_at_once_take_turns(store_root: Path) -> None:
    bulk(store_root, 1500)
    with Memory.open(store_root) as mem:
        mem.sync(force=True)
        ids = dict(mem.index.conn.execute("SELECT path, id FROM docs").fetchall())
    command = [sys.executable, "-m", "memdir", "--root", str(store_root), "reindex", "--full"]
    children = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)]
    children.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    outs = [child.communicate(timeout=120) for child in children]
    assert [child.returncode for child in children] == [0, 0], [e.decode() for _, e in outs]
    assert all(f"added {len(ids)}," in out.decode() for out, _ in outs)
    with Memory.open(store_root) as mem:
        assert dict(mem.index.conn.execute("SELECT path, id FROM docs").fetchall()) == ids
        assert mem.doctor().ok
