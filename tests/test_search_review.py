"""Search as an agent reads it: snippets that show the match, a truthful `why`, safe reranking."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from helpers import Letters
from memdir.errors import InvalidInput
from memdir.providers.plugins import hookimpl, manager
from memdir.retrieval import rerank
from memdir.service import Memory
from memdir.vectors import embedder as embeddings
from test_hybrid import _open, _turn

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
    _turn(mem, "t/a1.md", "s1", "ann", "2023-06-03T10:00:00Z", "Which instrument do you play?")
    _turn(mem, "t/a2.md", "s1", "bob", "2023-06-03T10:00:01Z", "The violin, mostly classical.")
    _turn(mem, "t/b1.md", "s2", "ann", "2023-07-20T09:00:00Z", "We went kayaking on the lake.")
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


class _Odd(rerank.Reranker):
    """Answers with one score per text, of which the second is not a usable number."""

    def __init__(self, bad: Any) -> None:
        self.bad = bad

    def score(self, query: str, texts: Sequence[str]) -> Sequence[Any]:
        return [1.0, self.bad, 3.0][: len(texts)]


class _Plugin:
    @hookimpl
    def register_rerankers(self, register: Callable[[str, Callable[..., Any]], None]) -> None:
        register("nan", lambda settings: _Odd(math.nan))
        register("inf", lambda settings: _Odd(math.inf))
        register("text", lambda settings: _Odd("high"))


@pytest.fixture
def odd_rerankers() -> Iterator[None]:
    found = _Plugin()
    manager().register(found)
    rerank.clear_cache()
    yield
    manager().unregister(found)
    rerank.clear_cache()


@pytest.mark.parametrize("provider", ["nan", "inf", "text"])
def test_a_reranker_score_that_is_no_finite_number_leaves_the_order(
    odd_rerankers: None, store_root: Path, provider: str
) -> None:
    mem = Memory.open(
        store_root,
        overrides={
            "store": {"git_commit": False},
            "embeddings": {"enabled": False},
            "rerank": {"provider": provider},
        },
    )
    for name, times in (("a", 3), ("b", 2), ("c", 1)):
        mem.write(f"notes/{name}.md", f"# {name}\n\n{'morning ' * times}walk\n")
    hits = mem.search("morning", mode="bm25", limit=3)
    assert [h.path for h in hits] == ["notes/a.md", "notes/b.md", "notes/c.md"]
    for hit in hits:
        assert "not a finite number" in hit.why["rerank_error"]
        assert math.isfinite(hit.score) and "rerank_rank" not in hit.why


def test_a_where_filter_with_a_list_or_mapping_value_is_invalid_input(store_root: Path) -> None:
    mem = Memory.open(
        store_root, overrides={"store": {"git_commit": False}, "embeddings": {"enabled": False}}
    )
    mem.write("notes/a.md", "---\ntags: [deploy, ops]\n---\n# Deploy\n\nShip it.\n")
    assert [h.path for h in mem.search("deploy", where={"tags": "ops"})] == ["notes/a.md"]
    for value in (["deploy", "ops"], {"name": "deploy"}):
        with pytest.raises(InvalidInput, match="'tags' needs one value"):
            mem.search("deploy", where={"tags": value})


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
    _turn(mem, "t/a.md", "s1", "ann", "2024-01-01T10:00:00Z", "Ann brews black tea daily.")
    mem.search("what tea does Quincy brew on sundays", mode="hybrid")
    mem.search("what tea does Ann brew on sundays", mode="hybrid")
    # A visible user's name leaves the embedded query; a quarantined file names no user.
    assert QUERIES == ["what tea does Quincy brew on sundays", "what tea does brew on sundays"]
