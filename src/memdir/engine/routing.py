"""Routing a source to the bundles whose scope fits it, and picking a topic inside one.

The score of a bundle is the share of its scope's content terms (stemmed, stopwords dropped)
that occur in the source: ``|scope ∩ source| / |scope|``, between 0 and 1. Every bundle whose
score reaches the routing threshold fits. When none does, the best bundle still takes the
source if its score reaches the quarantine threshold; otherwise the source is quarantined with
a reason that names the best score. Fitting bundles are ordered by score, then by the number
of times the source uses the matched terms ("mass"); a weak fit goes to the bundle with the
largest mass. Remaining ties keep the order of PROGRAM.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from ..records import field, recordclass
from .program import Bundle
from .terms import STOPWORDS, stem, term_set, terms, words


@recordclass(frozen=True)
class Route:
    bundles: tuple[str, ...]
    scores: Mapping[str, float]
    matched: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    reason: str = ""
    method: str = "lexical"  # or "meaning" (memdir.engine.meaning), "hint", "none"
    details: Mapping[str, object] = field(default_factory=dict)  # the meaning router's scores

    @property
    def quarantined(self) -> bool:
        return not self.bundles


def score(scope: str, source_terms: frozenset[str]) -> tuple[float, tuple[str, ...]]:
    """The scope score of a source and the scope terms it matched."""
    scope_terms = term_set(scope)
    if not scope_terms:
        return 0.0, ()
    matched = tuple(sorted(scope_terms & source_terms))
    return len(matched) / len(scope_terms), matched


def route(bundles: Sequence[Bundle], text: str, *, routing: float, quarantine: float) -> Route:
    """Decide where a source goes (see the module docstring for the rule)."""
    if not bundles:
        return Route((), {}, {}, "no bundles are defined in PROGRAM.md")
    counts = Counter(terms(text))
    source_terms = frozenset(counts)
    if not source_terms:
        return Route((), {}, {}, "the source has no words to route by")
    scores: dict[str, float] = {}
    matched: dict[str, tuple[str, ...]] = {}
    for bundle in bundles:
        scores[bundle.name], matched[bundle.name] = score(bundle.scope, source_terms)
    mass = {b.name: sum(counts[t] for t in matched[b.name]) for b in bundles}
    order = sorted(bundles, key=lambda b: (-scores[b.name], -mass[b.name]))
    fits = tuple(b.name for b in order if scores[b.name] >= routing)
    if fits:
        return Route(fits, scores, matched)
    weak = [b.name for b in bundles if scores[b.name] >= quarantine and scores[b.name] > 0]
    best = max(weak, key=lambda n: (mass[n], scores[n])) if weak else order[0].name
    if scores[best] >= quarantine and scores[best] > 0:
        return Route((best,), scores, matched, f"weak fit: best score {scores[best]:.2f}")
    return Route(
        (),
        scores,
        matched,
        f"no bundle scope fits: best was '{best}' at {scores[best]:.2f}, below the quarantine "
        f"threshold {quarantine:.2f}",
    )


def surface_keywords(text: str, limit: int = 8) -> list[tuple[str, str]]:
    """(stem, most frequent surface word) pairs by descending frequency."""
    counts: Counter[str] = Counter()
    forms: dict[str, Counter[str]] = {}
    first: dict[str, int] = {}
    for position, raw in enumerate(words(text)):
        word = raw.strip("'-")
        if len(word) < 3 or word in STOPWORDS or not word[0].isalpha():
            continue
        key = stem(word)
        counts[key] += 1
        forms.setdefault(key, Counter())[word] += 1
        first.setdefault(key, position)
    ranked = sorted(counts, key=lambda k: (-counts[k], first[k]))[:limit]
    return [(k, forms[k].most_common(1)[0][0]) for k in ranked]


def pick_topic(
    text: str,
    topics: Iterable[str],
    scope: str,
    *,
    hint: str | None = None,
) -> tuple[str, bool]:
    """(topic slug, is_new). A hint wins; else the existing topic whose name terms occur most
    often in the source; else a new topic named after the source's most frequent scope word
    (or its most frequent word when it uses none of the scope's)."""
    from .terms import slugify

    existing = list(topics)
    if hint:
        slug = slugify(hint)
        return slug, slug not in existing
    counts = Counter(terms(text))
    best, best_count = None, 0
    for topic in existing:
        count = sum(counts[t] for t in term_set(topic.replace("-", " ")))
        if count > best_count:
            best, best_count = topic, count
    if best is not None and best_count >= 2:
        return best, False
    scope_terms = term_set(scope)
    ranked = surface_keywords(text, limit=50)
    for key, surface in ranked:
        if key in scope_terms:
            return slugify(surface), slugify(surface) not in existing
    if best is not None:
        return best, False
    slug = slugify(ranked[0][1]) if ranked else "general"
    return slug, slug not in existing
