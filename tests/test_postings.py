"""BM25 from cached postings: FTS5's own ranking, scores and snippets, never a stale one."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from memdir.index import postings
from memdir.index.search import Filters, Hit, bm25
from memdir.service import Memory

WORDS = "deploy deploys deployed canary rollback cache latency budget timeout alert".split()
FILLER = [f"{a}{b}" for a in ("al", "be", "ga", "de", "ep", "ze", "et", "th") for b in "aeiouyxz"]

CACHED = postings.Tuning(numpy_min=0, cache_min=0)
FTS5 = postings.Tuning(numpy_min=10**12)
QUERIES = [
    "deploy",
    "canary rollback",
    "deploy deploys deployed",  # three words, one token: each phrase counts, as in FTS5
    "latency budget timeout alert",
    "the",  # stopwords only: kept
    "Cache? (latency) AND -budget*",
]


def _doc(rng: random.Random, n: int) -> str:
    body = " ".join(
        rng.choice(WORDS if rng.random() < 0.06 else FILLER) for _ in range(20 + n % 60)
    )
    kind = "semantic" if n % 3 == 0 else "episodic"
    title = rng.choice(WORDS) if n % 5 == 0 else rng.choice(FILLER)
    return f"---\ntitle: {title} {n}\nmemory_kind: {kind}\nowner: o{n % 4}\n---\nthe {body}\n"


def _fill(root: Path, count: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    for n in range(count):
        folder = root / ("wiki" if n % 2 else "episodes") / f"d{n % 7}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"doc-{n}.md").write_text(_doc(rng, n), encoding="utf-8")


def _key(hits: list[Hit]) -> list[tuple[str, float, str]]:
    return [(h.path, h.score, h.snippet) for h in hits]


def _both(conn: sqlite3.Connection, query: str, filters: Filters, limit: int, offset: int = 0):  # type: ignore[no-untyped-def]
    fts = bm25(conn, query, filters, limit, offset=offset, tuning=FTS5)
    cached = bm25(conn, query, filters, limit, offset=offset, tuning=CACHED)
    return fts, cached


def _cached_terms(conn: sqlite3.Connection) -> dict[str, int]:
    return {str(t): int(s) for t, s in conn.execute("SELECT term, seq FROM fts_postings")}


@pytest.fixture
def big(mem: Memory) -> Memory:
    _fill(mem.root, 300)
    mem.sync()
    return mem


FILTERS = [
    Filters(),
    Filters(path_prefix="wiki/d3/"),
    Filters(kind="semantic"),
    Filters(where=(("owner", "o2"),)),
]


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("filters", FILTERS)
def test_cached_ranking_is_fts5_ranking(big: Memory, query: str, filters: Filters) -> None:
    conn = big.index.conn
    for limit, offset in ((10, 0), (5, 3), (400, 0)):
        fts, cached = _both(conn, query, filters, limit, offset)
        assert fts, query
        assert _key(cached) == _key(fts)
        assert [h.why["bm25_rank"] for h in cached] == list(
            range(offset + 1, offset + 1 + len(fts))
        )
    assert _cached_terms(conn)  # the cached path ran and kept its postings


def test_a_word_of_several_tokens_goes_to_fts5(big: Memory) -> None:
    conn = big.index.conn
    (big.root / "notes").mkdir()
    (big.root / "notes" / "x.md").write_text("---\ntitle: x\n---\nsnake_case deploy\n")
    big.sync()
    fts, cached = _both(conn, "snake_case deploy", Filters(), 10)
    assert _key(cached) == _key(fts) and fts[0].path == "notes/x.md"
    assert postings.rank(conn, ["snake_case"], "", [], 10, CACHED) is None


def test_changes_after_caching_are_read_again(big: Memory) -> None:
    conn = big.index.conn
    bm25(conn, "canary rollback deploy", Filters(), 10, tuning=CACHED)
    before = _cached_terms(conn)
    assert {"canari", "rollback", "deploi"} <= set(before)
    root = big.root
    # a new document that wins, one edited to lose every word, one deleted
    (root / "wiki" / "new.md").write_text(
        "---\ntitle: canary rollback\n---\ncanary canary rollback\n"
    )
    winner = next((root / "wiki" / "d1").glob("*.md"))
    edited = bm25(conn, "canary", Filters(), 1, tuning=FTS5)[0].path
    (root / edited).write_text("---\ntitle: plain\n---\nnothing here\n")
    gone = bm25(conn, "rollback", Filters(), 2, tuning=FTS5)[1].path
    (root / gone).unlink()
    winner.write_text(winner.read_text() + "\ndeploy deploy deploy\n")
    big.sync()
    logged = conn.execute("SELECT count(*) FROM fts_log").fetchone()[0]
    assert logged == 4
    for query in ("canary rollback deploy", "canary", "rollback", "deploy"):
        fts, cached = _both(conn, query, Filters(), 20)
        assert _key(cached) == _key(fts), query
    assert _cached_terms(conn) == before  # still the old postings, with the changes on top
    paths = [h.path for h in bm25(conn, "canary", Filters(), 400, tuning=CACHED)]
    assert paths[0] == "wiki/new.md" and edited not in paths and gone not in paths


def test_a_word_with_many_changes_is_recomputed(big: Memory) -> None:
    conn = big.index.conn
    bm25(conn, "deploy", Filters(), 10, tuning=CACHED)
    bm25(conn, "timeout", Filters(), 10, tuning=CACHED)
    seq = _cached_terms(conn)["deploi"]
    for n in range(5):
        (big.root / "wiki" / f"more-{n}.md").write_text(f"---\ntitle: m{n}\n---\ndeploy {n}\n")
        big.sync()
    tight = postings.Tuning(numpy_min=0, cache_min=0, dirty_max=3)
    fts = bm25(conn, "deploy", Filters(), 50, tuning=FTS5)
    assert _key(bm25(conn, "deploy", Filters(), 50, tuning=tight)) == _key(fts)
    assert _cached_terms(conn)["deploi"] > seq
    assert "timeout" not in _cached_terms(conn)  # as stale, dropped rather than kept
    # the log keeps nothing older than the oldest cached word
    oldest = min(_cached_terms(conn).values())
    assert conn.execute("SELECT count(*) FROM fts_log WHERE seq <= ?", (oldest,)).fetchone()[0] == 0


def test_a_large_sync_drops_the_cache(mem: Memory) -> None:
    _fill(mem.root, 40)
    mem.sync()
    conn = mem.index.conn
    bm25(conn, "deploy", Filters(), 10, tuning=CACHED)
    assert _cached_terms(conn)
    postings.note_changes(conn, list(range(1, 30)), postings.Tuning(log_max=10))
    assert not _cached_terms(conn)
    assert conn.execute("SELECT count(*) FROM fts_log").fetchone()[0] == 0
    fts, cached = _both(conn, "deploy", Filters(), 10)
    assert _key(cached) == _key(fts)


def test_postings_are_derived(big: Memory) -> None:
    conn = big.index.conn
    hits = _key(bm25(conn, "latency budget", Filters(), 10, tuning=CACHED))
    big.close()
    (big.root / ".memdir" / "index.db").unlink()
    again = Memory.open(big.root)
    try:
        again.sync()
        conn = again.index.conn
        assert not _cached_terms(conn)
        assert _key(bm25(conn, "latency budget", Filters(), 10, tuning=CACHED)) == hits
    finally:
        again.close()


def test_memory_search_uses_the_same_ranking(big: Memory) -> None:
    hits = big.search("canary rollback", mode="bm25", limit=10)
    assert _key(hits) == _key(bm25(big.index.conn, "canary rollback", Filters(), 10, tuning=FTS5))


@pytest.mark.parametrize(
    ("blob", "values"),
    [(b"\x00", [0]), (b"\x7f\x02v", [127, 2, 118]), (b"\x86\x8d#", [100003]), (b"\x81\x00", [128])],
)
def test_varints(blob: bytes, values: list[int]) -> None:
    assert postings.varints(blob) == values
