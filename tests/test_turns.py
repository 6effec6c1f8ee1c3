"""Turn records through the service and the CLI: parents, the DAG, bad input, concurrency."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from memdir.cli import cli
from memdir.doc.ids import new_id
from memdir.doc.turnrecord import parse_turn, turn_path, worklog_path
from memdir.errors import Conflict, InvalidInput, NotFound
from memdir.files.store import Store
from memdir.index import dag
from memdir.service import Memory

NO_GIT = {"store": {"git_commit": False}}


def run_cli(*args: str, stdin: bytes | None = None, env: dict[str, str] | None = None) -> Any:
    """The CLI in process (click's runner): exit code, stdout and stderr as bytes."""
    res = CliRunner().invoke(cli, list(args), input=stdin, env=env)
    return SimpleNamespace(
        returncode=res.exit_code, stdout=res.stdout_bytes, stderr=res.stderr_bytes
    )


@pytest.fixture
def tmem(tmp_path: Path) -> Iterator[Memory]:
    root = Store.init(tmp_path / "s", git=False)
    mem = Memory.open(root, overrides=NO_GIT)
    yield mem
    mem.close()


def _turn_files(root: Path) -> list[str]:
    folder = root / "episodes" / "turns"
    return sorted(p.name for p in folder.rglob("*") if p.is_file() and p.name[0] != ".")


def test_record_writes_record_and_exact_worklog(tmem: Memory) -> None:
    raw = b'{"tool": "grep", "args": {"pattern": "deploy"}, "result": "2 hits"}\n{"tool":"read"}'
    rec = tmem.record_turn(
        thread="t1",
        user="ana",
        channel="cli",
        input="How do I deploy?",
        output="Use make deploy.",
        worklog=raw,
        keywords=["deploy"],
        provenance="session:abc",
        actor="agent-7",
    )
    path = tmem.root / turn_path(rec.id)
    assert path.is_file() and rec.path == turn_path(rec.id)
    assert (tmem.root / worklog_path(rec.id)).read_bytes() == raw
    assert tmem.turn_worklog(rec.id) == raw
    back = tmem.turn_show(rec.id)
    assert (back.input, back.output, back.thread, back.user) == (
        "How do I deploy?",
        "Use make deploy.",
        "t1",
        "ana",
    )
    assert "grep(pattern=deploy)" in back.compact
    assert back.extra["tool_calls"] == 2 and back.extra["compactor"] == "default"
    derived = back.extra["derived-from"]
    assert derived[0]["type"] == "session" and derived[0]["actor"] == "agent-7"
    row = tmem.index.conn.execute(
        "SELECT type, thread, user, memory_kind FROM docs WHERE episode_id = ?", (rec.id,)
    ).fetchone()
    assert tuple(row) == ("turn", "t1", "ana", "episodic")


def test_ids_sort_by_time_and_parents_link(tmem: Memory) -> None:
    a = tmem.record_turn(thread="t", input="a")
    b = tmem.record_turn(thread="t", input="b", parents=[a.id])
    assert a.id < b.id
    assert [n.id for n in tmem.ancestors(b.id)] == [a.id]
    assert [n.id for n in tmem.descendants(a.id)] == [b.id]


def test_bad_input_writes_nothing(tmem: Memory) -> None:
    good = tmem.record_turn(thread="t", input="ok")
    before = _turn_files(tmem.root)
    tmem.write("notes/a.md", f"---\nepisode_id: {new_id()}\ntype: note\n---\nhi\n")
    note_id = tmem.index.conn.execute(
        "SELECT episode_id FROM docs WHERE path = 'notes/a.md'"
    ).fetchone()[0]
    tmem.write("notes/b.md", "---\nepisode_id: operational-x-1\ntype: episode\n---\nhi\n")
    cases = [
        ({"parents": [new_id()]}, "unknown parent turn"),
        ({"parents": ["not-an-id"]}, "'not-an-id' is neither a turn id nor a document path"),
        ({"parents": [note_id]}, "is not a turn: notes/a.md has type 'note'; name it by its path"),
        ({"parents": ["operational-x-1"]}, "neither a turn id nor a document path"),
        ({"parents": ["notes/missing.md"]}, "unknown parent document: notes/missing.md"),
        ({"parents": ["../outside.md"]}, "'..' part"),
        ({"input": "", "output": "  "}, "both are empty"),
        ({"thread": "a/b"}, "path separators"),
        ({"thread": "x\x07"}, "control character"),
        ({"user": "..\\x"}, "path separators"),
        ({"worklog": b"{nope\n"}, "line 1 is not valid JSON"),
        ({"worklog": [1]}, "entry 1 must be an object"),
        ({"provenance": "nocolon"}, "type:id"),
    ]
    for change, message in cases:
        kwargs: dict[str, object] = {"thread": "t", "input": "x", "parents": [good.id]}
        kwargs.update(change)
        with pytest.raises(InvalidInput, match=message):
            tmem.record_turn(**kwargs)  # type: ignore[arg-type]
    own = new_id()
    with pytest.raises(InvalidInput, match="own parent"):
        tmem.record_turn(thread="t", input="x", parents=[own], id=own)
    with pytest.raises(Conflict):
        tmem.record_turn(thread="t", input="again", id=good.id)
    assert _turn_files(tmem.root) == before


def _dag(mem: Memory) -> dict[str, str]:
    """a <- b, a <- c, (b, c) <- d <- e; f alone."""
    ids: dict[str, str] = {}
    for name, parents in [("a", ""), ("b", "a"), ("c", "a"), ("d", "bc"), ("e", "d"), ("f", "")]:
        rec = mem.record_turn(thread="dag", input=name, parents=[ids[p] for p in parents])
        ids[name] = rec.id
    return ids


def test_ancestors_and_descendants_of_a_hand_built_dag(tmem: Memory) -> None:
    ids = _dag(tmem)
    name = {v: k for k, v in ids.items()}
    anc = [(name[n.id], n.depth) for n in tmem.ancestors(ids["e"])]
    assert anc == [("d", 1), ("c", 2), ("b", 2), ("a", 3)]  # newest first within a level
    assert [name[n.id] for n in tmem.ancestors(ids["e"], depth=2)] == ["d", "c", "b"]
    assert [name[n.id] for n in tmem.ancestors(ids["e"], limit=2)] == ["d", "c"]
    desc = [(name[n.id], n.depth) for n in tmem.descendants(ids["a"])]
    assert desc == [("c", 1), ("b", 1), ("d", 2), ("e", 3)]
    assert tmem.ancestors(ids["f"]) == [] and tmem.descendants(ids["e"]) == []
    assert [name[n.id] for n in tmem.thread("dag", last=2)] == ["f", "e"]
    with pytest.raises(NotFound):
        tmem.ancestors(new_id())


def test_a_hand_made_cycle_does_not_loop(tmem: Memory) -> None:
    ids = _dag(tmem)
    # Edit a's file by hand so that a names e as its parent: a cycle.
    path = tmem.root / turn_path(ids["a"])
    text = path.read_text()
    path.write_text(text.replace("parents: []", f'parents: ["{ids["e"]}"]'))
    assert parse_turn(path.read_text()).parents == (ids["e"],)
    tmem.sync(force=True)
    got = [n.id for n in tmem.ancestors(ids["e"], depth=100)]
    assert sorted(got) == sorted([ids["d"], ids["c"], ids["b"], ids["a"]])
    assert ids["e"] not in got
    assert ids["e"] in [n.id for n in tmem.descendants(ids["d"], depth=100)]


def test_dag_walk_reads_no_files(tmem: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = _dag(tmem)
    tmem.sync(force=True)
    statements: list[str] = []
    tmem.index.conn.set_trace_callback(statements.append)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the DAG walk must not read files")

    monkeypatch.setattr(Path, "read_text", refuse)
    monkeypatch.setattr(Path, "read_bytes", refuse)
    monkeypatch.setattr(tmem.turns, "_sync", lambda **kw: None)
    assert len(tmem.ancestors(ids["e"], depth=50)) == 4
    tmem.index.conn.set_trace_callback(None)
    assert len([s for s in statements if s.lstrip().upper().startswith("SELECT")]) <= 6


def test_the_walks_read_only_the_turn_graph(tmem: Memory) -> None:
    """The recursive queries seek in turn_edges and turn_nodes only: never a docs or links
    row, never a scan."""
    ids = _dag(tmem)
    for up, edge_key in ((True, "child=?"), (False, "parent=?")):
        statements: list[str] = []
        tmem.index.conn.set_trace_callback(statements.append)
        tmem.turns._walk(ids["e"] if up else ids["a"], 50, 1000, up=up)
        tmem.index.conn.set_trace_callback(None)
        walk = next(s for s in statements if "WITH RECURSIVE" in s)
        plan = [str(row[3]) for row in tmem.index.conn.execute("EXPLAIN QUERY PLAN " + walk)]
        searches = [line for line in plan if line.startswith("SEARCH")]
        assert searches, plan
        assert not any(" docs " in f" {line} " or " links " in f" {line} " for line in plan)
        assert any(line.startswith("SEARCH e ") and edge_key in line for line in searches), plan
        assert any(line.startswith("SEARCH n ") and "eid=?" in line for line in searches), plan
        assert not any(line.startswith(("SCAN e", "SCAN n")) for line in plan), plan


def test_the_turn_graph_follows_hand_edits_and_an_older_index(tmp_path: Path) -> None:
    root = Store.init(tmp_path / "s", git=False)
    with Memory.open(root, overrides=NO_GIT) as mem:
        ids = _dag(mem)
        name = {v: k for k, v in ids.items()}

        def up(turn: str) -> list[str]:
            return [name[n.id] for n in mem.ancestors(ids[turn], depth=10)]

        assert up("e") == ["d", "c", "b", "a"]  # by depth, then newest first
        # d edited by hand to name only c; b's file deleted; a copy of c under another name
        d_path = root / turn_path(ids["d"])
        text = d_path.read_text()
        d_path.write_text(text.replace(f'"{ids["b"]}", ', "").replace(f', "{ids["b"]}"', ""))
        (root / turn_path(ids["b"])).unlink()
        c_path = root / turn_path(ids["c"])
        (c_path.parent / "copy-of-c.md").write_text(c_path.read_text())
        mem.sync(force=True)
        assert up("e") == ["d", "c", "a"]
        assert [name[n.id] for n in mem.descendants(ids["a"], depth=10)] == ["c", "d", "e"]
        (c_path.parent / "copy-of-c.md").unlink()
        mem.sync(force=True)
        assert up("e") == ["d", "c", "a"]  # the other file of c still holds it
    # An index made before the turn graph existed is filled when it is opened.
    db = sqlite3.connect(root / ".memdir" / "index.db")
    db.executescript(
        "DROP TABLE turn_nodes; DROP TABLE turn_edges; "
        "DELETE FROM migrations WHERE name = '0500_turn_graph';"
    )
    db.close()
    with Memory.open(root, overrides=NO_GIT) as mem:
        assert [name[n.id] for n in mem.ancestors(ids["e"], depth=10)] == ["d", "c", "a"]


def _writer(root: str, n: int, tag: str) -> None:
    mem = Memory.open(root, overrides=NO_GIT)
    try:
        for i in range(n):
            mem.record_turn(thread=f"w-{tag}", input=f"{tag} {i}", output="ok")
    finally:
        mem.close()


def test_concurrent_writer_processes_lose_nothing(tmp_path: Path) -> None:
    root = Store.init(tmp_path / "s", git=False)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(root), 10, str(k))) for k in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    files = [f for f in _turn_files(root) if f.endswith(".md")]
    assert len(files) == 40 and len(set(files)) == 40
    with Memory.open(root, overrides=NO_GIT) as mem:
        mem.sync(force=True)
        for k in range(4):
            assert len(mem.thread(f"w-{k}", last=100)) == 10


def test_cli_record_show_and_walk(tmp_path: Path) -> None:
    root = Store.init(tmp_path / "s")
    log = tmp_path / "run.jsonl"
    raw = '{"tool": "search", "args": {"query": "ünï"}}\n{"result": "found"}\n'.encode()
    log.write_bytes(raw)
    first = run_cli(
        "--root", str(root), "turn", "record", "--thread", "c1", "--user", "bo",
        "--input", "hello", "--output", "hi", "--worklog", str(log), "--keyword", "greet,intro",
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    a = first.stdout.decode().strip()
    payload = {"thread": "c1", "input": "next", "output": "done", "parents": [a],
               "worklog": [{"tool": "read", "args": {"path": "x.md"}}]}  # fmt: skip
    second = run_cli("--root", str(root), "turn", "record", "--json",
                     stdin=json.dumps(payload).encode())  # fmt: skip
    assert second.returncode == 0, second.stderr
    b = json.loads(second.stdout)
    assert b["parents"] == [a] and b["keywords"] == [] and "read(path=x.md)" in b["compact"]
    shown = run_cli("--root", str(root), "turn", "show", a, "--raw")
    assert shown.stdout == raw
    full = run_cli("--root", str(root), "turn", "show", a).stdout.decode()
    assert "## Input\n\nhello" in full and 'keywords: ["greet", "intro"]' in full
    anc = json.loads(run_cli("--root", str(root), "turn", "ancestors", b["id"], "--json").stdout)
    assert [(n["id"], n["depth"]) for n in anc] == [(a, 1)]
    desc = run_cli("--root", str(root), "turn", "descendants", a).stdout.decode()
    assert b["id"] in desc
    thread = json.loads(run_cli("--root", str(root), "turn", "thread", "c1", "--json").stdout)
    assert [n["id"] for n in thread] == [b["id"], a]
    # git history holds both records
    log_out = (root / ".git").exists()
    assert log_out


def test_cli_bad_input_is_a_clear_error(tmp_path: Path) -> None:
    root = Store.init(tmp_path / "s", git=False)
    bad = [
        (["--thread", "t", "--input", "x", "--parent", new_id()], "unknown parent turn"),
        (["--thread", "a/b", "--input", "x"], "path separators"),
        (["--thread", "t", "--input", "", "--output", ""], "both are empty"),
    ]
    for args, message in bad:
        out = run_cli("--root", str(root), "turn", "record", *args)
        assert out.returncode == 2
        assert out.stderr.decode().startswith("error: ") and message in out.stderr.decode()
    out = run_cli("--root", str(root), "turn", "record", stdin=b'{"thread": "t", "inptu": "x"}')
    assert out.returncode == 2 and "unknown key(s) in the JSON object: inptu" in out.stderr.decode()
    out = run_cli("--root", str(root), "turn", "record", stdin=b"[1]")
    assert out.returncode == 2 and "one JSON object" in out.stderr.decode()
    assert _turn_files(root) == []


def test_worklogs_are_searched_only_on_demand(tmem: Memory) -> None:
    rec = tmem.record_turn(
        thread="t",
        input="deploy please",
        output="done",
        worklog=[
            {"tool": "read", "args": {"path": "a.md"}, "result": "the zebrafish section"},
            {"tool": "shell", "args": {"command": "make"}, "result": "built"},
        ],
    )
    assert "zebrafish" not in tmem.turn_show(rec.id).compact
    tmem.record_turn(thread="t", input="unrelated", output="ok")
    # the argument sits only in the raw work log: plain search does not see it
    assert [h.path for h in tmem.keyword_search("zebrafish")] == []
    hits = tmem.search_worklogs("zebrafish")
    assert [h.path for h in hits] == [rec.worklog_path]
    assert hits[0].type == "worklog" and hits[0].why["turn"] == rec.path
    assert "[zebrafish]" in hits[0].snippet
    # a purged turn leaves the work-log table too
    assert (tmem.root / rec.worklog_path).is_file()
    purged = tmem.forget(rec.path, purge=True)
    assert tmem.search_worklogs("zebrafish") == []
    # ... and the disk: the raw log may hold what the turn was purged for
    assert purged["removed"] == [rec.path, rec.worklog_path]
    assert not (tmem.root / rec.path).exists() and not (tmem.root / rec.worklog_path).exists()


def test_recursive_query_and_breadth_first_walk_agree(tmem: Memory) -> None:
    import random

    rnd = random.Random(3)
    ids: list[str] = []
    for i in range(40):
        parents = rnd.sample(ids, k=min(len(ids), rnd.randint(0, 3)))
        ids.append(tmem.record_turn(thread=f"r{i % 3}", input=str(i), parents=parents).id)
    for start in rnd.sample(ids, 8):
        for depth, limit in [(1, 1000), (3, 1000), (50, 1000), (50, 5), (0, 10)]:
            for up in (True, False):
                fast = tmem.turns._walk(start, depth, limit, up)
                slow = dag.walk_bfs(tmem.index.conn, start, depth, limit, up)
                assert fast == slow, (start, depth, limit, up)
    # a tiny cap forces the fallback: same answer
    deep = tmem.turns._walk(ids[-1], 50, 1, up=True)
    assert deep == dag.walk_bfs(tmem.index.conn, ids[-1], 50, 1, up=True)


def test_worklog_search_takes_the_search_filters(tmem: Memory) -> None:
    log = [{"tool": "read", "args": {"path": "a.md"}, "result": "the zebrafish section"}]
    a = tmem.record_turn(thread="a", input="first", output="ok", worklog=log)
    b = tmem.record_turn(thread="b", input="second", output="ok", worklog=log)

    def found(**given: Any) -> list[str]:
        hits = tmem.search_worklogs("zebrafish", filters=tmem.filters(**given))
        return sorted(h.why["turn"] for h in hits)

    assert found() == sorted([a.path, b.path])
    assert found(where=["thread=a"]) == [a.path]
    assert found(path_prefix="notes/") == []
    assert found(type="note") == []
    tmem.forget(b.path, reason="wrong")
    assert found() == [a.path]
    assert found(include_superseded=True) == sorted([a.path, b.path])


def test_cli_search_include_worklog(tmp_path: Path) -> None:
    root = Store.init(tmp_path / "s", git=False)
    with Memory.open(root, overrides=NO_GIT) as mem:
        rec = mem.record_turn(
            thread="t",
            input="check the build",
            output="fine",
            worklog=[{"tool": "read", "result": "quokka"}, {"tool": "make", "result": "ok"}],
        )
    env = {"MEMDIR_EMBEDDINGS_ENABLED": "false"}
    plain = run_cli("--root", str(root), "search", "quokka", "--json", env=env)
    assert plain.returncode == 0, plain.stderr
    assert json.loads(plain.stdout) == []
    found = run_cli("--root", str(root), "search", "quokka", "--include-worklog", "--json", env=env)
    hits = json.loads(found.stdout)
    assert [(h["path"], h["type"]) for h in hits] == [(rec.worklog_path, "worklog")]


def test_every_interface_searches_work_logs_like_the_cli(tmp_path: Path) -> None:
    """`include_worklog` is the service's: Python, HTTP and MCP give the CLI's hits."""
    import anyio
    import httpx
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    from http_server import live_server

    root = Store.init(tmp_path / "s", git=False)
    off = {**NO_GIT, "embeddings": {"enabled": False}}
    with Memory.open(root, overrides=off) as mem:
        mem.write("notes/q.md", "# Quokka\n\nA quokka note.\n")
        rec = mem.record_turn(
            thread="t",
            input="check",
            output="fine",
            worklog=[{"tool": "read", "result": "quokka"}, {"tool": "make", "result": "ok"}],
        )
        expected = [("notes/q.md", "note"), (rec.worklog_path, "worklog")]
        hits = mem.search("quokka", include_worklog=True)
        assert [(h.path, h.type or "note") for h in hits] == expected
        assert [h.path for h in mem.search("quokka")] == ["notes/q.md"]
        assert mem.search("quokka", include_worklog=True, path_prefix="notes/")[-1].path == (
            "notes/q.md"
        )
    with live_server(root, off) as live:
        got = httpx.get(f"{live.url}/v1/search", params={"q": "quokka", "include_worklog": "true"})
        assert got.status_code == 200, got.text
        assert [h["path"] for h in got.json()] == [p for p, _ in expected]

        async def over_mcp() -> list[str]:
            async with Client(streamable_http_client(f"{live.url}/mcp")) as client:
                result = await client.call_tool(
                    "search", {"query": "quokka", "include_worklog": True}
                )
                assert not result.is_error
                text = "".join(getattr(b, "text", "") for b in result.content)
                return [h["path"] for h in json.loads(text)]

        assert anyio.run(over_mcp) == [p for p, _ in expected]


def test_compactor_failure_is_recorded_in_the_record(tmp_path: Path) -> None:
    root = Store.init(tmp_path / "s", git=False)
    overrides = {**NO_GIT, "turns": {"compactor": "llm"}, "llm": {"base_url": "", "model": ""}}
    with Memory.open(root, overrides=overrides) as mem:
        rec = mem.record_turn(thread="t", input="x", worklog=[{"tool": "grep", "result": "1"}])
        back = mem.turn_show(rec.id)
    assert back.extra["compactor"] == "default"
    assert "base_url and model are not set" in back.extra["compact_error"]
    assert "Tools (1 call): grep" in back.compact


def test_ls_titles_a_turn_as_search_does(tmem: Memory) -> None:
    rec = tmem.record_turn(thread="deploys", user="ana", input="ship it?", output="shipped")
    tmem.write("notes/a.md", "---\ntitle: A note\n---\nbody\n")
    titles = {row["path"]: row["title"] for row in tmem.ls()}
    [hit] = tmem.search("shipped", type="turn", mode="bm25")
    assert titles[rec.path] == hit.title and hit.title.startswith("deploys · ana · ")
    assert titles["notes/a.md"] == "A note"


def test_worklog_search_limit_defaults_to_the_search_limit(tmp_path: Path) -> None:
    root = Store.init(tmp_path / "s", git=False)
    with Memory.open(root, overrides={**NO_GIT, "search": {"default_limit": 2}}) as mem:
        log = [{"tool": "read", "args": {"path": "a.md"}, "result": "the zebrafish section"}]
        for n in range(3):
            mem.record_turn(thread=f"t{n}", input="look", output="ok", worklog=log)
        assert len(mem.search_worklogs("zebrafish")) == 2
        assert len(mem.search_worklogs("zebrafish", limit=3)) == 3


def test_a_document_can_be_a_parent(tmem: Memory) -> None:
    """Parents name any memory: the DAG and the next context pack show the article a turn
    used beside the turn before it; a forgotten article drops out of both."""
    tmem.write("wiki/bread/starter.md", "---\ntype: article\n---\n# Starter\n\nFeed it at 8.\n")
    first = tmem.record_turn(thread="t", input="when do I feed the starter?", output="at 8")
    second = tmem.record_turn(
        thread="t",
        input="and on weekends?",
        output="the same",
        parents=[first.id, "./wiki/bread//starter.md"],
    )
    assert second.parents == (first.id, "wiki/bread/starter.md")  # in its normal form
    assert parse_turn((tmem.root / turn_path(second.id)).read_text()).parents == second.parents
    up = tmem.ancestors(second.id)
    assert [(n.id, n.type, n.depth) for n in up] == [
        ("wiki/bread/starter.md", "article", 1),
        (first.id, "turn", 1),
    ]
    assert dag.walk_bfs(tmem.index.conn, second.id, 10, 1000, up=True) == up
    assert tmem.descendants(first.id)[0].id == second.id
    third = tmem.record_turn(thread="t", input="thanks", output="welcome", parents=[second.id])
    assert {(n.id, n.depth) for n in tmem.ancestors(third.id)} == {
        (second.id, 1),
        (first.id, 2),
        ("wiki/bread/starter.md", 2),
    }
    pack = tmem.context("t", budget=4000)
    used = [i for i in pack.items if i.path == "wiki/bread/starter.md"]
    assert len(used) == 1 and used[0].kind == "document"
    assert "Feed it at 8." in used[0].text and used[0].reason.startswith("ancestor of")
    tmem.forget("wiki/bread/starter.md", reason="wrong")
    assert "wiki/bread/starter.md" not in [n.id for n in tmem.ancestors(third.id)]
    assert all(i.path != "wiki/bread/starter.md" for i in tmem.context("t", budget=4000).items)


def test_a_confined_token_names_no_document_parent_outside_its_prefix(tmp_path: Path) -> None:
    """Over HTTP, a document parent outside the token's prefix is refused whether or not it
    exists, so the refusal tells nothing about the files outside."""
    import subprocess

    from helpers import run_cli
    from http_server import live_server

    root = Store.init(tmp_path / "s")
    (root / "wiki").mkdir(exist_ok=True)
    (root / "wiki" / "secret.md").write_text("# Secret\n")
    (root / "episodes" / "mine.md").write_text("# Mine\n")
    for args in (["add", "-A"], ["commit", "-qm", "seed"]):
        subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)
    made = run_cli(
        "token", "create", "w", "--scope", "write", "--prefix", "episodes/", "--json", cwd=root
    )
    assert made.returncode == 0, made.stderr
    token = json.loads(made.stdout)["token"]
    with live_server(root, {"store": {"git_commit": False}}) as live, live.client(token) as c:
        for parent in ("wiki/secret.md", "wiki/absent.md"):
            got = c.post("/v1/turns", json={"thread": "t", "input": "x", "parents": [parent]})
            assert got.status_code == 403, got.text
        ok = c.post(
            "/v1/turns", json={"thread": "t", "input": "x", "parents": ["episodes/mine.md"]}
        )
        assert ok.status_code == 201, ok.text
        assert ok.json()["parents"] == ["episodes/mine.md"]
