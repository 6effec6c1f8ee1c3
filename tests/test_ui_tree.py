"""The browse page's tree and the home page's counts, brought forward after writes (the
index's change log), equal the tree and counts reckoned from every row: new documents,
turns, forgets, deletions, renames by hand, the inbox."""

from __future__ import annotations

import random

import pytest

from memdir.http.ui.livetree import LiveTree
from memdir.http.ui.model import Views
from memdir.index import uirows
from memdir.service import Memory

FOLDERS = ["wiki/a/t1", "wiki/a", "wiki/b/t2", "episodes/runs", "episodes/notes", "inbox", "n"]
NAMES = ["alpha", "beta", "index", "log", "gamma"]


@pytest.fixture
def mem(bare: Memory) -> Memory:
    return bare


def whole(mem: Memory) -> LiveTree:
    tree = LiveTree()
    tree.apply((), uirows.visible_keyed(mem.index.conn))
    return tree


def step(mem: Memory, rng: random.Random) -> str:
    existing = [r.path for r in uirows.visible(mem.index.conn) if "/" in r.path]
    roll = rng.random()
    if roll < 0.35 or not existing:
        path = f"{rng.choice(FOLDERS)}/{rng.choice(NAMES)}{rng.randint(0, 3)}.md"
        mem.write(path, f"# Page {rng.randint(0, 99)}\n")
        return f"write {path}"
    if roll < 0.55:
        mem.record_turn(thread=rng.choice(["t1", "t2"]), user="ana", input="q", output="a")
        return "turn"
    path = rng.choice(existing)
    if not (mem.root / path).is_file():  # gone since the index last looked
        return f"skip {path}"
    if roll < 0.7:
        mem.forget(path, reason="test")
        return f"forget {path}"
    if roll < 0.85:
        (mem.root / path).unlink()
        return f"delete {path}"
    target = mem.root / f"{rng.choice(FOLDERS)}/moved-{rng.randint(0, 99)}.md"
    target.parent.mkdir(parents=True, exist_ok=True)
    (mem.root / path).rename(target)  # a rename by hand the next sync finds
    return f"rename {path}"


@pytest.mark.parametrize("seed", range(3))
def test_the_live_tree_equals_the_tree_built_whole(mem: Memory, seed: int) -> None:
    rng = random.Random(seed)
    views = Views(mem)
    for _ in range(10):
        step(mem, rng)
        mem.sync(force=True)
    views.live_tree(LiveTree.counts)
    done = []
    for _ in range(40):
        done.append(step(mem, rng))
        mem.sync(force=True)
        want = whole(mem)
        got = views.live_tree(lambda t: (t.counts(), t.view(True)))
        assert got == (want.counts(), want.view(True)), f"after {done}"
        counts = uirows.home_counts(mem.index.conn)  # the index's own counts agree
        assert got[0] == counts, f"after {done}"
    assert views.tree_builds == 1 and views.tree_updates >= 30


def test_the_inbox_is_listed_once_and_folders_page_by_the_index(mem: Memory) -> None:
    for i in range(3):
        mem.write(f"inbox/src{i}.md", f"# Source {i}\n")
    mem.write("notes/a.md", "# A\n")
    views = Views(mem)
    from memdir.access import LOCAL

    tree = views.tree(LOCAL)
    assert tree["inbox"]["count"] == 3
    other = [r.path for r in tree["other"]]
    assert "notes/a.md" in other and not [p for p in other if p.startswith("inbox/")]
    folder = views.folder(LOCAL, "inbox/", 1)
    assert folder["count"] == 3 and [r.path for r in folder["rows"]] == [
        "inbox/src1.md",
        "inbox/src2.md",
    ]
    mem.forget("inbox/src1.md", reason="test")
    assert views.folder(LOCAL, "inbox/", 0)["count"] == 2
    assert views.tree(LOCAL)["inbox"]["count"] == 2
