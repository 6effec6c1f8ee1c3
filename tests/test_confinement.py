"""A prefix-confined token sees nothing whose real file lies outside its prefix: a symlink
under the prefix, to a file or to a folder outside it, shows nothing through any read verb
(search in every mode, grep, ls, turns, context, query), over HTTP and MCP."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from helpers import run_cli
from http_server import Live, live_server
from memdir.doc import paths
from memdir.doc.turnrecord import turn_path, worklog_path
from memdir.index.search import Filters
from memdir.service import Memory

SECRET = "zanzibar"  # a word only the files outside the prefix hold


def make_token(root: Path, name: str, scope: str, prefix: str | None = None) -> str:
    args = ["token", "create", name, "--scope", scope, "--json"]
    result = run_cli(*args, *(["--prefix", prefix] if prefix else []), cwd=root)
    assert result.returncode == 0, result.stderr
    return str(json.loads(result.stdout)["token"])


def seed(root: Path) -> None:
    """episodes/ holds its own note and two links out: to a file and to a folder of wiki/."""
    (root / "episodes").mkdir(exist_ok=True)
    (root / "wiki").mkdir(exist_ok=True)
    (root / "episodes/own.md").write_text("# Own\n\nThe harbour note, zany but ours.\n")
    (root / "wiki/secret.md").write_text(f"# Harbour {SECRET}\n\nThe harbour {SECRET} code.\n")
    (root / "episodes/peek.md").symlink_to("../wiki/secret.md")
    (root / "episodes/side").symlink_to("../wiki")
    for args in (["add", "-A"], ["commit", "-qm", "seed"]):
        subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


@pytest.fixture
def confined(toy: None, store_root: Path) -> Iterator[tuple[Live, str, str]]:
    seed(store_root)
    writer = make_token(store_root, "writer", "write", "episodes/")
    admin = make_token(store_root, "admin", "admin")
    settings = {"embeddings": {"provider": "letters"}, "store": {"git_commit": False}}
    with live_server(store_root, settings) as live:
        yield live, writer, admin


def linked_turn(live: Live, admin: str) -> tuple[str, str]:
    """A turn whose record is moved out of episodes/ and linked back, and its child."""
    with live.client(admin) as client:
        made = client.post("/v1/turns", json={"thread": f"t-{SECRET}", "input": SECRET})
        parent = made.json()["id"]
        child = client.post(
            "/v1/turns", json={"thread": "t-own", "input": "own", "parents": [parent]}
        )
        child_id = child.json()["id"]
    root = live.mem.root
    record = root / turn_path(parent)
    shutil.move(record, root / "wiki/turn.md")
    record.symlink_to(Path("../" * (turn_path(parent).count("/"))) / "wiki/turn.md")
    assert SECRET in record.read_text()
    return parent, child_id


def test_http_reads_show_nothing_through_a_link_out(confined: tuple[Live, str, str]) -> None:
    live, writer, admin = confined
    parent, child = linked_turn(live, admin)
    with live.client(writer) as client:
        assert client.get("/v1/files/episodes/peek.md").status_code == 403
        assert client.get("/v1/files/episodes/side/secret.md").status_code == 403
        for mode in ("bm25", "vector", "hybrid", "auto"):
            for q in (SECRET, "harbour code"):
                found = client.get("/v1/search", params={"q": q, "mode": mode, "limit": 50})
                assert found.status_code == 200, found.text
                assert SECRET not in found.text, (mode, q, found.text)
                shown = {h["path"] for h in found.json()}
                assert not shown & {
                    "episodes/peek.md",
                    "episodes/side/secret.md",
                    turn_path(parent),
                }
            own = client.get("/v1/search", params={"q": "harbour zany", "mode": mode})
            assert [h["path"] for h in own.json()][:1] == ["episodes/own.md"], (mode, own.text)
        for pattern in (SECRET, "harbour"):
            lines = client.get("/v1/grep", params={"pattern": pattern})
            assert lines.status_code == 200 and SECRET not in lines.text, lines.text
        assert [
            h["path"] for h in client.get("/v1/grep", params={"pattern": "harbour"}).json()
        ] == ["episodes/own.md"]
        listed = client.get("/v1/ls").json()
        assert "episodes/own.md" in [r["path"] for r in listed]
        assert SECRET not in json.dumps(listed) and "episodes/peek.md" not in json.dumps(listed)
        assert client.get(f"/v1/turns/{parent}").status_code == 404
        assert client.get(f"/v1/turns/{parent}/worklog").status_code == 404
        ancestors = client.get(f"/v1/turns/{child}/ancestors")
        assert ancestors.status_code == 200 and ancestors.json() == [], ancestors.text
        descendants = client.get(f"/v1/turns/{child}/descendants")
        assert descendants.status_code == 200
        thread = client.get(f"/v1/threads/t-{SECRET}")
        assert thread.status_code == 200 and thread.json() == [], thread.text
        assert client.get(f"/v1/turns/{child}").json()["parents"] == [parent]  # its own file
        assert client.post("/v1/context", json={"thread": "t-own"}).status_code == 403
        assert client.get("/v1/query", params={"q": "harbour"}).status_code == 403
    with live.client(admin) as client:  # the whole store's caller still reaches the link
        lines = client.get("/v1/grep", params={"pattern": SECRET, "path_prefix": "wiki/"})
        assert {h["path"] for h in lines.json()} == {"wiki/secret.md", "wiki/turn.md"}


def test_work_log_hits_show_nothing_through_a_link_out(confined: tuple[Live, str, str]) -> None:
    """A turn's work log moved out of the prefix and linked back is no search hit of a
    prefix-confined token, whether it was indexed before the move or only after it."""
    live, writer, admin = confined
    with live.client(admin) as client:
        made = client.post(
            "/v1/turns",
            json={
                "thread": "t-log",
                "input": "look it up",
                "output": "done",
                "worklog": [{"tool": "read", "result": f"the {SECRET} harbour log"}],
            },
        )
        assert made.status_code in (200, 201), made.text
        log = worklog_path(made.json()["id"])
        found = client.get("/v1/search", params={"q": SECRET, "include_worklog": "true"})
        assert log in [h["path"] for h in found.json()]  # indexed while it was a file
    root = live.mem.root
    shutil.move(root / log, root / "wiki/log.jsonl")
    (root / log).symlink_to(Path("../" * log.count("/")) / "wiki/log.jsonl")
    assert SECRET in (root / log).read_text()
    with live.client(writer) as client:
        for mode in ("bm25", "hybrid"):
            params = {"q": SECRET, "mode": mode, "include_worklog": "true", "limit": 50}
            found = client.get("/v1/search", params=params)
            assert found.status_code == 200, found.text
            # The turn record (its own file, with the compacted log) stays a hit.
            assert log not in found.text, (mode, found.text)
            assert "worklog" not in [h.get("type") for h in found.json()], found.text
    with live.client(admin) as client:  # the whole store's caller still finds it
        found = client.get("/v1/search", params={"q": SECRET, "include_worklog": "true"})
        assert log in [h["path"] for h in found.json()]


def test_mcp_tools_show_nothing_through_a_link_out(confined: tuple[Live, str, str]) -> None:
    live, writer, admin = confined
    parent, child = linked_turn(live, admin)
    headers = {"Authorization": f"Bearer {writer}"}

    async def go() -> list[tuple[str, dict[str, Any], bool, str]]:
        transport = streamable_http_client(
            f"{live.url}/mcp", http_client=create_mcp_http_client(headers=headers)
        )
        calls: list[tuple[str, dict[str, Any]]] = [
            *[("search", {"query": SECRET, "mode": m}) for m in ("bm25", "vector", "hybrid")],
            ("search", {"query": "harbour zany", "mode": "hybrid"}),
            ("grep", {"pattern": "harbour"}),
            ("walk", {}),
            ("walk", {"prefix": "episodes/side/"}),
            ("read", {"path": "episodes/peek.md"}),
            ("read", {"path": "episodes/peek.md", "section": f"Harbour {SECRET}"}),
            ("turn_show", {"turn_id": parent}),
            ("turn_ancestors", {"turn_id": child}),
            ("context", {"thread": "t-own"}),
            ("query", {"question": "harbour"}),
        ]
        out = []
        async with Client(transport) as c:
            for name, args in calls:
                result = await c.call_tool(name, args)
                text = "".join(getattr(b, "text", "") for b in result.content)
                out.append((name, args, bool(result.is_error), text))
            for uri in (
                "memdir://files/episodes/peek.md",
                "memdir://files/episodes/side/secret.md",
            ):
                with pytest.raises(Exception, match="confined"):
                    await c.read_resource(uri)
            own = await c.read_resource("memdir://files/episodes/own.md")
            assert "harbour note" in getattr(own.contents[0], "text", "")
        return out

    results = anyio.run(go)
    for name, args, _failed, text in results:
        assert SECRET not in text, (name, args, text)
    by_call = {(n, json.dumps(a)): (failed, text) for n, a, failed, text in results}
    failed, text = by_call[("grep", json.dumps({"pattern": "harbour"}))]
    assert not failed and [h["path"] for h in json.loads(text)] == ["episodes/own.md"]
    failed, text = by_call[("search", json.dumps({"query": "harbour zany", "mode": "hybrid"}))]
    assert not failed and json.loads(text)[0]["path"] == "episodes/own.md"
    failed, text = by_call[("walk", json.dumps({}))]
    assert not failed and [r["path"] for r in json.loads(text)] == ["episodes/own.md"] + [
        r["path"] for r in json.loads(text)[1:] if r["path"].startswith("episodes/turns/")
    ]
    assert by_call[("turn_show", json.dumps({"turn_id": parent}))][0]
    assert by_call[("read", json.dumps({"path": "episodes/peek.md"}))][0]
    assert by_call[("context", json.dumps({"thread": "t-own"}))][0]


def test_a_search_still_fills_its_limit_past_links_out(toy: None, store_root: Path) -> None:
    """The links out are left out in the ranking itself, not cut from a short list."""
    (store_root / "wiki").mkdir(exist_ok=True)
    (store_root / "episodes").mkdir(exist_ok=True)
    for i in range(6):
        (store_root / f"wiki/s{i}.md").write_text(f"# S{i}\n\nharbour harbour harbour {i}\n")
        (store_root / f"episodes/l{i}.md").symlink_to(f"../wiki/s{i}.md")
        (store_root / f"episodes/own{i}.md").write_text(f"# O{i}\n\nharbour, once {i}\n")
    with Memory.open(store_root, overrides={"embeddings": {"provider": "letters"}}) as mem:
        for mode in ("bm25", "vector", "hybrid"):
            hits = mem.search("harbour", limit=6, path_prefix="episodes/", mode=mode)
            assert sorted(h.path for h in hits) == [f"episodes/own{i}.md" for i in range(6)]
        assert len(mem.search("harbour", limit=12, mode="bm25")) == 12  # no prefix: all


def test_links_out_names_files_and_folders_that_leave_the_prefix(store_root: Path) -> None:
    seed(store_root)
    (store_root / "episodes/kept").mkdir()
    (store_root / "episodes/alias").symlink_to("kept")
    (store_root / "episodes/mine.md").symlink_to("own.md")
    assert sorted(paths.links_out(store_root, "episodes/")) == [
        "episodes/peek.md",
        "episodes/side/",
    ]
    assert paths.links_out(store_root, "episodes/o") == []
    assert paths.links_out(store_root, "episodes/side/") == ["episodes/side/"]
    assert paths.shown_within(store_root, "episodes/mine.md", "episodes/")
    named = ["episodes/own.md", "episodes/peek.md", "episodes/side/secret.md", "wiki/secret.md"]
    assert paths.through_symlinks(store_root, named) == {named[1], named[2]}
    assert not paths.shown_within(store_root, "episodes/peek.md", "episodes/")
    flt = Filters(path_prefix="episodes/", exclude=("episodes/peek.md", "episodes/side/"))
    with Memory.open(store_root) as mem:
        rows = [r["path"] for r in mem.ls("episodes/")]
        assert "episodes/own.md" in rows and "episodes/mine.md" in rows
        assert "episodes/peek.md" not in rows
        condition, params = flt.sql()
        kept = mem.index.conn.execute(
            f"SELECT path FROM docs d WHERE 1 = 1{condition} ORDER BY path", params
        ).fetchall()
        assert [r[0] for r in kept] == ["episodes/mine.md", "episodes/own.md"]
