"""Benchmarks of turn memory: record rate, concurrent writers, context and DAG walks.

    python bench/turns.py record  [--n 1000] [--procs 4] [--keep DIR] [--after-delete N]
    python bench/turns.py context [--sizes 1000,100000] [--queries 200] [--keep DIR [--reuse]]
    python bench/turns.py all

``record`` writes turns through ``Memory.record_turn`` (index included,
embeddings off, git on with ``store.git_batch_seconds`` so a burst shares
commits), then runs ``--procs`` writer processes at once and checks no turn is
lost. It prints the whole rate (opening the store, the turns, and the close that
syncs the journal and makes the last git commit) and its parts. Both stores stay
on disk until the run ends: files created right after thousands were deleted are
slower to create on this disk, and ``--after-delete N`` measures that case on
purpose. ``context`` builds stores of each size by rendering turn records straight
to disk (the same format ``record_turn`` writes), indexes them once, then times
``Memory.context`` and ``Memory.ancestors(depth=50)`` in process, the sizes
taking turns query by query. The index sync
every verb starts with is throttled (``store.sync_interval_seconds``) and timed
separately, since its stat scan is the foundation's cost, not the pack's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from memdir.doc.ids import new_id
from memdir.doc.turnrecord import TurnRecord, created_of, render_turn, turn_path
from memdir.files.store import Store
from memdir.service import Memory

WORDS = [
    "deploy",
    "rollback",
    "kubernetes",
    "billing",
    "refund",
    "login",
    "cache",
    "latency",
    "migration",
    "schema",
    "index",
    "token",
    "budget",
    "snapshot",
    "router",
    "thread",
    "parent",
    "ancestor",
    "error",
    "timeout",
    "retry",
    "queue",
    "worker",
]
WORKLOG = [
    {"tool": "search", "args": {"query": "deploy failure"}, "result": "3 hits"},
    {"tool": "read", "args": {"path": "wiki/ops/deploy.md"}, "result": "make deploy"},
    {"tool": "shell", "args": {"command": "make deploy"}, "error": "migration failed"},
    {"tool": "shell", "args": {"command": "make migrate && make deploy"}, "result": "ok"},
]


def _overrides(batch: float) -> dict[str, dict[str, Any]]:
    return {"embeddings": {"enabled": False}, "store": {"git_batch_seconds": batch}}


def _writer(root: str, n: int, tag: str, batch: float) -> dict[str, float]:
    """Record ``n`` turns in one process; the seconds spent opening, recording, closing."""
    started = time.perf_counter()
    with Memory.open(root, overrides=_overrides(batch)) as mem:
        opened = time.perf_counter()
        prev: list[str] = []
        for i in range(n):
            rec = mem.record_turn(
                thread=f"w{tag}-{i % 20}",
                user=f"u{i % 7}",
                input=f"question {i} about {WORDS[i % len(WORDS)]}",
                output=f"answer {i}",
                worklog=WORKLOG,
                parents=prev,
                keywords=[WORDS[i % len(WORDS)]],
            )
            prev = [rec.id]
        recorded = time.perf_counter()
    closed = time.perf_counter()  # close syncs the journal and commits what git has queued
    return {"open": opened - started, "record": recorded - opened, "close": closed - recorded}


def _churn(folder: Path, count: int) -> None:
    """Write ``count`` small files, flush them to disk and delete them.

    On some file systems (ext4 mounted with ``discard`` here) files created right after a
    mass deletion are much slower to create; this reproduces what a benchmark that deletes
    its previous store just before timing the next one measures.
    """
    folder.mkdir(parents=True)
    for i in range(count):
        (folder / f"f{i}.md").write_bytes(b"x" * 3000)
    os.sync()
    shutil.rmtree(folder)


def bench_record(
    n: int, procs: int, batch: float, work: Path, after_delete: int = 0
) -> dict[str, Any]:
    """Time one writer, then ``procs`` writers at once, each in a new store under ``work``.

    The stores are kept until the whole run ends (or for good with ``--keep``): deleting
    thousands of files just before a timed run slows the creates that follow.
    """
    out: dict[str, Any] = {}
    root = Store.init(work / "solo")
    if after_delete:
        _churn(work / "churn-solo", after_delete)
    started = time.perf_counter()
    parts = _writer(str(root), n, "solo", batch)
    seconds = time.perf_counter() - started
    out["record_turns"] = n
    out["record_seconds"] = round(seconds, 3)
    out["record_turns_per_s"] = round(n / seconds, 1)
    out["record_open_seconds"] = round(parts["open"], 3)
    out["record_loop_turns_per_s"] = round(n / parts["record"], 1)
    out["record_close_seconds"] = round(parts["close"], 3)
    root = Store.init(work / "concurrent")
    if after_delete:
        _churn(work / "churn-concurrent", after_delete)
    ctx = multiprocessing.get_context("spawn")
    each = max(n // procs, 1)
    workers = [
        ctx.Process(target=_writer, args=(str(root), each, str(k), batch)) for k in range(procs)
    ]
    started = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    seconds = time.perf_counter() - started
    files = list((root / "episodes" / "turns").rglob("*.md"))
    with Memory.open(root, overrides=_overrides(batch)) as mem:
        mem.sync(force=True)
        rows = mem.index.conn.execute("SELECT count(*) FROM docs WHERE type = 'turn'")
        indexed = int(rows.fetchone()[0])
    tracked = subprocess.run(
        ["git", "-C", str(root), "ls-files", "episodes/turns"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.count(".md\n")
    out["concurrent_procs"] = procs
    out["concurrent_expected"] = each * procs
    out["concurrent_files"] = len(files)
    out["concurrent_indexed"] = indexed
    out["concurrent_committed"] = tracked
    out["concurrent_turns_per_s"] = round(each * procs / seconds, 1)
    out["concurrent_exit_codes"] = [w.exitcode for w in workers]
    out["after_delete"] = after_delete
    return out


def build_store(root: Path, size: int, seed: int = 7) -> dict[str, Any]:
    """Write ``size`` turn records straight to disk: 50 turns per thread, each turn's parent
    is the thread's previous turn, and 5 % also cite a recent turn of another thread."""
    rnd = random.Random(seed)
    who = random.Random(seed + 1)
    threads = max(size // 50, 1)
    # Each user has about 200 turns spread over many threads at every size, so a pack's
    # "same user, other threads" section has material in the small store as in the big one.
    users = max(size // 200, 5)
    last: dict[int, str] = {}
    last_user: dict[int, str] = {}
    all_ids: list[str] = []
    base_ms = int(time.time() * 1000) - size * 10
    for i in range(size):
        ident = new_id(base_ms + i * 10)
        t = i % threads
        parents = [last[t]] if t in last else []
        if all_ids and rnd.random() < 0.05:  # now and then a turn cites another thread
            other = rnd.choice(all_ids[-200:])
            if other not in parents:
                parents.append(other)
        words = rnd.choices(WORDS, k=30)
        user = f"u{who.randrange(users)}"
        rec = TurnRecord(
            id=ident,
            thread=f"t{t}",
            user=user,
            channel="bench",
            parents=tuple(parents),
            keywords=tuple(words[:3]),
            created=created_of(ident),
            input=" ".join(words[:15]),
            compact="- Tools (4 calls): search, read, shell x2\n- Result: ok",
            output=" ".join(words[15:]),
            extra={"compactor": "default"},
        )
        path = root / turn_path(ident)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_turn(rec), encoding="utf-8")
        last[t] = ident
        last_user[t] = user
        all_ids.append(ident)
    (root / "SNAPSHOT.md").write_text("We deploy with make deploy; migrations first.\n")
    return {
        "threads": threads,
        "latest": [last[t] for t in sorted(last)],
        "users": [last_user[t] for t in sorted(last)],
    }


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def _context_store(
    stack: contextlib.ExitStack, size: int, keep: Path | None, reuse: bool
) -> tuple[Memory, dict[str, Any], dict[str, Any]]:
    """Open (building and indexing first when needed) the store of one size."""
    if keep is None:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
    else:
        folder = keep / f"context-{size}"
    root, saved = folder / "s", folder / "info.json"
    times = {"build_seconds": 0.0, "index_seconds": 0.0}
    if reuse and saved.is_file():
        info = json.loads(saved.read_text())
    else:
        if folder.exists():
            raise SystemExit(f"{folder} exists: add --reuse, or pick a new folder")
        folder.mkdir(parents=True)
        Store.init(root, git=False)
        started = time.perf_counter()
        info = build_store(root, size)
        times["build_seconds"] = round(time.perf_counter() - started, 1)
    overrides = {**_overrides(0.0), "store": {"sync_interval_seconds": 3600.0}}
    mem = stack.enter_context(Memory.open(root, overrides=overrides))
    if not saved.is_file():
        started = time.perf_counter()
        mem.sync(force=True)
        times["index_seconds"] = round(time.perf_counter() - started, 1)
        saved.write_text(json.dumps(info))
    started = time.perf_counter()
    mem.index.sync()
    times["sync_rescan_ms"] = round((time.perf_counter() - started) * 1000, 1)
    mem.context(thread="t0", user=info["users"][0], keywords=["deploy"])  # warm
    return mem, info, times


def bench_context(
    sizes: list[int], queries: int, keep: Path | None = None, reuse: bool = False
) -> dict[str, Any]:
    """Time packs and depth-50 walks on stores of each size.

    The sizes take turns query by query (one pack on each store, then the next), so a
    change in this machine's speed during the run weighs on every size alike and the
    ratio compares the stores, not two moments.
    """
    out: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        stores = {size: _context_store(stack, size, keep, reuse) for size in sizes}
        rnds = {size: random.Random(1) for size in sizes}
        times: dict[int, list[float]] = {size: [] for size in sizes}
        packed: dict[int, list[tuple[int, int]]] = {size: [] for size in sizes}
        for _ in range(queries):
            for size, (mem, info, _t) in stores.items():
                rnd = rnds[size]
                t = rnd.randrange(info["threads"])
                kws = rnd.sample(WORDS, 2)
                started = time.perf_counter()
                # the thread and the user of its latest turn, as an agent loop asks
                pack = mem.context(thread=f"t{t}", user=info["users"][t], keywords=kws)
                times[size].append(time.perf_counter() - started)
                assert pack.tokens <= mem.settings.turns.context_budget
                packed[size].append((len(pack.items), pack.tokens))
        walk: dict[int, list[float]] = {size: [] for size in sizes}
        found: dict[int, list[tuple[int, int]]] = {size: [] for size in sizes}
        for _ in range(queries):
            for size, (mem, info, _t) in stores.items():
                tip = rnds[size].choice(info["latest"])
                started = time.perf_counter()
                nodes = mem.ancestors(tip, depth=50)
                walk[size].append(time.perf_counter() - started)
                found[size].append((max((n.depth for n in nodes), default=0), len(nodes)))
        for size, (_mem, _info, made) in stores.items():
            out[str(size)] = {
                **made,
                "context_p50_ms": round(statistics.median(times[size]) * 1000, 2),
                "context_p95_ms": round(_pct(times[size], 0.95) * 1000, 2),
                "context_items_mean": round(statistics.mean(n for n, _ in packed[size]), 1),
                "context_tokens_mean": round(statistics.mean(t for _, t in packed[size])),
                "ancestors50_p50_ms": round(statistics.median(walk[size]) * 1000, 2),
                "ancestors50_p95_ms": round(_pct(walk[size], 0.95) * 1000, 2),
                "ancestors50_max_depth": max(d for d, _ in found[size]),
                "ancestors50_mean_turns": round(statistics.mean(n for _, n in found[size]), 1),
            }
            print(json.dumps({size: out[str(size)]}), file=sys.stderr)
    if len(sizes) >= 2:
        small, big = out[str(min(sizes))], out[str(max(sizes))]
        out["context_p95_ratio"] = round(big["context_p95_ms"] / small["context_p95_ms"], 2)
        out["context_p50_ratio"] = round(big["context_p50_ms"] / small["context_p50_ms"], 2)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description="turn memory benchmarks")
    parser.add_argument("what", choices=["record", "context", "all"])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--batch", type=float, default=1.0, help="store.git_batch_seconds")
    parser.add_argument(
        "--durability", choices=["full", "rename"], default="full", help="store.durability"
    )
    parser.add_argument(
        "--keep",
        metavar="DIR",
        help="make the stores in DIR (new) and keep them (context: DIR/context-SIZE)",
    )
    parser.add_argument(
        "--reuse", action="store_true", help="context: time the stores kept in --keep DIR again"
    )
    parser.add_argument(
        "--after-delete",
        type=int,
        default=0,
        metavar="N",
        help="record: write and delete N files just before each timed run",
    )
    parser.add_argument("--sizes", default="1000,100000")
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    result: dict[str, Any] = {}
    if args.what in {"record", "all"}:
        # Through the environment, so the writer processes use the same setting.
        os.environ["MEMDIR_STORE_DURABILITY"] = args.durability
        if args.keep:
            work = Path(args.keep)
            work.mkdir(parents=True, exist_ok=False)
            result["record"] = bench_record(args.n, args.procs, args.batch, work, args.after_delete)
        else:
            with tempfile.TemporaryDirectory() as tmp:
                result["record"] = bench_record(
                    args.n, args.procs, args.batch, Path(tmp), args.after_delete
                )
        result["record"]["durability"] = args.durability
    if args.what in {"context", "all"}:
        sizes = [int(s) for s in args.sizes.split(",")]
        keep = Path(args.keep) if args.keep else None
        result["context"] = bench_context(sizes, args.queries, keep, args.reuse)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
