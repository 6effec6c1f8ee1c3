"""The route judge (``[engine] judge``): a model's say over the router's placement, through
the plugin mechanism (a fake judge registered as a plugin) and the built-in model judge
against a local chat server."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from http_server import ServiceHandler, fake_service
from memdir.doc import frontmatter
from memdir.engine.judge import JudgeRequest, Verdict
from memdir.errors import ConfigError, ProviderError
from memdir.files.store import Store
from memdir.providers.plugins import hookimpl, manager
from memdir.service import Memory

BREAD = (
    "# Starter care\n\nFeed the sourdough starter every day with equal weights of flour and "
    "water. A starter that smells of acetone wants feeding more often.\n"
)
COMPOST = (
    "# Hot compost\n\nA compost pile needs greens and browns in balance. Turn the compost every "
    "week so the soil gets air, and water it when it feels dry.\n"
)
PARTY = (
    "# Mia's party\n\nA flour fight at Mia's party: yeast of fun, the baking tray a drum, "
    "the kitchen a mess for a week.\n"
)
PLAN = "# Saturday\n\nThe stall opens at nine; take the loaves in the blue crates.\n"


class FakeJudge:
    """Decides by the source's title, as a table says; records what it was shown."""

    name = "fake"
    table: dict[str, Any] = {}
    seen: list[JudgeRequest] = []
    noise = ""

    def __init__(self, settings: Any) -> None:
        self.settings = settings

    def judge(self, request: JudgeRequest) -> Verdict:
        FakeJudge.seen.append(request)
        said = FakeJudge.table.get(request.title, "keep")
        if said == "keep":
            return Verdict(request.proposed, "as proposed")
        if isinstance(said, BaseException):
            raise said
        return Verdict(tuple(said), f"said{FakeJudge.noise} {said}")


class FakePlugin:
    @hookimpl
    def register_judges(self, register: Callable[[str, Callable[..., Any]], None]) -> None:
        register("fake", FakeJudge)


@pytest.fixture
def judged(tmp_path: Path) -> Iterator[Memory]:
    plugin = FakePlugin()
    manager().register(plugin)
    FakeJudge.table, FakeJudge.seen, FakeJudge.noise = {}, [], ""
    mem = Memory.open(
        Store.init(tmp_path / "store"),
        overrides={"engine": {"judge": "fake", "router": "lexical"}},
    )
    mem.bundle_add("kitchen", "baking bread, sourdough starter, flour, yeast, kitchen")
    mem.bundle_add("garden", "vegetable garden, soil, compost, seeds, watering")
    try:
        yield mem
    finally:
        mem.close()
        manager().unregister(plugin)


def by_name(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["source"].rsplit("-", 1)[-1]: p for p in result["placements"]}


def runs_row(root: Path) -> str:
    """The last consolidate run's row of runs.tsv."""
    rows = (root / ".memdir/runs.tsv").read_text().splitlines()
    return next(r for r in reversed(rows) if "\tconsolidate\t" in r)


def test_the_judge_quarantines_what_the_router_filed_and_files_what_it_held(
    judged: Memory,
) -> None:
    FakeJudge.table = {"Mia's party": [], "Saturday": ["kitchen"]}
    FakeJudge.noise = "\x00\ud800\n\t"  # a reason no file can hold, made one that can
    judged.ingest([("bread.md", BREAD), ("party.md", PARTY), ("plan.md", PLAN)])
    result = judged.consolidate()
    placed = by_name(result)
    # What the judge was shown: the note, every scope and the router's proposal.
    party = next(r for r in FakeJudge.seen if r.title == "Mia's party")
    assert "flour fight" in party.text and party.proposed == ("kitchen",)
    assert dict(party.bundles)["garden"].startswith("vegetable garden")
    # The router filed the party under kitchen (it shares flour, yeast, kitchen): quarantined.
    assert placed["party.md"]["judge"] == {
        "by": "fake",
        "bundles": [],
        "reason": "said []",
        "router": ["kitchen"],
    }
    [held] = result["quarantined"]
    assert held["source"].endswith("-party.md")
    assert held["reason"] == "judge fake: no bundle is for it (said [])"
    fm = frontmatter.parse((judged.root / held["to"]).read_text()).fm
    assert fm["quarantined_by"] == "judge fake" and "kitchen" in fm["route_scores"]
    # The router held the stall plan (no scope word); the judge filed it.
    assert placed["plan.md"]["judge"]["router"] == [] and placed["plan.md"]["bundles"] == [
        "kitchen"
    ]
    assert "reason" in placed["plan.md"] and "judge fake" in placed["plan.md"]["reason"]
    assert any("/kitchen/" in a for a in result["articles"] if "saturday" in a)
    row = runs_row(judged.root)
    assert "judge=fake" in row and "judged=3" in row and "overruled=2" in row
    assert "judge_fallbacks=0" in row
    # Released by a person, the party is filed where they said: the judge is not asked.
    FakeJudge.seen.clear()
    judged.quarantine_release(held["to"], bundle="kitchen")
    again = judged.consolidate()
    assert [p["bundles"] for p in again["placements"]] == [["kitchen"]]
    assert FakeJudge.seen == [] and "judge" not in again["placements"][0]


def test_a_failing_judge_leaves_the_routers_placement_and_says_so(judged: Memory) -> None:
    FakeJudge.table = {
        "Starter care": ProviderError("the model service answered 503"),
        "Hot compost": ["allotment"],  # no such bundle: no verdict
    }
    judged.ingest([("bread.md", BREAD), ("compost.md", COMPOST)])
    result = judged.consolidate()
    placed = by_name(result)
    # No verdict: the router's own placement, unmarked.
    assert "kitchen" in placed["bread.md"]["bundles"] and "judge" not in placed["bread.md"]
    assert "garden" in placed["compost.md"]["bundles"] and "judge" not in placed["compost.md"]
    assert any("bread.md: judge fake failed" in n and "503" in n for n in result["notes"])
    assert any("no bundle of PROGRAM.md (allotment)" in n for n in result["notes"])
    assert "judge_fallbacks=2" in runs_row(judged.root) and "judged=0" in runs_row(judged.root)


def test_a_judge_that_keeps_failing_is_not_asked_for_the_rest_of_the_run(
    judged: Memory,
) -> None:
    down = ProviderError("connection refused")
    FakeJudge.table = {f"Note {n}": down for n in range(6)}
    judged.ingest([(f"n{n}.md", f"# Note {n}\n\nFeed the starter flour.\n") for n in range(6)])
    result = judged.consolidate()
    assert len(FakeJudge.seen) == 3
    assert [p["bundles"] for p in result["placements"]] == [["kitchen"]] * 6  # the router's
    assert any("failed 3 times in a row" in n for n in result["notes"])
    assert "judge_fallbacks=6" in runs_row(judged.root)


def test_a_judge_that_breaks_stops_the_run_and_undoes_it(judged: Memory) -> None:
    FakeJudge.table = {"Hot compost": RuntimeError("bug in the plugin")}
    judged.ingest([("bread.md", BREAD), ("compost.md", COMPOST)])
    inbox = sorted(p.name for p in (judged.root / "inbox").glob("*.md"))
    with pytest.raises(ProviderError, match="judge 'fake' failed on inbox/.*compost.md"):
        judged.consolidate()
    assert sorted(p.name for p in (judged.root / "inbox").glob("*.md")) == inbox
    assert not list((judged.root / "wiki").rglob("starter-care*.md"))


@pytest.mark.parametrize(
    ("judge", "said"),
    [
        ("oracle", "unknown route judge 'oracle' in engine.judge"),
        ("openai", "base_url and model are not both set"),  # no [llm] endpoint
    ],
)
def test_a_judge_that_cannot_be_had_is_a_config_error(
    tmp_path: Path, judge: str, said: str
) -> None:
    with Memory.open(Store.init(tmp_path / "s"), overrides={"engine": {"judge": judge}}) as m:
        m.bundle_add("kitchen", "baking bread")
        m.ingest([("bread.md", BREAD)])
        with pytest.raises(ConfigError, match=said):
            m.consolidate()
        assert len(list((m.root / "inbox").glob("*.md"))) == 1  # nothing consolidated


class JudgeChat(ServiceHandler):
    reply: Any = {}
    asked: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        body = self.read_json()
        JudgeChat.asked.append(body)
        content = JudgeChat.reply if isinstance(JudgeChat.reply, str) else json.dumps(self.reply)
        self.send_json({"choices": [{"message": {"role": "assistant", "content": content}}]})


@pytest.mark.parametrize(
    ("reply", "filed"),
    [
        ({"bundles": [], "reason": "A party, not baking."}, None),
        ({"bundles": ["kitchen", "garden", "kitchen"], "reason": "both"}, ["garden", "kitchen"]),
        ("not json at all", ["kitchen"]),  # no verdict: the router's placement
        ({"bundle": "kitchen"}, ["kitchen"]),
    ],
)
def test_the_model_judge_against_a_local_chat_server(
    tmp_path: Path, reply: Any, filed: list[str] | None
) -> None:
    JudgeChat.reply, JudgeChat.asked = reply, []
    with fake_service(JudgeChat) as url:
        overrides = {
            "engine": {"judge": "openai", "router": "lexical"},
            "llm": {"base_url": f"{url}/v1", "model": "judge-model", "timeout_seconds": 5},
        }
        with Memory.open(Store.init(tmp_path / "store"), overrides=overrides) as mem:
            mem.bundle_add("kitchen", "baking bread, sourdough starter, flour, yeast, kitchen")
            mem.bundle_add("garden", "vegetable garden, soil, compost, seeds, watering")
            mem.ingest([("party.md", PARTY)])
            result = mem.consolidate()
            row = runs_row(mem.root)
    [asked] = JudgeChat.asked
    assert asked["model"] == "judge-model"
    system, user = asked["messages"][0]["content"], asked["messages"][1]["content"]
    assert "at most two" in system and "- garden: vegetable garden" in user
    assert "flour fight" in user and "proposes: kitchen" in user
    [placed] = result["placements"]
    if filed is None:
        assert (
            result["quarantined"] and "A party, not baking." in result["quarantined"][0]["reason"]
        )
    else:
        assert sorted(placed["bundles"]) == filed
    assert ("judge_fallbacks=1" in row) == (filed == ["kitchen"])
