"""Who is recorded as the writer: with auth on, the token's name; X-Actor (or the MCP
tools' ``actor``) is kept beside it as a claim, a trailer of the commit message."""

from __future__ import annotations

import subprocess
from pathlib import Path

import anyio
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from helpers import create_token
from http_server import live_server

NO_VECTORS = {"embeddings": {"enabled": False}}


def last_commit(root: Path, path: str) -> tuple[str, str]:
    """(author name, whole message) of the last commit that touched ``path``."""
    out = subprocess.run(
        ["git", "log", "-1", "--format=%an%x00%B", "--", path],
        cwd=root,
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    author, _, message = out.partition("\0")
    return author, message.strip()


def test_a_token_is_the_author_and_x_actor_a_trailer(store_root: Path) -> None:
    token = create_token(store_root, "ci-bot", "write")
    with live_server(store_root, NO_VECTORS) as live, live.client(token) as client:
        claimed = {"X-Actor": "planner", "X-Provenance": "run:7"}
        put = client.put("/v1/files/notes/a.md", json={"content": "# A\n"}, headers=claimed)
        assert put.status_code == 201, put.text
        turn = client.post("/v1/turns", json={"thread": "t", "input": "hi"}, headers=claimed)
        assert turn.status_code == 201, turn.text
        plain = client.put("/v1/files/notes/b.md", json={"content": "# B\n"})
        assert plain.status_code == 201, plain.text
    author, message = last_commit(store_root, "notes/a.md")
    assert author == "ci-bot"
    assert message.splitlines()[-1] == "X-Actor: planner"
    assert "actor: ci-bot" in (store_root / "notes/a.md").read_text()  # derived-from
    turn_author, turn_message = last_commit(store_root, turn.json()["path"])
    assert turn_author == "ci-bot" and turn_message.endswith("X-Actor: planner")
    assert last_commit(store_root, "notes/b.md")[0] == "ci-bot"
    assert "X-Actor" not in last_commit(store_root, "notes/b.md")[1]


def test_without_auth_x_actor_is_the_author(store_root: Path) -> None:
    with live_server(store_root, NO_VECTORS) as live, live.client() as client:
        put = client.put(
            "/v1/files/notes/a.md", json={"content": "# A\n"}, headers={"X-Actor": "planner"}
        )
        assert put.status_code == 201, put.text
    author, message = last_commit(store_root, "notes/a.md")
    assert author == "planner" and "X-Actor" not in message


def test_mcp_actor_is_a_claim_beside_the_token(store_root: Path) -> None:
    token = create_token(store_root, "mcp-bot", "write")
    with live_server(store_root, NO_VECTORS) as live:

        async def go() -> None:
            transport = streamable_http_client(
                f"{live.url}/mcp",
                http_client=create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}),
            )
            async with Client(transport) as client:
                args = {"path": "notes/m.md", "content": "# M\n", "actor": "agent\nForged: x"}
                result = await client.call_tool("write", args)
                assert not result.is_error, result.content

        anyio.run(go)
    author, message = last_commit(store_root, "notes/m.md")
    assert author == "mcp-bot"
    assert message.splitlines()[-1] == "X-Actor: agent Forged: x"  # one line, no forged trailer
