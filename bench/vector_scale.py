"""Search latency at scale: vector and hybrid search over N documents.

    python bench/vector_scale.py [--docs 100000] [--queries 200] [--keep DIR [--reuse]]
    python bench/vector_scale.py --embed 10000

Writes N short markdown documents (random words from a fixed vocabulary, 20 per
thread), syncs the index, writes the hybrid passages, then stores one synthetic
unit vector per document directly in the vector tables under the configured
model's id (embedding 100k texts would take most of an hour on 2 cores and
measures the embedder, not the search). Queries are real: each is embedded by
the model, so the vector and hybrid timings include query embedding, exact
scoring of every vector, filtering, thread and date signals and fusion. Also
times a bare numpy matrix-vector product and the int8 first pass
(``memdir.vectors.scan``) at the same size. The process runs as a
long-lived agent would: the file walk before each verb is throttled
(``store.sync_interval_seconds``), so timings are of the search itself.

Last, ``--writes`` rounds of: a hybrid search, ``record_turn`` (timed too: in a process that
searches by meaning it embeds the turn before it returns), a hybrid search (the
first after the turn: it brings the loaded matrix in step with the new rows; it embeds the
turn only where the write did not). Each query is new, so none comes from the query cache.
Prints both p50s and p95s, their ratios and how many times the whole matrix was read (1:
the first load).

With ``--embed N``: writes N turn records (20 per thread) and embeds them for real
through ``Memory.embed`` with the progress bar, reports texts/s, then syncs again
and reports what the second sync embedded (it should be nothing).
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


class Words:
    """Document and query words.

    ``zipf`` (the default): a 20,000-word vocabulary (the list above, then made-up
    words) drawn with Zipf frequencies, like real text; queries use content words
    (ranks 50-5,000, as the most frequent words are stopwords). ``small``: the 52
    words above drawn uniformly, so every query word is in about a third of all
    documents (the worst case for BM25).
    """

    def __init__(self, kind: str, seed: int) -> None:
        rng = random.Random(seed)
        self.kind = kind
        vocab = list(VOCAB)
        if kind == "zipf":
            syllables = [c + v for c in "bcdfghklmnprstvz" for v in "aeiou"]
            seen = set(vocab)
            while len(vocab) < 20_000:
                word = "".join(rng.choice(syllables) for _ in range(rng.randint(2, 4)))
                if word not in seen:
                    seen.add(word)
                    vocab.append(word)
            rng.shuffle(vocab)
        self.vocab = vocab
        total = 0.0
        self.cum: list[float] = []
        for rank in range(1, len(vocab) + 1):
            total += 1.0 / rank if kind == "zipf" else 1.0
            self.cum.append(total)

    def text(self, rng: random.Random, n: int) -> str:
        return " ".join(rng.choices(self.vocab, cum_weights=self.cum, k=n))

    def query(self, rng: random.Random) -> str:
        pool = self.vocab[50:5000] if self.kind == "zipf" else self.vocab
        return " ".join(rng.choice(pool) for _ in range(rng.randint(2, 6)))


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, int(round(pct / 100 * len(ordered))) - 1)]


def build(root: Path, docs: int, seed: int, words: Words) -> Any:
    from memdir.service import Memory

    rng = random.Random(seed)
    Memory.init(root).close()
    folder = root / "notes"
    for i in range(docs):
        sub = folder / f"{i // 1000:03d}"
        sub.mkdir(parents=True, exist_ok=True)
        text = words.text(rng, rng.randint(8, 40))
        day, second = divmod(i, 86400)
        front = (
            f'---\nthread: "t{i // 20:05d}"\n'
            f'created: "2024-{1 + day // 28:02d}-{1 + day % 28:02d}T'
            f'{second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}Z"\n---\n\n'
        )
        (sub / f"n{i:06d}.md").write_text(f"{front}# Note {i}\n\n{text}\n", encoding="utf-8")
    return open_memory(root)


def open_memory(root: Path) -> Any:
    from memdir.service import Memory

    return Memory.open(
        root, overrides={"store": {"git_commit": False, "sync_interval_seconds": 3600.0}}
    )


def build_turns(root: Path, turns: int, seed: int) -> Any:
    """N turn records in threads of 20, written in the ``record_turn`` layout."""
    from memdir.service import Memory

    rng = random.Random(seed)
    Memory.init(root).close()
    for i in range(turns):
        sub = root / "episodes" / "turns" / f"{i // 1000:03d}"
        sub.mkdir(parents=True, exist_ok=True)
        said = " ".join(rng.choice(VOCAB) for _ in range(rng.randint(8, 40)))
        (sub / f"t{i:06d}.md").write_text(
            f'---\nmemory_kind: episodic\ntype: turn\nthread: "t{i // 20:05d}"\n'
            f'user: "u{i % 7}"\ncreated: "2024-01-01T00:00:00Z"\n---\n\n'
            f"## Input\n\n{said}\n\n## Compact\n\n- No tool calls.\n\n## Output\n\n\n",
            encoding="utf-8",
        )
    return open_memory(root)


def embed_run(root: Path, turns: int, seed: int) -> dict[str, Any]:
    from memdir.cli.common import ProgressPrinter

    mem = build_turns(root, turns, seed)
    mem.sync(force=True)  # open() already walked the empty store
    t = time.perf_counter()
    first = mem.embed(progress=ProgressPrinter("embedding"))
    seconds = time.perf_counter() - t
    t = time.perf_counter()
    second = mem.embed()
    again = time.perf_counter() - t
    mem.close()
    return {
        "turns": turns,
        "first_sync": {
            "embedded": first.embedded,
            "cache_hits": first.cache_hits,
            "seconds": round(seconds, 1),
            "texts_per_s": round(first.embedded / seconds, 1) if seconds else 0.0,
        },
        "second_sync": {"embedded": second.embedded, "seconds": round(again, 3)},
    }


def fill_vectors(mem: Any, seed: int) -> int:
    """One random unit vector per visible document, stored as if embedded."""
    vectors = mem.vector_index()
    model, dim = vectors.model, vectors.embedder.dim
    rng = np.random.default_rng(seed)
    rows = mem.index.conn.execute(
        "SELECT id, hash FROM docs WHERE hidden = 0 AND zone = 0"
    ).fetchall()
    for lo in range(0, len(rows), 5000):
        vectors.write_passages([int(r[0]) for r in rows[lo : lo + 5000]])
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


def time_after_writes(mem: Any, queries: list[str]) -> dict[str, Any]:
    """Hybrid search just before and just after each of ``len(queries) // 2`` turns."""
    vectors = mem.vector_index()
    before, after, records = [], [], []
    for i in range(len(queries) // 2):
        t = time.perf_counter()
        mem.search(queries[2 * i], limit=10, mode="hybrid")
        before.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        mem.record_turn(
            thread="bench-writes", user="ana", input=queries[2 * i], output=f"answer {i}"
        )
        records.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        mem.search(queries[2 * i + 1], limit=10, mode="hybrid")
        after.append((time.perf_counter() - t) * 1000)
    b50, a50 = statistics.median(before), statistics.median(after)
    b95, a95 = percentile(before, 95), percentile(after, 95)
    return {
        "turns": len(before),
        "vectors": "synthetic, one per document; each new turn embedded by the model",
        "before_ms": {"p50": round(b50, 2), "p95": round(b95, 2)},
        "after_write_ms": {"p50": round(a50, 2), "p95": round(a95, 2)},
        "ratio": {"p50": round(a50 / b50, 2), "p95": round(a95 / b95, 2)},
        # record_turn embeds the turn in a process that searches by meaning (_embed_turn)
        "record_turn_ms": {
            "p50": round(statistics.median(records), 2),
            "p95": round(percentile(records, 95), 2),
        },
        "full_matrix_loads": vectors.full_loads,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", type=Path, help="build the store here and keep it")
    parser.add_argument("--reuse", action="store_true", help="reuse the --keep store if built")
    parser.add_argument("--embed", type=int, help="embed N turn records for real instead")
    parser.add_argument("--vocab", choices=["zipf", "small"], default="zipf")
    parser.add_argument(
        "--writes", type=int, default=20, help="turns recorded between two hybrid searches"
    )
    args = parser.parse_args(argv)
    if args.embed:
        root = args.keep or Path(tempfile.mkdtemp(prefix="memdir-embed-")) / "store"
        try:
            print(embed_run(root, args.embed, args.seed))
        finally:
            if args.keep is None:
                shutil.rmtree(root.parent, ignore_errors=True)
        return 0

    root = args.keep or Path(tempfile.mkdtemp(prefix="memdir-scale-")) / "store"
    rng = random.Random(args.seed + 1)
    words = Words(args.vocab, args.seed)
    queries = [words.query(rng) for _ in range(200)]
    # Every fifth query names a month, so the date signal runs too.
    queries = [q + " in March 2024" if i % 5 == 0 else q for i, q in enumerate(queries)]
    queries = queries[: args.queries]
    fresh = random.Random(args.seed + 2)  # queries no earlier search has embedded
    write_queries = [f"{words.query(fresh)} {i}" for i in range(2 * args.writes)]
    try:
        t = time.perf_counter()
        if args.reuse and (root / ".memdir" / "index.db").is_file():
            mem = open_memory(root)  # built by an earlier run with --keep
            count = int(mem.index.conn.execute("SELECT count(*) FROM vectors").fetchone()[0])
            print(f"reusing {root}: {count} vectors", file=sys.stderr)
        else:
            mem = build(root, args.docs, args.seed, words)
            mem.sync(force=True)  # open() already walked the empty store
            print(
                f"wrote and indexed {args.docs} docs in {time.perf_counter() - t:.1f} s",
                file=sys.stderr,
            )
            t = time.perf_counter()
            count = fill_vectors(mem, args.seed)
            print(
                f"stored passages and {count} synthetic vectors in {time.perf_counter() - t:.1f} s",
                file=sys.stderr,
            )
        vectors = mem.vector_index()
        t = time.perf_counter()
        loaded = vectors._load()
        load_s = time.perf_counter() - t
        t = time.perf_counter()
        snapshot = loaded.snapshot(vectors.quantise_from)  # builds the int8 copy
        int8_s = time.perf_counter() - t
        scorer = snapshot.sealed[0][2] if snapshot.sealed else None  # None below QUANTISE_FROM
        # Bare matrix-vector product for reference.
        matrix = snapshot.matrix
        qv = matrix[0].copy()
        bare = []
        for _ in range(args.queries):
            t = time.perf_counter()
            scores = matrix @ qv
            np.argpartition(-scores, 50)[:50]
            bare.append((time.perf_counter() - t) * 1000)
        results = {
            "docs": count,
            "vocab": args.vocab,
            "matrix_load_s": round(load_s, 2),
            "int8_build_s": round(int8_s, 2),
            "numpy_matvec_ms": {
                "p50": round(statistics.median(bare), 2),
                "p95": round(percentile(bare, 95), 2),
            },
        }
        if scorer is not None:
            first = []
            for _ in range(args.queries):
                t = time.perf_counter()
                scorer.scores(qv)
                first.append((time.perf_counter() - t) * 1000)
            results["int8_pass_ms"] = {
                "p50": round(statistics.median(first), 2),
                "p95": round(percentile(first, 95), 2),
            }
        # The parts of a vector search: embedding the query, then scoring and filtering.
        embedder = mem.embedder()
        embed_ms, search_ms = [], []
        for q in queries:
            t = time.perf_counter()
            qvec = embedder.embed_query(q)
            embed_ms.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            mem.vector_index().search_vector(qvec, limit=10)
            search_ms.append((time.perf_counter() - t) * 1000)
        for name, times in (("query_embedding_ms", embed_ms), ("vector_scoring_ms", search_ms)):
            results[name] = {
                "p50": round(statistics.median(times), 2),
                "p95": round(percentile(times, 95), 2),
            }
        for mode in ("bm25", "vector", "hybrid"):
            results[mode] = time_queries(mem, queries, mode)
        if args.writes:
            results["search_after_a_turn"] = time_after_writes(mem, write_queries)
        mem.close()
    finally:
        if args.keep is None:
            shutil.rmtree(root.parent, ignore_errors=True)
    for key, value in results.items():
        print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
