"""The vector index through Memory: caching, hiding, model switch, modes, missing extra."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from helpers import CALLS, Flaky, Letters
from memdir.errors import InvalidQuery, MissingExtra, ModelMismatch, ProviderError
from memdir.files.store import Store
from memdir.index.passages import passage, turn_text
from memdir.service import Memory

Mem = Memory


def _open(root: Path, provider: str = "letters") -> Mem:
    return Mem.open(
        root,
        overrides={"store": {"git_commit": False}, "embeddings": {"provider": provider}},
    )


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return Store.init(tmp_path / "store")


def _seed(mem: Mem) -> None:
    mem.write("notes/sunrise.md", "# Sunrise\n\nI painted a lake sunrise last year.\n")
    mem.write("notes/cat.md", "# Pets\n\nWe adopted a grey cat called Tom.\n")
    mem.write("notes/run.md", "# Running\n\nTraining for the city marathon in spring.\n")


def test_second_sync_embeds_nothing_and_cache_hits_unchanged_text(toy: None, root: Path) -> None:
    mem = _open(root)
    mem.embed()  # the files `init` wrote
    _seed(mem)
    first = mem.embed()
    assert (first.documents, first.embedded, first.cache_hits) == (3, 3, 0)
    again = mem.embed()
    assert (again.documents, again.embedded) == (0, 0)
    # Frontmatter-only edit: the document is re-chunked but its text is a cache hit.
    mem.write(
        "notes/cat.md", "---\ntags: [pets]\n---\n# Pets\n\nWe adopted a grey cat called Tom.\n"
    )
    edited = mem.embed()
    assert (edited.documents, edited.embedded, edited.cache_hits) == (1, 0, 1)
    mem.write("notes/cat.md", "# Pets\n\nWe adopted two cats.\n")
    changed = mem.embed()
    assert (changed.documents, changed.embedded) == (1, 1)
    counts = mem.vector_index().counts()
    assert counts["pending"] == 0
    rows = mem.index.conn.execute(
        "SELECT count(*) FROM chunks c JOIN docs d ON d.id = c.doc_id WHERE d.path LIKE 'notes/%'"
    ).fetchone()
    assert rows[0] == 3
    mem.close()


def test_plugin_vectors_are_stored_as_float32_and_checked(toy: None, root: Path) -> None:
    mem = _open(root, "wide")
    _seed(mem)
    found = mem.search("sunrises painted", mode="vector", limit=3)
    assert found[0].path == "notes/sunrise.md"
    assert found[0].why["vector_score"] == pytest.approx(
        float(
            Letters("x").embed(["sunrises painted"])[0]
            @ Letters("x").embed(["Sunrise\n\nI painted a lake sunrise last year."])[0]
        ),
        abs=0.02,
    )
    mem.close()
    short = _open(Store.init(root.parent / "other"), "short")
    with pytest.raises(ProviderError, match=r"shape \(\d+, 25\).*expected \(\d+, 26\)"):
        short.embed()
    short.close()


def test_auto_search_keeps_to_keywords_when_the_embedder_fails_later(toy: None, root: Path) -> None:
    Flaky.down = False
    mem = _open(root, "flaky")
    _seed(mem)
    assert mem.search("marathon training", limit=3)[0].why["mode"] == "hybrid"
    Flaky.down = True
    try:
        mem.write("notes/swim.md", "# Swimming\n\nLaps in the lake every morning.\n")
        found = mem.search("lake laps", limit=3)
        assert found[0].path == "notes/swim.md" and found[0].why["mode"] == "bm25"
        assert "connection refused" in found[0].why["fallback"]
        for mode in ("vector", "hybrid"):
            with pytest.raises(ProviderError, match="connection refused"):
                mem.search("lake laps", mode=mode)
        # Back up: auto searches wait out the retry period without calling the embedder.
        Flaky.down = False
        CALLS.clear()
        again = mem.search("lake laps", limit=3)
        assert again[0].why["mode"] == "bm25" and "tried again in" in again[0].why["fallback"]
        assert mem.search_mode("auto")[0] == "bm25" and not CALLS
        mem.retrieval._embedder_failed = (0.0, "expired")  # the retry period is over
        assert mem.search("lake laps", limit=3)[0].why["mode"] == "hybrid" and CALLS
    finally:
        Flaky.down = False
        mem.close()


def test_modes_and_why(toy: None, root: Path) -> None:
    mem = _open(root)
    _seed(mem)
    vector = mem.search("sunrises painted", mode="vector", limit=3)
    assert vector[0].path == "notes/sunrise.md"
    assert vector[0].why["mode"] == "vector" and vector[0].why["vector_rank"] == 1
    hybrid = mem.search("marathon training", mode="hybrid", limit=3, path_prefix="notes/")
    assert hybrid[0].path == "notes/run.md"
    assert hybrid[0].why["bm25_rank"] == 1 and hybrid[0].why["vector_rank"] >= 1
    # Vector-only matches carry their vector rank and no bm25 rank.
    assert {h.path for h in hybrid} == {"notes/run.md", "notes/cat.md", "notes/sunrise.md"}
    assert all("bm25_rank" not in h.why and h.why["vector_rank"] for h in hybrid[1:])
    bm = mem.search("marathon", mode="bm25")
    assert [h.path for h in bm] == ["notes/run.md"]
    assert mem.search_mode("auto") == ("hybrid", None)
    for mode in ("bm25", "vector", "hybrid", "auto"):
        for query in ("", "  ?!... "):
            with pytest.raises(InvalidQuery):
                mem.search(query, mode=mode)
    long_query = "painted sunrise " * 500
    assert mem.search(long_query, mode="hybrid")[0].path == "notes/sunrise.md"
    mem.close()


def test_superseded_and_purged_are_never_returned(toy: None, root: Path) -> None:
    mem = _open(root)
    _seed(mem)
    mem.write("notes/old.md", "# Old sunrise\n\nI painted a lake sunrise last year.\n")
    mem.embed()
    assert "notes/old.md" in {h.path for h in mem.search("lake sunrise", mode="vector")}
    mem.forget("notes/old.md")
    mem.forget("notes/cat.md", purge=True)
    for mode in ("bm25", "vector", "hybrid", "auto"):
        found = mem.search("lake sunrise painted cat", mode=mode, limit=50, path_prefix="notes/")
        paths = {h.path for h in found}
        assert "notes/old.md" not in paths, mode
        assert "notes/cat.md" not in paths, mode
        assert "notes/sunrise.md" in paths, mode
    shown = mem.search("lake sunrise", mode="vector", include_superseded=True, limit=50)
    assert "notes/old.md" not in {h.path for h in shown}  # hidden docs carry no vectors
    noted = mem.index.conn.execute(
        "SELECT d.path FROM chunks c JOIN docs d ON d.id = c.doc_id WHERE d.path LIKE 'notes/%'"
    ).fetchall()
    assert sorted(r[0] for r in noted) == ["notes/run.md", "notes/sunrise.md"]
    mem.close()


def test_model_switch_never_mixes_vectors(toy: None, root: Path) -> None:
    mem = _open(root, "letters")
    _seed(mem)
    mem.embed()
    mem.close()
    other = _open(root, "letters2")
    with pytest.raises(ModelMismatch, match=r"letters-v1.*letters-v2.*reindex --vectors"):
        other.search("sunrise", mode="vector")
    mode, note = other.search_mode("auto")
    assert mode == "bm25" and note is not None and "reindex --vectors" in note
    assert other.search("sunrise")[0].path == "notes/sunrise.md"  # keyword search still works
    stats = other.embed(rebuild=True)
    assert stats.embedded >= 3 and stats.cache_hits == 0
    models = {r[0] for r in other.index.conn.execute("SELECT DISTINCT model FROM vectors")}
    assert models == {"letters-v2"}
    assert other.search("sunrise", mode="vector")[0].path == "notes/sunrise.md"
    other.close()


def test_missing_extra_keeps_keyword_search(toy: None, root: Path) -> None:
    mem = _open(root, "absent")
    _seed(mem)
    mode, note = mem.search_mode("auto")
    assert mode == "bm25" and note is not None and "memdir[vectors]" in note
    assert [h.path for h in mem.search("marathon")] == ["notes/run.md"]
    with pytest.raises(MissingExtra, match=r"memdir\[vectors\]"):
        mem.search("marathon", mode="hybrid")
    mem.close()


def test_passage_drops_heading_marks_and_keeps_title() -> None:
    assert passage("Pets", "## Input\n\nWe adopted a cat.\n") == "Pets\nInput\n\nWe adopted a cat."
    assert passage("We adopted", "We adopted a cat.") == "We adopted a cat."


def test_turn_text_keeps_what_was_said() -> None:
    body = "## Input\n\nI adopted a cat.\n\n## Compact\n\n- No tool calls.\n\n## Output\n\nNice!\n"
    assert turn_text(body, with_compact=False) == "I adopted a cat.\nNice!"
    assert turn_text(body, with_compact=True) == "I adopted a cat.\n- No tool calls.\nNice!"
    assert turn_text("# A note\n\ntext\n", with_compact=False) is None


def test_int8_scores_stay_within_their_bounds() -> None:
    pytest.importorskip("onnxruntime")
    from memdir.vectors.scan import Int8Scorer

    rng = np.random.default_rng(5)
    matrix = rng.standard_normal((3000, 48)).astype(np.float32)
    matrix[:100, 0] *= 40.0  # rows with one dominant dimension: a coarse scale
    matrix[100] = 0.0  # an empty row
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    matrix = matrix / np.where(norms > 0, norms, 1.0)
    scorer = Int8Scorer(matrix)
    for i in range(30):
        query = matrix[i * 7] + 0.2 * rng.standard_normal(48).astype(np.float32)
        query /= np.linalg.norm(query)
        approx, bound = scorer.scores(query)
        exact = matrix @ query
        assert approx.shape == exact.shape == bound.shape
        assert np.all(np.abs(exact - approx) <= bound)
        assert float(np.abs(exact - approx).max()) < 0.05  # near, not only bounded
    approx, _ = scorer.scores(np.zeros(48, dtype=np.float32))
    assert not approx.any()


def test_int8_first_pass_returns_the_exact_ranking(toy: None, root: Path) -> None:
    pytest.importorskip("onnxruntime")
    mem = _open(root)
    rng = np.random.default_rng(3)
    letters = "abcdefghijklmnopqrstuvwxyz"
    for i in range(300):
        said = " ".join(
            "".join(rng.choice(list(letters), size=int(rng.integers(2, 9))))
            for _ in range(int(rng.integers(3, 12)))
        )
        folder = "notes/a" if i % 3 else "notes/b"
        mem.write(f"{folder}/n{i:03d}.md", f"# Note {i}\n\n{said}\n")
    mem.embed()
    vectors = mem.vector_index()
    embedder = mem.embedder()
    queries = ["quiet lake sunrise", "zzz xylophone", "a", "marathon training plan"]
    plain = {}
    for query in queries:
        qvec = embedder.embed([query])[0]
        for prefix in (None, "notes/b/"):
            flt = mem.filters(path_prefix=prefix)
            for limit in (1, 10, 120):
                plain[query, prefix, limit] = vectors.search_vector(qvec, limit=limit, filters=flt)
    vectors.quantise_from = 0
    for (query, prefix, limit), want in plain.items():
        qvec = embedder.embed([query])[0]
        got = vectors.search_vector(qvec, limit=limit, filters=mem.filters(path_prefix=prefix))
        assert [h.doc_id for h in got] == [h.doc_id for h in want]
        assert [h.score for h in got] == [h.score for h in want]  # re-scored alike
    assert vectors._matrix is not None and vectors._matrix.seals  # the int8 pass did run
    mem.close()


def test_a_turn_recorded_after_a_search_by_meaning_is_embedded_by_the_write(
    toy: None, root: Path
) -> None:
    with _open(root) as mem:
        _seed(mem)
        mem.search("sunrise", mode="hybrid")  # this process now searches by meaning
        CALLS.clear()
        turn = mem.record_turn(
            thread="ferries", user="ana", input="When does the harbour ferry leave?", output="Noon."
        )
        assert sum(CALLS) >= 1  # the turn's text, embedded before record_turn returned
        assert mem.vector_index().pending()[0] == 0
        CALLS.clear()
        hits = mem.search("harbour ferry leave", mode="vector")
        assert turn.path in [h.path for h in hits]
        assert CALLS == [1]  # the search embedded its query only


def test_a_write_in_a_process_that_never_searched_by_meaning_loads_no_model(
    toy: None, root: Path
) -> None:
    with _open(root) as mem:
        _seed(mem)
        CALLS.clear()
        turn = mem.record_turn(
            thread="ferries", user="ana", input="When does the harbour ferry leave?", output="Noon."
        )
        assert CALLS == []
        hits = mem.search("harbour ferry leave", mode="vector")  # embeds what is waiting
        assert turn.path in [h.path for h in hits]
        assert sum(CALLS) > 1


def test_a_turn_is_acknowledged_even_when_embedding_it_fails(
    toy: None, root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with _open(root) as mem:
        _seed(mem)
        mem.search("sunrise", mode="hybrid")
        embedder = mem.vector_index().embedder
        plain = embedder.embed

        def broken(texts: Any) -> Any:
            raise RuntimeError("the model ran out of memory")

        embedder.embed = broken  # type: ignore[method-assign]
        turn = mem.record_turn(thread="ferries", user="ana", input="Ferry times?", output="Noon.")
        assert "not embedded yet" in caplog.text
        embedder.embed = plain  # type: ignore[method-assign]
        assert mem.turn_show(turn.id).output == "Noon."  # recorded once, on disk
        hits = mem.search("ferry times", mode="vector")  # the search embeds it
        assert turn.path in [h.path for h in hits]
