"""A full reindex while the store is in use: readers never fail and never see half an index.

The rebuild runs in one write transaction over the live index (memdir.index.Index.rebuild),
so readers in this process and in others keep answering from the old index until it commits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from memdir.service import Memory

DOCS = 40


def fill(mem: Memory, count: int = DOCS) -> list[str]:
    """``count`` notes that all hold the word "common"; their paths, sorted."""
    paths = [f"notes/n{n:03d}.md" for n in range(count)]
    for n, path in enumerate(paths):
        mem.write(path, f"# Note {n}\n\ncommon word, and token{n} alone.\n")
    return paths


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
