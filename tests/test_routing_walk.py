"""The default router by meaning: a random walk from each source that ends at a scope, an
article or an everyday background text (memdir.engine.spread), on vectors chosen by hand so
that each rule of the walk shows."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from memdir.engine import placing, spread
from memdir.engine.program import Bundle
from memdir.errors import ConfigError
from memdir.files.store import Store
from memdir.service import Memory
from memdir.settings import Settings

np = pytest.importorskip("numpy")


def unit(*xs: float) -> object:
    v = np.array(xs, dtype=np.float64)
    return v / np.linalg.norm(v)


def test_a_walk_carries_a_label_through_another_source() -> None:
    # Seed 0 is a scope, seeds 1-3 the background. Source A is next to the scope; source B
    # is far from every seed but next to A: its walks go through A and end at the scope.
    seeds = np.array(
        [unit(1, 0, 0, 0), unit(0, 0, 1, 0), unit(0, 0, 0.9, 0.1), unit(0, 0, 0.8, 0.2)]
    )
    sources = np.array([unit(0.9, 0.4, 0, 0), unit(0.5, 1, 0, 0)])
    labels = np.array([0, 1, 1, 1])
    tuning = spread.SpreadTuning(neighbours=2, scope_weight=1.0)
    shares = spread.absorbed(
        sources, seeds, labels, 2, tuning, np.array([True, False, False, False])
    )
    assert shares.shape == (2, 2)
    assert np.allclose(shares.sum(axis=1), 1.0)
    assert shares[0, 0] > 0.9 and shares[1, 0] > 0.9  # B never touches the scope itself
    alone = spread.absorbed(
        sources[1:], seeds, labels, 2, tuning, np.array([True, False, False, False])
    )
    assert alone[0, 0] < shares[1, 0]  # without A, B's walks reach the background more


def test_the_scope_weight_tips_a_source_between_a_scope_and_the_background() -> None:
    seeds = np.array([unit(1, 0, 0), unit(0, 1, 0), unit(0, 0.95, 0.3)])
    labels = np.array([0, 1, 1])
    source = np.array([unit(1, 1, 0.1)])  # as near the scope as the background
    mask = np.array([True, False, False])
    even = spread.absorbed(source, seeds, labels, 2, spread.SpreadTuning(scope_weight=1.0), mask)
    heavy = spread.absorbed(source, seeds, labels, 2, spread.SpreadTuning(scope_weight=10.0), mask)
    assert even[0, 1] > even[0, 0]  # two background texts against one scope
    assert heavy[0, 0] > heavy[0, 1]


def _embed(table: dict[str, Sequence[float]]):  # type: ignore[no-untyped-def]
    def embed(texts: Sequence[str]) -> object:
        rows = np.array([table[t] for t in texts], dtype=np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    return embed


EVERYDAY = {"e1": (0, 0, 1, 0), "e2": (0, 0, 1, 0.2), "e3": (0, 0, 1, -0.2)}


def test_routes_say_where_each_source_went_and_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spread, "background", lambda: tuple(EVERYDAY))
    table = {
        "bees scope": (1, 0, 0, 0),
        "bike scope": (0, 1, 0, 0),
        **EVERYDAY,
        "hive": (1, 0.05, 0.1, 0),
        "both": (1, 1, 0.1, 0),
        "film": (0.05, 0, 1, 0.05),
    }
    bundles = [Bundle("bees", "bees scope"), Bundle("bike", "bike scope")]
    items = [("hive", "hive"), ("both", "both"), ("film", "film")]
    routes = spread.route_all(_embed(table), bundles, items, {}, spread.SpreadTuning())
    assert routes["hive"].bundles == ("bees",)
    assert set(routes["both"].bundles) == {"bees", "bike"}
    film = routes["film"]
    assert film.quarantined and "best was 'bees' at" in film.reason
    assert film.details["background"] > film.scores["bees"]
    assert set(film.details) >= {"meaning", "lexical", "background"}
    strict = spread.route_all(_embed(table), bundles, items, {}, spread.SpreadTuning(margin=1.0))
    assert all(r.quarantined for r in strict.values())


def test_an_article_a_bundle_holds_pulls_its_neighbours_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spread, "background", lambda: ("e1", "e2"))
    table = {
        "bees scope": (1, 0, 0),
        "e1": (0, 0, 1),
        "e2": (0, 0.3, 1),
        "article": (0.2, 1, 0),  # an article filed in bees before, far from its scope
        "note": (0.15, 1, 0.3),  # near the article only
    }
    bundles = [Bundle("bees", "bees scope")]
    cold = spread.route_all(_embed(table), bundles, [("n", "note")], {}, spread.SpreadTuning())
    warm = spread.route_all(
        _embed(table), bundles, [("n", "note")], {"bees": ["article"]}, spread.SpreadTuning()
    )
    assert warm["n"].scores["bees"] > cold["n"].scores["bees"]
    assert warm["n"].bundles == ("bees",)


def test_the_settings_pick_the_router(tmp_path: Path) -> None:
    root = Store.init(tmp_path / "store")
    walk = placing.router_for(Settings())
    assert isinstance(walk.tuning, spread.SpreadTuning) and walk.tuning.margin < 0
    nearest = Memory.open(root, overrides={"engine": {"router": "nearest"}})
    try:
        assert not isinstance(placing.router_for(nearest.settings).tuning, spread.SpreadTuning)
    finally:
        nearest.close()
    with pytest.raises(ConfigError, match="route_margin"):
        Memory.open(root, overrides={"engine": {"route_margin": -2}})
    with pytest.raises(ConfigError, match="route_scope_weight"):
        Memory.open(root, overrides={"engine": {"route_scope_weight": 0}})


def test_a_background_every_bundle_claims_leaves_nothing_to_quarantine_against(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A scope about everyday life claims every background sentence (cosine 0.4 or more): the
    # walk has nowhere else to end, and one source among few texts still gets a route.
    monkeypatch.setattr(spread, "background", lambda: ("e1", "e2"))
    table = {"life": (1, 0.1), "e1": (1, 0), "e2": (1, 0.2), "note": (0.2, 1)}
    routes = spread.route_all(
        _embed(table), [Bundle("life", "life")], [("n", "note")], {}, spread.SpreadTuning()
    )
    assert routes["n"].bundles == ("life",) and routes["n"].details["background"] == 0.0
    none = spread.route_all(_embed(table), [], [("n", "note")], {}, spread.SpreadTuning())
    assert none["n"].quarantined and "no bundles" in none["n"].reason
    assert (
        spread.route_all(_embed(table), [Bundle("life", "life")], [], {}, spread.SpreadTuning())
        == {}
    )


def test_a_second_bundle_joins_by_two_of_its_scope_words(monkeypatch: pytest.MonkeyPatch) -> None:
    """A note about two subjects walks mostly to the one it resembles more; the other joins
    when the note uses two words of its scope (route_second_words), not by share alone, and
    one shared word is not enough."""
    monkeypatch.setattr(spread, "background", lambda: tuple(EVERYDAY))
    near_both = (1, 0.45, 0.05, 0)
    texts = {
        "two": "swarm caught, then cycling to the office",
        "one": "swarm caught, then cycling home",
        "none": "swarm caught, then home by train",
    }
    table = {
        "keeping the bee hives": (1, 0, 0, 0),
        "cycling to the office": (0, 1, 0, 0),
        **EVERYDAY,
        **dict.fromkeys(texts.values(), near_both),
    }
    bundles = [Bundle("bees", "keeping the bee hives"), Bundle("bike", "cycling to the office")]
    items = list(texts.items())
    on = spread.route_all(_embed(table), bundles, items, {}, spread.SpreadTuning())
    off = spread.route_all(_embed(table), bundles, items, {}, spread.SpreadTuning(second_words=0))
    two = on["two"]
    assert two.scores["bike"] < 0.6 * two.scores["bees"]  # too weak by share alone
    assert two.scores["bike"] > two.details["background"]
    assert two.bundles == ("bees", "bike")
    assert on["one"].bundles == ("bees",)  # "cycling" alone is chance
    assert on["none"].bundles == ("bees",)
    assert off["two"].bundles == ("bees",)
