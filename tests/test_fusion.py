"""Reciprocal rank fusion on hand-built rankings."""

from __future__ import annotations

import pytest

from memdir.retrieval.fusion import add_boost, diversify, rrf


def test_rrf_scores_and_why_by_hand() -> None:
    fused = rrf({"bm25": ["a", "b", "c"], "vector": ["c", "a", "d"]}, k=10)
    got = {f.key: (round(f.score, 6), f.ranks) for f in fused}
    assert got["a"] == (round(1 / 11 + 1 / 12, 6), {"bm25": 1, "vector": 2})
    assert got["c"] == (round(1 / 13 + 1 / 11, 6), {"bm25": 3, "vector": 1})
    assert got["b"] == (round(1 / 12, 6), {"bm25": 2})
    assert got["d"] == (round(1 / 13, 6), {"vector": 3})
    # a: 0.17424, c: 0.16783, b: 0.08333, d: 0.07692
    assert [f.key for f in fused] == ["a", "c", "b", "d"]


def test_rrf_weights_change_the_order() -> None:
    rankings = {"bm25": ["x", "y"], "vector": ["y", "x"]}
    assert [f.key for f in rrf(rankings, weights={"bm25": 2.0})] == ["x", "y"]
    assert [f.key for f in rrf(rankings, weights={"vector": 2.0})] == ["y", "x"]


def test_rrf_ties_break_on_best_rank_then_signal_order() -> None:
    # Symmetric: both p and q score 1/61 + 1/62; same best rank, p first in the first signal.
    fused = rrf({"one": ["p", "q"], "two": ["q", "p"]})
    assert fused[0].score == pytest.approx(fused[1].score)
    assert [f.key for f in fused] == ["p", "q"]
    single = rrf({"one": ["m"], "two": ["n"]})
    assert [f.key for f in single] == ["m", "n"]


def test_rrf_duplicates_keep_first_rank_and_limit() -> None:
    fused = rrf({"bm25": ["a", "a", "b"]}, k=0, limit=1)
    assert len(fused) == 1
    assert fused[0].key == "a"
    assert fused[0].ranks == {"bm25": 1}
    assert fused[0].score == pytest.approx(1.0)
    assert rrf({}) == []
    assert rrf({"bm25": []}) == []


def test_boost_is_recorded_and_reorders() -> None:
    fused = rrf({"bm25": ["a", "b"]}, k=10)
    boosted = add_boost(fused, "neighbour", {"b": 0.05})
    assert [f.key for f in boosted] == ["b", "a"]
    assert boosted[0].boosts == {"neighbour": 0.05}
    assert boosted[0].score == pytest.approx(1 / 12 + 0.05)
    assert boosted[1].boosts == {}


def test_diversify_keeps_the_head_then_shows_new_groups_first() -> None:
    fused = rrf({"bm25": ["a1", "a2", "a3", "b1", "a4", "c1", "b2", "x"]}, k=10)
    group = {"a1": "a", "a2": "a", "a3": "a", "a4": "a", "b1": "b", "b2": "b", "c1": "c"}
    order = [f.key for f in diversify(fused, group, keep=2)]
    # a1, a2 stay; then the first of each unseen group (b1, c1) and x (no group), then the rest.
    assert order == ["a1", "a2", "b1", "c1", "x", "a3", "a4", "b2"]
    assert [f.key for f in diversify(fused, group, keep=8)] == [f.key for f in fused]
    assert [f.key for f in diversify(fused, {}, keep=0)] == [f.key for f in fused]
    assert diversify([], group, keep=3) == []
