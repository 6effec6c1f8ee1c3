"""Sync over git: new turns written on two clones of one store, then synced both ways.

    python bench/sync.py [--turns 1000] [--keep DIR]

A bare repository on disk is the remote. Clone A records ``--turns`` turns (through
``Memory.record_turn``, embeddings off), clone B records a tenth as many at the same time
in another process, then A syncs (push), B syncs (fetch, merge, index, push) and A syncs
again. Printed: the time of each sync, the turns on each side, turns lost (must be 0) and
whether each index is in step with its files afterwards (``doctor``), without a full walk:
the sync brought only the paths that arrived into the index.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from memdir.service import Memory

OFF = {"embeddings": {"enabled": False}}


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, timeout=300)


def record(root: Path, name: str, n: int) -> float:
    started = time.perf_counter()
    with Memory.open(root, overrides=OFF) as mem:
        for i in range(n):
            mem.record_turn(
                thread=f"{name}-{i // 50}", input=f"{name} question {i}", output=f"answer {i}"
            )
    return time.perf_counter() - started


def timed_sync(root: Path) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    with Memory.open(root, overrides=OFF) as mem:
        report = mem.git_sync()
    return time.perf_counter() - started, report


def turns_on_disk(root: Path) -> set[str]:
    base = root / "episodes" / "turns"
    return {p.name for p in base.rglob("*.md") if p.name != "index.md"}


def in_step(root: Path) -> bool:
    with Memory.open(root, overrides=OFF) as mem:
        return bool(mem.doctor().ok)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=1000, help="turns recorded on clone A")
    ap.add_argument("--keep", type=Path, help="work in DIR and keep it (default: a temp dir)")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="memdir-sync-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        remote, a, b = work / "remote.git", work / "a", work / "b"
        git(work, "init", "-q", "--bare", str(remote))
        Memory.init(a).close()
        git(a, "remote", "add", "origin", str(remote))
        with Memory.open(a, overrides=OFF) as mem:
            mem.sync(force=True)
            mem.git_sync()
        with Memory.open(a, overrides=OFF) as mem:
            mem.sync_conflicts()  # warm imports before timing
        from memdir.engine import remote as remote_sync

        remote_sync.clone(str(remote), str(b))
        other = subprocess.Popen(
            [sys.executable, __file__, "--record-only", str(b), str(max(1, args.turns // 10))]
        )
        rec_a = record(a, "a", args.turns)
        other.wait(timeout=3600)
        push_a, rep_a = timed_sync(a)
        pull_b, rep_b = timed_sync(b)
        pull_a, rep_a2 = timed_sync(a)
        ta, tb = turns_on_disk(a), turns_on_disk(b)
        expected = args.turns + max(1, args.turns // 10)
        out = {
            "turns_a": args.turns,
            "turns_b": max(1, args.turns // 10),
            "record_a_s": round(rec_a, 2),
            "sync_a_push_s": round(push_a, 2),
            "sync_b_merge_s": round(pull_b, 2),
            "sync_a_pull_s": round(pull_a, 2),
            "arrived_b": rep_b["arrived"],
            "touched_b": len(rep_b["touched"]),
            "on_disk_a": len(ta),
            "on_disk_b": len(tb),
            "lost": expected - len(ta & tb),
            "a_in_step": in_step(a),
            "b_in_step": in_step(b),
            "kept_as_conflicts": len(rep_a["kept"]) + len(rep_b["kept"]) + len(rep_a2["kept"]),
        }
        print(json.dumps(out, indent=2))
        return 0 if out["lost"] == 0 and out["a_in_step"] and out["b_in_step"] else 1
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--record-only":
        record(Path(sys.argv[2]), "b", int(sys.argv[3]))
        sys.exit(0)
    sys.exit(main())
