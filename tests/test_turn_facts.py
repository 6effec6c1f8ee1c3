"""Turn facts routed into bundle articles (consolidate --turns), and the agent path for turns:
the plan packet lists threads with unmerged turns, apply takes pages for them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import git, run_cli
from memdir.doc import frontmatter
from memdir.engine import threads
from memdir.errors import InvalidInput
from memdir.files.store import Store
from memdir.service import Memory


@pytest.fixture
def tmem(tmp_path: Path) -> Iterator[Memory]:
    mem = Memory.open(Store.init(tmp_path / "store"), overrides={"embeddings": {"enabled": False}})
    mem.bundle_add("kitchen", "baking bread, sourdough starter, flour, yeast, oven")
    mem.bundle_add("garden", "tomatoes, compost, watering plants, garden beds")
    yield mem
    mem.close()


def unmerged_turns(mem: Memory) -> list[str]:
    return threads.unmerged_turns(e.path for e in mem.memory_report().unmerged)


def bread_turns(mem: Memory) -> list[str]:
    a = mem.record_turn(
        thread="bread",
        input="How often should I feed the sourdough starter?",
        output="Feed the sourdough starter twice a day with equal weights of flour and rye.",
    )
    b = mem.record_turn(
        thread="bread",
        input="What oven temperature for the loaf?",
        output="We decided to bake the bread at 230 degrees with steam in the oven.",
        parents=[a.id],
    )
    return [a.id, b.id]


def fm_of(mem: Memory, rel: str) -> dict[str, object]:
    return frontmatter.parse((mem.root / rel).read_text()).fm


def test_a_threads_facts_become_a_cited_article_in_its_bundle(tmem: Memory) -> None:
    ids = bread_turns(tmem)
    result = tmem.consolidate(turns=True)
    [article] = result["turns"]["articles"]
    assert article.startswith("wiki/kitchen/") and article in result["articles"]
    fm = fm_of(tmem, article)
    assert fm["thread"] == "bread"
    assert fm["sources"][0]["resource"] == "threads/bread.md"  # type: ignore[index]
    assert [m["id"] for m in fm["merged-from"]] == ids  # type: ignore[union-attr]
    body = (tmem.root / article).read_text()
    assert "230 degrees" in body or "twice a day" in body  # the turns' own words
    assert unmerged_turns(tmem) == []
    audit = result["refine"]
    assert audit["okf"]["kitchen"] == "conformant"
    assert not [i for i in audit["components"]["schema_violation"]["items"] if article in i]
    found = tmem.query("how often to feed the sourdough starter")
    assert found["found"] and article in [a["path"] for a in found["answers"]]
    assert git(tmem.root, "status", "--porcelain", "--untracked-files=all") == ""


def test_a_thread_no_bundle_fits_is_listed_with_its_reason(tmem: Memory) -> None:
    tmem.record_turn(
        thread="taxes", input="When is the tax return due?", output="The return is due in May."
    )
    result = tmem.consolidate(turns=True)
    assert result["turns"]["articles"] == []
    [unrouted] = result["turns"]["unrouted"]
    assert unrouted["thread"] == "taxes" and "no bundle scope fits" in unrouted["reason"]
    assert set(unrouted["scores"]) == {"kitchen", "garden"}
    assert result["turns"]["pages"] == ["threads/taxes.md"] and unmerged_turns(tmem) == []


def test_a_later_fold_rewrites_the_same_article(tmem: Memory) -> None:
    ids = bread_turns(tmem)
    [first] = tmem.consolidate(turns=True)["turns"]["articles"]
    third = tmem.record_turn(
        thread="bread",
        input="How much flour for one loaf?",
        output="Use 500 grams of bread flour and 10 grams of salt for one loaf.",
    )
    again = tmem.consolidate(turns=True)
    assert again["turns"]["articles"] == [first]
    assert [m["id"] for m in fm_of(tmem, first)["merged-from"]] == [*ids, third.id]  # type: ignore[union-attr]
    kitchen = [p for p in git(tmem.root, "ls-files", "wiki/kitchen").split() if "index" not in p]
    assert [p for p in kitchen if "log.md" not in p] == [first]


def test_the_plan_lists_threads_and_apply_takes_the_agents_page(tmem: Memory) -> None:
    ids = bread_turns(tmem)
    packet = tmem.consolidate(plan=True)
    [item] = packet["threads"]
    assert item["thread"] == "bread" and item["new_turns"] == ids
    assert [t["id"] for t in item["turns"]] == ids and "## Asked" in item["example_page"]
    page = (
        "---\ntitle: Baking bread, decided\n---\n# Bread\n\n"
        f"- The starter is fed twice a day [{ids[0]}].\n"
        f"- The loaf bakes at 230 degrees with steam [{ids[1]}].\n"
    )
    result = tmem.consolidate(
        apply={"articles": [], "threads": [{"thread": "bread", "page": page}]}
    )
    text = (tmem.root / "threads/bread.md").read_text()
    assert "The loaf bakes at 230 degrees" in text and "## Asked" not in text
    fm = fm_of(tmem, "threads/bread.md")
    assert fm["type"] == "thread" and fm["title"] == "Baking bread, decided"
    assert [m["id"] for m in fm["merged-from"]] == ids  # type: ignore[union-attr]
    assert unmerged_turns(tmem) == []
    assert result["turns"]["articles"] and result["turns"]["articles"][0].startswith(
        "wiki/kitchen/"
    )


def test_apply_refuses_pages_that_do_not_cite_their_turns(tmem: Memory) -> None:
    ids = bread_turns(tmem)
    head = git(tmem.root, "rev-parse", "HEAD")
    bad = {
        "articles": [],
        "threads": [
            {"thread": "bread", "page": f"# Bread\n\nOnly {ids[0]} is cited.\n"},
            {"thread": "nope", "page": "# Nope\n"},
        ],
    }
    with pytest.raises(InvalidInput) as caught:
        tmem.consolidate(apply=bad)
    assert f"cites no turn {ids[1]}" in str(caught.value) and "'nope'" in str(caught.value)
    assert git(tmem.root, "rev-parse", "HEAD") == head
    assert not (tmem.root / "threads").exists() and len(unmerged_turns(tmem)) == 2


def test_the_cli_plan_lists_threads(tmem: Memory) -> None:
    bread_turns(tmem)
    tmem.close()
    out = run_cli("consolidate", "--plan", cwd=tmem.root)
    assert out.returncode == 0, out.stderr
    assert [t["thread"] for t in json.loads(out.stdout)["threads"]] == ["bread"]
