"""The ``openai`` embeddings provider against a real loopback server imitating the API."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from http_server import ServiceHandler, fake_service, free_port
from memdir import __version__
from memdir.errors import MissingExtra, ModelMismatch, ProviderError
from memdir.files.store import Store
from memdir.service import Memory
from memdir.settings import EmbeddingsSettings
from memdir.vectors import embedder as emb
from memdir.vectors.remote import OpenAIEmbedder

KEY = "sk-test-4f9a1c77e2"


def letters(text: str) -> list[float]:
    """The fake model: how often each letter a-z occurs (26 dimensions)."""
    out = [0.0] * 26
    for ch in text.lower():
        if "a" <= ch <= "z":
            out[ord(ch) - 97] += 1.0
    return out


def unit(text: str) -> Any:
    row = np.asarray(letters(text), dtype=np.float32)
    return row / np.linalg.norm(row)


@dataclass
class Fake:
    """What the fake service answers, and what it was sent."""

    url: str = ""
    #: "ok", "500", "503-once" (busy, then "ok"), "garbage", "echo-key", "short" (one row
    #: too few), "ragged" (sizes differ within an answer), "wide" (30 dimensions: as if the
    #: model changed)
    mode: str = "ok"
    seen: list[dict[str, Any]] = field(default_factory=list)

    def inputs(self) -> list[list[str]]:
        return [r["body"]["input"] for r in self.seen]


def _handler(fake: Fake) -> type[ServiceHandler]:
    class Handler(ServiceHandler):
        def do_POST(self) -> None:
            body = self.read_json()
            fake.seen.append(
                {
                    "path": self.path,
                    "body": body,
                    "auth": self.headers.get("Authorization"),
                    "agent": self.headers.get("User-Agent"),
                }
            )
            if fake.mode == "503-once":
                fake.mode = "ok"
                self.send_bytes(b"loading the model", 503)
                return
            if fake.mode == "500":
                self.send_bytes(b"model crashed: out of memory", 500)
                return
            if fake.mode == "echo-key":
                self.send_bytes(f"invalid key {self.headers.get('Authorization')}".encode(), 401)
                return
            if fake.mode == "garbage":
                self.send_bytes(b"<html>not an embeddings answer</html>")
                return
            texts = body["input"]
            rows = [
                {"object": "embedding", "index": i, "embedding": letters(t)}
                for i, t in enumerate(texts)
            ]
            if fake.mode == "short":
                rows = rows[:-1]
            if fake.mode == "ragged" and len(rows) > 1:
                rows[-1]["embedding"] = rows[-1]["embedding"][:20]
            if fake.mode == "wide":
                for row in rows:
                    row["embedding"] = [*row["embedding"], 0.5, 0.5, 0.5, 0.5]
            # Rows come back in reverse: the client must order them by their index.
            answer = {"object": "list", "model": body["model"], "data": rows[::-1]}
            self.send_json(answer)

    return Handler


@pytest.fixture
def fake() -> Iterator[Fake]:
    state = Fake()
    with fake_service(_handler(state)) as url:
        state.url = f"{url}/v1/"
        emb.clear_cache()
        yield state
    emb.clear_cache()


def closed_url() -> str:
    """A loopback address nothing listens on (connections are refused)."""
    return f"http://127.0.0.1:{free_port()}/v1"


def _settings(url: str, **more: Any) -> EmbeddingsSettings:
    return EmbeddingsSettings(provider="openai", base_url=url, model="toy", **more)


def _open(root: Path, url: str, model: str = "toy") -> Memory:
    return Memory.open(
        root,
        overrides={
            "store": {"git_commit": False},
            "embeddings": {"provider": "openai", "base_url": url, "model": model},
        },
    )


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return Store.init(tmp_path / "store")


def _seed(mem: Memory) -> None:
    mem.write("notes/sunrise.md", "# Sunrise\n\nI painted a lake sunrise last year.\n")
    mem.write("notes/cat.md", "# Pets\n\nWe adopted a grey cat called Tom.\n")
    mem.write("notes/run.md", "# Running\n\nTraining for the city marathon in spring.\n")


def test_vector_and_hybrid_search_go_through_the_endpoint(fake: Fake, root: Path) -> None:
    mem = _open(root, fake.url)
    _seed(mem)
    vector = mem.search("sunrises painted", mode="vector", limit=3)
    assert vector[0].path == "notes/sunrise.md"
    assert vector[0].why["mode"] == "vector"
    # The stored score is the cosine of the fake model's letter counts.
    passage = "Sunrise\n\nI painted a lake sunrise last year."
    want = float(unit("sunrises painted") @ unit(passage))
    assert vector[0].why["vector_score"] == pytest.approx(want, abs=0.02)
    hybrid = mem.search("marathon training", mode="hybrid", limit=3, path_prefix="notes/")
    assert hybrid[0].path == "notes/run.md"
    assert hybrid[0].why["bm25_rank"] == 1 and hybrid[0].why["vector_rank"] >= 1
    assert {r["path"] for r in fake.seen} == {"/v1/embeddings"}
    assert {r["body"]["model"] for r in fake.seen} == {"toy"}
    assert all(r["auth"] is None for r in fake.seen)  # no api_key_env: no header
    sent = [t for batch in fake.inputs() for t in batch]
    assert "sunrises painted" in sent and any("lake sunrise" in t for t in sent)
    assert mem.embedder().model_id == "openai:toy" and mem.embedder().dim == 26
    mem.close()


def test_batches_respect_batch_size_and_rows_follow_their_index(fake: Fake) -> None:
    embedder = emb.get_embedder(_settings(fake.url, batch_size=2))
    assert isinstance(embedder, OpenAIEmbedder)
    assert fake.inputs() == [["memory"]]  # the probe that found the dimension
    texts = ["apple pie", "zebra crossing", "  ", "quiet lake", "bbb"]
    out = embedder.embed(texts)
    # The blank text is not sent; the others go two at a time.
    assert fake.inputs()[1:] == [["apple pie", "zebra crossing"], ["quiet lake", "bbb"]]
    assert out.dtype == np.float32 and out.shape == (5, 26)
    for row, text in zip(out, texts, strict=True):
        if text.strip():
            np.testing.assert_allclose(row, unit(text), atol=1e-6)
        else:
            assert not row.any()
    assert np.allclose(np.linalg.norm(out[[0, 1, 3, 4]], axis=1), 1.0)
    before = len(fake.seen)
    empty = embedder.embed([])
    assert empty.shape == (0, 26) and empty.dtype == np.float32
    assert len(fake.seen) == before  # no request for nothing
    np.testing.assert_allclose(embedder.embed_query("quiet lake"), unit("quiet lake"), atol=1e-6)
    # A query longer than the window is cut, not refused.
    embedder.embed(["word " * 5000])
    assert len(fake.inputs()[-1][0].split()) <= embedder.window


def test_api_key_is_sent_and_never_shown(fake: Fake, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMDIR_TEST_EMBED_KEY", KEY)
    embedder = OpenAIEmbedder(_settings(fake.url, api_key_env="MEMDIR_TEST_EMBED_KEY"))
    assert fake.seen[0]["auth"] == f"Bearer {KEY}"
    embedder.embed(["hello"])
    assert fake.seen[-1]["auth"] == f"Bearer {KEY}"
    fake.mode = "echo-key"  # a server that quotes the key it refused
    with pytest.raises(ProviderError, match="HTTP 401") as err:
        embedder.embed(["hello"])
    assert "invalid key" in str(err.value) and KEY not in str(err.value)
    assert KEY not in repr(err.value.args)
    # The variable named but unset: no header, and the 401 says why.
    monkeypatch.delenv("MEMDIR_TEST_EMBED_KEY")
    with pytest.raises(ProviderError, match=r"\$MEMDIR_TEST_EMBED_KEY is not set"):
        embedder.embed(["hello"])
    assert fake.seen[-1]["auth"] is None


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("500", r"answered HTTP 500: model crashed: out of memory"),
        ("garbage", r"not JSON: <html>not an embeddings answer</html>"),
        ("short", r"returned 1 embeddings for 2 inputs"),
        ("ragged", r"embeddings of different sizes: \[20, 26\]"),
    ],
)
def test_bad_answers_are_provider_errors(fake: Fake, mode: str, message: str) -> None:
    embedder = OpenAIEmbedder(_settings(fake.url))
    fake.mode = mode
    with pytest.raises(ProviderError, match=message) as err:
        embedder.embed(["first text", "second text"])
    assert "embeddings provider 'openai'" in str(err.value) and "/v1/embeddings" in str(err.value)


def test_requests_go_through_the_shared_client(fake: Fake) -> None:
    fake.mode = "503-once"  # the server is still loading its model: asked again
    embedder = OpenAIEmbedder(_settings(fake.url))
    assert embedder.dim == 26
    assert fake.inputs() == [["memory"], ["memory"]]
    assert {r["agent"] for r in fake.seen} == {f"memdir/{__version__}"}


def test_a_dimension_that_changes_is_refused(fake: Fake) -> None:
    embedder = OpenAIEmbedder(_settings(fake.url))
    assert embedder.dim == 26
    fake.mode = "wide"  # the server now runs another model under the same name
    with pytest.raises(ProviderError, match="answered 30 dimensions, but 26 when first asked"):
        embedder.embed(["alone"])


def test_missing_settings_and_refused_connection() -> None:
    for url, model in (("", "toy"), ("http://127.0.0.1:9/v1", ""), ("  ", "  ")):
        with pytest.raises(ProviderError, match=r"set \[embeddings\] base_url and model"):
            OpenAIEmbedder(EmbeddingsSettings(provider="openai", base_url=url, model=model))
    url = closed_url()
    with pytest.raises(ProviderError, match=r"cannot be reached: ConnectError") as err:
        emb.get_embedder(_settings(url))
    assert url.rstrip("/") + "/embeddings" in str(err.value)


def test_missing_httpx_names_the_extra(fake: Fake, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "httpx", None)
    with pytest.raises(MissingExtra, match=r"needs httpx: pip install 'memdir\[llm\]'"):
        emb.get_embedder(_settings(fake.url))
    assert fake.seen == []


def test_auto_mode_falls_back_to_keywords_when_the_endpoint_is_down(root: Path) -> None:
    emb.clear_cache()
    mem = _open(root, closed_url())
    _seed(mem)
    mode, note = mem.search_mode("auto")
    assert mode == "bm25"
    assert note is not None and note.startswith("keyword search only:")
    assert "cannot be reached" in note
    found = mem.search("marathon")
    assert [h.path for h in found] == ["notes/run.md"] and found[0].why["mode"] == "bm25"
    with pytest.raises(ProviderError, match="cannot be reached"):
        mem.search("marathon", mode="hybrid")
    mem.close()


def test_vectors_carry_the_model_id_and_a_switch_needs_a_rebuild(fake: Fake, root: Path) -> None:
    mem = _open(root, fake.url)
    _seed(mem)
    mem.embed()
    models = {r[0] for r in mem.index.conn.execute("SELECT DISTINCT model FROM vectors")}
    assert models == {"openai:toy"}
    mem.close()
    other = _open(root, fake.url, model="toy-large")
    with pytest.raises(ModelMismatch, match=r"openai:toy.*openai:toy-large.*reindex --vectors"):
        other.search("sunrise", mode="vector")
    mode, note = other.search_mode("auto")
    assert mode == "bm25" and note is not None and "reindex --vectors" in note
    stats = other.embed(rebuild=True)
    assert stats.embedded >= 3
    models = {r[0] for r in other.index.conn.execute("SELECT DISTINCT model FROM vectors")}
    assert models == {"openai:toy-large"}
    assert other.search("sunrise painted", mode="vector")[0].path == "notes/sunrise.md"
    assert fake.seen[-1]["body"]["model"] == "toy-large"
    other.close()


def test_each_endpoint_gets_its_own_embedder(fake: Fake) -> None:
    first = emb.get_embedder(_settings(fake.url))
    assert emb.get_embedder(_settings(fake.url)) is first  # loaded once per process
    # Same provider and model at another address: not the cached one (which would answer).
    with pytest.raises(ProviderError, match="cannot be reached"):
        emb.get_embedder(_settings(closed_url()))
