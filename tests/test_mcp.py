"""The MCP server through a real client session: over stdio (a `memdir mcp` subprocess)
and over streamable HTTP (`/mcp` on a real server on a loopback port)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from helpers import http_client, ok, run_cli, text_of
from http_server import live_server
from memdir.service import Memory

NO_VECTORS: dict[str, dict[str, Any]] = {"embeddings": {"enabled": False}}
EXPECTED_TOOLS = {
    "context",
    "search",
    "grep",
    "read",
    "walk",
    "turn_record",
    "turn_show",
    "turn_ancestors",
    "write",
    "memory_report",
    "merge",
    "ingest",
    "consolidate_plan",
    "consolidate_apply",
    "query",
    "refine",
}


def stdio_client(root: Path) -> Client:
    env = {k: v for k, v in os.environ.items() if k != "MEMDIR_ROOT"}
    env["MEMDIR_EMBEDDINGS_ENABLED"] = "false"  # keyword search: no model to load
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "memdir", "--root", str(root), "mcp"], env=env
    )
    return Client(params)


async def scenario(client: Client, root: Path) -> None:
    """The same scenario as the CLI and HTTP tests: write, turns, context, search, report."""
    async with client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) >= EXPECTED_TOOLS
        assert "MODE ONE" in (tools["context"].description or "")
        for name in ("search", "grep", "read", "walk"):
            assert "MODE TWO" in (tools[name].description or ""), name

        written = ok(
            await client.call_tool(
                "write",
                {
                    "path": "wiki/ops/rollback.md",
                    "content": "# Rollback\n\nFlip the blue-green switch back.\n",
                    "provenance": "run:mcp-1",
                    "actor": "mcp-agent",
                },
            )
        )
        assert written["created"] is True
        on_disk = (root / "wiki/ops/rollback.md").read_text()
        assert "derived-from:" in on_disk and "actor: mcp-agent" in on_disk

        read = ok(await client.call_tool("read", {"path": "wiki/ops/rollback.md"}))
        assert read["content"] == on_disk and read["etag"] == written["etag"]
        stale = await client.call_tool(
            "write",
            {"path": "wiki/ops/rollback.md", "content": "# R\n", "if_match": '"0123456789abcdef"'},
        )
        assert stale.is_error and text_of(stale).startswith("error: wiki/ops/rollback.md changed")

        first = ok(
            await client.call_tool(
                "turn_record",
                {
                    "thread": "t-mcp",
                    "user": "ana",
                    "input": "How do I roll back?",
                    "output": "Flip the switch.",
                    "keywords": ["rollback"],
                    "worklog": [{"tool": "search", "args": {"query": "rollback"}}],
                },
            )
        )
        second = ok(
            await client.call_tool(
                "turn_record",
                {
                    "thread": "t-mcp",
                    "input": "Then?",
                    "output": "Check the health endpoint.",
                    "parents": [first["id"]],
                },
            )
        )
        shown = ok(await client.call_tool("turn_show", {"turn_id": second["id"]}))
        assert shown["parents"] == [first["id"]]
        up = ok(await client.call_tool("turn_ancestors", {"turn_id": second["id"]}))
        assert [n["id"] for n in up] == [first["id"]]
        pack = ok(
            await client.call_tool(
                "context", {"thread": "t-mcp", "user": "ana", "keywords": ["rollback"]}
            )
        )
        assert "Check the health endpoint." in pack["text"]
        assert pack["tokens"] <= pack["budget"]

        hits = ok(await client.call_tool("search", {"query": "blue-green", "path_prefix": "wiki/"}))
        assert hits[0]["path"] == "wiki/ops/rollback.md"
        lines = ok(await client.call_tool("grep", {"pattern": "Flip the"}))
        line = on_disk.splitlines().index("Flip the blue-green switch back.") + 1
        assert [(h["path"], h["line"]) for h in lines if h["path"].startswith("wiki/")] == [
            ("wiki/ops/rollback.md", line)
        ]
        walked = ok(await client.call_tool("walk", {"prefix": "wiki/"}))
        assert [r["path"] for r in walked] == ["wiki/ops/rollback.md"]

        report = ok(await client.call_tool("memory_report", {}))
        assert list(report)[:3] == ["episodic_count", "total_episodic", "total_unmerged"]
        assert report["total_episodic"] == 2
        paged = ok(await client.call_tool("memory_report", {"limit": 1, "offset": 1}))
        assert len(paged["episodic_files"]) == 1 and paged["total_episodic"] == 2

        harness = await client.read_resource("memdir://HARNESS.md")
        assert harness.contents[0].text == (root / "HARNESS.md").read_text()
        article = await client.read_resource("memdir://files/wiki/ops/rollback.md")
        assert article.contents[0].text == on_disk

        missing = await client.call_tool("read", {"path": "wiki/none.md"})
        assert missing.is_error
        cli = run_cli("--root", str(root), "read", "wiki/none.md")
        assert text_of(missing) == cli.stderr.decode().strip()  # same text as the CLI
        escape = await client.call_tool("read", {"path": "../outside.md"})
        assert escape.is_error
        assert (
            text_of(escape)
            == run_cli("--root", str(root), "read", "../outside.md").stderr.decode().strip()
        )


def run(fn: Callable[[], Awaitable[None]]) -> None:
    anyio.run(fn)


def test_mcp_over_stdio(store_root: Path) -> None:
    run(lambda: scenario(stdio_client(store_root), store_root))


def test_mcp_over_http(store_root: Path) -> None:
    with live_server(store_root, NO_VECTORS) as live:
        run(lambda: scenario(http_client(live.url), store_root))


def test_engine_tools_over_stdio(store_root: Path) -> None:
    with Memory.open(store_root) as mem:
        mem.bundle_add("ops", "deploys, rollbacks, DNS")

    async def go() -> None:
        async with stdio_client(store_root) as client:
            placed = ok(
                await client.call_tool(
                    "ingest",
                    {
                        "sources": [{"name": "notes.txt", "content": "Deploys roll back by DNS."}],
                        "provenance": "import:n1",
                    },
                )
            )
            assert placed[0]["path"].startswith("inbox/")
            assert (store_root / placed[0]["path"]).exists()
            plan = ok(await client.call_tool("consolidate_plan", {}))
            assert isinstance(plan, dict) and plan
            answer = ok(await client.call_tool("query", {"question": "how do deploys roll back"}))
            assert isinstance(answer, dict)
            audit = ok(await client.call_tool("refine", {}))
            assert "drift" in audit
            bad = await client.call_tool("ingest", {"sources": [{"name": "x"}]})
            assert bad.is_error and text_of(bad).startswith("error: ")

    run(go)


def test_a_slow_tool_call_does_not_hold_other_calls(
    store_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memdir.documents import grep as service

    monkeypatch.setattr(service, "GREP_SECONDS", 3.0)
    (store_root / "notes").mkdir(exist_ok=True)
    (store_root / "notes" / "redos.md").write_text("# R\n\n" + "x" * 60 + "\n")
    with live_server(store_root, NO_VECTORS) as server:

        async def go() -> None:
            async with http_client(server.url) as slow, http_client(server.url) as quick:
                times: dict[str, float] = {}
                started = time.monotonic()

                async def grep() -> None:
                    result = await slow.call_tool("grep", {"pattern": "(.*){1,32000}[bc]"})
                    assert result.is_error and "took longer" in text_of(result)
                    times["grep"] = time.monotonic() - started

                async def walk() -> None:
                    await anyio.sleep(0.5)  # the grep is running by now
                    ok(await quick.call_tool("walk", {}))
                    times["walk"] = time.monotonic() - started

                async with anyio.create_task_group() as group:
                    group.start_soon(grep)
                    group.start_soon(walk)
                assert times["walk"] < 2.0 < times["grep"], times

        run(go)
