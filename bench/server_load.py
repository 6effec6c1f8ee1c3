"""Load on one memdir server: N clients recording turns and searching for S seconds.

Starts ``memdir serve`` as a subprocess on a fresh store (or --root), measures the
time from process start to the first answer, runs the clients, stops the server
gracefully (SIGTERM) and then counts what was acknowledged against the turn files
on disk and the index rows: nothing acknowledged may be missing.

    .venv/bin/python bench/server_load.py --clients 16 --seconds 60

Runs twice, each on a fresh store: with embeddings on (the default settings: `auto`
search is hybrid, every recorded turn is embedded by the model before the next
search) and with embeddings off (bm25 only), then prints both search p95s and
their ratio. ``--embeddings on`` or ``off`` runs one of them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

WORDS = (
    "deploy rollback cache latency index search memory turn thread user budget "
    "router article episode snapshot harness program drift lesson audit"
).split()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(
    root: Path, port: int, log: Path, *, embeddings: bool = False
) -> tuple[subprocess.Popen[bytes], float]:
    """Start ``memdir serve``; return the process and seconds to the first answer.

    The server's stderr (one access-log line per request) goes to ``log``: a pipe
    nobody reads would fill up and block the server.
    """
    env = dict(os.environ, MEMDIR_EMBEDDINGS_ENABLED="true" if embeddings else "false")
    env.pop("MEMDIR_ROOT", None)
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "memdir", "--root", str(root), "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("ab"),
    )
    url = f"http://127.0.0.1:{port}/v1/health"
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"server exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return proc, time.perf_counter() - started
        except httpx.TransportError:
            pass
        time.sleep(0.005)


class Client(threading.Thread):
    def __init__(self, n: int, base: str, deadline: float) -> None:
        super().__init__(daemon=True)
        self.n = n
        self.base = base
        self.deadline = deadline
        self.rng = random.Random(n)
        self.latency: dict[str, list[float]] = {}
        self.errors: list[str] = []
        self.turns: list[str] = []

    def timed(self, route: str, send: Any) -> httpx.Response | None:
        started = time.perf_counter()
        try:
            response: httpx.Response = send()
        except httpx.HTTPError as exc:
            self.errors.append(f"{route}: {exc!r}")
            return None
        self.latency.setdefault(route, []).append(time.perf_counter() - started)
        if response.status_code >= 400:
            self.errors.append(f"{route}: {response.status_code} {response.text[:200]}")
        return response

    def run(self) -> None:
        thread = f"bench-{self.n}"
        with httpx.Client(base_url=self.base, timeout=60) as http:
            i = 0
            while time.perf_counter() < self.deadline:
                words = self.rng.sample(WORDS, 3)
                body = {
                    "thread": thread,
                    "user": f"user-{self.n % 4}",
                    "input": f"turn {i}: what about {' '.join(words)}?",
                    "output": f"answer {i} about {words[0]}",
                    "keywords": words[:2],
                    "parents": self.turns[-1:],
                    "worklog": [{"tool": "search", "args": {"q": words[0]}, "result": "ok"}],
                }
                r = self.timed("POST /v1/turns", lambda b=body: http.post("/v1/turns", json=b))
                if r is not None and r.status_code == 201:
                    self.turns.append(r.json()["id"])
                q = " ".join(self.rng.sample(WORDS, 2))
                self.timed("GET /v1/search", lambda q=q: http.get("/v1/search", params={"q": q}))
                if i % 5 == 4:
                    ctx = {"thread": thread, "user": f"user-{self.n % 4}", "keywords": words[:2]}
                    self.timed("POST /v1/context", lambda c=ctx: http.post("/v1/context", json=c))
                i += 1


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(pct / 100 * (len(ordered) - 1))))]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used (independent of machine load)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def time_starts(count: int) -> None:
    """Start and stop a server ``count`` times on a fresh store; print the start-up times."""
    from memdir.files.store import Store

    with tempfile.TemporaryDirectory(prefix="memdir-start-") as tmp:
        root = Store.init(Path(tmp) / "store")
        times = []
        for _ in range(count):
            port = free_port()
            log = Path(tmp) / f"serve-{port}.log"
            proc, seconds = start_server(root, port, log)
            cpu = cpu_seconds(proc.pid)
            first_search = time.perf_counter()
            httpx.get(f"http://127.0.0.1:{port}/v1/search", params={"q": "index"}, timeout=30)
            search_seconds = seconds + time.perf_counter() - first_search
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
            times.append((seconds, search_seconds, cpu))
        firsts = [t[0] for t in times]
        print(
            json.dumps(
                {
                    "starts": count,
                    "first_answer_median_s": round(statistics.median(firsts), 3),
                    "first_answer_min_s": round(min(firsts), 3),
                    "first_answer_max_s": round(max(firsts), 3),
                    "first_search_median_s": round(statistics.median(t[1] for t in times), 3),
                    "cpu_first_answer_median_s": round(statistics.median(t[2] for t in times), 2),
                    "load_average_1min": os.getloadavg()[0],
                },
                indent=2,
            )
        )


def run_load(args: argparse.Namespace, *, embeddings: bool) -> dict[str, Any]:
    """One load run against a server with embeddings on or off; its figures."""
    from memdir.files.store import Store

    tmp = None
    if args.root is None:
        tmp = tempfile.TemporaryDirectory(prefix="memdir-load-")
        root = Store.init(Path(tmp.name) / "store")
    else:
        root = args.root.resolve()
    port = free_port()
    log = Path(tempfile.gettempdir()) / f"memdir-load-{port}.log"
    proc, first_answer = start_server(root, port, log, embeddings=embeddings)
    base = f"http://127.0.0.1:{port}"
    # One search before the clock starts: with embeddings on, it loads the model (seconds),
    # which would otherwise be paid by the first search of every client at once.
    warm = time.perf_counter()
    httpx.get(f"{base}/v1/search", params={"q": "warm up"}, timeout=120)
    first_search = time.perf_counter() - warm
    deadline = time.perf_counter() + args.seconds
    clients = [Client(n, base, deadline) for n in range(args.clients)]
    for c in clients:
        c.start()
    cpu_before = cpu_seconds(proc.pid)
    for c in clients:
        c.join()
    server_cpu = cpu_seconds(proc.pid) - cpu_before
    proc.send_signal(signal.SIGTERM)
    stopped = time.perf_counter()
    proc.wait(timeout=120)
    shutdown = time.perf_counter() - stopped

    acknowledged = {t for c in clients for t in c.turns}
    on_disk = {p.stem for p in (root / "episodes/turns").rglob("*.md")}
    with sqlite3.connect(root / ".memdir/index.db") as db:
        rows = {
            Path(r[0]).stem
            for r in db.execute("SELECT path FROM docs WHERE path LIKE 'episodes/turns/%'")
        }
    git_dirty = subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain", "--", "episodes"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    latency: dict[str, list[float]] = {}
    for c in clients:
        for route, values in c.latency.items():
            latency.setdefault(route, []).extend(values)
    errors = [e for c in clients for e in c.errors]
    access_lines = sum(1 for _ in log.open("rb"))
    log.unlink()
    result = {
        "embeddings": "on" if embeddings else "off",
        "clients": args.clients,
        "seconds": args.seconds,
        "first_answer_seconds": round(first_answer, 3),
        "first_search_seconds": round(first_search, 3),
        "shutdown_seconds": round(shutdown, 3),
        "errors": len(errors),
        "error_samples": errors[:5],
        "turns_acknowledged": len(acknowledged),
        "turn_files": len(on_disk),
        "index_rows": len(rows),
        "lost_turns": len(acknowledged - on_disk) + len(acknowledged - rows),
        "uncommitted_paths": len(git_dirty.splitlines()) if git_dirty else 0,
        "access_log_lines": access_lines,
        "server_cpu_seconds": round(server_cpu, 2),
        "server_cpu_ms_per_turn": round(server_cpu * 1000 / max(1, len(acknowledged)), 1),
        "load_average_1min": os.getloadavg()[0],
        "routes": {
            route: {
                "requests": len(values),
                "per_second": round(len(values) / args.seconds, 1),
                "p50_ms": round(statistics.median(values) * 1000, 1),
                "p95_ms": round(percentile(values, 95) * 1000, 1),
                "p99_ms": round(percentile(values, 99) * 1000, 1),
            }
            for route, values in sorted(latency.items())
        },
    }
    if tmp is not None:
        tmp.cleanup()
    return result


def print_result(result: dict[str, Any]) -> None:
    print(json.dumps({k: v for k, v in result.items() if k != "routes"}, indent=2))
    print(f"embeddings {result['embeddings']}:")
    print("| route | requests | req/s | p50 ms | p95 ms | p99 ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for route, row in result["routes"].items():
        print(
            f"| {route} | {row['requests']} | {row['per_second']} | "
            f"{row['p50_ms']} | {row['p95_ms']} | {row['p99_ms']} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--root", type=Path, help="An existing store (default: a fresh one).")
    parser.add_argument(
        "--embeddings",
        choices=["both", "on", "off"],
        default="both",
        help="Run with embeddings on, off, or both one after the other (the default).",
    )
    parser.add_argument("--json", action="store_true", help="Print JSON only.")
    parser.add_argument(
        "--starts", type=int, default=0, help="Only time N server starts (to the first answer)."
    )
    args = parser.parse_args()
    if args.starts:
        time_starts(args.starts)
        return
    if args.root is not None and args.embeddings == "both":
        parser.error("--root holds one run's turns: give --embeddings on or off with it")
    wanted = {"both": [True, False], "on": [True], "off": [False]}[args.embeddings]
    results = [run_load(args, embeddings=on) for on in wanted]
    search = "GET /v1/search"
    summary: dict[str, Any] = {}
    for result in results:
        summary[f"search_p95_ms_embeddings_{result['embeddings']}"] = result["routes"][search][
            "p95_ms"
        ]
    if len(results) == 2:
        on, off = (r["routes"][search]["p95_ms"] for r in results)
        summary["search_p95_ratio_on_to_off"] = round(on / off, 2) if off else None
    if args.json:
        print(json.dumps({"runs": results, "summary": summary}, indent=2))
    else:
        for result in results:
            print_result(result)
        print(json.dumps(summary, indent=2))
    if any(r["errors"] or r["lost_turns"] for r in results):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
