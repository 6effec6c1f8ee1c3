"""Full rebuilds under load: readers over HTTP while `POST /v1/reindex {"full": true}` loops.

Builds a store of --docs notes (or takes --root), embeds them, starts ``memdir serve`` as a
subprocess and runs one round: --readers threads search (bm25 and hybrid), list, read and
grep, and check that every answer is whole (every note listed, the one note a token names
found by search, read and grep), while one more thread rebuilds the index again and again.
Prints requests, errors, rebuilds done and the readers' p50 and p95; exits 1 on any error
or when the server died.

    .venv/bin/python bench/reindex_load.py --seconds 60 --readers 4 --docs 2000
    .venv/bin/python bench/reindex_load.py --seconds 60 --readers 4 --docs 2000 --no-rebuild

:func:`run_round` is one round against a server already running; the fault suite
(bench/faults.py) calls it, with :func:`note_text`, :func:`start_server` and :func:`free_port`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

FOLDER = "notes"


@dataclass
class Round:
    """What one round measured."""

    seconds: float = 0.0
    requests: int = 0
    errors: list[str] = field(default_factory=list)
    rebuilds: int = 0
    rebuild_seconds: list[float] = field(default_factory=list)
    latencies: dict[str, list[float]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def summary(self) -> dict[str, Any]:
        every = [x for values in self.latencies.values() for x in values]
        return {
            "seconds": round(self.seconds, 1),
            "requests": self.requests,
            "errors": len(self.errors),
            "first_errors": self.errors[:5],
            "rebuilds": self.rebuilds,
            "rebuild_p50_ms": ms(percentile(self.rebuild_seconds, 50)),
            "reader_p50_ms": ms(percentile(every, 50)),
            "reader_p95_ms": ms(percentile(every, 95)),
            "by_request": {
                name: {
                    "n": len(values),
                    "p50_ms": ms(percentile(values, 50)),
                    "p95_ms": ms(percentile(values, 95)),
                }
                for name, values in sorted(self.latencies.items())
            },
        }


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def percentile(values: list[float], pct: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(pct / 100 * (len(ordered) - 1))))]


def note_path(n: int) -> str:
    return f"{FOLDER}/n{n:05d}.md"


def note_text(n: int, rng: random.Random) -> str:
    """Note ``n``: words many notes share, and ``token<n> alone``, which only it holds."""
    words = "deploy rollback cache latency index search memory thread budget audit".split()
    topic = " ".join(rng.sample(words, 4))
    return f"# Note {n}\n\nA common note about {topic}, and token{n} alone.\n"


def make_store(root: Path, docs: int) -> list[str]:
    """A store of ``docs`` notes, indexed and embedded; their paths, sorted."""
    from memdir.files.store import Store
    from memdir.service import Memory

    if not (root / ".memdir").is_dir():
        Store.init(root)
    (root / FOLDER).mkdir(exist_ok=True)
    rng = random.Random(7)
    for n in range(docs):
        (root / note_path(n)).write_text(note_text(n, rng), encoding="utf-8")
    with Memory.open(root, overrides={"store": {"git_commit": False}}) as mem:
        mem.reindex()
        if mem.settings.embeddings.enabled:
            mem.embed()  # the first hybrid search would otherwise embed them all
    return [note_path(n) for n in range(docs)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(
    root: Path, port: int, log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``memdir serve`` on ``port``, answering; its stderr goes to ``log``.

    It runs in a session of its own, so that its whole process group can be killed.
    """
    if env is None:
        env = dict(os.environ)
        env.pop("MEMDIR_ROOT", None)
    with log.open("ab") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memdir", "--root", str(root), "serve", "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}; see {log}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the server did not answer within 60 s; see {log}")


class Reader(threading.Thread):
    """Loops over the read requests, checking that each answer is whole."""

    def __init__(
        self,
        n: int,
        url: str,
        paths: list[str],
        stop: threading.Event,
        out: Round,
        hybrid: bool = True,
    ):
        super().__init__(name=f"reader-{n}", daemon=True)
        self.rng = random.Random(n)
        self.url, self.paths, self.stop, self.out = url, paths, stop, out
        self.hybrid = hybrid

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=120) as http:
            checks = [self.search_bm25, self.ls, self.read, self.grep]
            if self.hybrid:  # a store without embeddings answers hybrid with an error
                checks.insert(1, self.search_hybrid)
            while not self.stop.is_set():
                for check in checks:
                    k = self.rng.randrange(len(self.paths))
                    self.timed(check.__name__, lambda c=check, k=k: c(http, k))

    def timed(self, name: str, call: Any) -> None:
        started = time.perf_counter()
        try:
            problem = call()
        except Exception as exc:  # a transport error is a finding of the round
            problem = f"{type(exc).__name__}: {exc}"
        took = time.perf_counter() - started
        with self.out.lock:
            self.out.requests += 1
            self.out.latencies.setdefault(name, []).append(took)
            if problem:
                self.out.errors.append(f"{name}: {problem}")

    def search_bm25(self, http: httpx.Client, k: int) -> str | None:
        r = http.get("/v1/search", params={"q": f"token{k}", "mode": "bm25"})
        if r.status_code != 200:
            return f"{r.status_code} {r.text[:200]}"
        got = [hit["path"] for hit in r.json()]
        return None if got == [self.paths[k]] else f"token{k}: {got}"

    def search_hybrid(self, http: httpx.Client, k: int) -> str | None:
        r = http.get("/v1/search", params={"q": f"token{k} alone", "mode": "hybrid"})
        if r.status_code != 200:
            return f"{r.status_code} {r.text[:200]}"
        got = [hit["path"] for hit in r.json()]
        return None if self.paths[k] in got else f"token{k} alone: {got[:3]}..."

    def ls(self, http: httpx.Client, k: int) -> str | None:
        r = http.get("/v1/ls", params={"prefix": FOLDER})
        if r.status_code != 200:
            return f"{r.status_code} {r.text[:200]}"
        got = [row["path"] for row in r.json()]
        return None if got == self.paths else f"{len(got)} of {len(self.paths)} listed"

    def read(self, http: httpx.Client, k: int) -> str | None:
        r = http.get(f"/v1/files/{self.paths[k]}")
        if r.status_code != 200:
            return f"{r.status_code} {r.text[:200]}"
        return None if f"token{k} alone" in r.json()["content"] else "wrong content"

    def grep(self, http: httpx.Client, k: int) -> str | None:
        r = http.get("/v1/grep", params={"pattern": f"token{k} alone", "path_prefix": FOLDER})
        if r.status_code != 200:
            return f"{r.status_code} {r.text[:200]}"
        got = [hit["path"] for hit in r.json()]
        return None if got == [self.paths[k]] else f"grep token{k}: {got}"


def run_round(
    url: str,
    paths: list[str],
    *,
    seconds: float,
    readers: int,
    rebuild: bool = True,
    hybrid: bool = True,
) -> Round:
    """``readers`` checking readers against the server at ``url`` while full rebuilds loop.

    ``paths`` are every document under ``notes/``, sorted, each holding ``token<n> alone``
    (:func:`make_store`). A failed or short answer is an error of the round; so is a
    rebuild that fails. Without ``rebuild`` the readers run alone (the baseline); without
    ``hybrid`` they search in bm25 only.
    """
    out = Round()
    stop = threading.Event()
    threads = [Reader(n, url, paths, stop, out, hybrid) for n in range(readers)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    with httpx.Client(base_url=url, timeout=600) as admin:
        while rebuild and time.perf_counter() - started < seconds:
            began = time.perf_counter()
            try:
                r = admin.post("/v1/reindex", json={"full": True})
                ok = r.status_code == 200 and r.json().get("added", 0) >= len(paths)
                problem = None if ok else f"{r.status_code} {r.text[:200]}"
            except Exception as exc:  # the server went away: the round's finding
                problem = f"{type(exc).__name__}: {exc}"
            out.rebuild_seconds.append(time.perf_counter() - began)
            if problem:
                out.errors.append(f"reindex: {problem}")
                if problem.startswith(("ConnectError", "RemoteProtocolError")):
                    break
            else:
                out.rebuilds += 1
        time.sleep(max(0.0, seconds - (time.perf_counter() - started)))
    stop.set()
    for thread in threads:
        thread.join(timeout=120)
    out.seconds = time.perf_counter() - started
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--root", type=Path, help="where to build the store (default: a temp dir)")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.add_argument(
        "--no-rebuild", action="store_true", help="the readers alone, as a baseline"
    )
    args = parser.parse_args()

    tmp = tempfile.TemporaryDirectory(prefix="memdir-reindex-")
    root = (args.root or Path(tmp.name) / "store").resolve()
    paths = make_store(root, args.docs)
    port = free_port()
    log = Path(tmp.name) / "serve.log"
    proc = start_server(root, port, log)
    url = f"http://127.0.0.1:{port}"
    try:
        result = run_round(
            url, paths, seconds=args.seconds, readers=args.readers, rebuild=not args.no_rebuild
        )
        alive = proc.poll() is None
        from memdir.index import watch

        watching = watch.running(root)
        doctor = httpx.get(f"{url}/v1/doctor", timeout=60).json() if alive else {}
        wal = root / ".memdir" / "index.db-wal"
        report = {
            "docs": args.docs,
            "readers": args.readers,
            **result.summary(),
            "server_alive": alive,
            "watcher_alive": watching,
            "doctor_ok": bool(doctor.get("ok")),
            "wal_mb_after": round(wal.stat().st_size / 1e6, 1) if wal.exists() else 0.0,
        }
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        server_log = log.read_text(errors="replace")
        tmp.cleanup()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(
            f"{report['requests']} requests, {report['errors']} errors, "
            f"{report['rebuilds']} rebuilds done in {report['seconds']} s "
            f"({args.readers} readers, {args.docs} docs); reader p50 "
            f"{report['reader_p50_ms']} ms, p95 {report['reader_p95_ms']} ms; rebuild p50 "
            f"{report['rebuild_p50_ms']} ms; server alive: {alive}, watcher alive: "
            f"{watching}, doctor ok: {report['doctor_ok']}"
        )
        for name, row in report["by_request"].items():
            print(f"  {name}: {row['n']} requests, p50 {row['p50_ms']} ms, p95 {row['p95_ms']} ms")
        for error in report["first_errors"]:
            print(f"  error: {error}")
    if not alive:
        sys.stderr.write(server_log[-4000:])
    failed = report["errors"] or not alive or not report["doctor_ok"]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
