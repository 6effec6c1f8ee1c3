"""Search latency at scale: vector and hybrid search over N documents.

    python bench/vector_scale.py [--docs 100000] [--queries 200] [--keep DIR]

Writes N short markdown documents (random words from a fixed vocabulary), syncs
the index, then stores one synthetic unit vector per document directly in the
vector tables under the configured model's id (embedding 100k texts would take
most of an hour on 2 cores and measures the embedder, not the search). Queries
are real: each is embedded by the model, so the vector and hybrid timings
include query embedding, exact scoring of every vector, filtering and fusion.
Also times a bare numpy matrix-vector product at the same size.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

VOCAB = [
    "memory",
    "agent",
    "store",
    "markdown",
    "index",
    "search",
    "vector",
    "query",
    "turn",
    "record",
    "session",
    "user",
    "thread",
    "parent",
    "deploy",
    "rollback",
    "cache",
    "budget",
    "latency",
    "token",
    "model",
    "embed",
    "chunk",
    "fusion",
    "rank",
    "recall",
    "garden",
    "painting",
    "marathon",
    "cat",
    "dog",
    "lake",
    "sunrise",
    "guitar",
    "camping",
    "book",
    "festival",
    "support",
    "group",
    "job",
    "interview",
    "school",
    "family",
    "friend",
    "trip",
    "beach",
    "mountain",
    "recipe",
    "coffee",
    "music",
    "concert",
    "game",
]


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, int(round(pct / 100 * len(ordered))) - 1)]


def build(root: Path, docs: int, seed: int) -> Any:
    from memdir.service import Memory

    rng = random.Random(seed)
    Memory.init(root).close()
    folder = root / "notes"
    for i in range(docs):
        sub = folder / f"{i // 1000:03d}"
        sub.mkdir(parents=True, exist_ok=True)
        text = " ".join(rng.choice(VOCAB) for _ in range(rng.randint(8, 40)))
        (sub / f"n{i:06d}.md").write_text(f"# Note {i}\n\n{text}\n", encoding="utf-8")
    return Memory.open(root, overrides={"store": {"git_commit": False}})


def fill_vectors(mem: Any, seed: int) -> int:
    """One random unit vector per visible document, stored as if embedded."""
    vectors = mem.vector_index()
    model, dim = vectors.model, vectors.embedder.dim
    rng = np.random.default_rng(seed)
    rows = mem.index.conn.execute(
        "SELECT id, hash FROM docs WHERE hidden = 0 AND zone = 0"
    ).fetchall()
    with mem.index.transaction() as conn:
        for lo in range(0, len(rows), 5000):
            part = rows[lo : lo + 5000]
            mat = rng.standard_normal((len(part), dim)).astype(np.float32)
            mat /= np.linalg.norm(mat, axis=1, keepdims=True)
            digests = [hashlib.sha256(f"synthetic {r[0]}".encode()).hexdigest() for r in part]
            conn.executemany(
                "INSERT OR REPLACE INTO vectors(model, text_hash, dim, vec) VALUES (?,?,?,?)",
                [(model, d, dim, mat[i].tobytes()) for i, d in enumerate(digests)],
            )
            conn.executemany(
                "INSERT OR REPLACE INTO chunks(doc_id, chunk_no, start, end, text_hash) "
                "VALUES (?, 0, 0, 0, ?)",
                [(int(r[0]), d) for r, d in zip(part, digests, strict=True)],
            )
            conn.executemany(
                "INSERT OR REPLACE INTO embedded(doc_id, hash, model) VALUES (?,?,?)",
                [(int(r[0]), str(r[1]), model) for r in part],
            )
        mem.index.set_meta(conn, "vectors_model", model)
        mem.index.set_meta(conn, "vectors_generation", f"{mem.index.generation}:{model}")
    return len(rows)


def time_queries(mem: Any, queries: list[str], mode: str) -> dict[str, float]:
    mem.search(queries[0], mode=mode)  # warm: loads the matrix once
    times = []
    for q in queries:
        t = time.perf_counter()
        mem.search(q, limit=10, mode=mode)
        times.append((time.perf_counter() - t) * 1000)
    return {
        "p50": round(statistics.median(times), 2),
        "p95": round(percentile(times, 95), 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", type=Path, help="build the store here and keep it")
    args = parser.parse_args(argv)

    root = args.keep or Path(tempfile.mkdtemp(prefix="memdir-scale-")) / "store"
    rng = random.Random(args.seed + 1)
    queries = [" ".join(rng.choice(VOCAB) for _ in range(rng.randint(2, 6))) for _ in range(200)]
    queries = queries[: args.queries]
    try:
        t = time.perf_counter()
        mem = build(root, args.docs, args.seed)
        mem.sync()
        print(
            f"wrote and indexed {args.docs} docs in {time.perf_counter() - t:.1f} s",
            file=sys.stderr,
        )
        t = time.perf_counter()
        count = fill_vectors(mem, args.seed)
        print(
            f"stored {count} synthetic vectors in {time.perf_counter() - t:.1f} s", file=sys.stderr
        )
        t = time.perf_counter()
        mem.vector_index()._load()
        load_s = time.perf_counter() - t
        # Bare matrix-vector product for reference.
        matrix = mem.vector_index()._matrix
        qv = matrix[0].copy()
        bare = []
        for _ in range(args.queries):
            t = time.perf_counter()
            scores = matrix @ qv
            np.argpartition(-scores, 50)[:50]
            bare.append((time.perf_counter() - t) * 1000)
        results = {
            "docs": count,
            "matrix_load_s": round(load_s, 2),
            "numpy_matvec_ms": {
                "p50": round(statistics.median(bare), 2),
                "p95": round(percentile(bare, 95), 2),
            },
        }
        for mode in ("bm25", "vector", "hybrid"):
            results[mode] = time_queries(mem, queries, mode)
        mem.close()
    finally:
        if args.keep is None:
            shutil.rmtree(root.parent, ignore_errors=True)
    for key, value in results.items():
        print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
