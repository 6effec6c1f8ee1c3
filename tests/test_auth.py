"""Bearer tokens: the pure rules, `memdir token`, and the auth matrix over HTTP and MCP."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from helpers import create_token, run_cli
from http_server import Live, free_port, live_server
from memdir import access as auth
from memdir.errors import Forbidden, InvalidInput, Unauthorized

# -- the pure rules ------------------------------------------------------------------------


def test_tokens_are_stored_hashed_and_checked() -> None:
    token = auth.new_token()
    entry = auth.TokenEntry("ci", auth.hash_token(token), "write", "episodes/")
    registry = auth.TokenRegistry([entry])
    principal = registry.authenticate(f"Bearer {token}")
    assert (principal.name, principal.scope, principal.prefix) == ("ci", "write", "episodes/")
    assert token not in json.dumps(entry.to_dict())
    for header, message in [
        (None, "missing bearer token"),
        ("Basic abc", "malformed Authorization"),
        ("Bearer", "malformed Authorization"),
        (f"Bearer {token}x", "unknown or revoked"),
    ]:
        with pytest.raises(Unauthorized, match=message):
            registry.authenticate(header)


def test_without_tokens_everyone_is_local_unless_required() -> None:
    assert auth.TokenRegistry([]).authenticate(None) == auth.LOCAL
    with pytest.raises(Unauthorized):
        auth.TokenRegistry([], required=True).authenticate(None)


def test_scopes_are_ordered() -> None:
    reader = auth.Principal("r", "read")
    reader.require("read")
    with pytest.raises(Forbidden, match="needs a write token"):
        reader.require("write")
    auth.Principal("a", "admin").require("write")


def test_prefix_confinement() -> None:
    p = auth.Principal("w", "write", "episodes/")
    assert p.covers("episodes/a.md") and not p.covers("episodes-old/a.md")
    assert p.confine(None) == "episodes/"
    assert p.confine("episodes/turns/") == "episodes/turns/"
    assert p.confine("epi") == "episodes/"  # a wider prefix narrows to the token's
    with pytest.raises(Forbidden):
        p.confine("wiki/")
    with pytest.raises(Forbidden):
        p.check_path("wiki/x.md")
    with pytest.raises(Forbidden):
        p.require_unconfined("the memory report")
    assert auth.normalize_prefix("./episodes") == "episodes/"
    assert auth.normalize_prefix("") == ""
    with pytest.raises(InvalidInput):
        auth.normalize_prefix("a/../b")


def test_loopback_addresses() -> None:
    for host in ("127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"):
        assert auth.is_loopback(host), host
    for host in ("0.0.0.0", "192.168.1.10", "example.com", "::"):
        assert not auth.is_loopback(host), host


names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)
prefixes = st.sampled_from(["", "episodes/", "wiki/ops/", "inbox/"])


@given(st.lists(st.tuples(names, st.sampled_from(auth.SCOPES), prefixes), max_size=5))
def test_config_round_trip_keeps_everything_else(items: list[tuple[str, str, str]]) -> None:
    base = '# memdir settings\n[memory]\nepisodes_path_prefix = "eps/"\n\n[server]\nport = 4000\n'
    entries = [
        auth.TokenEntry(n, auth.hash_token(n + "secret"), s, p, "2026-01-01T00:00:00Z")
        for n, s, p in items
    ]
    text = auth.config_with_tokens(base, entries)
    parsed = tomllib.loads(text)
    assert parsed["memory"]["episodes_path_prefix"] == "eps/"
    assert parsed["server"]["port"] == 4000
    assert auth.entries_in_config(text) == entries
    assert auth.config_with_tokens(text, []).rstrip("\n") == base.rstrip("\n")


# -- memdir token ------------------------------------------------------------------------


def test_token_cli_create_list_revoke(store_root: Path) -> None:
    token = create_token(store_root, "planner", "write", "episodes")
    config = (store_root / ".memdir/config.toml").read_text()
    assert token not in config and auth.hash_token(token) in config
    listed = json.loads(run_cli("token", "list", "--json", cwd=store_root).stdout)
    assert [(r["name"], r["scope"], r["prefix"]) for r in listed] == [
        ("planner", "write", "episodes/")
    ]
    dup = run_cli("token", "create", "planner", cwd=store_root)
    assert dup.returncode == 2 and b"exists" in dup.stderr
    assert run_cli("token", "revoke", "planner", cwd=store_root).returncode == 0
    assert auth.hash_token(token) not in (store_root / ".memdir/config.toml").read_text()
    gone = run_cli("token", "revoke", "planner", cwd=store_root)
    assert gone.returncode == 1 and b"no token named" in gone.stderr


@pytest.mark.parametrize("prefix", ["a\x7fb", "a\x01b", "a\nb/", "\x1b[2Jwiki"])
def test_token_create_refuses_a_control_character_in_the_prefix(
    store_root: Path, prefix: str
) -> None:
    """\x7f reached config.toml unescaped and token create died with a TOMLDecodeError."""
    config = store_root / ".memdir/config.toml"
    before = config.read_bytes()
    result = run_cli("token", "create", "ci", "--prefix", prefix, cwd=store_root)
    assert result.returncode == 2, result.stderr
    assert b"Traceback" not in result.stderr
    assert b"error: a token prefix cannot contain control characters" in result.stderr
    assert config.read_bytes() == before


def test_token_tables_are_written_by_a_toml_library(store_root: Path) -> None:
    """Quotes, backslashes and non-ASCII in a prefix survive the round trip."""
    create_token(store_root, "odd", "read", 'we"ird\\é/')
    text = (store_root / ".memdir/config.toml").read_text(encoding="utf-8")
    assert [e.prefix for e in auth.entries_in_config(text)] == ['we"ird/é/']
    with pytest.raises(InvalidInput, match="control characters or lone surrogates"):
        auth.normalize_prefix("a\ud800")


def test_serve_refuses_a_public_address_without_tokens(store_root: Path) -> None:
    result = run_cli("serve", "--host", "0.0.0.0", "--port", str(free_port()), cwd=store_root)
    assert result.returncode == 2
    assert b"refusing to listen on 0.0.0.0 without auth" in result.stderr


# -- the matrix over HTTP --------------------------------------------------------------------

READ, WRITE, ADMIN = "read", "write", "admin"
INSIDE, OUTSIDE, WHOLE = "inside", "outside", "whole"  # relative to the prefix episodes/

TURN = "01aaaaaaaaaaaaaaaaaaaaaaaa"


def routes(turn_id: str) -> list[tuple[str, str, dict[str, Any] | None, str, str]]:
    """(method, url, json, scope needed, where it reaches) for every route."""
    return [
        ("GET", "/v1/files/episodes/e.md", None, READ, INSIDE),
        ("GET", "/v1/files/wiki/w.md", None, READ, OUTSIDE),
        ("PUT", "/v1/files/episodes/new.md", {"content": "# N\n"}, WRITE, INSIDE),
        ("PUT", "/v1/files/wiki/new.md", {"content": "# N\n"}, WRITE, OUTSIDE),
        ("GET", "/v1/ls", None, READ, INSIDE),
        ("GET", "/v1/ls?prefix=wiki/", None, READ, OUTSIDE),
        ("GET", "/v1/search?q=note", None, READ, INSIDE),
        ("GET", "/v1/search?q=note&path_prefix=wiki/", None, READ, OUTSIDE),
        ("GET", "/v1/grep?pattern=note", None, READ, INSIDE),
        ("GET", "/v1/grep?pattern=note&path_prefix=wiki/", None, READ, OUTSIDE),
        ("GET", "/v1/memory/report", None, READ, WHOLE),
        ("GET", "/api/kiwi/memory/report", None, READ, WHOLE),
        ("GET", "/v1/doctor", None, READ, WHOLE),
        ("POST", "/v1/merge", {"page": "episodes/e.md", "episode": "x"}, WRITE, INSIDE),
        ("POST", "/v1/merge", {"page": "wiki/w.md", "episode": "x"}, WRITE, OUTSIDE),
        ("POST", "/v1/forget", {"path": "episodes/old.md"}, WRITE, INSIDE),
        ("POST", "/v1/forget", {"path": "wiki/old.md"}, WRITE, OUTSIDE),
        ("POST", "/v1/forget", {"path": "episodes/gone.md", "purge": True}, ADMIN, INSIDE),
        ("POST", "/v1/reindex", None, ADMIN, WHOLE),
        ("POST", "/v1/turns", {"thread": "t", "input": "hi"}, WRITE, INSIDE),
        ("GET", f"/v1/turns/{turn_id}", None, READ, INSIDE),
        ("GET", f"/v1/turns/{turn_id}/worklog", None, READ, INSIDE),
        ("GET", f"/v1/turns/{turn_id}/ancestors", None, READ, INSIDE),
        ("GET", f"/v1/turns/{turn_id}/descendants", None, READ, INSIDE),
        ("GET", "/v1/threads/t", None, READ, INSIDE),
        ("POST", "/v1/context", {"thread": "t"}, READ, WHOLE),
        ("POST", "/v1/ingest", {"sources": [{"name": "a.txt", "content": "text"}]}, WRITE, OUTSIDE),
        ("POST", "/v1/consolidate/plan", None, READ, WHOLE),
        ("POST", "/v1/consolidate", None, WRITE, WHOLE),
        ("GET", "/v1/query?q=note", None, READ, WHOLE),
        ("POST", "/v1/refine", None, WRITE, WHOLE),
        ("POST", "/v1/evaluate", None, WRITE, WHOLE),
        ("POST", "/v1/reflect", None, WRITE, WHOLE),
        ("POST", "/v1/episodes", {"kind": "life", "situation": "a day"}, WRITE, INSIDE),
    ]


def snapshot(root: Path) -> dict[str, int]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in (".git", ".memdir")]
        for name in filenames:
            path = Path(dirpath) / name
            out[str(path.relative_to(root))] = path.stat().st_mtime_ns
    return out


@pytest.fixture
def secured(store_root: Path) -> Iterator[tuple[Live, dict[str, str]]]:
    tokens = {
        "reader": create_token(store_root, "reader", "read"),
        "writer": create_token(store_root, "writer", "write", "episodes/"),
        "admin": create_token(store_root, "admin", "admin"),
    }
    for rel in ("episodes/e.md", "episodes/old.md", "episodes/gone.md", "wiki/w.md", "wiki/old.md"):
        (store_root / rel).parent.mkdir(parents=True, exist_ok=True)
        (store_root / rel).write_text("---\nepisode_id: x\n---\n# A note\n\nnote\n")
    for args in (["add", "-A"], ["commit", "-qm", "seed"]):
        subprocess.run(["git", "-C", str(store_root), *args], check=True, capture_output=True)
    with live_server(store_root, {"embeddings": {"enabled": False}}) as live:
        yield live, tokens


def expected(token: str | None, scope: str, where: str) -> int | None:
    """401 or 403 when refused; None when the request must get past auth."""
    if token is None:
        return 401
    have = {"reader": READ, "writer": WRITE, "admin": ADMIN}[token]
    if auth.SCOPES.index(have) < auth.SCOPES.index(scope):
        return 403
    if token == "writer" and where != INSIDE:
        return 403
    return None


def test_auth_matrix_over_http(secured: tuple[Live, dict[str, str]], store_root: Path) -> None:
    live, tokens = secured
    with live.client(tokens["admin"]) as admin:
        turn = admin.post("/v1/turns", json={"thread": "t", "input": "seed"})
        assert turn.status_code == 201
        turn_id = turn.json()["id"]
    for who in (None, "reader", "writer", "admin"):  # refusals first, then the writes
        with live.client(tokens[who] if who else None) as client:
            for method, url, body, scope, where in routes(turn_id):
                want = expected(who, scope, where)
                before = snapshot(store_root) if want else None
                response = client.request(method, url, json=body)
                label = f"{who} {method} {url}"
                if want is not None:
                    assert response.status_code == want, (label, response.text)
                    assert response.json()["error"]["code"] in ("unauthorized", "forbidden")
                    assert snapshot(store_root) == before, f"{label} changed files"
                else:
                    assert response.status_code not in (401, 403), (label, response.text)
                    assert response.status_code < 500, (label, response.text)
    assert (store_root / "episodes/new.md").exists()
    assert not (store_root / "wiki/new.md").exists() or "admin" in tokens  # admin wrote it


def test_confined_listing_sees_only_its_prefix(secured: tuple[Live, dict[str, str]]) -> None:
    live, tokens = secured
    with live.client(tokens["writer"]) as client:
        paths = [row["path"] for row in client.get("/v1/ls").json()]
        assert paths and all(p.startswith("episodes/") for p in paths)
        hits = client.get("/v1/search", params={"q": "note"}).json()
        assert hits and all(h["path"].startswith("episodes/") for h in hits)


def test_symlink_cannot_lead_a_confined_token_out(
    secured: tuple[Live, dict[str, str]], store_root: Path
) -> None:
    live, tokens = secured
    (store_root / "episodes/peek.md").symlink_to(store_root / "wiki/w.md")
    with live.client(tokens["writer"]) as client:
        assert client.get("/v1/files/episodes/peek.md").status_code == 403


def test_a_new_file_through_a_symlinked_folder_stays_inside_the_token(
    secured: tuple[Live, dict[str, str]], store_root: Path
) -> None:
    """The folder link leads to wiki/: the file would be created there, outside episodes/."""
    live, tokens = secured
    (store_root / "episodes/side").symlink_to(store_root / "wiki")
    with live.client(tokens["writer"]) as client:
        put = client.put("/v1/files/episodes/side/new.md", json={"content": "# N\n"})
        assert put.status_code == 403
    assert not (store_root / "wiki/new.md").exists()
    (store_root / "episodes/kept").mkdir()
    (store_root / "episodes/alias").symlink_to(store_root / "episodes/kept")
    with live.client(tokens["writer"]) as client:  # a link inside the token's folder is fine
        put = client.put("/v1/files/episodes/alias/new.md", json={"content": "# N\n"})
        assert put.status_code in (200, 201), put.text
    assert (store_root / "episodes/kept/new.md").is_file()


def test_revoked_token_is_refused_at_once(
    secured: tuple[Live, dict[str, str]], store_root: Path
) -> None:
    live, tokens = secured
    with live.client(tokens["reader"]) as client:
        assert client.get("/v1/ls").status_code == 200
        assert run_cli("token", "revoke", "reader", cwd=store_root).returncode == 0
        refused = client.get("/v1/ls")
        assert refused.status_code == 401 and "revoked" in refused.json()["error"]["message"]


def test_health_needs_no_token(secured: tuple[Live, dict[str, str]]) -> None:
    live, _ = secured
    with live.client() as client:
        assert client.get("/v1/health").status_code == 200
        assert client.get("/openapi.json").status_code == 401


# -- the matrix over MCP ---------------------------------------------------------------------

TOOLS: list[tuple[str, dict[str, Any], str, str]] = [
    ("read", {"path": "episodes/e.md"}, READ, INSIDE),
    ("read", {"path": "wiki/w.md"}, READ, OUTSIDE),
    ("walk", {}, READ, INSIDE),
    ("walk", {"prefix": "wiki/"}, READ, OUTSIDE),
    ("search", {"query": "note"}, READ, INSIDE),
    ("search", {"query": "note", "path_prefix": "wiki/"}, READ, OUTSIDE),
    ("grep", {"pattern": "note"}, READ, INSIDE),
    ("memory_report", {}, READ, WHOLE),
    ("context", {"thread": "t"}, READ, WHOLE),
    ("write", {"path": "episodes/m.md", "content": "# M\n"}, WRITE, INSIDE),
    ("write", {"path": "wiki/m.md", "content": "# M\n"}, WRITE, OUTSIDE),
    ("merge", {"page": "episodes/e.md", "episode": "y"}, WRITE, INSIDE),
    ("merge", {"page": "wiki/w.md", "episode": "y"}, WRITE, OUTSIDE),
    ("turn_record", {"thread": "t", "input": "hello"}, WRITE, INSIDE),
    ("turn_show", {"turn_id": TURN}, READ, INSIDE),
    ("turn_ancestors", {"turn_id": TURN}, READ, INSIDE),
    ("ingest", {"sources": [{"name": "a", "content": "b"}]}, WRITE, OUTSIDE),
    ("consolidate_plan", {}, READ, WHOLE),
    ("consolidate_apply", {}, WRITE, WHOLE),
    ("query", {"question": "note"}, READ, WHOLE),
    ("refine", {}, WRITE, WHOLE),
]


def test_auth_matrix_over_mcp(secured: tuple[Live, dict[str, str]], store_root: Path) -> None:
    live, tokens = secured

    def client(token: str | None) -> Client:
        headers = {"Authorization": f"Bearer {token}"} if token else None
        transport = streamable_http_client(
            f"{live.url}/mcp", http_client=create_mcp_http_client(headers=headers)
        )
        return Client(transport)

    async def go() -> None:
        with pytest.raises(Exception, match="TaskGroup|error"):  # no token: no session
            async with client(None) as c:
                await c.list_tools()
        for who in ("reader", "writer", "admin"):
            async with client(tokens[who]) as c:
                for name, args, scope, where in TOOLS:
                    want = expected(who, scope, where)
                    before = snapshot(store_root) if want else None
                    result = await c.call_tool(name, args)
                    text = "".join(getattr(b, "text", "") for b in result.content)
                    if want is not None:
                        assert result.is_error, (who, name, args, text)
                        assert text.startswith("error: ") and ("token" in text), (who, name, text)
                        assert snapshot(store_root) == before, (who, name)
                    else:
                        assert "token" not in text.split("\n")[0] or not result.is_error, (
                            who,
                            name,
                            text,
                        )
            async with client(tokens["writer"]) as c:
                inside = await c.read_resource("memdir://files/episodes/e.md")
                assert "note" in inside.contents[0].text
                with pytest.raises(Exception, match="confined"):
                    await c.read_resource("memdir://HARNESS.md")

    raw = httpx.post(f"{live.url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert raw.status_code == 401 and raw.json()["error"]["code"] == "unauthorized"
    anyio.run(go)
    assert (store_root / "wiki/m.md").exists()  # the admin wrote it
