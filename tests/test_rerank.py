"""Optional reranking: plugin rerankers, the built-in http reranker, failures, hiding."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from http_server import ServiceHandler, fake_service, free_port
from memdir import __version__
from memdir.errors import ConfigError, ProviderError
from memdir.files.store import Store
from memdir.providers.plugins import hookimpl, manager
from memdir.retrieval import rerank
from memdir.service import Memory

SEEN: list[tuple[str, list[str]]] = []


class Counting(rerank.Reranker):
    """Scores a text by how often it says the word the test picked."""

    def __init__(self, word: str) -> None:
        self.word = word

    def score(self, query: str, texts: Sequence[str]) -> Sequence[float]:
        SEEN.append((query, list(texts)))
        return [float(text.lower().split().count(self.word)) for text in texts]


class Failing(rerank.Reranker):
    def score(self, query: str, texts: Sequence[str]) -> Sequence[float]:
        raise ProviderError("the rerank service is down")


class Short(rerank.Reranker):
    def score(self, query: str, texts: Sequence[str]) -> Sequence[float]:
        return [1.0]


class Plugin:
    @hookimpl
    def register_rerankers(self, register: Callable[[str, Callable[..., Any]], None]) -> None:
        register("tea", lambda settings: Counting("tea"))
        register("failing", lambda settings: Failing())
        register("short", lambda settings: Short())
        register("not-one", lambda settings: object())


@pytest.fixture
def plugin() -> Iterator[None]:
    found = Plugin()
    manager().register(found)
    rerank.clear_cache()
    SEEN.clear()
    yield
    manager().unregister(found)
    rerank.clear_cache()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return Store.init(tmp_path / "store")


def _open(root: Path, **rerank_settings: Any) -> Memory:
    return Memory.open(
        root,
        overrides={
            "store": {"git_commit": False},
            "embeddings": {"enabled": False},
            "rerank": rerank_settings,
        },
    )


def _seed(mem: Memory) -> None:
    # BM25 ranks these by how often they say "morning"; the reranker by "tea".
    mem.write("notes/a.md", "# A\n\nmorning morning morning run\n")
    mem.write("notes/b.md", "# B\n\nmorning morning coffee\n")
    mem.write("notes/c.md", "# C\n\nmorning tea tea\n")
    mem.write("notes/d.md", "# D\n\nmorning and tea\n")


def _paths(hits: Sequence[Any]) -> list[str]:
    return [h.path for h in hits]


def _fused(root: Path) -> list[str]:
    """The order without a reranker."""
    plain = _open(root)
    try:
        return _paths(plain.search("morning", mode="bm25", path_prefix="notes/"))
    finally:
        plain.close()


def test_reranker_reorders_the_best_results_and_says_why(plugin: None, root: Path) -> None:
    plain = _open(root)
    _seed(plain)
    plain.close()
    fused = _fused(root)
    assert fused[:2] == ["notes/a.md", "notes/b.md"] and len(fused) == 4

    mem = _open(root, provider="tea", depth=20)
    hits = mem.search("morning", mode="bm25", path_prefix="notes/", limit=2)
    assert _paths(hits) == ["notes/c.md", "notes/d.md"]  # limit applies after reranking
    assert hits[0].why["rerank_rank"] == 1 and hits[0].why["rerank_score"] == 2.0
    assert hits[0].why["rank_before_rerank"] == fused.index("notes/c.md") + 1
    assert hits[0].why["mode"] == "bm25"
    assert hits[0].score == 2.0
    query, texts = SEEN[-1]
    assert query == "morning" and len(texts) == 4  # depth, not limit, candidates
    assert any("tea tea" in t for t in texts)
    # Only the first `depth` results are reranked; the rest keep their order after them.
    shallow = Memory.open(
        root,
        overrides={
            "store": {"git_commit": False},
            "embeddings": {"enabled": False},
            "rerank": {"provider": "tea", "depth": 2},
        },
    )
    got = shallow.search("morning", mode="bm25", path_prefix="notes/", limit=2)
    assert _paths(got) == ["notes/a.md", "notes/b.md"]  # neither says tea: order kept
    deeper = shallow.search("morning", mode="bm25", path_prefix="notes/", limit=4)
    assert _paths(deeper) == fused
    assert "rerank_rank" not in deeper[3].why  # beyond the depth: not reranked
    shallow.close()
    mem.close()


def test_reranking_never_returns_hidden_documents(plugin: None, root: Path) -> None:
    mem = _open(root, provider="tea")
    _seed(mem)
    mem.write("notes/old.md", "# Old\n\nmorning tea tea tea tea\n")
    first = mem.search("morning", mode="bm25", path_prefix="notes/")
    assert first[0].path == "notes/old.md"  # the reranker's favourite while it is visible
    mem.forget("notes/old.md")
    SEEN.clear()
    hits = mem.search("morning", mode="bm25", path_prefix="notes/")
    assert "notes/old.md" not in _paths(hits) and len(hits) == 4
    assert SEEN and all("tea tea tea" not in t for _, texts in SEEN for t in texts)
    mem.close()


def test_reranker_reads_what_a_turn_says_with_its_speaker(plugin: None, root: Path) -> None:
    mem = _open(root, provider="tea")
    mem.record_turn(
        thread="t1", input="shall we have tea this morning", output="yes", user="melanie"
    )
    mem.search("morning tea", mode="bm25")
    _, texts = SEEN[-1]
    turn = [t for t in texts if "shall we have tea" in t]
    assert turn and turn[0].startswith("melanie: ")
    mem.close()


def test_a_failing_reranker_keeps_the_fused_order(plugin: None, root: Path) -> None:
    for name, message in (("failing", "service is down"), ("short", "1 scores for 4")):
        mem = _open(root, provider=name)
        _seed(mem)
        hits = mem.search("morning", mode="bm25", path_prefix="notes/")
        mem.close()
        assert _paths(hits) == _fused(root)
        assert all(message in h.why["rerank_error"] for h in hits)


def test_unknown_or_unconfigured_reranker_is_a_clear_error(plugin: None, root: Path) -> None:
    mem = _open(root, provider="nope")
    with pytest.raises(ConfigError, match="unknown rerank provider 'nope'.*tea"):
        mem.search("morning", mode="bm25")
    mem.close()
    mem = _open(root, provider="not-one")
    with pytest.raises(ProviderError, match="rerank provider 'not-one' returned no Reranker"):
        mem.search("morning", mode="bm25")
    mem.close()
    mem = _open(root, provider="http")
    with pytest.raises(ProviderError, match=r"set \[rerank\] base_url and model"):
        mem.search("morning", mode="bm25")
    mem.close()


class _Service(ServiceHandler):
    """A rerank service on loopback: scores documents by how often they say "tea"."""

    seen: list[dict[str, Any]] = []
    status = 200
    garbage = False
    busy = 0  # answers this many requests with 503 first

    def do_POST(self) -> None:
        body = self.read_json()
        if self.note_or_refuse(body, type(self).seen):
            return
        scores = [doc.lower().split().count("tea") for doc in body["documents"]]
        results = sorted(
            ({"index": i, "relevance_score": s} for i, s in enumerate(scores)),
            key=lambda r: -r["relevance_score"],
        )
        answer = {"results": [{"index": 99}]} if self.garbage else {"results": results}
        self.send_json(answer, self.status)


@pytest.fixture
def service() -> Iterator[tuple[str, type[_Service]]]:
    handler = type("S", (_Service,), {"seen": [], "status": 200, "garbage": False, "busy": 0})
    with fake_service(handler) as url:
        yield f"{url}/v1", handler


def test_http_reranker_calls_the_rerank_endpoint(
    service: tuple[str, type[_Service]], root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, handler = service
    monkeypatch.setenv("MEMDIR_TEST_RERANK_KEY", "sekret")
    rerank.clear_cache()
    settings = {
        "provider": "http",
        "base_url": url + "/",
        "model": "tiny-reranker",
        "api_key_env": "MEMDIR_TEST_RERANK_KEY",
        "timeout_seconds": 5,
    }
    mem = _open(root, **settings)
    _seed(mem)
    hits = mem.search("morning", mode="bm25", path_prefix="notes/")
    assert _paths(hits)[:2] == ["notes/c.md", "notes/d.md"]  # said "tea" twice, then once
    sent = handler.seen[-1]
    assert sent["path"] == "/v1/rerank" and sent["auth"] == "Bearer sekret"
    assert sent["body"]["model"] == "tiny-reranker" and sent["body"]["query"] == "morning"
    assert sent["body"]["top_n"] == len(sent["body"]["documents"]) == 4

    handler.status = 500
    failed = mem.search("morning", mode="bm25", path_prefix="notes/")
    assert _paths(failed)[:2] == ["notes/a.md", "notes/b.md"]  # the fused order
    error = failed[0].why["rerank_error"]
    assert "HTTP 500" in error and "sekret" not in error
    handler.status, handler.garbage = 200, True
    bad = mem.search("morning", mode="bm25", path_prefix="notes/")
    assert "malformed answer" in bad[0].why["rerank_error"]
    mem.close()


def test_http_reranker_goes_through_the_shared_client(
    service: tuple[str, type[_Service]], root: Path
) -> None:
    url, handler = service
    rerank.clear_cache()
    mem = _open(root, provider="http", base_url=url, model="m")
    _seed(mem)
    handler.busy = 1  # one 503: asked again, and the second answer is used
    hits = mem.search("morning", mode="bm25", path_prefix="notes/")
    assert _paths(hits)[:2] == ["notes/c.md", "notes/d.md"]
    assert "rerank_error" not in hits[0].why
    assert len(handler.seen) == 2
    assert {s["agent"] for s in handler.seen} == {f"memdir/{__version__}"}
    mem.close()


def test_http_reranker_reports_a_refused_connection(root: Path) -> None:
    rerank.clear_cache()
    mem = _open(root, provider="http", base_url=f"http://127.0.0.1:{free_port()}", model="m")
    mem.write("notes/a.md", "# A\n\nmorning\n")
    hits = mem.search("morning", mode="bm25", path_prefix="notes/")
    assert _paths(hits) == ["notes/a.md"]
    assert "ConnectError" in hits[0].why["rerank_error"]
    mem.close()


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
