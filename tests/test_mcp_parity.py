"""MCP tools as an agent builder meets them: arguments, answers and refusals that match the
HTTP API and the CLI, and every HTTP verb a tool. Real server on loopback, real MCP client
session."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client import Client

from helpers import error_of, http_client, ok, run_cli, text_of
from http_server import Live, live_server

NO_VECTORS: dict[str, dict[str, Any]] = {"embeddings": {"enabled": False}}


@pytest.fixture
def live(store_root: Path) -> Iterator[Live]:
    with live_server(store_root, NO_VECTORS) as server:
        yield server


# -- MCP: arguments an agent can follow, the same as HTTP and the CLI ----------------------


def run_mcp(client: Client, body: Any) -> Any:
    async def go() -> Any:
        async with client:
            return await body(client)

    return anyio.run(go)


def test_search_tool_filters_by_frontmatter_like_http_and_cli(live: Live, store_root: Path) -> None:
    """HTTP and the CLI take `where` filters; the MCP search tool did not."""
    for name, status in (("a", "stable"), ("b", "draft")):
        note = f"---\nstatus: {status}\n---\n# Rollback {name}\n\nFlip the switch back.\n"
        with live.client() as client:
            assert client.put(f"/v1/files/wiki/{name}.md", json={"content": note}).status_code
    with live.client() as client:
        over_http = client.get("/v1/search", params={"q": "rollback", "where": "status=stable"})
    http_paths = [hit["path"] for hit in over_http.json()]
    cli = run_cli(
        "--root", str(store_root), "search", "rollback", "--where", "status=stable", "--json"
    )
    cli_paths = [hit["path"] for hit in json.loads(cli.stdout)]

    async def body(client: Client) -> Any:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        schema = tools["search"].input_schema["properties"]
        hits = ok(
            await client.call_tool("search", {"query": "rollback", "where": ["status=stable"]})
        )
        bad = await client.call_tool("search", {"query": "rollback", "where": ["status"]})
        return schema, [h["path"] for h in hits], bad

    schema, mcp_paths, bad = run_mcp(http_client(live.url), body)
    assert "where" in schema
    assert mcp_paths == http_paths == cli_paths == ["wiki/a.md"]
    assert bad.is_error and text_of(bad).startswith("error: ")


def test_search_tool_lists_its_modes(live: Live) -> None:
    """The mode was free text; a model had to guess the spelling from the description."""

    async def body(client: Client) -> Any:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        mode = tools["search"].input_schema["properties"]["mode"]
        refused = await client.call_tool("search", {"query": "x", "mode": "semantic"})
        return mode, refused

    mode, refused = run_mcp(http_client(live.url), body)
    choices = {v for option in mode["anyOf"] for v in option.get("enum", ())}
    cli_help = run_cli("search", "--help").stdout.decode()
    assert choices and all(choice in cli_help for choice in choices)
    assert {"bm25", "auto"} <= choices
    assert refused.is_error and "mode" in text_of(refused)


def test_consolidate_apply_takes_a_limit_like_http(live: Live, store_root: Path) -> None:
    """HTTP and the CLI consolidate at most `limit` sources; the MCP tool had no limit."""
    assert (
        run_cli("--root", str(store_root), "bundle", "add", "ops", "--scope", "deploys").returncode
        == 0
    )
    with live.client() as client:
        placed = client.post(
            "/v1/ingest",
            json={"sources": [{"name": f"n{i}.txt", "content": f"note {i}"} for i in range(3)]},
        )
    assert placed.status_code == 201
    inbox = sorted(p.name for p in (store_root / "inbox").glob("*.md"))
    assert len(inbox) == 3

    async def body(client: Client) -> Any:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        schema = tools["consolidate_apply"].input_schema["properties"]
        return schema, ok(await client.call_tool("consolidate_apply", {"limit": 1}))

    schema, outcome = run_mcp(http_client(live.url), body)
    assert "limit" in schema
    left = sorted(p.name for p in (store_root / "inbox").glob("*.md"))
    handled = [s["source"] for s in outcome["quarantined"]] + list(outcome["skipped"])
    assert len(handled) == 1 and len(left) == 2, outcome


def test_argument_descriptions_say_what_a_call_needs(live: Live) -> None:
    """Every argument a model fills in is described; merge says it needs an episode or a
    path (neither is required by the schema alone)."""

    async def body(client: Client) -> Any:
        return {t.name: t for t in (await client.list_tools()).tools}

    tools = run_mcp(http_client(live.url), body)
    undescribed = [
        f"{name}.{arg}"
        for name, tool in tools.items()
        for arg, spec in tool.input_schema.get("properties", {}).items()
        if not spec.get("description")
    ]
    assert undescribed == [], undescribed
    merge = tools["merge"].input_schema["properties"]
    assert "path" in merge["episode"]["description"]
    assert "episode" in merge["path"]["description"]
    prefix = tools["memory_report"].input_schema["properties"]["episodes_prefix"]
    assert "Only paths" not in prefix["description"]


def test_mcp_doc_lists_every_tool(live: Live) -> None:
    async def body(client: Client) -> Any:
        return [t.name for t in (await client.list_tools()).tools]

    names = run_mcp(http_client(live.url), body)
    doc = (Path(__file__).parent.parent / "docs" / "mcp.md").read_text()
    assert names and [n for n in names if f"| `{n}` |" not in doc] == []


# -- MCP: every verb the HTTP API serves ----------------------------------------------------

HTTP_VERBS_AS_TOOLS = {
    "POST /v1/forget": "forget",
    "POST /v1/evaluate": "evaluate",
    "POST /v1/reflect": "reflect",
    "POST /v1/episodes": "episode_add",
    "GET /v1/doctor": "doctor",
    "POST /v1/reindex": "reindex",
    "GET /v1/turns/{turn_id}/descendants": "turn_descendants",
}


def test_every_verb_of_the_http_api_is_a_tool(live: Live) -> None:
    """The design has every interface expose the same verbs; MCP had no forget (an agent
    could not retire a wrong memory), evaluate, reflect, episodes, doctor, reindex or
    descendants."""
    with live.client() as client:
        spec = client.get("/openapi.json").json()
    served = {f"{m.upper()} {path}" for path, ops in spec["paths"].items() for m in ops}
    assert set(HTTP_VERBS_AS_TOOLS) <= served

    async def body(client: Client) -> Any:
        return {t.name for t in (await client.list_tools()).tools}

    tools = run_mcp(http_client(live.url), body)
    assert set(HTTP_VERBS_AS_TOOLS.values()) - tools == set()


def test_forget_tool_supersedes_like_http(live: Live, store_root: Path) -> None:
    note = "# Old deploy\n\nDeploys go through the red switch.\n"
    with live.client() as client:
        for name in ("a", "b"):
            assert client.put(f"/v1/files/wiki/{name}.md", json={"content": note}).is_success
        over_http = client.post("/v1/forget", json={"path": "wiki/a.md", "reason": "wrong"})
    assert over_http.status_code == 200

    async def body(client: Client) -> Any:
        forgot = ok(await client.call_tool("forget", {"path": "wiki/b.md", "reason": "wrong"}))
        hits = ok(await client.call_tool("search", {"query": "red switch"}))
        tools = {t.name: t for t in (await client.list_tools()).tools}
        return forgot, hits, tools["forget"].annotations

    forgot, hits, annotations = run_mcp(http_client(live.url), body)
    assert set(forgot) == set(over_http.json()) and forgot["purged"] is False
    assert (store_root / "wiki/b.md").exists() and hits == []
    assert annotations is not None and annotations.destructive_hint is True


def test_purging_over_mcp_needs_an_admin_token(store_root: Path) -> None:
    from helpers import create_token

    writer = create_token(store_root, "writer", "write")
    admin = create_token(store_root, "admin", "admin")
    (store_root / "wiki").mkdir(exist_ok=True)
    (store_root / "wiki/old.md").write_text("# Old\n\nnote\n")

    async def purge(client: Client) -> Any:
        return await client.call_tool("forget", {"path": "wiki/old.md", "purge": True})

    with live_server(store_root, NO_VECTORS) as server:
        refused = run_mcp(http_client(server.url, writer), purge)
        assert refused.is_error and "admin" in text_of(refused)
        assert (store_root / "wiki/old.md").exists()
        done = run_mcp(http_client(server.url, admin), purge)
    assert ok(done)["purged"] is True and not (store_root / "wiki/old.md").exists()


def test_maintenance_and_dag_tools_answer_as_http(live: Live, store_root: Path) -> None:
    with live.client() as client:
        first = client.post("/v1/turns", json={"thread": "t", "input": "a", "output": "b"})
        second = client.post(
            "/v1/turns",
            json={"thread": "t", "input": "c", "output": "d", "parents": [first.json()["id"]]},
        )
        turn_id = first.json()["id"]
        down_http = client.get(f"/v1/turns/{turn_id}/descendants").json()
        doctor_http = client.get("/v1/doctor").json()

    async def body(client: Client) -> Any:
        return (
            ok(await client.call_tool("turn_descendants", {"turn_id": turn_id})),
            ok(await client.call_tool("doctor", {})),
            ok(await client.call_tool("reindex", {})),
            ok(
                await client.call_tool(
                    "episode_add",
                    {"kind": "life", "situation": "a rollback failed", "outcome": "failure"},
                )
            ),
            ok(await client.call_tool("reflect", {})),
            await client.call_tool("evaluate", {}),
        )

    down, doctor, reindexed, episode, reflected, evaluated = run_mcp(http_client(live.url), body)
    assert [n["id"] for n in down] == [n["id"] for n in down_http] == [second.json()["id"]]
    assert doctor == doctor_http and doctor["ok"] is True
    assert reindexed["scanned"] >= 2 and "changed_paths" in reindexed
    assert (store_root / episode["path"]).exists() and episode["path"].startswith("episodes/life/")
    assert reflected["episodes"] >= 1
    cli = run_cli("--root", str(store_root), "evaluate")
    if evaluated.is_error:
        assert text_of(evaluated) == cli.stderr.decode().strip()
    else:
        assert cli.returncode == 0


def test_forgotten_documents_can_be_listed_as_over_http(live: Live) -> None:
    """HTTP and the CLI take include_superseded on ls, search and grep; MCP did not, so an
    agent could forget a document but never see it again."""
    note = "# Old deploy\n\nDeploys go through the red switch.\n"
    with live.client() as client:
        assert client.put("/v1/files/wiki/old.md", json={"content": note}).is_success
        assert client.post("/v1/forget", json={"path": "wiki/old.md"}).is_success
        both = {"prefix": "wiki/", "include_superseded": "true"}
        ls_http = [r["path"] for r in client.get("/v1/ls", params=both).json()]
        grep_http = client.get(
            "/v1/grep", params={"pattern": "red switch", "include_superseded": "true"}
        ).json()

    async def body(client: Client) -> Any:
        hidden = ok(await client.call_tool("walk", {"prefix": "wiki/"}))
        walked = ok(await client.call_tool("walk", {"prefix": "wiki/", "include_superseded": True}))
        found = ok(
            await client.call_tool("search", {"query": "red switch", "include_superseded": True})
        )
        lines = ok(
            await client.call_tool("grep", {"pattern": "red switch", "include_superseded": True})
        )
        return hidden, walked, found, lines

    hidden, walked, found, lines = run_mcp(http_client(live.url), body)
    assert hidden == []
    assert [r["path"] for r in walked] == ls_http == ["wiki/old.md"]
    assert [h["path"] for h in found] == ["wiki/old.md"]
    assert lines == grep_http and [h["path"] for h in lines] == ["wiki/old.md"]


def test_write_tool_answers_what_http_and_the_cli_answer(live: Live, store_root: Path) -> None:
    """MCP's write left out the content hash that HTTP and `memdir write --json` return."""
    with live.client() as client:
        over_http = client.put("/v1/files/wiki/a.md", json={"content": "# A\n"}).json()
    cli = run_cli("--root", str(store_root), "write", "wiki/c.md", "--text", "# C\n", "--json")

    async def body(client: Client) -> Any:
        return ok(await client.call_tool("write", {"path": "wiki/b.md", "content": "# B\n"}))

    over_mcp = run_mcp(http_client(live.url), body)
    assert list(over_mcp) == list(over_http) == list(json.loads(cli.stdout))
    assert over_mcp["hash"] and over_mcp["hash"] != over_http["hash"]


def test_consolidate_apply_describes_the_packet_the_plan_asks_for(live: Live) -> None:
    """The packet was described as "the completed plan", so a model sent the plan back; the
    plan's contract names the shape apply takes."""

    async def body(client: Client) -> Any:
        plan = ok(await client.call_tool("consolidate_plan", {}))
        tools = {t.name: t for t in (await client.list_tools()).tools}
        return plan, tools["consolidate_apply"].input_schema["properties"]["packet"]

    plan, packet = run_mcp(http_client(live.url), body)
    keys = re.findall(r'"(\w+)"', plan["contract"]["return"])
    with live.client() as client:
        spec = client.get("/openapi.json").json()
    http_apply = spec["components"]["schemas"]["ConsolidateBody"]["properties"]["apply"]
    assert keys and all(f'"{key}"' in packet["description"] for key in keys), packet
    assert all(f'"{key}"' in http_apply["description"] for key in keys), http_apply


def test_purge_takes_only_a_real_boolean(live: Live, store_root: Path) -> None:
    """A destructive switch: "yes" or 1 was read as true and deleted the file."""
    with live.client() as client:
        assert client.put("/v1/files/wiki/keep.md", json={"content": "# Keep\n"}).is_success
        for loose in ("yes", 1, "true"):
            response = client.post("/v1/forget", json={"path": "wiki/keep.md", "purge": loose})
            assert response.status_code == 400, loose
            assert error_of(response)["message"].startswith("purge: ")
    assert (store_root / "wiki/keep.md").is_file()

    async def purge(client: Client) -> Any:
        return await client.call_tool("forget", {"path": "wiki/keep.md", "purge": "yes"})

    refused = run_mcp(http_client(live.url), purge)
    assert refused.is_error and (store_root / "wiki/keep.md").is_file()


def test_context_budget_has_the_same_ceiling_over_mcp_as_over_http(live: Live) -> None:
    async def ask(client: Client) -> Any:
        return [
            await client.call_tool("context", {"thread": "t", "budget": budget})
            for budget in (1_000_000, 1_000_001)
        ]

    within, over = run_mcp(http_client(live.url), ask)
    assert not within.is_error and over.is_error
    with live.client() as client:
        response = client.post("/v1/context", json={"thread": "t", "budget": 1_000_001})
    assert response.status_code == 400
