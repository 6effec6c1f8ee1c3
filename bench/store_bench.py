"""Store and index speed: build, sync, search, memory report and ``memdir --help``.

    python bench/store_bench.py [--count 10000] [--root DIR] [--keep] [--reuse-index]
        [--queries-repeat 20] [--json OUT]

Generates a synthetic store of ``--count`` files (bench/synth.py: episodes with ids, pages with
``merged-from``) unless ``--root`` already holds one, then measures each figure next to a
baseline taken in the same run:

- full index build (``Memory.reindex(full=True)``, embeddings disabled) vs a plain walk that
  parses every file (``coverage.report_for_folder``);
- no-op sync (a stat walk) vs the same plain walk;
- one changed file: ``Memory.write`` (its ``Index.sync_paths`` timed alone, git off) and an
  external edit picked up by a full stat-walk sync;
- BM25 search latency (p50/p95 over a fixed set of queries, one and several words) vs
  ``grep -r`` for the same words;
- ``memdir memory report --json`` on the unchanged store (real command, warm) vs the plain walk,
  with the JSON checked equal to the plain walk's apart from ``avg_age_days``/``expired_count``;
- ``memdir --help`` (real command, best of N) vs ``python -c pass``.

``--reuse-index`` skips the build when the store's index is already complete (the 100k build
takes about a minute; build once with ``--root DIR --keep`` and reuse).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import synth
from memdir.files.store import Store
from memdir.index import postings
from memdir.index.search import Filters, bm25
from memdir.kiwi import report as coverage
from memdir.service import Memory

OVERRIDES: dict[str, dict[str, Any]] = {
    "embeddings": {"enabled": False},
    "store": {"git_commit": False},
    "search": {"mode": "bm25"},
}
QUERIES = [
    "rollback",
    "canary deploy",
    "latency budget timeout",
    "postmortem incident runbook",
    "certificate rotation",
    "cache",
    "database replica backup restore",
    "why did the deploy fail",
    "customer refund escalation ticket",
    "token",
    "oncall alert",
    "migration schema",
    "page 42",
    "run 1234",
    "kubernetes pod cluster node network",
    "secret vault policy audit",
    "snapshot lesson",
    "gateway proxy",
    "what happened to the billing invoice",
    "trace span log metric",
]
ENV = {**os.environ, "MEMDIR_EMBEDDINGS_ENABLED": "0", "MEMDIR_STORE_GIT_COMMIT": "0"}
# The commands run as an installed memdir does: with its bytecode cached (pip compiles it at
# install time). An environment with PYTHONDONTWRITEBYTECODE set would compile every module
# from source on every command instead (about 0.1 s more here); --no-bytecode measures that.
BYTECODE = True


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def memdir_cmd() -> list[str]:
    exe = Path(sys.executable).with_name("memdir")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "memdir"]


def run_cmd(args: list[str]) -> tuple[float, subprocess.CompletedProcess[bytes]]:
    env = dict(ENV)
    if BYTECODE:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    started = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, env=env, check=False)
    return time.perf_counter() - started, proc


def ensure_store(root: Path, count: int) -> float:
    if (root / ".memdir").is_dir() and (root / "episodes").is_dir():
        return 0.0
    started = time.perf_counter()
    Store.init(root)
    synth.generate(root, count)
    return time.perf_counter() - started


def grep_seconds(root: Path, query: str) -> float:
    words = [w for w in query.lower().split() if len(w) > 2] or query.split()
    pattern = "|".join(words)
    seconds, _ = run_cmd(["grep", "-r", "-l", "-i", "-E", "--include=*.md", pattern, str(root)])
    return seconds


def strip_time(report_json: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(report_json)
    data.pop("avg_age_days", None)
    data.pop("expired_count", None)
    return data


def bench(root: Path, count: int, *, reuse_index: bool, repeat: int) -> dict[str, Any]:
    out: dict[str, Any] = {"count": count, "root": str(root)}
    out["generate_s"] = ensure_store(root, count)
    files = sum(1 for _ in coverage.walk_markdown(root))
    out["files"] = files
    print(f"store {root}: {files} markdown files (generated in {out['generate_s']:.1f}s)")

    walk_s, walk_report = timed(lambda: coverage.report_for_folder(root))
    out["plain_walk_s"] = walk_s
    print(f"plain walk + parse (report_for_folder): {walk_s:.2f}s")

    mem = Memory.open(root, overrides=OVERRIDES)
    complete = mem.index.conn.execute("SELECT count(*) FROM docs").fetchone()[0] == files
    if reuse_index and complete:
        out["build_s"] = None
        print("full build: skipped (--reuse-index, index complete)")
    else:
        cpu0 = time.process_time()
        build_s, stats = timed(lambda: mem.reindex(full=True))
        out["build_s"] = build_s
        out["build_cpu_s"] = time.process_time() - cpu0
        print(
            f"full build: {build_s:.2f}s wall ({out['build_cpu_s']:.2f}s cpu in this process), "
            f"{stats.added} docs, {build_s / walk_s:.2f}x the plain walk (target <= 60 s at 100k)"
        )

    noop = [timed(mem.index.sync)[0] for _ in range(5)]
    out["noop_sync_s"] = {"median": statistics.median(noop), "max": max(noop)}
    print(
        f"no-op sync: median {statistics.median(noop):.3f}s, max {max(noop):.3f}s "
        f"({walk_s / statistics.median(noop):.0f}x faster than the plain walk; target <= 1 s)"
    )

    # One changed file: through memdir (targeted) and by hand (full stat walk).
    targets = [
        str(r[0])
        for r in mem.index.conn.execute(
            "SELECT path FROM docs WHERE path LIKE 'episodes/%' ORDER BY id LIMIT 5 OFFSET 100"
        )
    ]
    write_total: list[float] = []
    targeted: list[float] = []
    external: list[float] = []
    for n, rel in enumerate(targets):
        text = (root / rel).read_text(encoding="utf-8")
        new = text + f"\nEdited through memdir {n} {time.time_ns()}.\n"
        t0 = time.perf_counter()
        mem.store.write_text(rel, new)
        t1 = time.perf_counter()
        mem.index.sync_paths([rel])
        t2 = time.perf_counter()
        write_total.append(t2 - t0)
        targeted.append(t2 - t1)
        (root / rel).write_text(new + f"Edited by hand {n}.\n", encoding="utf-8")
        seconds, stats = timed(mem.index.sync)
        assert stats.updated == 1, stats
        external.append(seconds)
        (root / rel).write_text(text, encoding="utf-8")
        mem.index.sync_paths([rel])
    out["one_file"] = {
        "memory_write_s": statistics.median(write_total),
        "sync_paths_s": statistics.median(targeted),
        "external_edit_sync_s": statistics.median(external),
    }
    print(
        f"one changed file: Memory.write {statistics.median(write_total) * 1000:.1f} ms "
        f"(of which Index.sync_paths {statistics.median(targeted) * 1000:.1f} ms); "
        f"external edit + stat-walk sync {statistics.median(external):.3f}s (target <= 0.2 s)"
    )

    # BM25: the query itself (the verb's leading sync is measured above).
    # The first query of each word with many matches computes its cached postings
    # (memdir.index.postings); it is timed apart, next to FTS5 ranking every match alone.
    conn = mem.index.conn
    with mem.index.transaction() as tx:  # start cold: no word's postings cached yet
        tx.execute("DELETE FROM fts_postings")
        tx.execute("DELETE FROM fts_log")
    flt = Filters()
    fts5_only = postings.Tuning(numpy_min=10**12)
    direct = [timed(lambda q=q: bm25(conn, q, flt, 10, tuning=fts5_only))[0] for q in QUERIES]
    first = [timed(lambda q=q: bm25(conn, q, flt, 10))[0] for q in QUERIES]
    lat: list[float] = []
    for _ in range(repeat):
        for q in QUERIES:
            lat.append(timed(lambda q=q: bm25(conn, q, flt, 10))[0])
    for _ in range(max(1, repeat // 4)):
        direct += [timed(lambda q=q: bm25(conn, q, flt, 10, tuning=fts5_only))[0] for q in QUERIES]
    mem.sync_once()
    verb = [timed(lambda q=q: mem.search(q, mode="bm25"))[0] for q in QUERIES for _ in range(3)]
    greps = [grep_seconds(root, q) for q in QUERIES[:5]]
    out["search"] = {
        "p50_ms": pct(lat, 0.5) * 1000,
        "p95_ms": pct(lat, 0.95) * 1000,
        "max_ms": max(lat) * 1000,
        "verb_p95_ms": pct(verb, 0.95) * 1000,
        "grep_median_s": statistics.median(greps),
        "first_p50_ms": pct(first, 0.5) * 1000,
        "first_p95_ms": pct(first, 0.95) * 1000,
        "fts5_p50_ms": pct(direct, 0.5) * 1000,
        "fts5_p95_ms": pct(direct, 0.95) * 1000,
    }
    s = out["search"]
    print(
        f"BM25 search ({len(QUERIES)} queries x {repeat}): p50 {s['p50_ms']:.1f} ms, "
        f"p95 {s['p95_ms']:.1f} ms, max {s['max_ms']:.1f} ms (Memory.search p95 "
        f"{s['verb_p95_ms']:.1f} ms); grep -r median {s['grep_median_s']:.2f}s "
        f"({s['grep_median_s'] * 1000 / s['p95_ms']:.0f}x the p95; target <= 20 ms)"
    )
    print(
        f"  first query of each: p50 {s['first_p50_ms']:.1f} ms, p95 {s['first_p95_ms']:.1f} ms "
        f"(computes the cached postings); FTS5 ranking every match: p50 "
        f"{s['fts5_p50_ms']:.1f} ms, p95 {s['fts5_p95_ms']:.1f} ms "
        f"({s['fts5_p95_ms'] / s['p95_ms']:.1f}x the p95)"
    )
    mem.close()

    # Memory report through the real command on the unchanged store (first run warms).
    args = [*memdir_cmd(), "--root", str(root), "memory", "report", "--json"]
    runs = [run_cmd(args) for _ in range(4)]
    for _, proc in runs:
        if proc.returncode != 0:
            raise SystemExit(proc.stderr.decode())
    warm = [seconds for seconds, _ in runs[1:]]
    same = strip_time(runs[-1][1].stdout.decode()) == strip_time(coverage.dumps_report(walk_report))
    with Memory.open(root, overrides=OVERRIDES) as mem2:
        inproc = [timed(mem2.memory_report)[0] for _ in range(3)]
    out["report"] = {
        "cold_cli_s": runs[0][0],
        "warm_cli_s": min(warm),
        "warm_in_process_s": min(inproc),
        "json_matches_plain_walk": same,
    }
    print(
        f"memory report --json (CLI): first {runs[0][0]:.2f}s, warm best {min(warm):.2f}s "
        f"(plain walk / this = {walk_s / min(warm):.1f}x); in process "
        f"{min(inproc):.3f}s; JSON equal to the plain walk's apart from time metrics: {same} "
        f"(target <= 0.5 s)"
    )

    out["watcher"] = bench_watcher(root, targets, walk_s)

    helps = [run_cmd([*memdir_cmd(), "--help"])[0] for _ in range(7)]
    bare = [run_cmd([sys.executable, "-c", "pass"])[0] for _ in range(7)]
    out["help"] = {"best_s": min(helps), "python_startup_s": min(bare)}
    print(
        f"memdir --help: best of 7 {min(helps):.3f}s (python -c pass {min(bare):.3f}s; "
        f"target <= 0.3 s)"
    )
    return out


def bench_watcher(root: Path, targets: list[str], walk_s: float) -> dict[str, Any]:
    """The same edit and report with ``memdir watch`` running (no stat walk)."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [*memdir_cmd(), "--root", str(root), "watch"], stderr=subprocess.PIPE, env=ENV
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline().decode().strip()
        start_s = time.perf_counter() - started
        if not line.startswith("watching"):
            raise SystemExit(f"memdir watch did not start: {line}")
        edits: list[float] = []
        with Memory.open(root, overrides=OVERRIDES) as mem:
            conn = mem.index.conn
            for n, rel in enumerate(targets):
                text = (root / rel).read_text(encoding="utf-8")
                (root / rel).write_text(text + f"\nwatched{n}x\n", encoding="utf-8")
                seconds, stats = timed(mem.sync)
                assert stats.scanned == 0, "the watcher did not answer"
                found = conn.execute(
                    "SELECT count(*) FROM docs_fts WHERE docs_fts MATCH ?", (f'"watched{n}x"',)
                ).fetchone()[0]
                assert found == 1, (rel, found)
                edits.append(seconds)
                (root / rel).write_text(text, encoding="utf-8")
                mem.sync()
        args = [*memdir_cmd(), "--root", str(root), "memory", "report", "--json"]
        runs = [run_cmd(args)[0] for _ in range(4)]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    figures = {
        "start_s": start_s,
        "external_edit_sync_s": statistics.median(edits),
        "external_edit_sync_max_s": max(edits),
        "report_cli_warm_s": min(runs[1:]),
    }
    print(
        f"with memdir watch running (started in {start_s:.2f}s): external edit + Memory.sync "
        f"median {figures['external_edit_sync_s'] * 1000:.1f} ms, max "
        f"{figures['external_edit_sync_max_s'] * 1000:.1f} ms (target <= 0.2 s); memory report "
        f"--json (CLI) warm best {figures['report_cli_warm_s']:.2f}s "
        f"(plain walk / this = {walk_s / figures['report_cli_warm_s']:.0f}x; target <= 0.5 s)"
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--root", type=Path, help="store to use or create (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep a temp store afterwards")
    parser.add_argument("--reuse-index", action="store_true", help="skip the build if complete")
    parser.add_argument("--queries-repeat", type=int, default=20)
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument(
        "--no-bytecode", action="store_true", help="run the commands without cached bytecode"
    )
    args = parser.parse_args()
    global BYTECODE
    BYTECODE = not args.no_bytecode
    root = args.root or Path(tempfile.mkdtemp(prefix="memdir-bench-")) / "store"
    try:
        print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus")
        print(f"commands run with cached bytecode: {BYTECODE}")
        figures = bench(root, args.count, reuse_index=args.reuse_index, repeat=args.queries_repeat)
        figures["loadavg_after"] = os.getloadavg()[0]
        print(f"load average after: {figures['loadavg_after']:.1f}")
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    finally:
        if args.root is None and not args.keep:
            shutil.rmtree(root.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
