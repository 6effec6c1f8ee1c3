"""Fuse ranked lists from several retrieval signals into one ranking.

Reciprocal rank fusion (RRF): an item's fused score is the sum over signals of
``weight / (k + rank)``, ranks counted from 1. Every fused item keeps the rank
it had in each signal (its ``why``), so a result can say why it is there.
Pure logic, no storage.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Generic, TypeVar

from ..records import field, recordclass

K = TypeVar("K", bound=Hashable)

DEFAULT_K = 60


@recordclass
class Fused(Generic[K]):
    """One fused item: its key, fused score and rank per signal (1-based)."""

    key: K
    score: float = 0.0
    ranks: dict[str, int] = field(default_factory=dict)
    boosts: dict[str, float] = field(default_factory=dict)


def rrf(
    rankings: Mapping[str, Sequence[K]],
    *,
    k: float = DEFAULT_K,
    weights: Mapping[str, float] | None = None,
    limit: int | None = None,
) -> list[Fused[K]]:
    """Reciprocal rank fusion of named rankings (best first; duplicates keep their first rank).

    Ties in fused score are broken by the best single rank, then by the order in
    which signals are given, so the result is deterministic.
    """
    fused: dict[K, Fused[K]] = {}
    for name, ranking in rankings.items():
        weight = 1.0 if weights is None else float(weights.get(name, 1.0))
        seen: set[K] = set()
        for position, key in enumerate(ranking, start=1):
            if key in seen:
                continue
            seen.add(key)
            item = fused.get(key)
            if item is None:
                item = fused[key] = Fused(key)
            item.ranks[name] = position
            item.score += weight / (k + position)
    order = list(rankings)
    result = sorted(fused.values(), key=lambda f: _tie_key(f, order))
    return result[:limit] if limit is not None else result


def _tie_key(item: Fused[K], order: list[str]) -> tuple[float, int, int]:
    best = min(item.ranks.values())
    first = min(order.index(name) for name in item.ranks)
    return (-item.score, best, first)


def add_boost(items: Sequence[Fused[K]], name: str, boosts: Mapping[K, float]) -> list[Fused[K]]:
    """Add a named score boost to some items and re-sort (the boost is recorded in ``why``)."""
    for item in items:
        value = boosts.get(item.key)
        if value:
            item.boosts[name] = item.boosts.get(name, 0.0) + value
            item.score += value
    return sorted(items, key=lambda f: (-f.score, min(f.ranks.values(), default=1 << 30)))


def diversify(
    items: Sequence[Fused[K]], group_of: Mapping[K, Hashable], *, keep: int
) -> list[Fused[K]]:
    """Keep the first ``keep`` items; then put first the best item of each group not yet shown.

    The rest follow in their order. Items without a group count as groups of their
    own. A page of results then covers more groups (threads) without changing the
    top ``keep``.
    """
    head = list(items[:keep])
    seen = {group_of[f.key] for f in head if f.key in group_of}
    first: list[Fused[K]] = []
    rest: list[Fused[K]] = []
    for item in items[keep:]:
        group = group_of.get(item.key)
        if group is None:
            first.append(item)
        elif group not in seen:
            seen.add(group)
            first.append(item)
        else:
            rest.append(item)
    return head + first + rest
