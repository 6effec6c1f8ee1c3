"""Many stores on one server: memory use, and search on a cold and a warm store.

    python bench/stores.py [--stores 100] [--notes 20] [--max-open 16] [--rounds 3] [--keep DIR]

Makes ``--stores`` stores of ``--notes`` notes each, starts ``memdir serve --stores-config``
as a subprocess (embeddings off, so the figures are the server's, not the model's), then
searches each store once (cold: the store is opened by that request) and ``--rounds`` more
times (warm, or cold again when the bound on open stores closed it: with more stores than
``--max-open`` taken in turn, a round reopens them; the bench prints both orders). Printed:
p50 / p95 of each kind, the server's resident memory after the cold pass and at the end, and
how many stores the server holds open.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from memdir.service import Memory

WORDS = "amber basalt cobalt dune ember fjord garnet heron iris jade kelp lichen".split()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def make(work: Path, count: int, notes: int) -> Path:
    lines = ["[stores]"]
    for n in range(count):
        root = work / f"s{n:03d}"
        if not (root / ".memdir").is_dir():
            Memory.init(root).close()
            with Memory.open(root, overrides={"embeddings": {"enabled": False}}) as mem:
                for i in range(notes):
                    word = WORDS[(n + i) % len(WORDS)]
                    text = f"# Note {i}\n\nStore {n} keeps the {word} note number {i}.\n"
                    mem.write(f"notes/n{i}.md", text, provenance="run:bench")
        lines.append(f's{n:03d} = "{root}"')
    config = work / "server.toml"
    config.write_text("\n".join(lines) + "\n")
    return config


def timed_search(client: httpx.Client, name: str) -> float:
    started = time.perf_counter()
    r = client.get(f"/v1/stores/{name}/search", params={"q": "basalt note", "mode": "bm25"})
    r.raise_for_status()
    return (time.perf_counter() - started) * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stores", type=int, default=100)
    ap.add_argument("--notes", type=int, default=20)
    ap.add_argument("--max-open", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="make (or reuse) the stores in DIR and keep them")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="memdir-stores-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        made = time.perf_counter()
        config = make(work, args.stores, args.notes)
        made_s = time.perf_counter() - made
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        env = {**os.environ, "MEMDIR_EMBEDDINGS_ENABLED": "false"}
        env.pop("MEMDIR_ROOT", None)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "memdir",
                "serve",
                "--port",
                str(port),
                "--stores-config",
                str(config),
                "--max-open",
                str(args.max_open),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while True:
                try:
                    httpx.get(f"{url}/v1/health", timeout=5)
                    break
                except httpx.TransportError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise SystemExit("the server did not start") from None
                    time.sleep(0.05)
            base_rss = rss_mb(proc.pid)
            names = [f"s{n:03d}" for n in range(args.stores)]
            with httpx.Client(base_url=url, timeout=60) as client:
                cold = [timed_search(client, name) for name in names]
                cold_rss = rss_mb(proc.pid)
                warm_one = [timed_search(client, names[-1]) for _ in range(50)]
                again = [timed_search(client, n) for _ in range(args.rounds) for n in names]
                health = client.get("/v1/health").json()
            out = {
                "stores": args.stores,
                "notes_each": args.notes,
                "max_open": args.max_open,
                "made_s": round(made_s, 1),
                "rss_mb_idle_server": round(base_rss, 1),
                "rss_mb_after_cold_pass": round(cold_rss, 1),
                "rss_mb_end": round(rss_mb(proc.pid), 1),
                "cold_search_ms_p50": round(statistics.median(cold), 1),
                "cold_search_ms_p95": round(pct(cold, 0.95), 1),
                "warm_search_ms_p50": round(statistics.median(warm_one), 1),
                "warm_search_ms_p95": round(pct(warm_one, 0.95), 1),
                "round_robin_ms_p50": round(statistics.median(again), 1),
                "round_robin_ms_p95": round(pct(again, 0.95), 1),
                "open_at_end": health["open"],
            }
            print(json.dumps(out, indent=2))
        finally:
            proc.terminate()
            proc.wait(timeout=60)
        return 0
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
