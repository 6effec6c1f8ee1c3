"""Merge and forget on the service: the actor a merge records, the merged-from entries it
matches as the memory report does, and a second forget that keeps the first."""

from __future__ import annotations

from memdir.doc import frontmatter
from memdir.service import Memory


def test_merge_records_its_actor_on_every_surface(kitchen: Memory) -> None:
    kitchen.write("wiki/page.md", "# Page\n")
    unnamed = kitchen.merge("wiki/page.md", episode="ep-1")
    named = kitchen.merge("wiki/page.md", episode="ep-2", actor="planner")
    assert unnamed["entry"]["actor"] == "anonymous" and named["entry"]["actor"] == "planner"


def test_merge_matches_the_entries_already_there_as_the_memory_report_does(
    kitchen: Memory,
) -> None:
    # merged-from given as one mapping (not a list), and a path written with backslashes.
    kitchen.write("wiki/one.md", "---\nmerged-from: {type: episode, id: ep-1}\n---\n# One\n")
    kitchen.write(
        "wiki/two.md",
        "---\nmerged-from:\n- {type: episode, path: 'episodes\\a.md'}\n---\n# Two\n",
    )
    assert kitchen.merge("wiki/one.md", episode="ep-1")["added"] is False
    assert kitchen.merge("wiki/two.md", path="episodes/a.md")["added"] is False
    assert frontmatter.parse(kitchen.read("wiki/one.md").content).fm["merged-from"] == {
        "type": "episode",
        "id": "ep-1",
    }


def test_forgetting_twice_keeps_the_first_valid_until_and_reason(kitchen: Memory) -> None:
    kitchen.write("wiki/old.md", "# Old\n")
    first = kitchen.forget("wiki/old.md", reason="replaced by the runbook")
    again = kitchen.forget("wiki/old.md", reason="another reason")
    fm = frontmatter.parse(kitchen.read("wiki/old.md").content).fm
    assert (first["already"], again["already"]) == (False, True)
    assert again["valid_until"] == first["valid_until"] == str(fm["valid_until"])
    assert fm["superseded_reason"] == "replaced by the runbook"
