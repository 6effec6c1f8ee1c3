"""The Postgres index beside SQLite at N synthetic documents (docs/benchmarks.md).

Writes N documents as ``bench/synth.py`` does, then for each engine: the full build
(``reindex --full``; for Postgres, the build of its rows from the local index the SQLite
build made: ``reindex --full`` with the Postgres engine is the two in turn), BM25 and
hybrid p50/p95 over the same queries, a search just after one document was written (the
cost of keeping the index in step), the throughput of 8 threads searching at once
(BM25) and, for a store Postgres searches through its approximate vector index, that
index's recall at 10 against the exact scan per number of candidates (``--candidates``).
Vectors come from a hashing embedder of 64 dimensions registered here (word
hashes, no model), so the hybrid figures are the cost of ranking and fusion, not of a
model; query embedding costs microseconds. Each engine's searches run with the file
watcher a server runs (``memdir serve``), so no search stats every file.

    python bench/scale.py --docs 20000 [--store DIR] [--dsn DSN] [--json out.json]

Without ``--dsn`` a throwaway server is started (memdir.index.pglocal). ``--store`` keeps
the synthetic store in DIR (written there when DIR does not exist, used as it is when it
does), so a large one is written once.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import synth
from memdir.providers.plugins import hookimpl, manager
from memdir.retrieval import pgranks
from memdir.service import Memory
from memdir.vectors import embedder as emb

DIM = 64
_edits = itertools.count(1)


class Hashing(emb.Embedder):
    """Each word adds +1 or -1 to one of 64 dimensions chosen by its hash; unit length."""

    dim = DIM
    window = 256
    model_id = "hashing-64"

    def embed(self, texts: Sequence[str]) -> Any:
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "big")
                out[row, h % DIM] += 1.0 if h & 0x80000000 else -1.0
        return emb.normalise(out)


class Plugin:
    @hookimpl
    def register_embedders(self, register: Callable[[str, Callable[..., Any]], None]) -> None:
        register("hashing", lambda settings: Hashing())


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def timed(mem: Memory, queries: list[str], mode: str) -> dict[str, float]:
    mem.search(queries[0], limit=10, mode=mode)  # warm
    seconds = []
    for q in queries:
        t0 = time.perf_counter()
        mem.search(q, limit=10, mode=mode)
        seconds.append(time.perf_counter() - t0)
    return {
        "p50_ms": round(1000 * statistics.median(seconds), 2),
        "p95_ms": round(1000 * percentile(seconds, 0.95), 2),
    }


def after_edit(
    mem: Memory, queries: list[str], mode: str, engine: str, n: int = 10
) -> dict[str, float]:
    """A search just after one new document was written (p50 and worst of ``n``)."""
    seconds = []
    for i in range(n):
        path = f"wiki/edits/{engine}-{mode}-{i}.md"
        # Each edit of its own length: no two score the same (ties are ordered by row id
        # in SQLite and by path in Postgres).
        filler = " word" * next(_edits)
        mem.write(path, f"# Edit {i}\n\n{queries[i % len(queries)]}{filler}.\n")
        t0 = time.perf_counter()
        mem.search(queries[i % len(queries)], limit=10, mode=mode)
        seconds.append(time.perf_counter() - t0)
    return {
        "p50_ms": round(1000 * statistics.median(seconds), 2),
        "max_ms": round(1000 * max(seconds), 2),
    }


def readers(mem: Memory, queries: list[str], threads: int, seconds: float) -> float:
    """Searches per second of ``threads`` threads searching (BM25) for ``seconds``."""
    done = [0] * threads
    stop = time.monotonic() + seconds

    def work(i: int) -> None:
        rng = random.Random(i)
        while time.monotonic() < stop:
            mem.search(rng.choice(queries), limit=10, mode="bm25")
            done[i] += 1

    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    t0 = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return round(sum(done) / (time.perf_counter() - t0), 1)


def vector_recall(
    pg: Any, vectors: Sequence[Any], candidates: Sequence[int], limit: int = 10
) -> dict[str, Any]:
    """Per number of candidates: the approximate index's top ``limit`` against the exact
    scan's (a hit counts when the scan ranks it in its top ``limit`` or it scores at
    least the scan's last: ties), with the p50 / p95 of the approximate search; and the
    exact scan's p50 / p95 under ``exact``."""
    from memdir.index.postgres import _vector_text, filter_sql
    from memdir.index.search import Filters

    flt = Filters()
    condition, params = filter_sql(flt)
    exact, spent = [], []
    for vec in vectors:
        t0 = time.perf_counter()
        exact.append(pg._exact(_vector_text(vec), condition, params, limit))
        spent.append(time.perf_counter() - t0)
    out: dict[str, Any] = {
        "exact": {
            "p50_ms": round(1000 * statistics.median(spent), 2),
            "p95_ms": round(1000 * percentile(spent, 0.95), 2),
        }
    }
    kept = pg.approximate_candidates
    try:
        for n in candidates:
            pg.approximate_candidates = n
            recalls, seconds = [], []
            for vec, want in zip(vectors, exact, strict=True):
                t0 = time.perf_counter()
                got = pg.nearest(vec, flt, limit)
                seconds.append(time.perf_counter() - t0)
                floor = want[-1][1] if want else 0.0
                paths = {p for p, *_ in want}
                hits = sum(1 for p, score, *_ in got if p in paths or score >= floor - 1e-6)
                recalls.append(hits / max(1, len(want)))
            out[str(n)] = {
                "recall": round(statistics.mean(recalls), 3),
                "worst": round(min(recalls), 2),
                "p50_ms": round(1000 * statistics.median(seconds), 2),
                "p95_ms": round(1000 * percentile(seconds, 0.95), 2),
            }
    finally:
        pg.approximate_candidates = kept
    return out


def note(what: str, value: Any) -> None:
    """One figure on stderr as soon as it is measured (a long run that stops keeps them)."""
    print(f"{time.strftime('%H:%M:%S')} {what}: {json.dumps(value)}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=20_000)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--seconds", type=float, default=10.0, help="of the readers' run")
    parser.add_argument("--dsn", default="")
    parser.add_argument("--store", type=Path, help="keep (or reuse) the synthetic store here")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--candidates",
        default="100,200,400,1000",
        help="numbers of candidates at which the approximate vector index's recall is measured",
    )
    args = parser.parse_args(argv)
    manager().register(Plugin())
    root_path = args.store or Path(tempfile.mkdtemp(prefix="memdir-scale-")) / "store"
    if not root_path.exists():
        Memory.init(root_path).close()
        t0 = time.perf_counter()
        synth.generate(root_path, args.docs)
        print(f"wrote {args.docs} documents in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    words, _ = synth.vocabulary()
    rng = random.Random(3)
    queries = [" ".join(rng.sample(words, rng.randint(1, 3))) for _ in range(args.queries)]
    server = None
    dsn = args.dsn
    if not dsn:
        from memdir.index import pglocal

        server = pglocal.start()
        dsn = server.dsn
    base = {"store": {"git_commit": False}, "embeddings": {"provider": "hashing"}}
    out: dict[str, Any] = {"docs": args.docs, "queries": len(queries)}
    out["load_average"] = [round(x, 2) for x in os.getloadavg()]
    try:
        with Memory.open(root_path, overrides=base) as mem:
            t0 = time.perf_counter()
            mem.reindex(full=True)
            build = time.perf_counter() - t0
            t0 = time.perf_counter()
            mem.embed()
            embed = time.perf_counter() - t0
            out["sqlite"] = {"build_s": round(build, 1), "embed_s": round(embed, 1)}
            note("sqlite build and embed", out["sqlite"])
            mem.start_watcher()
            out["sqlite"]["bm25"] = timed(mem, queries, "bm25")
            note("sqlite bm25", out["sqlite"]["bm25"])
            out["sqlite"]["hybrid"] = timed(mem, queries, "hybrid")
            note("sqlite hybrid", out["sqlite"]["hybrid"])
            out["sqlite"]["readers8_qps"] = readers(mem, queries, 8, args.seconds)
            note("sqlite readers8_qps", out["sqlite"]["readers8_qps"])
            out["sqlite"]["bm25_after_edit"] = after_edit(mem, queries, "bm25", "sqlite")
            out["sqlite"]["hybrid_after_edit"] = after_edit(mem, queries, "hybrid", "sqlite")
            print(json.dumps(out["sqlite"]), file=sys.stderr)
        shared = {**base, "index": {"engine": "postgres", "dsn": dsn, "store": "scale"}}
        with Memory.open(root_path, overrides=shared) as mem:
            t0 = time.perf_counter()
            pgranks.rebuild(mem.retrieval)  # what `reindex --full` adds to the local build
            build = time.perf_counter() - t0
            out["postgres"] = {"rows_build_s": round(build, 1)}
            note("postgres rows build", out["postgres"])
            mem.start_watcher()
            out["postgres"]["bm25"] = timed(mem, queries, "bm25")
            note("postgres bm25", out["postgres"]["bm25"])
            out["postgres"]["hybrid"] = timed(mem, queries, "hybrid")
            note("postgres hybrid", out["postgres"]["hybrid"])
            pg = mem.retrieval.pg
            out["postgres"]["vector_scans"] = dict(pg.vector_scans)
            if pg.vector_scans["approximate"]:
                counts = [int(n) for n in args.candidates.split(",") if n]
                vectors = Hashing().embed(queries)
                out["postgres"]["vector_recall_at_10"] = vector_recall(pg, vectors, counts)
                note("postgres vector recall", out["postgres"]["vector_recall_at_10"])
            out["postgres"]["readers8_qps"] = readers(mem, queries, 8, args.seconds)
            note("postgres readers8_qps", out["postgres"]["readers8_qps"])
            out["postgres"]["bm25_after_edit"] = after_edit(mem, queries, "bm25", "postgres")
            out["postgres"]["hybrid_after_edit"] = after_edit(mem, queries, "hybrid", "postgres")
            same = sum(
                [h.path for h in mem.search(q, limit=10, mode="bm25")]
                == [h.path for h in _sqlite_hits(root_path, base, q)]
                for q in queries[:20]
            )
            out["postgres"]["bm25_same_top10_of_20"] = same
            out["postgres"]["hybrid_same_top10_of_20"] = sum(
                [h.path for h in mem.search(q, limit=10, mode="hybrid")]
                == [h.path for h in _sqlite_hits(root_path, base, q, "hybrid")]
                for q in queries[:20]
            )
            print(json.dumps(out["postgres"]), file=sys.stderr)
    finally:
        if server is not None:
            server.remove()
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    return 0


_local: dict[str, Memory] = {}


def _sqlite_hits(root: Path, base: dict[str, Any], query: str, mode: str = "bm25") -> list[Any]:
    if "mem" not in _local:
        _local["mem"] = Memory.open(root, overrides=base)
    return _local["mem"].search(query, limit=10, mode=mode)


if __name__ == "__main__":
    raise SystemExit(main())
