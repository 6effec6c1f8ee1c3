"""Run every benchmark of bench/ at small sizes: a quick check that each still runs (`make bench`).

    python bench/run_all.py [--only NAME ...] [--timeout SECONDS]

The small sizes finish in a few minutes on two cores; their figures are not the published
ones. The full-size runs behind docs/benchmarks.md (each takes minutes to an hour):

    python bench/store_bench.py --count 100000 --root /tmp/memdir-100k --reuse-index
    python bench/engine.py --sizes 250,500,1000 --episodes 1000,10000,100000
    python bench/turns.py all --n 1000 --procs 4 --sizes 1000,100000
    python bench/vector_scale.py --docs 100000 --queries 200
    python bench/server_load.py --clients 16 --seconds 60
    python bench/reindex_load.py --readers 4 --seconds 60 --docs 2000
    python bench/stores.py --stores 100
    python bench/sync.py --turns 1000
    python bench/ui.py --count 100000 --turns 500 --requests 30 --graph-nodes 10000
    python bench/locomo.py --data locomo10-dev.json --audit errors.json --mode hybrid
    python bench/pack_recall.py --data locomo10-dev.json --audit errors.json

LoCoMo needs its data file, which is not in the repository: set MEMDIR_LOCOMO_DATA (and
optionally MEMDIR_LOCOMO_AUDIT) to run it here on its first conversation; otherwise it is
skipped. A script of bench/ missing from the list below is reported, so a new benchmark is
not silently left out.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
NOT_BENCHMARKS = {"run_all.py", "synth.py"}

QUICK: dict[str, list[str]] = {
    "store_bench.py": ["--count", "2000", "--queries-repeat", "5"],
    "engine.py": ["--sizes", "50", "--episodes", "1000"],
    "turns.py": ["all", "--n", "100", "--procs", "2", "--sizes", "1000", "--queries", "50"],
    "vector_scale.py": ["--docs", "2000", "--queries", "20"],
    "server_load.py": ["--clients", "2", "--seconds", "5"],
    "reindex_load.py": ["--readers", "2", "--seconds", "5", "--docs", "300"],
    "stores.py": ["--stores", "6", "--notes", "3", "--max-open", "3", "--rounds", "1"],
    "sync.py": ["--turns", "100"],
    "ui.py": ["--count", "2000", "--turns", "100", "--requests", "5", "--graph-nodes", "1000"],
}


def locomo_args() -> list[str] | None:
    data = os.environ.get("MEMDIR_LOCOMO_DATA")
    if not data or not Path(data).is_file():
        return None
    args = ["--data", data, "--mode", "bm25", "--limit-convs", "1"]
    audit = os.environ.get("MEMDIR_LOCOMO_AUDIT")
    if audit and Path(audit).is_file():
        args += ["--audit", audit]
    return args


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="script names to run (default: all)")
    parser.add_argument("--timeout", type=float, default=900.0, help="per script, seconds")
    args = parser.parse_args()

    plan = dict(QUICK)
    locomo = locomo_args()
    if locomo is not None:
        plan["locomo.py"] = locomo
        plan["pack_recall.py"] = [a for a in locomo if a not in ("--mode", "bm25")]
    present = sorted(p.name for p in BENCH.glob("*.py") if p.name not in NOT_BENCHMARKS)
    results: list[tuple[str, str, float]] = []
    for name in present:
        if args.only and name not in args.only and name.removesuffix(".py") not in args.only:
            continue
        if name not in plan:
            needs_data = name in ("locomo.py", "pack_recall.py")
            why = "needs MEMDIR_LOCOMO_DATA" if needs_data else "no quick settings"
            results.append((name, f"skipped ({why})", 0.0))
            continue
        command = [sys.executable, str(BENCH / name), *plan[name]]
        print(f"\n=== {name}: {' '.join(command[1:])}", flush=True)
        started = time.perf_counter()
        try:
            code = subprocess.run(command, timeout=args.timeout, check=False).returncode
            status = "ok" if code == 0 else f"failed (exit {code})"
        except subprocess.TimeoutExpired:
            status = f"timed out after {args.timeout:.0f} s"
        results.append((name, status, time.perf_counter() - started))

    print("\n| benchmark | result | seconds |\n|---|---|---|")
    for name, status, seconds in results:
        print(f"| {name} | {status} | {seconds:.1f} |")
    return 1 if any(s.startswith(("failed", "timed out")) for _, s, _ in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
