"""Engine verbs on real stores: consolidate, quarantine, refine regressions, harness, plan/apply,
query tiers, evaluate, reflect, the model writer against a local chat server, and the demo."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from http_server import ServiceHandler, fake_service
from memdir import __version__
from memdir.doc import frontmatter
from memdir.engine import reflect as reflect_module
from memdir.engine import runs as runs_module
from memdir.errors import HarnessChanged, InvalidDocument, InvalidInput, InvalidQuery
from memdir.files.store import Store
from memdir.service import Memory

BREAD = (
    "# Sourdough starter care\n\nA sourdough starter is flour and water colonised by wild "
    "yeast. Feed the starter every day with equal weights of flour and water. A starter that "
    "smells of acetone should be fed more often.\n"
)
COMPOST = (
    "# Hot compost\n\nA hot compost pile needs greens and browns in balance. Turn the compost "
    "every week so the soil life gets air. Water the compost pile when it feels dry.\n"
)
OFF = "# Markets\n\nThe stock market closed higher after the central bank held interest rates.\n"


@pytest.fixture
def eng(tmp_path: Path) -> Iterator[Memory]:
    mem = Memory.open(Store.init(tmp_path / "store"))
    mem.bundle_add("kitchen", "baking bread, sourdough starter, flour, yeast, fermentation")
    mem.bundle_add("garden", "vegetable garden, soil, compost, seeds, watering, pests")
    yield mem
    mem.close()


def git_log(root: Path) -> list[str]:
    out = subprocess.run(
        ["git", "-C", str(root), "log", "--format=%s"], capture_output=True, text=True, check=True
    )
    return out.stdout.splitlines()


def test_consolidate_routes_writes_quarantines_and_commits_once(eng: Memory) -> None:
    eng.ingest([("bread.md", BREAD), ("compost.md", COMPOST), ("off.md", OFF)])
    before = len(git_log(eng.root))
    result = eng.consolidate()
    assert len(git_log(eng.root)) == before + 1
    assert git_log(eng.root)[0].startswith("consolidate: 2 article(s) in garden, kitchen, 1 quar")
    assert sorted(p.split("/")[1] for p in result["articles"]) == ["garden", "kitchen"]
    [q] = result["quarantined"]
    assert q["source"].endswith("-off.md") and "no bundle" in q["reason"]
    assert (eng.root / q["to"]).is_file() and not (eng.root / q["source"]).exists()
    assert result["refine"]["drift"] == 0
    assert all(v == "conformant" for v in result["refine"]["okf"].values())
    article = next(p for p in result["articles"] if "/kitchen/" in p)
    fm = frontmatter.parse((eng.root / article).read_text()).fm
    assert fm["merged-from"][0]["type"] == "ingest"
    topic_index = (eng.root / article).parent / "index.md"
    assert f"]({Path(article).name}) - A sourdough starter" in topic_index.read_text()
    assert "* [kitchen](wiki/kitchen/index.md)" in (eng.root / "index.md").read_text()
    assert "## 20" in (eng.root / "wiki/kitchen/log.md").read_text()
    report = eng.memory_report()
    unmerged = {e.path for e in report.unmerged}
    assert not any(p.startswith("inbox/") for p in unmerged)  # consolidated sources covered
    assert q["to"] in unmerged  # the quarantined source stays unconsolidated
    rows = (eng.root / ".memdir/runs.tsv").read_text()
    assert "\tconsolidate\tok\tarticles=2 quarantined=1" in rows
    assert "run=refine hold drift=0 delta=+0" in rows
    assert list((eng.root / "episodes/operational").rglob("operational-consolidate-*.md"))
    assert eng.consolidate()["articles"] == []  # nothing unseen is left


def test_bad_input_empty_and_binary_sources(eng: Memory) -> None:
    with pytest.raises(InvalidDocument, match="empty"):
        eng.ingest([("e.md", "  \n")])
    with pytest.raises(InvalidDocument, match="binary"):
        eng.ingest([("b.bin", b"\x00\x01\x02")])


def test_refine_detects_a_regression(eng: Memory) -> None:
    eng.ingest([("bread.md", BREAD)])
    eng.consolidate()
    assert eng.refine()["label"] == "hold"
    orphan = eng.root / "wiki/kitchen/stray/lost.md"
    orphan.parent.mkdir(parents=True)
    orphan.write_text(frontmatter.render({"type": "concept"}, "# Lost\n\n[[nowhere]]\n"))
    result = eng.refine()
    assert result["label"] == "regress" and result["delta"] > 0
    comps = result["components"]
    assert any("lost.md" in i for i in comps["orphan"]["items"])
    assert any("stray" in i for i in comps["index_mismatch"]["items"])
    assert any("nowhere" in i for i in comps["broken_link"]["items"])
    assert any("missing required key 'title'" in i for i in comps["schema_violation"]["items"])
    rows = (eng.root / ".memdir/runs.tsv").read_text()
    assert f"run=refine regress drift={result['drift']} delta=+{result['delta']}" in rows
    from click.testing import CliRunner

    from memdir.cli import cli

    res = CliRunner().invoke(cli, ["--root", str(eng.root), "refine", "--fail-on-regress"])
    assert res.exit_code == 0  # same drift again: hold
    orphan.with_name("second.md").write_text(frontmatter.render({"type": "concept"}, "# 2\n"))
    res = CliRunner().invoke(cli, ["--root", str(eng.root), "refine", "--fail-on-regress"])
    assert res.exit_code == 1 and "run=refine regress" in res.output


def test_hand_edited_harness_is_refused_until_accepted(eng: Memory) -> None:
    with open(eng.root / "HARNESS.md", "a", encoding="utf-8") as fh:
        fh.write("- A rule added by hand.\n")
    with pytest.raises(HarnessChanged):
        eng.ingest([("bread.md", BREAD)])
    with pytest.raises(HarnessChanged):
        eng.consolidate()
    accepted = eng.harness_accept()
    assert accepted["changed"] is True
    assert "\tharness-accept\tok\t" in (eng.root / ".memdir/runs.tsv").read_text()
    assert eng.ingest([("bread.md", BREAD)])


def test_bad_program_points_at_the_line(eng: Memory) -> None:
    path = eng.root / "PROGRAM.md"
    path.write_text(path.read_text() + "\n## Budgets\n- article_bodies: lots\n")
    from memdir.errors import ProgramError

    with pytest.raises(ProgramError, match=r"PROGRAM.md:\d+: section '## Budgets' repeats"):
        eng.consolidate()


def test_consolidate_recalls_lessons_and_episodes_first(eng: Memory) -> None:
    eng.episode_add(
        kind="signal",
        situation="a sourdough starter recipe used cups",
        insights=["Weigh flour for the starter in grams."],
    )
    eng.reflect()
    eng.ingest([("bread.md", BREAD)])
    packet = eng.consolidate(plan=True)
    recall = packet["items"][0]["recall"]
    assert any(line.startswith("lesson:") and "grams" in line for line in recall)
    assert any(line.startswith("episode episodes/signal/") for line in recall)


def test_plan_apply_round_trip_and_refusal(eng: Memory) -> None:
    eng.ingest([("bread.md", BREAD)])
    packet = eng.consolidate(plan=True)
    [item] = packet["items"]
    assert item["bundle"] == "kitchen" and packet["harness_sha256"]
    bad = {
        "articles": [
            {
                "source": item["source"]["path"],
                "bundle": "kitchen",
                "article": "---\ntype: concept\n---\n# Thin\n",
            }
        ]
    }
    with pytest.raises(InvalidInput) as err:
        eng.consolidate(apply=bad)
    assert "missing section '## Key points'" in str(err.value)
    assert not list((eng.root / "wiki/kitchen").rglob("thin*.md"))  # nothing filed
    article = item["example_article"].replace("<RFC 3339 time>", "2026-01-01T00:00:00Z")
    # Sources of the wrong shape are a refusal like any harness problem, not a crash.
    odd = article.replace("sources:", "sources: 5\nold_sources:", 1)
    with pytest.raises(InvalidInput, match="sources"):
        eng.consolidate(apply={"articles": [{**bad["articles"][0], "article": odd}]})
    article = article.replace("Sourdough starter care", "Starter care by an agent", 2)
    good = {
        "articles": [
            {
                "source": item["source"]["path"],
                "bundle": "kitchen",
                "topic": item["topic"],
                "article": article,
            }
        ]
    }
    # One article per source, and the topic it says is the one it is filed under.
    with pytest.raises(InvalidInput, match="earlier in the packet"):
        eng.consolidate(apply={"articles": good["articles"] * 2})
    elsewhere = article.replace(f"\ntopic: {item['topic']}\n", "\ntopic: ../elsewhere\n", 1)
    assert elsewhere != article
    with pytest.raises(InvalidInput, match="topic must be"):
        eng.consolidate(apply={"articles": [{**good["articles"][0], "article": elsewhere}]})
    result = eng.consolidate(apply=good)
    [path] = result["articles"]
    assert path.endswith("/starter-care-by-an-agent.md")
    assert result["refine"]["drift"] == 0


def test_an_agents_packet_quarantines_a_source_no_bundle_is_for(eng: Memory) -> None:
    """The router files an off-topic note it should not (here one that names the bundle's
    words); the calling agent, reading the packet, says so instead of writing an article."""
    party = "# A party\n\nA flour fight at Mia's party, yeast of fun, the kitchen a mess.\n"
    eng.ingest([("bread.md", BREAD), ("party.md", PARTY := party)])
    packet = eng.consolidate(plan=True)
    assert '"quarantine"' in packet["contract"]["return"] and packet["contract"]["quarantine"]
    by_name = {i["source"]["path"].rsplit("-", 1)[-1]: i for i in packet["items"]}
    assert set(by_name) == {"bread.md", "party.md"}  # the router filed both
    bread, party_item = by_name["bread.md"], by_name["party.md"]
    # Each item says how the router placed it, so the agent can weigh a weak placement.
    assert party_item["route"]["bundles"] == ["kitchen"] and party_item["route"]["scores"]
    article = bread["example_article"].replace("<RFC 3339 time>", "2026-01-01T00:00:00Z")
    filed = {"source": bread["source"]["path"], "bundle": "kitchen", "article": article}
    held = {"source": party_item["source"]["path"], "reason": "  a child's party,\n not baking "}
    refusals = [
        ({"articles": [filed], "quarantine": [{**held, "source": "inbox/none.md"}]}, "unseen"),
        ({"articles": [filed], "quarantine": [{**held, "source": filed["source"]}]}, "has an"),
        ({"articles": [filed], "quarantine": [held, held]}, "named earlier"),
        ({"articles": [filed], "quarantine": [{**held, "reason": " "}]}, "must say why"),
        ({"articles": [filed], "quarantine": [{**held, "reason": "x" * 501}]}, "at most 500"),
        ({"articles": [filed], "quarantine": [{**held, "reason": "a\x00b"}]}, "no file can"),
        ({"articles": [filed], "quarantine": "party"}, "JSON object"),
    ]
    for packet_back, reason in refusals:
        with pytest.raises(InvalidInput, match=reason):
            eng.consolidate(apply=packet_back)
    # Refused whole: the good article was not filed either, nothing left the inbox.
    assert not list((eng.root / "wiki").rglob("sourdough*.md"))
    assert len(list((eng.root / "inbox").glob("*.md"))) == 2

    result = eng.consolidate(apply={"articles": [filed], "quarantine": [held]})
    [moved] = result["quarantined"]
    assert moved["source"] == held["source"] and moved["reason"] == "a child's party, not baking"
    assert not (eng.root / held["source"]).exists()
    assert [p.name for p in (eng.root / "inbox").glob("*.md")] == [filed["source"][6:]]
    fm = frontmatter.parse((eng.root / moved["to"]).read_text()).fm
    assert fm["quarantine_reason"] == "a child's party, not baking"
    assert fm["quarantined_by"] == "agent" and fm["route_scores"] == {}
    [entry] = eng.quarantine_list()
    assert entry["path"] == moved["to"] and entry["quarantined_by"] == "agent"
    from click.testing import CliRunner

    from memdir.cli import cli

    shown = CliRunner().invoke(cli, ["--root", str(eng.root), "quarantine", "list"])
    assert f"{moved['to']}: a child's party, not baking (by agent)" in shown.output
    # A person who disagrees releases it, and the mark goes with the other stamps.
    released = eng.quarantine_release(moved["to"], bundle="kitchen")
    assert "quarantined_by" not in frontmatter.parse((eng.root / released["path"]).read_text()).fm
    # A packet may only quarantine.
    eng.ingest([("party2.md", PARTY)])
    [again] = [i for i in eng.consolidate(plan=True)["items"] if "party2" in i["source"]["path"]]
    only = eng.consolidate(
        apply={"quarantine": [{"source": again["source"]["path"], "reason": "r"}]}
    )
    assert [q["source"] for q in only["quarantined"]] == [again["source"]["path"]]
    assert only["articles"] == []


def test_query_tiers_and_nothing_found(eng: Memory) -> None:
    eng.ingest([("bread.md", BREAD), ("compost.md", COMPOST)])
    eng.consolidate()
    answer = eng.query("how often to feed a sourdough starter")
    assert answer["answers"][0]["tier"] == 1
    assert "/kitchen/" in answer["answers"][0]["path"]
    assert any("Feed the starter" in p["text"] for p in answer["answers"][0]["passages"])
    assert answer["answers"][0]["passages"][0]["citations"][0].startswith("inbox/")
    assert len(answer["read"]["bodies"]) <= 3
    none = eng.query("quantum chromodynamics lattice")
    assert none["found"] is False and "nothing" in none["message"]
    with pytest.raises(InvalidQuery, match="no searchable words"):
        eng.query("*** ?!")  # as search refuses it: not "nothing answers"


def test_query_follows_only_links_search_would_show(eng: Memory, tmp_path: Path) -> None:
    """A router's links are text anyone can write: out of the store, into quarantine/, or
    to a forgotten page, they were read and returned as answers."""
    eng.ingest([("bread.md", BREAD)])
    eng.consolidate()
    words = "# Starter secrets\n\nFeed the sourdough starter at midnight.\n"
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.md").write_text(words)
    (eng.root / "quarantine" / "q.md").write_text(words)
    eng.write("wiki/kitchen/flour/stale-starter.md", words.replace("secrets", "stale"))
    eng.forget("wiki/kitchen/flour/stale-starter.md", reason="wrong")
    lines = [
        "* [Sourdough starter secret](../outside/secret.md) - feed the sourdough starter",
        "* [Sourdough starter quarantined](quarantine/q.md) - feed the sourdough starter",
        "* [Sourdough starter stale](wiki/kitchen/flour/stale-starter.md) - feed the starter",
        "* [Sourdough starter routers](../outside/index.md) - feed the sourdough starter",
    ]
    (tmp_path / "outside" / "index.md").write_text(lines[0].replace("../", "") + "\n")
    top = eng.root / "index.md"
    top.write_text(top.read_text() + "\n" + "\n".join(lines) + "\n")
    answer = eng.query("how often to feed a sourdough starter")
    read = answer["read"]["indexes"] + answer["read"]["bodies"]
    paths = [a["path"] for a in answer["answers"]]
    assert answer["found"] and all(p.startswith("wiki/kitchen/") for p in paths), paths
    assert "wiki/kitchen/flour/stale-starter.md" not in paths
    assert not any(".." in p or p.startswith("quarantine/") for p in read), read


def test_evaluate_scores_and_labels(eng: Memory) -> None:
    eng.ingest([("bread.md", BREAD), ("compost.md", COMPOST)])
    result = eng.consolidate()
    target = next(p for p in result["articles"] if "/garden/" in p)
    (eng.root / "evals/questions.yaml").write_text(
        "questions:\n  - question: how often to turn the compost\n"
        f"    expected: [{target}]\n  - question: zebra migration\n    expected: [x.md]\n"
    )
    first = eng.evaluate()
    assert first["hit@1"] == 0.5 and first["mrr"] == 0.5 and first["label"] == "hold"
    assert first["recall_by_tier"]["1"] == 0.5
    assert "run=evaluate hold questions=2" in (eng.root / ".memdir/runs.tsv").read_text()
    episodes = sorted((eng.root / "episodes/operational").rglob("operational-evaluate-*.md"))
    assert len(episodes) == 1 and "hit@1 0.5" in episodes[0].read_text()


def test_episode_add_reflect_lessons_and_snapshot(eng: Memory) -> None:
    for n in range(2):
        eng.episode_add(
            kind="signal",
            situation=f"user asked for grams {n}",
            insights=["Use metric units in recipes."],
            tags=["decision"],
        )
    result = eng.reflect()
    assert result["distilled"] == []  # too young
    lessons = (eng.root / "LESSONS.md").read_text()
    assert "**Use metric units in recipes.**" in lessons and "2 episodes" in lessons
    snap = (eng.root / "SNAPSHOT.md").read_text()
    assert "Use metric units in recipes." in snap and "user asked for grams 1" in snap
    from datetime import timedelta

    later = eng.reflect(
        now=__import__("memdir.engine.reflect", fromlist=["x"]).now_utc() + timedelta(days=30)
    )
    assert len(later["distilled"]) == 1
    distilled = frontmatter.parse((eng.root / later["distilled"][0]).read_text()).fm
    assert distilled["distilled"] is True


class ChatHandler(ServiceHandler):
    reply: dict[str, Any] = {}
    delay = 0.0
    busy = 0  # answers this many requests with 503 first
    agents: list[str | None] = []

    def do_POST(self) -> None:
        import time

        body = self.read_json()
        assert body["messages"][0]["role"] == "system"
        ChatHandler.agents.append(self.headers.get("User-Agent"))
        if ChatHandler.busy:
            ChatHandler.busy -= 1
            self.send_bytes(b"overloaded", 503)
            return
        time.sleep(self.delay)
        message = {"role": "assistant", "content": json.dumps(self.reply)}
        self.send_json({"choices": [{"message": message}]})


@pytest.mark.parametrize("delay", [0.0, 1.5])
def test_model_writer_against_a_local_chat_server(tmp_path: Path, delay: float) -> None:
    ChatHandler.reply = {
        "title": "Starter feeding",
        "description": "Feed the starter daily.",
        "key_points": [{"text": "Feed the starter daily.", "sources": ["x"]}],
        "takeaways": ["Feed it."],
        "tags": ["sourdough"],
    }
    ChatHandler.delay = delay
    with fake_service(ChatHandler) as url:
        root = Store.init(tmp_path / "store")
        mem = Memory.open(
            root,
            overrides={
                "engine": {"writer": "openai"},
                "llm": {
                    "base_url": f"{url}/v1",
                    "model": "test-model",
                    "timeout_seconds": 0.5,
                },
            },
        )
        mem.bundle_add("kitchen", "baking bread, sourdough starter, flour, yeast")
        mem.ingest([("bread.md", BREAD)])
        result = mem.consolidate()
        mem.close()
    [path] = result["articles"]
    fm = frontmatter.parse((root / path).read_text()).fm
    if delay == 0.0:
        assert fm["title"] == "Starter feeding" and fm["generated"]["by"] == "model/test-model"
    else:
        assert fm["generated"]["by"] == "memdir/extractive"
        assert any("fallback to extractive" in n and "timed out" in n for n in result["notes"])
        assert "fallbacks=1" in (root / ".memdir/runs.tsv").read_text()


def test_model_writer_goes_through_the_shared_client(tmp_path: Path) -> None:
    ChatHandler.reply = {
        "title": "Starter feeding",
        "key_points": [{"text": "Feed the starter daily.", "sources": ["x"]}],
    }
    ChatHandler.delay, ChatHandler.busy, ChatHandler.agents = 0.0, 1, []
    with fake_service(ChatHandler) as url:
        root = Store.init(tmp_path / "store")
        mem = Memory.open(
            root,
            overrides={
                "engine": {"writer": "openai"},
                "llm": {"base_url": f"{url}/v1", "model": "test-model"},
            },
        )
        mem.bundle_add("kitchen", "baking bread, sourdough starter, flour, yeast")
        mem.ingest([("bread.md", BREAD)])
        result = mem.consolidate()
        mem.close()
    # One 503, asked again: the model's draft, not the fallback.
    [path] = result["articles"]
    fm = frontmatter.parse((root / path).read_text()).fm
    assert fm["generated"]["by"] == "model/test-model" and fm["title"] == "Starter feeding"
    assert ChatHandler.agents == [f"memdir/{__version__}"] * 2


def test_model_writer_stops_asking_a_service_that_keeps_failing(tmp_path: Path) -> None:
    """Every source used to pay the failing service's retries (and, for a host that does not
    answer, its connect timeout each time): after three failures in a row it is not asked."""
    ChatHandler.reply = {"title": "x", "key_points": [{"text": "y", "sources": ["x"]}]}
    ChatHandler.delay, ChatHandler.busy, ChatHandler.agents = 0.0, 1000, []
    subjects = ["rye loaf", "bread oven", "sourdough starter", "baking tins", "flour sacks"]
    notes = [
        (f"n{n}.md", f"# The {s}\n\nA note about the {s}, for baking.\n")
        for n, s in enumerate(subjects)
    ]
    with fake_service(ChatHandler) as url:
        root = Store.init(tmp_path / "store")
        overrides = {
            "engine": {"writer": "openai", "router": "lexical"},
            "llm": {"base_url": f"{url}/v1", "model": "test-model"},
        }
        with Memory.open(root, overrides=overrides) as mem:
            mem.bundle_add("kitchen", "baking bread, loaf, rye flour, sourdough")
            mem.ingest(notes)
            result = mem.consolidate()
    assert len(result["placements"]) == 5 and result["articles"]
    assert len(ChatHandler.agents) == 3 * 3  # three sources, each tried three times
    assert sum("not asked" in n for n in result["notes"]) == 2
    ChatHandler.busy = 0


def test_demo_meets_its_targets(tmp_path: Path) -> None:
    from memdir.demo import build

    lines: list[str] = []
    out = build(tmp_path / "demo", echo=lines.append)
    assert out["refine"]["drift"] == 0
    assert set(out["refine"]["okf"].values()) == {"conformant"}
    [q] = out["consolidate"]["quarantined"]
    assert q["source"].endswith("misc-tax.md")
    unmerged = [e.path for e in out["report"].unmerged]
    assert not any(p.startswith("inbox/") for p in unmerged)
    assert out["evaluate"]["hit@3"] >= 0.8
    assert any(line.startswith("coverage:") for line in "\n".join(lines).splitlines())
    # The consolidate line is the run's commit message, said once.
    assert any(line.startswith("consolidate: 29 article(s) in ") for line in lines)
    assert not any(line.startswith("consolidate: consolidate:") for line in lines)
    turns = out["turns"]
    assert [list(t.parents) for t in turns[1:]] == [[turns[0].id], [turns[1].id]]
    assert {item.ref for item in out["context"].items} >= {t.id for t in turns}
    assert out["context"].tokens <= out["context"].budget
    # The turn the search finds reads as thread, user, time and "input → output".
    text = "\n".join(lines)
    assert "kitchen-help · " in text and "acetone, is it ruined? → " in text


def test_bundle_add_list_remove_through_the_cli(eng: Memory) -> None:
    from click.testing import CliRunner

    from memdir.cli import cli

    runner = CliRunner()
    root = str(eng.root)
    added = runner.invoke(
        cli, ["--root", root, "bundle", "add", "cycling", "--scope", "bicycle chain"]
    )
    assert added.exit_code == 0, added.output
    listed = runner.invoke(cli, ["--root", root, "bundle", "list"])
    assert all(name in listed.output for name in ("kitchen", "garden", "cycling"))
    assert "bicycle chain" in listed.output
    assert (eng.root / "wiki/cycling/index.md").is_file()
    removed = runner.invoke(cli, ["--root", root, "bundle", "remove", "cycling"])
    assert removed.exit_code == 0, removed.output
    program_text = (eng.root / "PROGRAM.md").read_text()
    assert "cycling" not in program_text and "kitchen" in program_text
    assert (eng.root / "wiki/cycling/index.md").is_file()  # articles and folders stay on disk


def test_reflect_records_the_episodes_it_distilled_as_merged(eng: Memory) -> None:
    """Distilled experience episodes are merged into LESSONS.md: they stop counting as
    unmerged in the memory report, and a later reflect keeps each entry as written."""
    from datetime import timedelta

    for n in range(2):
        eng.episode_add(
            kind="signal", situation=f"asked for grams {n}", insights=["Use metric units."]
        )
    eng.reflect()
    assert "merged-from" not in frontmatter.parse((eng.root / "LESSONS.md").read_text()).fm
    unmerged = {e.path for e in eng.memory_report().unmerged}
    signals = {p for p in unmerged if p.startswith("episodes/signal/")}
    assert len(signals) == 2
    later = reflect_module.now_utc() + timedelta(days=30)
    distilled = eng.reflect(now=later)["distilled"]
    assert distilled
    merged = frontmatter.parse((eng.root / "LESSONS.md").read_text()).fm["merged-from"]
    assert {m["path"] for m in merged} == set(distilled) and all(
        m["type"] == "episode" for m in merged
    )
    assert not set(distilled) & {e.path for e in eng.memory_report().unmerged}
    eng.reflect(now=later + timedelta(days=1))
    again = frontmatter.parse((eng.root / "LESSONS.md").read_text()).fm["merged-from"]
    assert all(m in again for m in merged)  # as first written, dates included


def operational(eng: Memory) -> list[Path]:
    return sorted((eng.root / "episodes/operational").rglob("*.md"))


def test_a_run_that_did_nothing_writes_no_episode(eng: Memory) -> None:
    """Operational episodes say what happened; an empty consolidate or an idle reflect
    leaves only its runs.tsv row."""
    eng.ingest([("bread.md", BREAD)])
    eng.consolidate()
    made = operational(eng)
    assert any("operational-consolidate" in p.name for p in made)
    text = next(p for p in made if "operational-consolidate" in p.name).read_text()
    assert "consolidate: 1 article(s) filed, 0 quarantined" in text and "drift" in text
    rows = len(runs_module.history(eng.root))
    eng.consolidate()
    eng.reflect()
    assert operational(eng) == made
    assert len(runs_module.history(eng.root)) > rows  # the runs are still logged


def test_an_outcome_follows_from_what_the_run_did(eng: Memory) -> None:
    off_topic = ("vat.md", "The quarterly VAT return is due a month after the quarter ends.\n")
    eng.ingest([off_topic])
    eng.consolidate()
    [episode] = [p for p in operational(eng) if "operational-consolidate" in p.name]
    fm = frontmatter.parse(episode.read_text()).fm
    assert fm["outcome"] == "failure"  # nothing filed, one source quarantined
    body = episode.read_text()
    assert "widen the scope of" in body and "quarantined inbox/" in body


def test_the_snapshot_says_each_recent_thing_once() -> None:
    from datetime import UTC, datetime, timedelta

    start = datetime(2026, 12, 1, tzinfo=UTC)
    same = [
        reflect_module.Episode(
            f"episodes/operational/e{n}.md", f"e{n}", "operational", start + timedelta(hours=n),
            "consolidate: 0 article(s) filed, 1 quarantined", "failure", (),
        )
        for n in range(4)
    ]  # fmt: skip
    other = reflect_module.Episode(
        "episodes/signal/s.md", "s", "signal", start, "user asked for grams", "success", ()
    )
    text = reflect_module.render_snapshot(
        identity="me", lessons=[], recent=[*reversed(same), other], decisions=[], cap=1500,
        count=len, max_recent=5,
    )  # fmt: skip
    recent = text.split("## Recent")[1].split("##")[0]
    assert recent.count("consolidate: 0 article(s) filed") == 1 and "4 times" in recent
    assert "user asked for grams" in recent


def test_the_experience_router_lists_the_kinds_recorded(eng: Memory) -> None:
    """episodes/index.md, the second router: each kind with its count and latest episode;
    the context pack offers it, and the memory report does not count it as an episode."""
    eng.episode_add(kind="signal", situation="user asked for grams", insights=["Use grams."])
    eng.record_turn(thread="t", input="hello", output="hi")
    eng.reflect()
    router = (eng.root / "episodes/index.md").read_text()
    assert "- [Signal](signal/): 1 episode(s)" in router and "user asked for grams" in router
    assert "- [Turns](turns/): 1 turn record(s)" in router
    assert "- [Life](life/): 0 episode(s)" in router
    assert "episodes/index.md" not in {e.path for e in eng.memory_report().episodic_files}
    pack = eng.context("t", budget=4000)
    assert any(i.kind == "router" and i.path == "episodes/index.md" for i in pack.items)
