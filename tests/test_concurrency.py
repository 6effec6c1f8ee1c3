"""Concurrent writers (threads and processes) and killed writers."""

from __future__ import annotations

import multiprocessing
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from helpers import committed
from memdir.doc import frontmatter
from memdir.index.db import connect
from memdir.service import Memory

WRITER = """
import sys
from memdir.service import Memory
root, worker, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
mem = Memory.open(root)
for i in range(count):
    mem.write(f"notes/w{worker}-{i}.md", f"# w{worker} {i}\\n", provenance=f"run:{worker}",
              actor=f"worker{worker}")
    mem.merge("wiki/page.md", episode=f"ep-{worker}-{i}", actor=f"worker{worker}")
mem.close()
"""


def test_processes_writing_at_once_lose_nothing(store_root: Path) -> None:
    with Memory.open(store_root) as mem:
        mem.write("wiki/page.md", "---\ntitle: Page\n---\nbody\n")
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(store_root), str(w), "8"])
        for w in range(4)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    notes = sorted(p.name for p in (store_root / "notes").iterdir())
    assert len(notes) == 32
    fm = frontmatter.parse((store_root / "wiki/page.md").read_text()).fm
    ids = sorted(item["id"] for item in fm["merged-from"])
    assert ids == sorted(f"ep-{w}-{i}" for w in range(4) for i in range(8))
    with Memory.open(store_root) as mem:
        assert mem.doctor().ok
        rows = mem.index.conn.execute(
            "SELECT count(*) FROM docs WHERE path LIKE 'notes/%'"
        ).fetchone()[0]
        assert rows == 32
    tracked = committed(store_root, "notes")
    assert len(tracked) == 32
    dirty = subprocess.run(
        ["git", "-C", str(store_root), "status", "--porcelain", "notes", "wiki"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    assert dirty.strip() == ""


def test_threads_merging_into_one_page(mem: Memory) -> None:
    mem.write("wiki/page.md", "# Page\n")

    def work(n: int) -> None:
        for i in range(5):
            mem.merge("wiki/page.md", episode=f"t{n}-{i}")

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    fm = frontmatter.parse((mem.root / "wiki/page.md").read_text()).fm
    assert len(fm["merged-from"]) == 20


KILLED = """
import sys
from memdir.service import Memory
root = sys.argv[1]
mem = Memory.open(root, overrides={"store": {"git_commit": False}})
big_a = "# A\\n" + "a" * 3_000_000 + "\\n"
big_b = "# B\\n" + "b" * 3_000_000 + "\\n"
print("ready", flush=True)
i = 0
while True:
    mem.store.write_text("notes/big.md", big_a if i % 2 else big_b)
    i += 1
"""


def test_a_killed_writer_leaves_the_old_or_the_new_file(store_root: Path) -> None:
    target = store_root / "notes" / "big.md"
    for delay in (0.3, 0.45, 0.6):
        proc = subprocess.Popen(
            [sys.executable, "-c", KILLED, str(store_root)], stdout=subprocess.PIPE
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        data = target.read_bytes()
        assert data in (b"# A\n" + b"a" * 3_000_000 + b"\n", b"# B\n" + b"b" * 3_000_000 + b"\n")
    with Memory.open(store_root) as mem:
        assert [r["path"] for r in mem.ls("notes/")] == ["notes/big.md"]


def _open_index(path: str, ready: Any, failures: Any) -> None:
    ready.wait()
    try:
        conn = connect(Path(path))
        conn.execute("SELECT count(*) FROM migrations").fetchone()
        conn.close()
    except sqlite3.Error as exc:
        failures.put(str(exc))


def test_processes_opening_one_new_index_at_once(tmp_path: Path) -> None:
    # Switching a new file to WAL takes an exclusive lock that SQLite does not wait for.
    ctx = multiprocessing.get_context("fork")
    failures = ctx.Queue()
    for round_ in range(15):
        path = tmp_path / f"r{round_}" / "index.db"
        ready = ctx.Barrier(6)
        procs = [
            ctx.Process(target=_open_index, args=(str(path), ready, failures)) for _ in range(6)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        assert [p.exitcode for p in procs] == [0] * 6
    errors = []
    while not failures.empty():
        errors.append(failures.get())
    assert errors == []
