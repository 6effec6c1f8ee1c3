"""The web UI's link graph brought forward after writes (the index's change log) equals the
graph built whole from the index, whatever the writes: new pages, edits, links that start or
stop resolving, forgets, deletions, hand edits, another process, a rebuild."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import run_cli
from memdir.files.store import Store
from memdir.http.ui.linkgraph import LinkGraph, build_graph
from memdir.http.ui.model import Views
from memdir.index import uirows
from memdir.service import Memory

OVERRIDES = {"embeddings": {"enabled": False}, "store": {"git_commit": False}}
NAMES = ["alpha", "beta", "gamma", "delta", "Alpha", "beta.md"]
FOLDERS = ["wiki/a/t1", "wiki/a/t2", "wiki/b/t1", "episodes", "notes"]


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[Memory]:
    root = Store.init(tmp_path / "s", git=False)
    with Memory.open(root, overrides=OVERRIDES) as memory:
        yield memory


def whole(mem: Memory) -> LinkGraph:
    conn = mem.index.conn
    return build_graph(uirows.visible_keyed(conn), uirows.edges_of(conn))


def same(got: LinkGraph, want: LinkGraph) -> None:
    assert got.rows == want.rows
    assert got.titles == want.titles
    assert {k: sorted(v) for k, v in got.stems.items()} == {
        k: sorted(v) for k, v in want.stems.items()
    }
    assert sorted(got.edges) == sorted(want.edges)
    assert {k: sorted(v) for k, v in got.backlinks.items()} == {
        k: sorted(v) for k, v in want.backlinks.items()
    }
    for path in want.titles:  # what a wikilink resolves to, from every document
        for name in NAMES:
            assert got.resolve(path, name, "wikilink") == want.resolve(path, name, "wikilink")


def page(rng: random.Random) -> str:
    links = " ".join(f"[[{rng.choice(NAMES)}]]" for _ in range(rng.randint(0, 3)))
    rel = f"[x]({rng.choice(NAMES)}.md)" if rng.random() < 0.3 else ""
    related = f"---\nrelated: [{rng.choice(NAMES)}]\n---\n" if rng.random() < 0.2 else ""
    return f"{related}# Page {rng.randint(0, 999)}\n\n{links} {rel}\n"


def a_path(rng: random.Random) -> str:
    name = rng.choice(NAMES).removesuffix(".md")
    return f"{rng.choice(FOLDERS)}/{name}{rng.choice(['', '-2'])}.md"


def step(mem: Memory, rng: random.Random) -> str:
    """One random change to the store; returns what it did."""
    existing = [r.path for r in uirows.visible(mem.index.conn) if "/" in r.path]
    roll = rng.random()
    if roll < 0.5 or not existing:
        path = a_path(rng)
        mem.write(path, page(rng))
        return f"write {path}"
    path = rng.choice(existing)
    if roll < 0.65:
        mem.forget(path, reason="test")
        return f"forget {path}"
    if roll < 0.8:
        (mem.root / path).unlink()
        return f"delete {path}"
    (mem.root / path).write_text(page(rng))  # a hand edit the next sync finds
    return f"edit {path}"


@pytest.mark.parametrize("seed", range(4))
def test_the_graph_brought_forward_equals_the_graph_built_whole(mem: Memory, seed: int) -> None:
    rng = random.Random(seed)
    views = Views(mem)
    for _ in range(12):
        mem.write(a_path(rng), page(rng))
    views.graph()
    assert views.builds == 1
    done = []
    for _ in range(40):
        done.append(step(mem, rng))
        mem.sync(force=True)
        got = views.graph()
        try:
            same(got, whole(mem))
        except AssertionError as exc:
            raise AssertionError(f"after {done}") from exc
    assert views.builds == 1 and views.updates >= 30  # no step rebuilt the graph whole


def test_a_page_still_reading_the_old_graph_is_not_disturbed(mem: Memory) -> None:
    mem.write("wiki/a/t1/alpha.md", "# Alpha\n\n[[beta]]\n")
    mem.write("wiki/a/t1/beta.md", "# Beta\n")
    views = Views(mem)
    old = views.graph()
    rows, edges, backlinks = list(old.rows), old.edges, dict(old.backlinks)
    mem.write("wiki/a/t1/gamma.md", "# Gamma\n\n[[alpha]] [[beta]]\n")
    mem.forget("wiki/a/t1/beta.md", reason="test")
    new = views.graph()
    assert new is not old and views.updates == 1
    assert old.rows == rows and old.edges == edges and old.backlinks == backlinks
    assert "wiki/a/t1/beta.md" not in new.titles
    assert sorted(new.edges) == [("wiki/a/t1/gamma.md", "wiki/a/t1/alpha.md", "wikilink")]


def test_another_process_and_a_rebuild_are_seen(mem: Memory) -> None:
    mem.write("wiki/a/t1/alpha.md", "# Alpha\n\n[[beta]]\n")
    views = Views(mem)
    views.graph()
    # another process writes through its own index: the triggers in the file log it
    answer = run_cli(
        "write", "wiki/a/t1/beta.md", "--provenance", "run:1", cwd=mem.root, stdin=b"# Beta\n"
    )
    assert answer.returncode == 0, answer.stderr
    got = views.graph()
    assert views.updates == 1 and ("wiki/a/t1/alpha.md", "wiki/a/t1/beta.md", "wikilink") in (
        got.edges
    )
    same(got, whole(mem))
    # a rebuild empties every derived table, the change log too: the graph is built whole
    (mem.root / "wiki/a/t1/beta.md").write_text("# Beta\n\n[[alpha]]\n")
    mem.reindex(full=True)
    got = views.graph()
    assert views.builds == 2
    same(got, whole(mem))
    mem.write("wiki/a/t1/gamma.md", "# Gamma\n\n[[alpha]]\n")
    same(views.graph(), whole(mem))
    assert views.updates == 2  # and brought forward again after it


def test_the_change_log_keeps_no_path_or_text(mem: Memory) -> None:
    mem.write("wiki/a/t1/secret-name.md", "# Secret\n\nswordfish\n")
    Views(mem).graph()
    mem.forget("wiki/a/t1/secret-name.md", purge=True)
    rows = mem.index.conn.execute(f"SELECT * FROM {uirows.CHANGE_LOG}").fetchall()
    assert rows and all(isinstance(v, int) for row in rows for v in row)
