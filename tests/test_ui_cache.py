"""The web UI's link graph brought forward after writes (the index's change log) equals the
graph built whole from the index, whatever the writes: new pages, edits, links that start or
stop resolving, forgets, deletions, hand edits, another process, a rebuild."""

from __future__ import annotations

import random
from typing import Any

import pytest

from helpers import run_cli
from memdir.http.ui.linkgraph import LinkGraph, build_graph
from memdir.http.ui.model import Views
from memdir.index import uirows
from memdir.service import Memory

NAMES = ["alpha", "beta", "gamma", "delta", "Alpha", "beta.md"]
FOLDERS = ["wiki/a/t1", "wiki/a/t2", "wiki/b/t1", "episodes", "notes"]


@pytest.fixture
def mem(bare: Memory) -> Memory:
    return bare


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


# -- the memory report kept in step ---------------------------------------------------------

EPISODE_IDS = ["e1", "e2", "e3", " e4 ", ""]


def episode(rng: random.Random) -> str:
    """An episode, sometimes without an id, sometimes episodic outside episodes/."""
    fm = [f"episode_id: {rng.choice(EPISODE_IDS)!r}"] if rng.random() < 0.8 else []
    if rng.random() < 0.2:
        fm.append("memory_kind: episodic")
    if rng.random() < 0.15:
        fm.append(f"memory_status: {rng.choice(['contested', 'active', 'archived'])}")
    if rng.random() < 0.15:
        fm.append(f"expires_at: {rng.choice(['2001-01-01', '2999-01-01'])}")
    return "---\n" + "\n".join(fm) + "\n---\n# Episode\n\nwhat happened\n"


def merging_page(rng: random.Random) -> str:
    """A page merging some episodes by id or by path (now and then in a bad shape)."""
    refs = []
    for _ in range(rng.randint(0, 3)):
        if rng.random() < 0.5:
            refs.append(
                f"  - {{type: {rng.choice(['episode', 'run', 'note'])}, "
                f"id: {rng.choice(EPISODE_IDS)!r}}}"
            )
        else:
            refs.append(f"  - {{type: episode, path: episodes/{rng.choice(NAMES)}.md}}")
    merged = "merged-from:\n" + "\n".join(refs) if refs else "merged-from: oops"
    extra = f"\nscope: {rng.choice(['ops', 'home'])}" if rng.random() < 0.3 else ""
    extra += "\ncontradicts: [[alpha]]" if rng.random() < 0.2 else ""
    return f"---\nmemory_kind: semantic\n{merged}{extra}\n---\n# Page\n\nsummary\n"


def report_step(mem: Memory, rng: random.Random) -> str:
    existing = [p["path"] for p in mem.ls("") if "/" in p["path"]]
    roll = rng.random()
    if roll < 0.6 or not existing:
        folder = rng.choice(["episodes", "episodes/runs", "wiki/a/t1", "notes"])
        path = f"{folder}/{rng.choice(NAMES).removesuffix('.md')}.md"
        body = merging_page(rng) if folder.startswith("wiki") else episode(rng)
        mem.write(path, body)
        return f"write {path}"
    path = rng.choice(existing)
    if roll < 0.75:
        mem.forget(path, reason="test")
        return f"forget {path}"
    if roll < 0.9:
        (mem.root / path).unlink()
        return f"delete {path}"
    (mem.root / path).write_text(episode(rng))
    return f"edit {path}"


def report_same(views: Views, mem: Memory) -> None:
    """The live report's figures equal the report folded whole from the same facts."""
    from datetime import UTC, datetime

    from memdir.kiwi import report as coverage

    got = views.report()
    facts = [coverage.FileFacts.from_json(t) for _, _, t in uirows.facts_keyed(mem.index.conn)]
    want = coverage.build_report(facts, mem.episodes_prefix(), datetime.now(UTC))
    assert (got.total_episodic, got.total_unmerged) == (want.total_episodic, want.total_unmerged)
    assert got.coverage_pct == want.coverage_pct
    assert (got.contradictions, got.merged_from_refs, got.contested_count) == (
        want.contradictions,
        want.merged_from_refs,
        want.contested_count,
    )
    assert got.expired_count == want.expired_count
    assert got.scope_counts == want.scope_counts
    assert got.warnings == want.warnings
    mtimes = {f.path: f.mtime for f in facts}
    oldest = sorted(want.unmerged, key=lambda e: mtimes[e.path])  # stable: walk order kept
    assert [e for e, _ in got.oldest] == oldest[:500]
    # and what the service reports, the figures a person compares with the CLI's
    official = mem.memory_report()
    assert (got.total_unmerged, got.coverage_pct) == (
        official.total_unmerged,
        official.coverage_pct,
    )


@pytest.mark.parametrize("seed", range(4))
def test_the_live_report_equals_the_report_folded_whole(mem: Memory, seed: int) -> None:
    rng = random.Random(seed)
    views = Views(mem)
    for _ in range(10):
        report_step(mem, rng)
    report_same(views, mem)
    assert views.report_builds == 1
    done = []
    for _ in range(40):
        done.append(report_step(mem, rng))
        mem.sync(force=True)
        try:
            report_same(views, mem)
        except AssertionError as exc:
            raise AssertionError(f"after {done}") from exc
    assert views.report_builds == 1 and views.report_updates >= 30


def test_a_rebuild_makes_the_live_report_again(mem: Memory) -> None:
    mem.write("episodes/alpha.md", "---\nepisode_id: e1\n---\n# A\n")
    views = Views(mem)
    assert views.report().total_unmerged == 1
    mem.write("wiki/a/t1/beta.md", "---\nmerged-from:\n  - {type: episode, id: e1}\n---\n# B\n")
    assert views.report().total_unmerged == 0 and views.report_updates == 1
    mem.reindex(full=True)
    assert views.report().total_unmerged == 0 and views.report_builds == 2
    (mem.root / "wiki/a/t1/beta.md").unlink()
    mem.sync(force=True)
    assert views.report().total_unmerged == 1 and views.report_updates == 2
    assert mem.memory_report().total_unmerged == 1


# -- the home page's counts, asked of the index ----------------------------------------------


def counted(rows: list[uirows.DocRow]) -> tuple[dict[str, int], list[uirows.DocRow]]:
    """The home page's counts and latest turns, reckoned from the rows one by one."""
    turns = [r for r in rows if r.type == "turn" and r.path.startswith("episodes/turns/")]
    counts = {
        "turns": len(turns),
        "threads": len({r.thread for r in turns if r.thread}),
        "episodes": sum(1 for r in rows if r.path.startswith("episodes/") and r.type != "turn"),
        "articles": sum(
            1
            for r in rows
            if r.path.startswith("wiki/")
            and r.path.rsplit("/", 1)[-1] not in ("index.md", "log.md")
        ),
    }
    return counts, sorted(turns, key=lambda r: r.created, reverse=True)[:10]


@pytest.mark.parametrize("prefix", ["", "wiki/", "episodes/", "episodes/turns/", "wiki/a/"])
def test_the_home_counts_equal_the_rows_counted_one_by_one(mem: Memory, prefix: str) -> None:
    rng = random.Random(7)
    for path in ("wiki/index.md", "wiki/a/log.md", "wiki/a/INDEX.md", "wiki/a/t1/index.md"):
        mem.write(path, "# Index\n")
    mem.write("wiki/log.md.md", "# Not a log\n")
    mem.write("episodes/turns/x.md", "---\ntype: note\n---\n# Not a turn\n")
    mem.write("episodes/turn.md", "---\ntype: turn\n---\n# A turn outside turns/\n")
    for i in range(25):
        thread = rng.choice(["t1", "t2", "t3"])
        mem.record_turn(thread=thread, user="ana", input=f"q{i}", output="a")
        report_step(mem, rng)
    mem.forget(next(p["path"] for p in mem.ls("episodes/turns/")), reason="test")
    conn = mem.index.conn
    want_counts, want_latest = counted(uirows.visible(conn, prefix))
    assert uirows.home_counts(conn, prefix) == want_counts
    assert uirows.latest_turns(conn, prefix) == want_latest
    if prefix == "":
        assert want_counts["turns"] > 10 and want_counts["articles"] > 0  # not a vacuous check
        on_disk = len(list((mem.root / "episodes").rglob("*.md")))  # forgotten ones too
        assert uirows.zone_count(conn, "episodes/") == on_disk


def test_the_graph_json_kept_between_writes_follows_each_write(mem: Memory) -> None:
    """The encoded graph is kept while the index generation holds; a write, a forget or a
    hand edit makes it again, equal to the graph of the store as it now is, per caller."""
    import json

    from memdir.access import LOCAL

    views = Views(mem)
    rng = random.Random(7)

    def edges_of(data: dict[str, Any]) -> set[tuple[str, str]]:
        paths = [n["path"] for n in data["nodes"]]
        return {(paths[a], paths[b]) for a, b in data["edges"]}

    for _ in range(25):
        step(mem, rng)
        got = json.loads(views.graph_json(LOCAL))
        again = views.graph_json(LOCAL)
        assert again is views.graph_json(LOCAL)  # kept while nothing changed
        graph = whole(mem)
        wiki = sorted(p for p in graph.titles if p.startswith("wiki/"))
        assert sorted(n["path"] for n in got["nodes"]) == wiki
        want = {(s, d) for s, d, _ in graph.edges if s in wiki and d in wiki}
        assert edges_of(got) == want
        one = json.loads(views.graph_json(LOCAL, "a"))
        assert all(n["path"].startswith("wiki/a/") for n in one["nodes"])
        assert sorted(n["path"] for n in one["nodes"]) == [
            p for p in wiki if p.startswith("wiki/a/")
        ]
