"""BM25 of hybrid search's passages from cached postings: FTS5's ranking, never a stale one."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from memdir import records
from memdir.files.store import Store
from memdir.index import postings
from memdir.index.search import Filters, fts_query, query_words
from memdir.service import Memory

WORDS = "deploy canary rollback cache latency budget timeout alert violin lake".split()
FILLER = [f"{a}{b}" for a in ("al", "be", "ga", "de", "ep", "ze", "et", "th") for b in "aeiouyxz"]
CACHED = postings.Tuning(numpy_min=0, cache_min=0)
FTS5 = postings.Tuning(numpy_min=10**12)
PASSAGES = postings.PASSAGES
# 0.1 and 0.7 are not sums of whole numbers: a context word adds them one at a time
WEIGHTS = [0.3, 0.0, 0.1, 0.7, 1.0, 2.5]
QUERIES = [
    "deploy",
    "canary rollback",
    "deploy deploys deployed",  # one token three times: three phrases, as in FTS5
    "latency budget timeout alert",
    "violin",  # rare
    "the",  # stopwords only: kept
]
FILTERS = [
    Filters(),
    Filters(path_prefix="wiki/d3/"),
    Filters(kind="semantic"),
    Filters(where=(("owner", "o2"),)),
]


def _open(root: Path) -> Memory:
    return Memory.open(
        root,
        overrides={"store": {"git_commit": False}, "embeddings": {"provider": "letters"}},
    )


def _text(rng: random.Random, n: int) -> str:
    words = []
    for _ in range(6 + n % 30):
        if rng.random() < 0.12:
            words += [rng.choice(WORDS[:9])] * rng.choice((1, 1, 2, 3, 5))
        else:
            words.append(rng.choice(FILLER))
    if n % 97 == 5:
        words.append("violin")
    return " ".join(words)


def _doc(rng: random.Random, n: int) -> str:
    title = rng.choice(WORDS[:8]) if n % 5 == 0 else rng.choice(FILLER)
    thread = f'thread: "s{n % 9}"\n' if n % 11 else ""
    kind = "semantic" if n % 3 == 0 else "episodic"
    return (
        f"---\ntitle: {title} {n}\nmemory_kind: {kind}\nowner: o{n % 4}\n{thread}"
        f'created: "2024-01-0{1 + n % 7}T10:{n // 60 % 60:02d}:{n % 60:02d}Z"\n---\n'
        f"{_text(rng, n)}\n"
    )


def _path(n: int) -> str:
    return f"{'wiki' if n % 2 else 'episodes'}/d{n % 7}/doc-{n}.md"


@pytest.fixture
def big(toy: None, tmp_path: Path) -> Iterator[Memory]:
    root = Store.init(tmp_path / "store")
    rng = random.Random(3)
    for n in range(320):
        path = root / _path(n)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_doc(rng, n), encoding="utf-8")
    mem = _open(root)
    mem.embed()
    yield mem
    mem.close()


def _fts5(
    conn: sqlite3.Connection, query: str, flt: Filters, depth: int, weight: float
) -> list[tuple[int, float]]:
    """FTS5's ranking of the passages, with its scores (the query of hybrid search)."""
    condition, params = flt.sql("d")
    return [
        (int(r[0]), float(r[1]))
        for r in conn.execute(
            "SELECT p.rowid, bm25(passages_fts, 3.0, 1.0, ?) FROM passages_fts p "
            f"JOIN docs d ON d.id = p.rowid WHERE passages_fts MATCH ?{condition} "
            "ORDER BY bm25(passages_fts, 3.0, 1.0, ?) LIMIT ?",
            (weight, fts_query(query), *params, weight, depth),
        )
    ]


def _cached(
    conn: sqlite3.Connection, query: str, flt: Filters, depth: int, weight: float
) -> list[tuple[int, float]]:
    condition, params = flt.sql("d")
    ranked = postings.rank(
        conn,
        query_words(query),
        condition,
        params,
        depth,
        CACHED,
        table=PASSAGES,
        weights=(3.0, 1.0, weight),
    )
    assert ranked is not None
    return [(int(row["id"]), score) for row, score in ranked]


def _same(
    conn: sqlite3.Connection, query: str, flt: Filters | None = None, depth: int = 400
) -> None:
    flt = flt or Filters()
    for weight in WEIGHTS:
        fts = _fts5(conn, query, flt, depth, weight)
        assert _cached(conn, query, flt, depth, weight) == fts, (query, weight)


def _terms(conn: sqlite3.Connection) -> dict[str, int]:
    return {str(t): int(s) for t, s in conn.execute("SELECT term, seq FROM passage_postings")}


def _logged(conn: sqlite3.Connection) -> set[int]:
    return {int(r[0]) for r in conn.execute("SELECT doc_id FROM passage_log")}


def _id(mem: Memory, path: str) -> int:
    return int(mem.index.conn.execute("SELECT id FROM docs WHERE path = ?", (path,)).fetchone()[0])


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("flt", FILTERS)
def test_cached_passage_ranking_is_fts5_ranking(big: Memory, query: str, flt: Filters) -> None:
    conn = big.index.conn
    for depth in (10, 50, 1000):
        for weight in WEIGHTS:
            fts = _fts5(conn, query, flt, depth, weight)
            assert fts, query
            # the same ids, in the same order, with the same scores to the last bit
            assert _cached(conn, query, flt, depth, weight) == fts, (depth, weight)
    assert _terms(conn)  # the cached path ran and kept its postings
    assert not conn.execute("SELECT 1 FROM fts_postings").fetchone()  # docs_fts's untouched


def test_context_counts_are_stored_per_column(big: Memory) -> None:
    conn = big.index.conn
    _cached(conn, "deploy", Filters(), 10, 0.3)
    ids, w = conn.execute("SELECT ids, w FROM passage_postings WHERE term = 'deploi'").fetchone()
    assert len(w) == 3 * len(ids) // 2  # title, body and context counts (float32 each)
    # a weight never seen before is ranked from the same postings
    _same(conn, "deploy canary")
    assert set(_terms(conn)) == {"deploi", "canari"}


def test_hybrid_lexical_ids_use_the_postings(big: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    conn = big.index.conn
    for weight in (0.3, 0.1, 2.5):
        search = records.replace(big.settings.search, previous_weight=weight)
        monkeypatch.setattr(big.retrieval, "settings", records.replace(big.settings, search=search))
        for query in QUERIES:
            for flt in FILTERS:
                monkeypatch.setattr(postings, "DEFAULT", FTS5)
                fts = big.retrieval._lexical_ids(query, flt, 50)
                monkeypatch.setattr(postings, "DEFAULT", CACHED)
                assert big.retrieval._lexical_ids(query, flt, 50) == fts, (weight, query, flt)
                assert fts == [d for d, _ in _fts5(conn, query, flt, 50, weight)]
    assert {"deploi", "canari", "rollback"} <= set(_terms(conn))


def test_few_matches_and_no_numpy_go_to_fts5(big: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    conn = big.index.conn
    words = query_words("violin")
    weights = (3.0, 1.0, 0.3)
    assert postings.rank(conn, words, "", [], 10, table=PASSAGES, weights=weights) is None
    assert postings.rank(conn, ["snake_case"], "", [], 10, CACHED, table=PASSAGES) is None
    assert postings.rank(conn, words, "", [], 10, CACHED, table=PASSAGES, weights=weights)
    monkeypatch.setattr(postings, "_numpy", lambda: False)
    assert postings.rank(conn, words, "", [], 10, CACHED, table=PASSAGES, weights=weights) is None


def test_inserts_deletes_and_context_updates_are_logged(big: Memory) -> None:
    conn = big.index.conn
    for query in ("canary rollback deploy", "alert"):
        _cached(conn, query, Filters(), 10, 0.3)
    before = _terms(conn)
    assert {"canari", "rollback", "deploi", "alert"} <= set(before)
    root = big.root
    # a new document in a thread that wins on its own and its successor's words ...
    (root / "wiki" / "new.md").write_text(
        '---\ntitle: canary rollback\nthread: "s4"\ncreated: "2024-01-05T10:59:59Z"\n---\n'
        "canary canary rollback alert alert alert\n"
    )
    # ... one in no thread (its context stays empty) ...
    (root / "wiki" / "loose.md").write_text("---\ntitle: loose\n---\nrollback canary deploy\n")
    # ... one edited to lose every word (its successor's context changes with it) ...
    edited = _fts5(conn, "canary", Filters(), 1, 0.3)[0][0]
    edited_path = conn.execute("SELECT path FROM docs WHERE id = ?", (edited,)).fetchone()[0]
    (root / edited_path).write_text(
        '---\ntitle: plain\nthread: "s1"\ncreated: "2024-01-02T10:00:00Z"\n---\nnothing here\n'
    )
    # ... and one deleted
    gone = _fts5(conn, "rollback", Filters(), 2, 0.3)[1][0]
    gone_path = conn.execute("SELECT path FROM docs WHERE id = ?", (gone,)).fetchone()[0]
    (root / gone_path).unlink()
    followers = {
        int(r[0])
        for r in conn.execute(
            "SELECT doc_id FROM passage_links WHERE prev_id IN (?, ?)", (edited, gone)
        )
    }
    big.embed()
    new, loose = _id(big, "wiki/new.md"), _id(big, "wiki/loose.md")
    assert {new, loose, edited, gone} | followers <= _logged(conn)
    for query in ("canary rollback deploy", "canary", "rollback", "alert", "deploy"):
        _same(conn, query)
        for flt in FILTERS:
            _same(conn, query, flt, 20)
    assert _terms(conn) == before  # still the old postings, with the changes on top
    ranked = [d for d, _ in _cached(conn, "canary", Filters(), 400, 0.3)]
    assert {new, loose} <= set(ranked) and edited not in ranked and gone not in ranked


def test_a_context_update_alone_is_logged(big: Memory) -> None:
    conn = big.index.conn
    _cached(conn, "alert timeout", Filters(), 10, 0.3)
    # the last document of thread s2 gets a successor: only that one's context is new
    last = conn.execute(
        "SELECT l.doc_id FROM passage_links l JOIN docs d ON d.id = l.doc_id "
        "WHERE l.thread = 's2' ORDER BY d.created DESC, d.id DESC LIMIT 1"
    ).fetchone()[0]
    (big.root / "wiki" / "after.md").write_text(
        '---\ntitle: after\nthread: "s2"\ncreated: "2024-02-01T00:00:00Z"\n---\nquiet words\n'
    )
    big.embed()
    after = _id(big, "wiki/after.md")
    assert _logged(conn) == {after}
    row = conn.execute("SELECT context FROM passages_fts WHERE rowid = ?", (after,)).fetchone()
    assert (
        row[0]
        == conn.execute("SELECT body FROM passages_fts WHERE rowid = ?", (last,)).fetchone()[0]
    )
    # an update of a context only: the middle document of a thread is edited
    middle = conn.execute(
        "SELECT l.doc_id, d.path FROM passage_links l JOIN docs d ON d.id = l.doc_id "
        "WHERE l.thread = 's3' ORDER BY d.created, d.id LIMIT 1 OFFSET 5"
    ).fetchone()
    follower = conn.execute(
        "SELECT doc_id FROM passage_links WHERE prev_id = ?", (middle[0],)
    ).fetchone()[0]
    path = big.root / middle[1]
    path.write_text(path.read_text() + "\nalert alert timeout alert\n")
    big.embed()
    assert {middle[0], follower} <= _logged(conn)
    for query in ("alert", "timeout", "alert timeout"):
        _same(conn, query)


def test_purge_is_logged(big: Memory) -> None:
    conn = big.index.conn
    _cached(conn, "budget latency", Filters(), 10, 0.3)
    victim = _fts5(conn, "budget", Filters(), 1, 0.3)[0][0]
    path = conn.execute("SELECT path FROM docs WHERE id = ?", (victim,)).fetchone()[0]
    big.forget(path, purge=True)
    assert victim in _logged(conn)
    _same(conn, "budget latency")
    assert victim not in [d for d, _ in _cached(conn, "budget", Filters(), 400, 0.3)]


def test_a_passages_rebuild_drops_the_postings(big: Memory) -> None:
    conn = big.index.conn
    _cached(conn, "deploy cache", Filters(), 10, 0.3)
    assert _terms(conn)
    with big.index.transaction() as wconn:
        big.index.set_meta(wconn, "passages_version", "old")
    # the new layout drops and recreates passages_fts and writes every passage again
    big.embed()
    assert not _terms(conn) and not _logged(conn)
    _same(conn, "deploy cache")
    assert set(_terms(conn)) == {"deploi", "cach"}
    big.embed(rebuild=True)  # clear(): every passage dropped, then written again
    assert not _terms(conn) and not _logged(conn)
    _same(conn, "deploy cache")


def test_postings_read_before_a_write_are_not_kept(big: Memory) -> None:
    conn = big.index.conn
    words = query_words("deploy")
    weights = (3.0, 1.0, 0.3)
    found = postings._rank(conn, PASSAGES, weights, words, "", [], 10, CACHED)
    assert found is not None
    _, fresh, seq, generation = found
    assert fresh and not _terms(conn)
    # a write with nothing cached logs nothing, but what was read before it is stale
    (big.root / "wiki" / "late.md").write_text("---\ntitle: late\n---\ndeploy deploy\n")
    big.embed()
    assert not _logged(conn)
    postings._store(conn, PASSAGES, fresh, seq, generation, CACHED.dirty_max)
    assert not _terms(conn)
    _same(conn, "deploy")


def test_a_large_change_drops_the_cache(big: Memory) -> None:
    conn = big.index.conn
    _cached(conn, "deploy", Filters(), 10, 0.3)
    with big.index.transaction() as wconn:
        postings.note_changes(wconn, range(1, 30), postings.Tuning(log_max=10), PASSAGES)
    assert not _terms(conn) and not _logged(conn)
    _same(conn, "deploy")


def test_passage_postings_are_derived(big: Memory) -> None:
    conn = big.index.conn
    ranked = _cached(conn, "latency budget", Filters(), 10, 0.3)
    big.close()
    (big.root / ".memdir" / "index.db").unlink()
    again = _open(big.root)
    try:
        again.embed()
        conn = again.index.conn
        assert not _terms(conn)
        assert _cached(conn, "latency budget", Filters(), 10, 0.3) == ranked
        assert ranked == _fts5(conn, "latency budget", Filters(), 10, 0.3)
    finally:
        again.close()
