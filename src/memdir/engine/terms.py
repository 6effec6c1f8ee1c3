"""Words, sentences and keywords: the small text toolkit of routing and the extractive writer."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache

from ..doc.lazyregex import LazyRegex

STOPWORDS = frozenset(
    """a about above after again against all also am an and any are as at be because been before
    being below between both but by can could did do does doing down during each even ever few
    for from further get gets got had has have having he her here hers him his how i if in into
    is it its itself just like made make makes many may me might more most much must my no nor
    not now of off often on once one only or other our ours out over own per rather same shall
    she should since so some such than that the their theirs them then there these they this
    those through to too under until up upon us use used uses using very via was we well were
    what when where which while who whom why will with within without would yet you your yours
    etc e.g i.e""".split()
)

_WORD = LazyRegex(r"[a-z0-9][a-z0-9'-]*[a-z0-9]|[a-z0-9]")
_SENTENCE_END = LazyRegex(r"(?<=[.!?])[\"')\]]*\s+(?=[A-Z0-9\"'(\[])")
_MARKUP = LazyRegex(r"`+|\*\*|__|\[\[|\]\]|\[\^[^\]]*\]|!\[[^\]]*\]\([^)]*\)|\[([^\]]*)\]\([^)]*\)")


def stem(word: str) -> str:
    """A light suffix stripper: enough to match plural and verb forms of a scope word."""
    base = word
    for suffix in ("ations", "ation", "ings", "ing", "edly", "ies", "ied", "es", "ed", "ly", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            base = word[: len(word) - len(suffix)]
            if suffix in ("ies", "ied"):
                base += "y"
            elif suffix == "es" and not base.endswith(("s", "x", "z", "ch", "sh")):
                base = word[:-1]
            elif len(base) > 3 and base[-1] == base[-2] and base[-1] not in "lsz":
                base = base[:-1]
            break
    if len(base) > 3 and base.endswith("e"):
        base = base[:-1]
    return base


def words(text: str) -> list[str]:
    """Lowercased words, apostrophes kept inside words."""
    return _WORD.findall(text.lower().replace("\u2019", "'"))


def terms(text: str) -> list[str]:
    """Stemmed content words (stopwords and one-letter words dropped), in text order."""
    out = []
    for raw in words(text):
        word = raw.strip("'-")
        if word.endswith("'s"):
            word = word[:-2]  # a possessive: "router's" is the router
        if len(word) < 2 or word in STOPWORDS or word.isdigit():
            continue
        out.append(stem(word))
    return out


@lru_cache(maxsize=65536)
def term_set(text: str) -> frozenset[str]:
    """Distinct stemmed content words (cached: routers and titles repeat)."""
    return frozenset(terms(text))


def plain(text: str) -> str:
    """Markdown inline markup removed (links keep their label)."""
    return " ".join(_MARKUP.sub(lambda m: m.group(1) or "", text).split())


def paragraphs(body: str) -> list[str]:
    """Prose paragraphs of a markdown body: headings, fences, lists, quotes and tables skipped."""
    out: list[str] = []
    current: list[str] = []
    fenced = False
    for line in body.splitlines():
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if fenced:
            continue
        if not stripped or stripped.startswith(("#", "|", "<", "[^")):
            if current:
                out.append(" ".join(current))
                current = []
            continue
        stripped = re.sub(r"^(?:[-*+>]|\d+[.)])\s+", "", stripped)
        current.append(stripped)
    if current:
        out.append(" ".join(current))
    return [plain(p) for p in out if p.strip()]


def sentences(text: str) -> list[str]:
    """Sentences of prose text, whitespace-normalised."""
    out: list[str] = []
    for para in paragraphs(text):
        out.extend(p.strip() for p in _SENTENCE_END.split(para) if p.strip())
    return out


def keywords(texts: Iterable[str], limit: int = 8) -> list[str]:
    """The most frequent content terms (ties broken by first appearance)."""
    counts: Counter[str] = Counter()
    first: dict[str, int] = {}
    position = 0
    for text in texts:
        for term in terms(text):
            counts[term] += 1
            first.setdefault(term, position)
            position += 1
    ranked = sorted(counts, key=lambda t: (-counts[t], first[t]))
    return ranked[:limit]


def slugify(text: str, max_len: int = 60) -> str:
    """A lowercase ASCII slug (``-`` separated); ``untitled`` when nothing is left."""
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    if len(slug) > max_len:
        slug = slug[:max_len].rsplit("-", 1)[0] or slug[:max_len]
    return slug or "untitled"
