"""Ingest and consolidate: no source is lost or silently stuck, a merge counts as the memory
report counts it, the sources left in inbox/ are shown, and a store without a bundle is left
as it was."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from helpers import BREAD, BROKEN, git, run_cli
from memdir.doc import frontmatter
from memdir.engine import consolidate as consolidating
from memdir.errors import Conflict
from memdir.files.store import Store
from memdir.service import Memory


def drop(root: Path, rel: str, text: str) -> None:
    """A file placed by hand (not through ingest), committed like any user change."""
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(text, encoding="utf-8")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", f"drop {rel}")


def unmerged_inbox(mem: Memory) -> set[str]:
    return {e.path for e in mem.memory_report().unmerged if e.path.startswith("inbox/")}


def test_a_second_misfit_of_the_same_name_does_not_overwrite_the_first(eng: Memory) -> None:
    first = "The quarterly VAT return is due a month after the quarter ends.\n"
    second = "Invoices are numbered per calendar year without gaps.\n"
    drop(eng.root, "inbox/notes.md", first)
    [q1] = eng.consolidate()["quarantined"]
    drop(eng.root, "inbox/notes.md", second)
    [q2] = eng.consolidate()["quarantined"]
    assert q1["to"] != q2["to"]
    assert first in (eng.root / q1["to"]).read_text(encoding="utf-8")
    assert second in (eng.root / q2["to"]).read_text(encoding="utf-8")
    assert {q1["to"], q2["to"]} <= set(git(eng.root, "ls-files", "quarantine").split())


def test_a_source_whose_frontmatter_does_not_parse_stays_in_the_inbox(eng: Memory) -> None:
    drop(eng.root, "inbox/crust.md", BROKEN)
    drop(eng.root, "inbox/tax.md", "---\ntitle: [x\n---\nThe VAT ledger goes to the accountant.\n")
    eng.ingest([("bread.md", BREAD)])
    plan = eng.consolidate(plan=True)
    assert [i["source"]["path"] for i in plan["items"]] == [
        p for p in unmerged_inbox(eng) if p not in ("inbox/crust.md", "inbox/tax.md")
    ]
    assert sorted(s.split(":")[0] for s in plan["skipped"]) == ["inbox/crust.md", "inbox/tax.md"]
    result = eng.consolidate()  # the off-topic one used to crash the run while quarantining
    assert sorted(s.split(":")[0] for s in result["skipped"]) == ["inbox/crust.md", "inbox/tax.md"]
    assert all("frontmatter" in s for s in result["skipped"])
    assert (eng.root / "inbox/crust.md").read_text(encoding="utf-8") == BROKEN
    assert (eng.root / "inbox/tax.md").is_file() and not result["quarantined"]
    [article] = result["articles"]
    assert "Sourdough" in (eng.root / article).read_text(encoding="utf-8")
    assert git(eng.root, "status", "--porcelain") == ""  # everything written was committed
    assert "\tpartial\t" in (eng.root / ".memdir/runs.tsv").read_text(encoding="utf-8")


def _agent_article(plan: dict[str, Any], merged: list[dict[str, str]]) -> dict[str, Any]:
    """The plan's one example article as an agent returns it, with its own merged-from."""
    [item] = plan["items"]
    text = item["example_article"].replace("<RFC 3339 time>", "2026-01-02T03:04:05Z")
    text = frontmatter.edit(text, lambda fm: fm.__setitem__("merged-from", merged))
    article = {"source": item["source"]["path"], "bundle": item["bundle"], "topic": item["topic"]}
    return {"articles": [{**article, "article": text}]}


def test_an_applied_merge_of_an_unknown_type_still_covers_its_source(eng: Memory) -> None:
    [src] = eng.ingest([("bread.md", BREAD)])
    plan = eng.consolidate(plan=True)
    packet = _agent_article(plan, [{"type": "note", "id": src["episode_id"]}])
    eng.consolidate(apply=packet)
    assert src["path"] not in unmerged_inbox(eng)  # the report counts the source as merged
    assert eng.consolidate(plan=True)["items"] == []


def test_consolidate_offers_what_the_report_calls_unmerged(eng: Memory) -> None:
    [src] = eng.ingest([("bread.md", BREAD)])
    page = "---\ntype: concept\nmerged-from:\n  - type: note\n    id: {}\n---\n# P\n"
    drop(eng.root, "wiki/kitchen/hand/page.md", page.format(src["episode_id"]))
    assert unmerged_inbox(eng) == {src["path"]}
    offered = [i["source"]["path"] for i in eng.consolidate(plan=True)["items"]]
    assert offered == [src["path"]]
    by_path = page.replace("id: {}", "path: {}").format(src["path"])
    drop(eng.root, "wiki/kitchen/hand/page.md", by_path)
    assert unmerged_inbox(eng) == set()
    assert eng.consolidate(plan=True)["items"] == []


def test_is_merged_follows_the_report_rule() -> None:
    keys = {"run:e1", "note:e2", "episode:path:inbox/c.md"}
    assert consolidating.is_merged(keys, " e1 ", "inbox/a.md")
    assert not consolidating.is_merged(keys, "e2", "inbox/b.md")
    assert consolidating.is_merged(keys, "other", "inbox/c.md")


def test_ingest_appends_provenance_to_the_sources_own_derived_from(eng: Memory) -> None:
    own = {"type": "run", "id": "r-9", "date": "2026-01-01T00:00:00Z", "actor": "alice"}
    source = frontmatter.render({"title": "Oven", "derived-from": [own]}, BREAD)
    [done] = eng.ingest([("oven.md", source)], provenance=" tool : x:y ", actor="bob")
    fm = frontmatter.parse((eng.root / done["path"]).read_text(encoding="utf-8")).fm
    assert fm["derived-from"][0] == own
    added = fm["derived-from"][1]
    assert (added["type"], added["id"], added["actor"]) == ("tool", "x:y", "bob")
    assert added["date"].endswith("Z") and fm["title"] == "Oven"
    odd = frontmatter.render({"derived-from": "somewhere"}, BREAD)
    [kept] = eng.ingest([("odd.md", odd)], provenance="tool:z")
    fm = frontmatter.parse((eng.root / kept["path"]).read_text(encoding="utf-8")).fm
    assert fm["derived-from"][0] == "somewhere" and fm["derived-from"][1]["id"] == "z"


def test_consolidate_shows_the_skipped_sources_with_plan_and_without(kitchen: Memory) -> None:
    drop(kitchen.root, "inbox/crust.md", BROKEN)
    kitchen.ingest([("bread.md", BREAD)])
    root = str(kitchen.root)

    plan = run_cli("--root", root, "consolidate", "--plan")
    assert plan.returncode == 0, plan.stderr
    packet = json.loads(plan.stdout)  # stdout is only the packet, fit for `> packet.json`
    [reason] = packet["skipped"]
    assert reason.startswith("inbox/crust.md: ") and "frontmatter" in reason
    assert f"skipped {reason}" in plan.stderr.decode().splitlines()

    run = run_cli("--root", root, "consolidate")
    assert run.returncode == 0, run.stderr
    assert f"skipped {reason}" in run.stdout.decode().splitlines()
    assert (kitchen.root / "inbox/crust.md").read_text(encoding="utf-8") == BROKEN


def test_consolidate_with_no_bundle_leaves_the_inbox_as_it_is(tmp_path: Path) -> None:
    """A fresh store has no bundle: every source was moved to quarantine/ as a misfit."""
    mem = Memory.open(Store.init(tmp_path / "store"))
    try:
        mem.ingest([("starter.md", BREAD.encode())], provenance="run:1")
        before = sorted(
            p.relative_to(mem.root) for p in mem.root.rglob("*") if ".git" not in p.parts
        )
        with pytest.raises(Conflict, match="bundle add"):
            mem.consolidate()
        with pytest.raises(Conflict, match="bundle add"):
            mem.consolidate(plan=True)
        after = sorted(
            p.relative_to(mem.root) for p in mem.root.rglob("*") if ".git" not in p.parts
        )
        assert after == before and not list((mem.root / "quarantine").glob("*.md"))
        # An empty inbox with no bundle is no error: there is nothing to file.
        for rel in (mem.root / "inbox").glob("*.md"):
            rel.unlink()
        assert mem.consolidate()["articles"] == []
    finally:
        mem.close()


def test_consolidate_does_not_call_its_own_articles_a_stale_index(kitchen: Memory) -> None:
    kitchen.ingest([("bread.md", BREAD)])
    done = kitchen.consolidate()
    assert done["articles"] and done["refine"]["stale_index"] is False
    assert kitchen.doctor().ok


def test_two_hand_dropped_misfits_of_one_name_get_their_own_ids(kitchen: Memory) -> None:
    off = "# Markets\n\nThe stock market closed higher after the central bank held rates.\n"
    ids = []
    for _ in range(2):
        drop(kitchen.root, "inbox/notes.md", off)
        [moved] = kitchen.consolidate()["quarantined"]
        placed = frontmatter.parse((kitchen.root / moved["to"]).read_text()).fm
        ids.append(placed["episode_id"])
    assert ids[0] != ids[1]
    report = kitchen.memory_report()
    assert not report.warnings
