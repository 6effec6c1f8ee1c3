"""The loaded vector matrix follows writes by document instead of reloading.

A long-lived :class:`VectorIndex` (a server's) is compared with a fresh one (a full
load) after random writes, replaces, supersedes and deletes, made by the same
``Memory`` and by a second one on the same store (what another process is: nothing
in memory is shared, only the index). SQL statements are counted with SQLite's trace
callback, so the count means the same on any version of the code.
"""

from __future__ import annotations

import os
import random
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memdir.files.store import Store
from memdir.service import Memory
from memdir.vectors import matrix as vectormatrix
from memdir.vectors.index import VectorHit, VectorIndex

WORDS = (
    "lake sunrise marathon cat garden painting guitar camping festival recipe coffee "
    "mountain beach concert school friend trip music book dog budget deploy rollback"
).split()
QUERIES = ["quiet lake sunrise", "marathon training", "grey cat garden", "zzz", "coffee trip"]


def _open(root: Path) -> Memory:
    return Memory.open(
        root,
        overrides={
            "store": {"git_commit": False},
            "embeddings": {"provider": "letters", "chunk_tokens": 8, "chunk_overlap": 2},
        },
    )


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return Store.init(tmp_path / "store", git=False)


@pytest.fixture
def small_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seal int8 ranges and compact after a few rows, so a short test runs every path."""
    monkeypatch.setattr(vectormatrix, "SEAL_ROWS", 12)
    monkeypatch.setattr(vectormatrix, "SPARE_ROWS", 6)


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 30)))


def _fresh(mem: Memory, quantise_from: int) -> VectorIndex:
    emb = mem.settings.embeddings
    return VectorIndex(
        mem.index,
        mem.embedder(),
        chunk_tokens=emb.chunk_tokens,
        chunk_overlap=emb.chunk_overlap,
        quantise_from=quantise_from,
    )


def _live_rows(vectors: VectorIndex) -> list[tuple[int, int, int, int, bytes]]:
    """The rows a search of this index reads: (doc, chunk no, start, end, vector bytes)."""
    scan = vectors.loaded()
    if scan is None:
        return []
    rows = scan.rows
    keep = rows.live_rows()
    return sorted(
        (int(rows.docs[i]), *(int(x) for x in rows.chunks[i]), rows.matrix[i].tobytes())
        for i in keep.tolist()
    )


def _results(mem: Memory, vectors: VectorIndex) -> list[list[VectorHit]]:
    embedder = mem.embedder()
    out = []
    for query in QUERIES:
        qvec = embedder.embed([query])[0]
        for prefix in (None, "notes/b/"):
            flt = mem.filters(path_prefix=prefix)
            for limit in (1, 3, 10, 200):
                out.append(vectors.search_vector(qvec, limit=limit, filters=flt))
    return out


def _assert_like_fresh(mem: Memory, vectors: VectorIndex) -> None:
    vectors.sync()
    assert vectors.counts()["pending"] == 0  # the sync found every change (a full check)
    fresh = _fresh(mem, vectors.quantise_from)
    assert _live_rows(vectors) == _live_rows(fresh)
    assert _results(mem, vectors) == _results(mem, fresh)  # same hits, same float scores


def _random_change(mem: Memory, rng: random.Random, paths: list[str], texts: list[str]) -> None:
    """Add, replace (or copy another's text), supersede, purge or delete by hand."""
    op = rng.random()
    if op < 0.45 or len(paths) < 3:
        path = f"notes/{rng.choice('ab')}/n{rng.randrange(10**6):06d}.md"
        # One in four new documents repeats a text: equal vectors, ties to break alike.
        text = rng.choice(texts) if texts and rng.random() < 0.25 else _text(rng)
        texts.append(text)
        mem.write(path, f"# {path}\n\n{text}\n")
        paths.append(path)
    elif op < 0.7:
        mem.write(rng.choice(paths), f"# Edited\n\n{_text(rng)}\n")
    elif op < 0.8:
        mem.forget(paths.pop(rng.randrange(len(paths))), reason="replaced")
    elif op < 0.9:
        mem.forget(paths.pop(rng.randrange(len(paths))), purge=True)
    else:
        os.remove(mem.store.root / paths.pop(rng.randrange(len(paths))))
        mem.sync(force=True)


@pytest.mark.parametrize("quantise_from", [0, 40, 1 << 40])
def test_incremental_matrix_matches_a_fresh_load(
    toy: None, root: Path, small_ranges: None, quantise_from: int
) -> None:
    pytest.importorskip("onnxruntime")
    mem = _open(root)
    vectors = mem.vector_index()
    vectors.quantise_from = quantise_from
    rng = random.Random(quantise_from % 97 + 14)
    paths: list[str] = []
    texts: list[str] = []
    for step in range(90):
        _random_change(mem, rng, paths, texts)
        if step % 6 == 5:
            _assert_like_fresh(mem, vectors)
    _assert_like_fresh(mem, vectors)
    matrix = vectors._matrix
    assert matrix is not None
    assert vectors.full_loads == 1  # every later change came from the chunk log
    assert vectors.replayed > 50
    assert matrix.compactions >= 1  # masked rows were dropped at least once
    if quantise_from == 40:
        assert matrix.seals >= 2  # a first int8 range, then ranges of appended rows
    mem.close()


def test_writes_of_another_memory_reach_the_loaded_matrix(toy: None, root: Path) -> None:
    """A second Memory on the store (a CLI beside a server) writes; the first follows."""
    server = _open(root)
    rng = random.Random(3)
    for i in range(20):
        server.write(f"notes/a/s{i:02d}.md", f"# S{i}\n\n{_text(rng)}\n")
    vectors = server.vector_index()
    vectors.sync()
    _assert_like_fresh(server, vectors)
    cli = _open(root)
    paths = [f"notes/a/s{i:02d}.md" for i in range(20)]
    texts: list[str] = []
    for _ in range(25):
        _random_change(cli, rng, paths, texts)
        cli.embed()
    _assert_like_fresh(server, vectors)
    assert vectors.full_loads == 1
    cli.close()
    server.close()


class _Statements:
    """Counts the statements a connection runs, by what they read."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.seen: list[str] = []
        conn.set_trace_callback(self.seen.append)

    def count(self, *marks: str, without: str = "\0") -> int:
        return sum(1 for s in self.seen if all(m in s for m in marks) and without not in s)


def _reads_of_every_row(seen: _Statements) -> int:
    return seen.count("FROM chunks c JOIN vectors v", "ORDER BY c.doc_id", without="IN (")


def _full_scans(seen: _Statements) -> int:
    return seen.count("NOT IN (SELECT id FROM docs") + seen.count(
        "LEFT JOIN embedded", without="IN ("
    )


def test_a_search_after_one_turn_reads_only_that_turn(toy: None, root: Path) -> None:
    mem = _open(root)
    for i in range(30):
        mem.record_turn(thread="t1", user="ana", input=f"question {i} lake", output="answer")
    mem.search("lake", mode="hybrid")  # embeds everything, loads the matrix once
    seen = _Statements(mem.index.conn)
    hits = mem.search("lake", mode="hybrid")
    assert hits and _reads_of_every_row(seen) == 0  # nothing changed, nothing read
    turn = mem.record_turn(thread="t1", user="ana", input="the sunrise marathon", output="ok")
    seen.seen.clear()
    hits = mem.search("sunrise marathon", mode="hybrid")
    assert any(turn.id in h.path for h in hits)
    assert _reads_of_every_row(seen) == 0  # the new turn's rows only
    assert seen.count("FROM chunks c JOIN vectors v", "c.doc_id IN (") == 1
    assert _full_scans(seen) == 0  # the sync looked at the changed turn, not every document
    mem.close()


def test_snapshot_is_not_changed_by_later_appends(small_ranges: None) -> None:
    """A search holding a snapshot keeps its rows while the matrix takes new ones."""
    matrix = vectormatrix.ChunkMatrix(4)
    unit = np.eye(4, dtype=np.float32)

    def rows(doc: int, count: int, axis: int) -> list[Any]:
        return [(doc, no, no, no + 1, unit[axis].tobytes()) for no in range(count)]

    matrix.reset(rows(1, 3, 0))
    before = matrix.snapshot(1 << 40)
    matrix.replace({1}, rows(1, 2, 1))  # replaced: old rows masked, new ones appended
    for doc in range(2, 12):
        matrix.replace({doc}, rows(doc, 2, 2))  # fills the spare rows, then compacts
    assert matrix.compactions >= 1
    assert before.live == 3 and before.alive is None
    assert before.matrix.tolist() == [unit[0].tolist()] * 3
    assert before.docs.tolist() == [1, 1, 1]
    after = matrix.snapshot(1 << 40)
    assert after.live == 22
    live = after.live_rows()
    assert sorted(after.docs[live].tolist()) == [1, 1] + sorted(list(range(2, 12)) * 2)


def test_a_search_after_one_turn_takes_the_write_lock_once(toy: None, root: Path) -> None:
    """16 writers queue for SQLite's write lock: the vector sync asks for it once."""
    mem = _open(root)
    mem.record_turn(thread="t1", user="ana", input="first lake", output="answer")
    mem.search("lake", mode="hybrid")
    # Written by a process that never searched by meaning, so the search embeds it.
    with _open(root) as writer:
        writer.record_turn(thread="t1", user="ana", input="the sunrise marathon", output="ok")
    seen = _Statements(mem.index.conn)
    assert mem.search("sunrise marathon", mode="hybrid")
    assert seen.count("BEGIN IMMEDIATE") == 1
    mem.close()


def test_a_sync_waiting_for_another_does_not_embed_later_writes(toy: None, root: Path) -> None:
    """A search waits for the sync in progress, not for writes made after it was called."""
    import threading
    import time

    mem = _open(root)
    mem.embed()
    vectors = mem.vector_index()
    embedder = vectors.embedder
    entered, release = threading.Event(), threading.Event()
    plain = embedder.embed

    def slow(texts: Any) -> Any:
        entered.set()
        release.wait(10)
        return plain(texts)

    embedder.embed = slow  # type: ignore[method-assign]
    mem.write("notes/a/first.md", "# First\n\nlake sunrise\n")
    results: dict[str, Any] = {}
    first = threading.Thread(target=lambda: results.setdefault("first", vectors.sync()))
    first.start()
    assert entered.wait(10)
    second = threading.Thread(target=lambda: results.setdefault("second", vectors.sync()))
    second.start()
    time.sleep(0.3)  # the second sync has read the log and waits for the lock
    mem.write("notes/a/later.md", "# Later\n\nmarathon\n")
    release.set()
    first.join(10)
    second.join(10)
    embedder.embed = plain  # type: ignore[method-assign]
    assert results["first"].documents == 1
    assert results["second"].documents == 0  # the first sync covered what it was called for
    assert vectors.pending_count() == 1  # the later write waits for the next search
    mem.close()


def test_a_new_document_that_takes_a_deleted_id_is_embedded(toy: None, root: Path) -> None:
    """SQLite gives a new row the largest id + 1: a deleted newest document's id comes back."""
    mem = _open(root)
    mem.sync(force=True)  # the files of `init` first, so the note below is the newest row
    mem.write("notes/a/old.md", "# Old\n\nlake\n")
    mem.write("notes/a/newest.md", "# Newest\n\nsunrise\n")
    vectors = mem.vector_index()
    vectors.sync()
    ids = dict(mem.index.conn.execute("SELECT path, id FROM docs").fetchall())
    mem.forget("notes/a/newest.md", purge=True)
    vectors.sync()  # reads the deletion
    mem.write("notes/a/next.md", "# Next\n\nmarathon\n")
    again = dict(mem.index.conn.execute("SELECT path, id FROM docs").fetchall())
    assert again["notes/a/next.md"] == ids["notes/a/newest.md"]  # the id came back
    assert vectors.sync().documents == 1
    assert vectors.counts()["pending"] == 0
    _assert_like_fresh(mem, vectors)
    mem.close()
