"""Split long text into overlapping windows of tokens for embedding.

Pure logic: the caller supplies the character spans of the text's tokens (an
embedder's tokenizer knows them; :func:`word_spans` is a fallback), and gets
back chunks as character ranges, so a chunk can always be shown from the source.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..records import recordclass

_WORD = re.compile(r"\w+|[^\w\s]", re.UNICODE)


@recordclass(frozen=True)
class Chunk:
    """A window of the source text: ``text == source[start:end]``."""

    no: int
    start: int
    end: int
    text: str


def word_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of words and punctuation marks (a tokenizer-free fallback)."""
    return [m.span() for m in _WORD.finditer(text)]


def chunk(
    text: str,
    spans: Sequence[tuple[int, int]],
    *,
    max_tokens: int = 200,
    overlap: int = 40,
) -> list[Chunk]:
    """Windows of at most ``max_tokens`` tokens, each sharing ``overlap`` tokens with the next.

    A text of at most ``max_tokens`` tokens is one chunk holding the whole text (trimmed).
    A window prefers to end at a sentence or line end found in its last third.
    """
    if max_tokens < 1:
        raise ValueError("max_tokens must be positive")
    overlap = max(0, min(overlap, max_tokens // 2))
    stripped = text.strip()
    if not spans or len(spans) <= max_tokens:
        if not stripped:
            return []
        start = text.index(stripped[0])
        return [Chunk(0, start, start + len(stripped), stripped)]
    chunks: list[Chunk] = []
    i = 0
    n = len(spans)
    while i < n:
        j = min(n, i + max_tokens)
        if j < n:
            j = _sentence_end(text, spans, i, j)
        start, end = spans[i][0], spans[j - 1][1]
        chunks.append(Chunk(len(chunks), start, end, text[start:end]))
        if j >= n:
            break
        i = max(i + 1, j - overlap)
    return chunks


def _sentence_end(text: str, spans: Sequence[tuple[int, int]], i: int, j: int) -> int:
    """The best window end in ``(i, j]``: after the last sentence end in its last third."""
    floor = i + max(1, (j - i) * 2 // 3)
    for k in range(j - 1, floor - 1, -1):
        token = text[spans[k][0] : spans[k][1]]
        gap = text[spans[k][1] : spans[k + 1][0]] if k + 1 < len(spans) else ""
        if token in {".", "!", "?"} or "\n" in gap:
            return k + 1
    return j
