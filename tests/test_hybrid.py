"""Hybrid search signals (previous turn, thread, dates), purge of vector rows, search CLI;
snippets that show the match and a truthful `why`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import Letters, write_turn_page
from memdir.cli import cli
from memdir.errors import InvalidInput, InvalidQuery
from memdir.files.store import Store
from memdir.index.search import words
from memdir.providers.plugins import hookimpl, manager
from memdir.retrieval.datehints import Window, closeness, names_a_date, parse_time, windows
from memdir.retrieval.userhints import named_users, without_users
from memdir.service import Memory
from memdir.vectors import embedder as embeddings


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return Store.init(tmp_path / "store")


def _open(root: Path, provider: str = "letters", **search: float) -> Memory:
    return Memory.open(
        root,
        overrides={
            "store": {"git_commit": False},
            "embeddings": {"provider": provider},
            "search": dict(search),
        },
    )


def _conversation(mem: Memory) -> None:
    write_turn_page(
        mem, "t/a1.md", "s1", "ann", "2023-06-03T10:00:00Z", "Which instrument do you play?"
    )
    write_turn_page(
        mem, "t/a2.md", "s1", "bob", "2023-06-03T10:00:01Z", "The violin, mostly classical."
    )
    write_turn_page(
        mem, "t/a3.md", "s1", "ann", "2023-06-03T10:00:02Z", "Lovely, see you at rehearsal."
    )
    write_turn_page(
        mem, "t/b1.md", "s2", "ann", "2023-07-20T09:00:00Z", "We went kayaking on the lake."
    )
    write_turn_page(mem, "t/b2.md", "s2", "bob", "2023-07-20T09:00:01Z", "Sounds fun, was it cold?")


def test_dates_named_in_a_query() -> None:
    day = windows("What did Maria start on 3 June, 2023?")
    assert day == [Window(datetime(2023, 6, 3, tzinfo=UTC), datetime(2023, 6, 4, tzinfo=UTC))]
    assert windows("the week before August 3, 2023")[0].start == datetime(2023, 8, 3, tzinfo=UTC)
    assert windows("on 2023-02-01")[0].end == datetime(2023, 2, 2, tzinfo=UTC)
    month = windows("Where did Joanna travel in July 2022?")
    assert month == [Window(datetime(2022, 7, 1, tzinfo=UTC), datetime(2022, 8, 1, tzinfo=UTC))]
    assert windows("in December 2022")[0].end == datetime(2023, 1, 1, tzinfo=UTC)
    assert windows("on 31 February, 2023") == []  # no such day
    assert windows("may I see the march of time") == []
    assert len(windows("between 11 August 2023 and 15 August 2023")) == 2
    inside = parse_time("2022-07-15T10:00:00Z")
    assert inside is not None and closeness(inside, month, 7.0) == 1.0
    week_after = parse_time("2022-08-08T00:00:00+00:00")
    assert week_after is not None and closeness(week_after, month, 7.0) == pytest.approx(0.5)
    assert parse_time("not a date") is None and parse_time(None) is None


def _span(found: list[Window]) -> list[tuple[str, str]]:
    return [(w.start.date().isoformat(), w.end.date().isoformat()) for w in found]


def test_weeks_parts_seasons_and_years_named_in_a_query() -> None:
    assert _span(windows("the second week of November 2023")) == [("2023-11-08", "2023-11-15")]
    assert _span(windows("the last week of February, 2024")) == [("2024-02-23", "2024-03-01")]
    assert _span(windows("early June 2023")) == [("2023-06-01", "2023-06-11")]
    assert _span(windows("mid-July 2022")) == [("2022-07-11", "2022-07-21")]
    assert _span(windows("late in April 2021")) == [("2021-04-21", "2021-05-01")]
    assert _span(windows("What state did Joanna visit in summer 2021?")) == [
        ("2021-06-01", "2021-09-01")
    ]
    assert _span(windows("the winter of 2022")) == [
        ("2022-01-01", "2022-03-01"),
        ("2022-12-01", "2023-01-01"),
    ]
    assert _span(windows("beach trips in 2023")) == [("2023-01-01", "2024-01-01")]
    assert _span(windows("a picture shared on December 1,2023")) == [("2023-12-01", "2023-12-02")]
    assert windows("2000 people came") == [] and windows("summer 12345") == []
    # A day whose window would end after year 9999 names nothing (it raised before).
    assert windows("on 31 December 9999") == windows("9999-12-31") == []
    assert _span(windows("30 December 9999")) == [("9999-12-30", "9999-12-31")]


def test_a_month_without_a_year_is_placed_in_the_years_given() -> None:
    assert windows("When did Melanie go camping in June?") == []  # no year to place it in
    assert _span(windows("When did Melanie go camping in June?", years=[2023, 2022])) == [
        ("2022-06-01", "2022-07-01"),
        ("2023-06-01", "2023-07-01"),
    ]
    assert _span(windows("the second week of November", years=[2023])) == [
        ("2023-11-08", "2023-11-15")
    ]
    assert windows("may I see the march of time", years=[2023]) == []
    # A year in the query wins over the years given.
    assert _span(windows("in May 2021", years=[2023])) == [("2021-05-01", "2021-06-01")]


_DATE_WORDS = st.sampled_from(
    "in of the early mid- late summer winter spring fall second last week June may "
    "December 1, 2023 2024 9998 9999 0000 31 29 February , 1st 4th during".split()
)


_DATES = st.builds(
    "{} {} {}, {}".format,
    st.sampled_from(["on", "early", "late", "the last week of", "in"]),
    st.integers(min_value=0, max_value=40),
    st.sampled_from(["December", "Feb", "june"]),
    st.sampled_from([0, 1, 1969, 2023, 9998, 9999, 12000]),
) | st.builds(
    "{}-{:02d}-{:02d}".format,
    st.sampled_from([1, 2023, 9999]),
    st.integers(min_value=0, max_value=13),
    st.integers(min_value=0, max_value=32),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_DATE_WORDS | _DATES | st.text(max_size=6), max_size=10).map(" ".join),
    st.sets(st.integers(min_value=-5, max_value=12000), max_size=4),
)
def test_date_hints_never_raise_and_every_window_is_a_range(text: str, years: set[int]) -> None:
    found = windows(text, years=years)
    for window in found:
        assert window.start < window.end
        assert window.start.tzinfo is not None
    if found:
        assert names_a_date(text)  # the cheap test never hides a date


def test_a_thread_of_one_document_lifts_nothing(toy: None, root: Path) -> None:
    """The thread signals lift a document by what its thread holds; in a thread of one
    document that is the document itself, so its match counted twice and a one-turn
    thread's turn outranked a note that matched better."""
    mem = _open(root)
    _conversation(mem)
    write_turn_page(
        mem, "t/c1.md", "s3", "ann", "2023-08-01T09:00:00Z", "Is the violin rehearsal on?"
    )
    mem.write("notes/violin.md", "# Violin rehearsal\n\nViolin rehearsal is on Tuesdays.\n")
    hits = {h.path: h for h in mem.search("violin rehearsal", mode="hybrid", limit=10)}
    alone = hits["t/c1.md"].why
    assert "thread_boost" not in alone and "thread_match_boost" not in alone
    assert "thread_boost" in hits["t/a2.md"].why  # a thread of three still lifts its turns
    mem.forget("t/b2.md")  # a thread left with one visible document is one too
    again = {h.path: h for h in mem.search("kayaking lake", mode="hybrid", limit=10)}
    assert "thread_boost" not in again["t/b1.md"].why
    mem.close()


def test_reply_found_by_the_question_it_answers(toy: None, root: Path) -> None:
    mem = _open(root)
    _conversation(mem)
    hits = mem.search("which instrument", mode="hybrid", limit=5, path_prefix="t/")
    by_path = {h.path: h for h in hits}
    # The reply does not contain the words; its passage context (the question) does.
    assert "bm25_rank" in by_path["t/a2.md"].why
    assert mem.search("which instrument", mode="bm25", path_prefix="t/a2") == []
    assert by_path["t/a1.md"].why["thread_rank"] == 1
    assert "thread_match_boost" in by_path["t/a2.md"].why
    row = mem.index.conn.execute("SELECT context FROM passages_fts WHERE body LIKE 'Lovely%'")
    assert row.fetchone()[0] == "The violin, mostly classical."
    mem.close()


@pytest.mark.parametrize(
    ("said", "query", "when"),
    [
        ("I baked bread today", "on 20 May, 2023", ("2023-03-01", "2023-05-20")),
        # A month without a year is looked for in the candidates' years.
        ("We went camping by the lake", "in June", ("2023-08-10", "2023-06-10")),
    ],
)
def test_date_in_the_query_lifts_turns_of_that_date(
    toy: None, root: Path, said: str, query: str, when: tuple[str, str]
) -> None:
    mem = _open(root, thread_weight=0.0, thread_boost=0.0)
    write_turn_page(mem, "t/x.md", "s1", "ann", f"{when[0]}T10:00:00Z", said + ".")
    write_turn_page(mem, "t/y.md", "s2", "ann", f"{when[1]}T10:00:00Z", said + "!")
    plain = mem.search(said, mode="hybrid", limit=2, path_prefix="t/")
    dated = mem.search(f"{said} {query}", mode="hybrid", limit=2, path_prefix="t/")
    assert dated[0].path == "t/y.md" and dated[0].why["date_boost"] == pytest.approx(0.2)
    assert dated[1].why["date_boost"] < 0.2
    assert "date_boost" not in plain[0].why
    mem.close()


def test_purge_drops_vectors_passages_and_thread_words(toy: None, root: Path) -> None:
    mem = _open(root)
    _conversation(mem)
    mem.embed()
    conn = mem.index.conn
    doc_id = conn.execute("SELECT id FROM docs WHERE path = 't/a2.md'").fetchone()[0]
    vectors_before = conn.execute("SELECT count(*) FROM vectors").fetchone()[0]
    mem.forget("t/a2.md", purge=True)
    # No vector sync has run since: the purge itself removed every derived row.
    for table, column in (
        ("chunks", "doc_id"),
        ("embedded", "doc_id"),
        ("passage_links", "doc_id"),
    ):
        assert (
            conn.execute(f"SELECT count(*) FROM {table} WHERE {column} = ?", (doc_id,)).fetchone()[
                0
            ]
            == 0
        ), table
    assert (
        conn.execute("SELECT count(*) FROM passages_fts WHERE rowid = ?", (doc_id,)).fetchone()[0]
        == 0
    )
    assert conn.execute("SELECT count(*) FROM vectors").fetchone()[0] == vectors_before - 1
    for (text,) in conn.execute("SELECT context FROM passages_fts"):
        assert "violin" not in text
    for (text,) in conn.execute("SELECT body FROM threads_fts"):
        assert "violin" not in text
    # The next turn's context is now the turn before the purged one.
    row = conn.execute("SELECT context FROM passages_fts WHERE body LIKE 'Lovely%'").fetchone()
    assert row[0] == "Which instrument do you play?"
    for mode in ("bm25", "vector", "hybrid"):
        assert "t/a2.md" not in {h.path for h in mem.search("violin classical", mode=mode)}
    mem.close()


def test_superseded_turn_leaves_thread_and_context(toy: None, root: Path) -> None:
    mem = _open(root)
    _conversation(mem)
    mem.embed()
    mem.forget("t/b1.md")
    for mode in ("vector", "hybrid", "auto"):
        assert "t/b1.md" not in {h.path for h in mem.search("kayaking lake", mode=mode)}
    bodies = " ".join(r[0] for r in mem.index.conn.execute("SELECT body FROM threads_fts"))
    assert "kayaking" not in bodies and "cold" in bodies
    mem.close()


def _cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    res = CliRunner().invoke(cli, list(args), env=env)
    return res.exit_code, res.stdout, res.stderr


def test_search_cli_modes_notes_and_errors(toy: None, root: Path) -> None:
    with _open(root) as mem:
        _conversation(mem)
    env = {"MEMDIR_EMBEDDINGS_PROVIDER": "letters", "MEMDIR_STORE_GIT_COMMIT": "false"}
    r = str(root)
    code, out, err = _cli("search", "violin", "--mode", "hybrid", "--json", "--root", r, env=env)
    assert code == 0, err
    import json

    hits = json.loads(out)
    assert hits[0]["path"] == "t/a2.md"
    assert hits[0]["why"]["mode"] == "hybrid" and hits[0]["why"]["bm25_rank"] == 1
    assert "nearest by meaning" not in err
    code, out, err = _cli("search", "violin", "--mode", "bm25", "--json", "--root", r, env=env)
    assert code == 0 and json.loads(out)[0]["why"]["mode"] == "bm25"
    # No document holds a word of the query: vectors still answer, and the CLI says so.
    code, out, err = _cli("search", "xylophone", "--mode", "hybrid", "--root", r, env=env)
    assert code == 0 and out.strip() and "note: no result contains a word" in err
    code, out, err = _cli("search", " ?!.. ", "--root", r, env=env)
    assert code != 0 and err.startswith("error: ") and "no searchable words" in err
    code, out, err = _cli("search", "violin " * 2000, "--mode", "vector", "--root", r, env=env)
    assert code == 0 and "t/a2.md" in out  # far past the model window: truncated, works
    # A missing model package: auto falls back to bm25 with a note naming the extra.
    absent = {**env, "MEMDIR_EMBEDDINGS_PROVIDER": "absent"}
    code, out, err = _cli("search", "violin", "--root", r, env=absent)
    assert code == 0 and "t/a2.md" in out
    assert "note: keyword search only" in err and "memdir[vectors]" in err
    code, out, err = _cli("search", "violin", "--mode", "hybrid", "--root", r, env=absent)
    assert code != 0 and "memdir[vectors]" in err


def test_reindex_vectors_after_a_model_switch(toy: None, root: Path) -> None:
    with _open(root) as mem:
        _conversation(mem)
        mem.embed()
    env = {"MEMDIR_EMBEDDINGS_PROVIDER": "letters2", "MEMDIR_STORE_GIT_COMMIT": "false"}
    r = str(root)
    code, out, err = _cli("search", "violin", "--mode", "vector", "--root", r, env=env)
    assert code != 0 and "memdir reindex --vectors" in err and "letters-v1" in err
    code, out, err = _cli("search", "violin", "--root", r, env=env)
    assert code == 0 and "t/a2.md" in out and "memdir reindex --vectors" in err
    code, out, err = _cli("reindex", "--vectors", "--root", r, env=env)
    assert code == 0, err
    assert "embedding " in err and "embedded " in out
    code, out, err = _cli("search", "violin", "--mode", "vector", "--root", r, env=env)
    assert code == 0 and "t/a2.md" in out and err == ""


def test_a_turn_moved_to_another_thread_leaves_the_old_one(toy: None, root: Path) -> None:
    mem = _open(root)
    _conversation(mem)
    mem.embed()
    write_turn_page(
        mem, "t/a2.md", "s9", "bob", "2023-06-03T10:00:01Z", "The violin, mostly classical."
    )
    mem.embed()
    conn = mem.index.conn
    rows = dict(
        conn.execute(
            "SELECT t.thread, f.body FROM thread_rows t JOIN threads_fts f ON f.rowid = t.row"
        ).fetchall()
    )
    assert "violin" not in rows["s1"] and "violin" in rows["s9"]
    row = conn.execute("SELECT context FROM passages_fts WHERE body LIKE 'Lovely%'").fetchone()
    assert row[0] == "Which instrument do you play?"
    mem.close()


def test_a_large_backlog_keeps_auto_search_keyword_only(toy: None, root: Path) -> None:
    mem = Memory.open(
        root,
        overrides={
            "store": {"git_commit": False},
            "embeddings": {"provider": "letters", "inline_limit": 2},
        },
    )
    for n in range(4):
        mem.write(f"notes/n{n}.md", f"# Note {n}\n\nzebra crossing number {n}\n")
    mode, note = mem.search_mode("auto")
    assert mode == "bm25" and note is not None and "reindex --vectors" in note
    assert all(h.why["mode"] == "bm25" for h in mem.search("zebra"))
    assert mem.vector_index().pending_count() >= 4
    mem.embed()
    assert mem.vector_index().pending_count() == 0
    assert mem.search_mode("auto") == ("hybrid", None)
    mem.close()
    off = Memory.open(root, overrides={"embeddings": {"enabled": False}})
    with pytest.raises(InvalidInput, match="disabled"):
        off.search("zebra", mode="vector")
    off.close()


def test_one_large_file_keeps_auto_search_keyword_only(toy: None, root: Path) -> None:
    mem = Memory.open(
        root,
        overrides={
            "store": {"git_commit": False},
            "embeddings": {"provider": "letters", "inline_limit": 50},
        },
    )
    mem.embed()
    mem.write("notes/big.md", "# Big\n\n" + "zebra crossing, " * 5000)  # 80 KB, one file
    pending, size = mem.vector_index().pending()
    assert pending == 1 and size > 50 * 1000
    mode, note = mem.search_mode("auto")
    assert mode == "bm25" and note is not None and "bytes" in note
    mem.close()


def test_users_named_in_a_query() -> None:
    users = ["Melanie", "Caroline", "x", "ann-marie"]
    assert named_users("What did Melanie paint recently?", users) == ["Melanie"]
    assert named_users("melanie's and CAROLINE’s plans", users) == ["Melanie", "Caroline"]
    assert (
        named_users("Melanies painting, x marks the spot", users) == []
    )  # whole words; x too short
    assert named_users("did ann-marie call?", users) == ["ann-marie"]
    assert named_users("did ann call?", users) == []
    assert without_users("What did Melanie's kids paint?", ["Melanie"]) == "What did kids paint?"
    assert without_users("Melanie?", ["Melanie"]) == "Melanie?"  # nothing else left


def test_a_named_user_lifts_their_turns_and_leaves_the_query_vector(
    toy: None, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem = _open(root, thread_weight=0.0, thread_boost=0.0, date_boost=0.0)
    write_turn_page(
        mem, "t/ann.md", "s1", "ann", "2023-03-01T10:00:00Z", "I baked sourdough bread today."
    )
    write_turn_page(
        mem, "t/bob.md", "s2", "bob", "2023-03-01T10:00:00Z", "I baked sourdough bread today."
    )
    mem.embed()
    embedder = mem.embedder()
    seen: list[str] = []
    real = embedder.embed

    def recording(texts: list[str]) -> object:
        seen.extend(texts)
        return real(texts)

    monkeypatch.setattr(embedder, "embed", recording)
    for name in ("bob", "Ann"):
        hits = mem.search(f"what did {name} bake", mode="hybrid", limit=2, path_prefix="t/")
        assert hits[0].path == f"t/{name.lower()}.md"
        assert hits[0].why["user_boost"] == pytest.approx(0.05)
        assert "user_boost" not in hits[1].why
    # Both queries are embedded as "what did bake": the second is the cached embedding.
    assert seen == ["what did bake"]
    plain = mem.search("who baked bread", mode="hybrid", limit=2, path_prefix="t/")
    assert all("user_boost" not in h.why for h in plain)
    mem.close()


def test_the_turns_next_to_a_candidate_lift_it_by_their_scores(toy: None, root: Path) -> None:
    """With the neighbour boost on, a turn gains the weight times the fused score of the
    turns just before and after it in its thread; a forgotten turn is no neighbour. (`why`
    shows figures to five places.)"""
    mem = _open(root, thread_weight=0.0, thread_boost=0.0, date_boost=0.0, neighbour_boost=0.5)
    _conversation(mem)
    hits = {h.path: h for h in mem.search("violin", mode="hybrid", limit=10, path_prefix="t/")}
    rrf = {path: hit.why["rrf"] for path, hit in hits.items()}
    assert hits["t/a1.md"].why["neighbour_boost"] == pytest.approx(0.5 * rrf["t/a2.md"], abs=1e-4)
    both = 0.5 * (rrf["t/a1.md"] + rrf["t/a3.md"])
    assert hits["t/a2.md"].why["neighbour_boost"] == pytest.approx(both, abs=1e-4)
    assert hits["t/b1.md"].why["neighbour_boost"] == pytest.approx(0.5 * rrf["t/b2.md"], abs=1e-4)
    mem.forget("t/a2.md")
    hits = {h.path: h for h in mem.search("violin", mode="hybrid", limit=10, path_prefix="t/")}
    assert "t/a2.md" not in hits
    lift = 0.5 * hits["t/a3.md"].why["rrf"]
    assert hits["t/a1.md"].why["neighbour_boost"] == pytest.approx(lift, abs=1e-4)
    mem.close()


def test_results_after_the_fifth_show_threads_not_yet_shown(toy: None, root: Path) -> None:
    mem = _open(root)
    for i in range(7):
        write_turn_page(
            mem, f"t/a{i}.md", "s1", "ann", f"2023-03-01T10:00:0{i}Z", f"Bread bread loaf {i}."
        )
    write_turn_page(
        mem, "t/b.md", "s2", "bob", "2023-04-01T10:00:00Z", "Rain again, and some bread."
    )
    hits = mem.search("bread loaf", mode="hybrid", limit=8, path_prefix="t/")
    paths = [h.path for h in hits]
    assert all(p.startswith("t/a") for p in paths[:5])
    assert paths[5] == "t/b.md"
    assert sorted(paths[6:]) == sorted(
        f"t/a{i}.md" for i in range(7) if f"t/a{i}.md" not in paths[:5]
    )
    # Scores are not re-ordered, only the positions after the fifth.
    assert hits[5].score < hits[6].score
    mem.close()


_QUERY_WORDS = st.sampled_from(
    "ann bob Ann's violin lake in June 3 June, 2023 summer 2023 the second week of July "
    '31 December 9999 ( ) " * : - NEAR AND OR NOT ^ 🎻 ünïcödé'.split()
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(query=st.lists(_QUERY_WORDS | st.text(max_size=8), max_size=12).map(" ".join))
def test_any_string_is_a_query_in_every_mode(toy: None, tmp_path: Path, query: str) -> None:
    root = tmp_path / "store"
    if not root.exists():
        Store.init(root, git=False)
        with _open(root) as mem:
            _conversation(mem)
    with _open(root) as mem:
        for mode in ("bm25", "vector", "hybrid"):
            try:
                hits = mem.search(query, mode=mode, limit=3)
            except InvalidQuery:
                assert not words(query)  # only a query with no words is refused
                continue
            assert len(hits) <= 3 and all((root / h.path).is_file() for h in hits)


FILLER = " ".join(f"Paragraph {n} talks about capacity planning for storage." for n in range(12))


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_a_snippet_shows_the_words_found_far_into_a_document(
    toy: None, store_root: Path, mode: str
) -> None:
    mem = _open(store_root)
    body = f"# Failover design\n\n{FILLER}\n\nThe handshake word is xylophone.\n"
    mem.write("notes/design.md", body)
    mem.write("notes/short.md", "# Xylophone lessons\n\nA xylophone teacher on Mondays.\n")
    hits = {h.path: h for h in mem.search("xylophone handshake", mode=mode, limit=5)}
    far = hits["notes/design.md"].snippet
    assert "xylophone" in far and "handshake" in far
    assert far.startswith("…") and "Paragraph 0 " not in far
    assert len(far) <= 160
    # A match at the start of a body keeps the start, as before.
    assert hits["notes/short.md"].snippet.startswith("Xylophone lessons")


def test_a_hit_found_by_meaning_alone_shows_its_best_chunk(toy: None, store_root: Path) -> None:
    chunks = {"provider": "letters", "chunk_tokens": 8, "chunk_overlap": 0}
    mem = Memory.open(store_root, overrides={"store": {"git_commit": False}, "embeddings": chunks})
    head = " ".join(["banana cabana"] * 12)
    mem.write("notes/mixed.md", f"# Fruit\n\n{head}.\n\nFizz buzz jazz quiz zzz.\n")
    # "zzzzz" is no word of the note: only the vector side (letter counts) can find it.
    hits = mem.search("zzzzz", mode="vector", limit=1)
    assert hits and hits[0].path == "notes/mixed.md"
    assert hits[0].snippet.startswith("…") and "jazz" in hits[0].snippet


def test_why_rrf_is_the_fusion_of_ranks_and_the_score_adds_the_boosts(
    toy: None, store_root: Path
) -> None:
    mem = _open(store_root)
    write_turn_page(
        mem, "t/a1.md", "s1", "ann", "2023-06-03T10:00:00Z", "Which instrument do you play?"
    )
    write_turn_page(
        mem, "t/a2.md", "s1", "bob", "2023-06-03T10:00:01Z", "The violin, mostly classical."
    )
    write_turn_page(
        mem, "t/b1.md", "s2", "ann", "2023-07-20T09:00:00Z", "We went kayaking on the lake."
    )
    k = mem.settings.search.rrf_k
    hits = mem.search("which instrument does bob play, the violin?", mode="hybrid", limit=5)
    assert any(name.endswith("_boost") for h in hits for name in h.why)
    for hit in hits:
        ranks = [hit.why[name] for name in ("bm25_rank", "vector_rank") if name in hit.why]
        assert hit.why["rrf"] == pytest.approx(sum(1 / (k + r) for r in ranks), abs=1e-5)
        boosts = sum(v for name, v in hit.why.items() if name.endswith("_boost"))
        assert hit.score == pytest.approx(hit.why["rrf"] + boosts, abs=1e-4)


def test_keyword_fallback_note_when_embeddings_are_off(store_root: Path) -> None:
    mem = Memory.open(
        store_root, overrides={"store": {"git_commit": False}, "embeddings": {"enabled": False}}
    )
    mem.write("notes/a.md", "# Tea\n\nGreen tea in the morning.\n")
    mode, note = mem.search_mode()
    assert mode == "bm25" and note is not None and note.startswith("keyword search only:")
    assert mem.search("tea")[0].why["fallback"] == note


QUERIES: list[str] = []


class _Recording(Letters):
    """Letter counts; remembers each query it embeds."""

    def embed_query(self, text: str) -> Any:
        QUERIES.append(text)
        return super().embed_query(text)


class _EmbedderPlugin:
    @hookimpl
    def register_embedders(self, register: Callable[[str, Callable[..., Any]], None]) -> None:
        register("recording", lambda settings: _Recording("recording-v1"))


@pytest.fixture
def recording() -> Iterator[None]:
    found = _EmbedderPlugin()
    manager().register(found)
    embeddings.clear_cache()
    QUERIES.clear()
    yield
    manager().unregister(found)
    embeddings.clear_cache()


def test_a_user_known_only_from_quarantine_is_no_user_hint(
    recording: None, store_root: Path
) -> None:
    (store_root / "quarantine" / "misfit.md").write_text(
        "---\nuser: Quincy\n---\n# Misfit\n\nQuincy brews green tea.\n", encoding="utf-8"
    )
    mem = _open(store_root, provider="recording")
    write_turn_page(
        mem, "t/a.md", "s1", "ann", "2024-01-01T10:00:00Z", "Ann brews black tea daily."
    )
    mem.search("what tea does Quincy brew on sundays", mode="hybrid")
    mem.search("what tea does Ann brew on sundays", mode="hybrid")
    # A visible user's name leaves the embedded query; a quarantined file names no user.
    assert QUERIES == ["what tea does Quincy brew on sundays", "what tea does brew on sundays"]
