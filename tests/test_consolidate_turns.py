"""consolidate --turns: unmerged turn records folded into one cited page per thread, turn
coverage at 100%, later runs folding only new turns, and a failed run changing nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import assert_untouched, folders, git, run_cli, snapshot
from memdir.doc import frontmatter
from memdir.engine import reflect, threads
from memdir.errors import MemdirError
from memdir.files.store import Store
from memdir.service import Memory


@pytest.fixture
def tmem(tmp_path: Path) -> Iterator[Memory]:
    root = Store.init(tmp_path / "store")
    mem = Memory.open(root, overrides={"embeddings": {"enabled": False}})
    yield mem
    mem.close()


def unmerged_turns(mem: Memory) -> list[str]:
    return threads.unmerged_turns(e.path for e in mem.memory_report().unmerged)


def record_bread(mem: Memory) -> list[str]:
    a = mem.record_turn(
        thread="bread",
        user="ana",
        input="When should I feed the starter?",
        output="Twice a day. We decided to feed it at 8 and at 20.",
        worklog=[{"tool": "search", "args": {"q": "starter"}, "result": "wiki/kitchen/x.md"}],
    )
    b = mem.record_turn(
        thread="bread",
        user="ana",
        input="And the hydration?",
        output="Let's go with 75% hydration. Weigh the water.",
        parents=[a.id],
    )
    return [a.id, b.id]


def test_every_unmerged_turn_is_folded_into_its_threads_page(tmem: Memory) -> None:
    bread = record_bread(tmem)
    net = tmem.record_turn(thread="Net Ops 1", input="Which VLAN for cameras?", output="VLAN 30.")
    assert len(unmerged_turns(tmem)) == 3
    result = tmem.consolidate(turns=True)
    assert result["turns"]["turns"] == 3 and result["turns"]["skipped"] == []
    pages = sorted(result["turns"]["pages"])
    assert pages[0] == "threads/bread.md" and pages[1].startswith("threads/net-ops-1-")
    assert unmerged_turns(tmem) == []
    page = frontmatter.parse((tmem.root / "threads/bread.md").read_text())
    assert page.fm["type"] == "thread" and page.fm["memory_kind"] == "semantic"
    assert [(m["type"], m["id"]) for m in page.fm["merged-from"]] == [("turn", i) for i in bread]
    body = page.body
    assert "- When should I feed the starter? [^1]" in body
    assert "- We decided to feed it at 8 and at 20. [^1]" in body.split("## Decided")[1]
    assert "- Let's go with 75% hydration. [^2]" in body
    assert "search" in body.split("## Done")[1].split("##")[0]  # the compact of its tools
    assert f"[^2]: [turn {bread[1]}](../episodes/turns/" in body
    other = (tmem.root / pages[1]).read_text()
    assert "thread: Net Ops 1" in other and net.id in other
    assert "turn(s) folded into 2 thread page(s)" in result["commit"]
    assert git(tmem.root, "status", "--porcelain", "--untracked-files=all") == ""


def test_a_later_run_folds_only_the_new_turns(tmem: Memory) -> None:
    first, second = record_bread(tmem)
    tmem.consolidate(turns=True)
    before = frontmatter.parse((tmem.root / "threads/bread.md").read_text()).fm["merged-from"]
    again = tmem.consolidate(turns=True)
    assert again["turns"] == {
        "pages": [],
        "turns": 0,
        "skipped": [],
        "articles": [],
        "unrouted": [],
    }
    third = tmem.record_turn(thread="bread", input="thanks", output="welcome", parents=[second])
    later = tmem.consolidate(turns=True)
    assert later["turns"]["pages"] == ["threads/bread.md"] and later["turns"]["turns"] == 1
    page = frontmatter.parse((tmem.root / "threads/bread.md").read_text())
    merged = page.fm["merged-from"]
    assert merged[:2] == before and [m["id"] for m in merged] == [first, second, third.id]
    assert page.fm["turns"] == 3 and "- thanks [^3]" in page.body
    assert unmerged_turns(tmem) == []


def test_turns_are_folded_only_when_asked_or_set(tmp_path: Path) -> None:
    root = Store.init(tmp_path / "store")
    with Memory.open(root) as mem:
        record_bread(mem)
        assert mem.consolidate()["turns"]["turns"] == 0
        assert len(unmerged_turns(mem)) == 2
    with Memory.open(root, overrides={"engine": {"consolidate_turns": True}}) as mem:
        assert mem.consolidate(turns=False)["turns"]["turns"] == 0
        assert mem.consolidate()["turns"]["turns"] == 2
        assert unmerged_turns(mem) == []


def test_the_cli_folds_turns_and_says_where(tmem: Memory) -> None:
    record_bread(tmem)
    done = run_cli("consolidate", "--turns", cwd=tmem.root)
    assert done.returncode == 0, done.stderr
    assert "folded turns into threads/bread.md" in done.stdout.decode()


def test_a_failed_run_folds_nothing(tmem: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    record_bread(tmem)
    before, dirs, head = (
        snapshot(tmem.root),
        folders(tmem.root),
        git(tmem.root, "rev-parse", "HEAD"),
    )

    def full_disk(**kwargs: Any) -> str:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(reflect, "render_snapshot", full_disk)
    with pytest.raises(MemdirError, match="No space left on device"):
        tmem.consolidate(turns=True)
    assert_untouched(tmem, before, dirs, head)
    assert not (tmem.root / "threads").exists() and len(unmerged_turns(tmem)) == 2
