"""Pure engine parts: OKF lines, routing, the extractive writer, distillation, the snapshot."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from importlib import resources

from hypothesis import given, settings
from hypothesis import strategies as st

from memdir.doc import frontmatter
from memdir.engine import harness, okf, reflect, routing, writer
from memdir.engine.program import Budgets, Bundle

HARNESS = harness.parse(
    resources.files("memdir").joinpath("templates", "HARNESS.md").read_text(encoding="utf-8")
)


@given(
    st.text(min_size=1, max_size=40).filter(lambda s: s.strip()),
    st.from_regex(r"[a-z0-9/_.-]{1,30}\.md", fullmatch=True),
    st.text(max_size=60),
)
def test_index_entry_round_trip(title: str, url: str, description: str) -> None:
    entry = okf.Entry(title, url, description)
    line = okf.render_entry(entry)
    parsed = okf.parse_entry(line)
    assert parsed is not None
    assert parsed.title == " ".join(title.split())
    assert parsed.url == url
    assert parsed.description == " ".join(description.split())


def test_index_and_log_conformance() -> None:
    root = okf.render_index(
        "cooking", [("Topics", [okf.Entry("Bread", "bread/index.md", "x")])], root=True
    )
    topic = okf.render_index("Bread", [("", [okf.Entry("Starter", "starter.md", "y")])])
    log = okf.render_log(
        "cooking log",
        [okf.LogEntry("2026-01-01", "old"), okf.LogEntry("2026-02-01", "new")],
    )
    assert log.index("## 2026-02-01") < log.index("## 2026-01-01")
    article = frontmatter.render({"type": "concept"}, "# Starter\n")
    files = {"index.md": root, "log.md": log, "bread/index.md": topic, "bread/starter.md": article}
    assert okf.conformance(files) == []
    bad = dict(files)
    bad["bread/untyped.md"] = "# no frontmatter\n"
    bad["index.md"] = root.replace('"0.2"', '"0.1"')
    bad["log.md"] = "# log\n\n## 2026-01-01\n\n## 2026-02-01\n\n## yesterday\n"
    problems = okf.conformance(bad)
    assert "bread/untyped.md: no frontmatter" in problems
    assert any("okf_version" in p for p in problems)
    assert any("newest first" in p for p in problems)
    assert any("'## YYYY-MM-DD'" in p for p in problems)


BUNDLES = [
    Bundle("cooking", "recipes, baking bread, fermentation, knife skills, sauces"),
    Bundle("garden", "vegetables, soil, compost, seeds, watering, pests"),
]


def test_routing_fits_several_one_or_quarantines() -> None:
    bread = "Baking bread needs a ripe starter and patient fermentation of the dough."
    route = routing.route(BUNDLES, bread, routing=0.2, quarantine=0.1)
    assert route.bundles == ("cooking",)
    assert "bread" in route.matched["cooking"]
    both = (
        "Compost from kitchen scraps feeds the soil; fermentation of sauces and baking bread too."
    )
    assert set(routing.route(BUNDLES, both, routing=0.2, quarantine=0.1).bundles) == {
        "cooking",
        "garden",
    }
    weak = "A note about seeds."
    assert routing.route(BUNDLES, weak, routing=0.2, quarantine=0.1).bundles == ("garden",)
    off = "The stock market closed higher after the central bank held interest rates."
    q = routing.route(BUNDLES, off, routing=0.2, quarantine=0.1)
    assert q.quarantined
    assert "below the quarantine threshold" in q.reason
    assert routing.route([], bread, routing=0.2, quarantine=0.1).reason.startswith("no bundles")


def test_pick_topic_reuses_or_creates() -> None:
    text = "Bread dough rises. Bread crust browns. Bread keeps a week."
    assert routing.pick_topic(text, ["bread"], BUNDLES[0].scope) == ("bread", False)
    topic, new = routing.pick_topic(
        "Fermentation of cabbage makes kimchi.", ["bread"], BUNDLES[0].scope
    )
    assert (topic, new) == ("fermentation", True)
    assert routing.pick_topic(text, [], BUNDLES[0].scope, hint="Sour Dough") == ("sour-dough", True)


SOURCE = """# Sourdough starter care

A sourdough starter is a culture of wild yeast and lactic bacteria kept in flour and water.
Feed the starter every day with equal weights of flour and water. A starter that smells of
acetone is hungry and should be fed more often. Keep the starter at room temperature for
daily baking. The starter doubles in four to eight hours after a feeding.
"""


def request(candidates: tuple[writer.RelatedArticle, ...] = ()) -> writer.WriteRequest:
    src = writer.SourceDoc("src-abc", "inbox/a.md", "01abc", "Sourdough starter care", SOURCE)
    return writer.WriteRequest("cooking", "starter", src, candidates, Budgets(), HARNESS)


def test_extractive_writer_article_satisfies_the_harness() -> None:
    cands = (
        writer.RelatedArticle("/bread/crust.md", "Bread crust", "How baking browns the crust"),
        writer.RelatedArticle(
            "/starter/flour.md", "Flour for a starter", "Which flour feeds yeast"
        ),
    )
    req = request(cands)
    draft = writer.ExtractiveWriter().write(req)
    assert draft.title == "Sourdough starter care"
    assert draft.description.startswith("A sourdough starter is a culture")
    assert 1 <= len(draft.key_points) <= Budgets().key_points
    for sentence, ids in draft.key_points:
        assert sentence in " ".join(SOURCE.split())
        assert ids == ["src-abc"]
    assert any("should be fed" in t for t in draft.takeaways)
    assert [r.path for r in draft.related] == ["/starter/flour.md"]
    text = writer.render_article(req, draft, at="2026-01-01T00:00:00Z", actor="test")
    assert writer.check(req, text) == []
    fm = frontmatter.parse(text).fm
    assert fm["merged-from"][0]["id"] == "01abc"
    assert fm["sources"] == [
        {"id": "src-abc", "resource": "inbox/a.md", "title": "Sourdough starter care"}
    ]
    assert "(../starter/flour.md)" in text


def at(days_ago: float, now: datetime) -> datetime:
    return now - timedelta(days=days_ago)


def episode(n: int, moment: datetime, insight: str = "Route before writing.") -> reflect.Episode:
    return reflect.Episode(
        f"episodes/life/e{n}.md",
        f"life-{n}",
        "life",
        moment,
        f"situation {n}",
        "success",
        (insight,),
    )


NOW = datetime(2026, 6, 1, tzinfo=UTC)


def test_distillation_boundaries() -> None:
    one = reflect.lessons_from([episode(1, at(100, NOW))])
    assert reflect.to_distill(one, NOW, 14) == []
    young = reflect.lessons_from([episode(1, at(14, NOW)), episode(2, at(1, NOW))])
    assert reflect.to_distill(young, NOW, 14) == []  # exactly the age is not older
    old = reflect.lessons_from(
        [episode(1, at(15, NOW)), episode(2, at(1, NOW)), episode(3, at(20, NOW))]
    )
    assert len(old) == 1 and len(old[0].episodes) == 3
    stamped = reflect.to_distill(old, NOW, 14)
    assert [e.episode_id for e in stamped] == ["life-1", "life-3"]  # the newest stays live
    other = reflect.lessons_from([episode(1, at(30, NOW)), episode(2, at(20, NOW), "Other.")])
    assert reflect.to_distill(other, NOW, 14) == []  # different insights: two lessons of one


def test_episode_render_read_round_trip() -> None:
    text = reflect.render_episode(
        episode_id="signal-x",
        kind="signal",
        at=NOW,
        situation="User prefers metric units",
        intent="remember",
        actions=["noted"],
        outcome="success",
        insights=["Use metric units in recipes."],
        tags=["decision"],
    )
    ep, problems = reflect.read_episode("episodes/signal/signal-x.md", text)
    assert problems == [] and ep is not None
    assert ep.insights == ("Use metric units in recipes.",)
    assert ep.tags == ("decision",) and ep.timestamp == NOW
    broken, problems = reflect.read_episode("x.md", text.replace("## Outcome", "## Result"))
    assert broken is None and "missing section '## Outcome'" in problems


def bytes_count(text: str) -> int:
    return len(text.encode("utf-8"))


@settings(max_examples=40, deadline=None)
@given(
    st.integers(min_value=100, max_value=3000),
    st.lists(st.text(min_size=1, max_size=300), max_size=30),
    st.text(max_size=2000),
)
def test_snapshot_never_exceeds_the_cap(cap: int, insights: list[str], identity: str) -> None:
    eps = [episode(n, at(n, NOW), ins) for n, ins in enumerate(insights)]
    lessons = reflect.lessons_from(eps)
    text = reflect.render_snapshot(
        identity=identity, lessons=lessons, recent=eps, decisions=eps, cap=cap, count=bytes_count
    )
    assert bytes_count(text) <= cap


def test_snapshot_size_flat_in_episode_count() -> None:
    sizes = []
    for total in (1_000, 20_000):
        eps = [
            episode(n, at(n / 100, NOW), f"insight number {n % 50} about routing")
            for n in range(total)
        ]
        lessons = reflect.lessons_from(eps)
        text = reflect.render_snapshot(
            identity="An agent.",
            lessons=lessons,
            recent=eps[:5],
            decisions=[],
            cap=1500,
            count=bytes_count,
        )
        sizes.append(bytes_count(text))
    assert sizes[0] <= 1500 and sizes[1] <= 1500
    assert abs(sizes[0] - sizes[1]) < 40
