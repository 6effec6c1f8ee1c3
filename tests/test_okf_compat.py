"""OKF compatibility: the bundles memdir regenerates stay OKF v0.2 bundles when the
wiki holds articles a person filed by hand (odd names, deeper folders, free-form dates)."""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path

import pytest

from helpers import BREAD
from memdir.engine import okf
from memdir.errors import InvalidInput
from memdir.service import Memory


def bundle_files(root: Path, bundle: str) -> dict[str, str]:
    base = root / "wiki" / bundle
    return {
        p.relative_to(base).as_posix(): p.read_text(encoding="utf-8")
        for p in sorted(base.rglob("*.md"))
    }


def hand_article(title: str, *, at: str | None = None) -> str:
    generated = f"generated:\n  by: ana\n  at: {at}\n" if at else ""
    return f"---\ntype: note\ntitle: {title}\ndescription: Written by hand.\n{generated}---\n# x\n"


def consolidate_one(mem: Memory) -> None:
    mem.ingest([("starter.md", BREAD)], provenance="run:1")
    mem.consolidate()


def test_an_article_whose_name_has_a_space_is_listed_with_an_encoded_url(eng: Memory) -> None:
    eng.write("wiki/kitchen/bread/crust (notes).md", hand_article("Crust [draft] notes"))
    consolidate_one(eng)
    files = bundle_files(eng.root, "kitchen")
    assert okf.conformance(files) == []
    listed = {e.path: e for e in okf.entries(files["bread/index.md"])}
    assert listed["crust (notes).md"].url == "crust%20%28notes%29.md"
    assert listed["crust (notes).md"].title == "Crust [draft] notes"
    audit = eng.refine()
    assert audit["components"]["index_mismatch"]["items"] == []
    assert audit["okf"]["kitchen"] == "conformant"


def test_the_log_groups_an_article_with_a_free_form_date_under_a_real_date(eng: Memory) -> None:
    eng.write("wiki/kitchen/bread/crumb.md", hand_article("Crumb", at="last tuesday"))
    eng.write("wiki/kitchen/bread/oven.md", hand_article("Oven", at='"2026-02-30"'))
    consolidate_one(eng)
    log = (eng.root / "wiki/kitchen/log.md").read_text(encoding="utf-8")
    assert okf.check_log(log) == []
    headings = [line for line in log.splitlines() if line.startswith("## ")]
    assert "## last tuesd" not in headings and "## 2026-02-30" not in headings
    assert headings[-1] == "## 1970-01-01"


def test_an_article_in_a_deeper_folder_is_reached_through_an_index_per_folder(
    eng: Memory,
) -> None:
    eng.write("wiki/kitchen/bread/rye/dark-rye.md", hand_article("Dark rye"))
    consolidate_one(eng)
    files = bundle_files(eng.root, "kitchen")
    assert okf.conformance(files) == []
    assert [e.url for e in okf.entries(files["bread/rye/index.md"])] == ["dark-rye.md"]
    bread = {e.title: e.url for e in okf.entries(files["bread/index.md"])}
    assert bread["Rye"] == "rye/index.md"
    assert "dark-rye.md" not in bread.values()
    audit = eng.refine()
    assert audit["components"]["index_mismatch"]["items"] == []


def test_query_walks_an_encoded_index_url_to_the_article(eng: Memory) -> None:
    eng.write(
        "wiki/kitchen/bread/rye crumb.md",
        "---\ntype: note\ntitle: Rye crumb\ndescription: Rye crumb stays moist.\n---\n"
        "# Rye crumb\n\n## Key points\n\n- Rye crumb stays moist for days.\n",
    )
    consolidate_one(eng)
    found = eng.query("Why does rye crumb stay moist?")
    tiers = {a["path"]: a["tier"] for a in found["answers"]}
    assert tiers.get("wiki/kitchen/bread/rye crumb.md") == 1  # the index walk, not search


@pytest.mark.parametrize("page", ["index.md", "log.md", "*/index.md"])
def test_merge_and_forget_leave_a_bundles_generated_index_and_log_alone(
    eng: Memory, page: str
) -> None:
    consolidate_one(eng)
    page = "wiki/kitchen/" + next(p for p in bundle_files(eng.root, "kitchen") if fnmatch(p, page))
    before = (eng.root / page).read_bytes()
    for call in (
        lambda: eng.merge(page, episode="ep-1"),
        lambda: eng.forget(page, reason="old"),
        lambda: eng.forget(page, purge=True),
    ):
        with pytest.raises(InvalidInput, match="regenerates"):
            call()
    assert (eng.root / page).read_bytes() == before
    assert okf.conformance(bundle_files(eng.root, "kitchen")) == []


def test_merge_into_the_top_router_is_refused_and_an_article_still_takes_it(eng: Memory) -> None:
    consolidate_one(eng)
    with pytest.raises(InvalidInput, match="regenerates"):
        eng.merge("index.md", episode="ep-1")
    article = next(p for p in bundle_files(eng.root, "kitchen") if "/" in p and "index" not in p)
    assert eng.merge(f"wiki/kitchen/{article}", episode="ep-1")["added"] is True
