"""Bearer tokens: the pure rules, `memdir token`, and the auth matrix over HTTP and MCP."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from starlette.routing import Route

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


# -- the web UI ----------------------------------------------------------------------------
# Every UI page and action under every kind of caller: no token, a wrong one, a read token,
# a whole-store write token, a prefix token (write, wiki/kitchen/) and admin, each both as
# a bearer header and as a signed-in session. The prefix token's answers are then searched
# for anything outside its prefix.

SECRETS = ("swordfish", "private/vault.md", "How do I feed the starter", "vat.md")
"""Text only a caller who sees outside wiki/kitchen/ may meet: the vault's content and path,
a turn's input, the quarantined source."""


def ui_routes(store: Any) -> list[tuple[str, str, dict[str, str] | None, str, str]]:
    """(method, url, form, scope needed, where it reaches) for every UI page and action."""
    from helpers import git

    vault_sha = git(store.root, "log", "--format=%H", "-1", "--", "private/vault.md").strip()
    starter_sha = git(store.root, "log", "--format=%H", "-1", "--", "wiki/kitchen").strip()
    first = store.turns[0]
    rye = "/doc/wiki/kitchen/notes/rye.md"
    return [
        ("GET", "/", None, READ, INSIDE),
        ("GET", "/search?q=starter&mode=bm25", None, READ, INSIDE),
        ("GET", "/search?q=swordfish&mode=bm25", None, READ, INSIDE),
        ("GET", "/search?q=vault&prefix=private/", None, READ, OUTSIDE),
        ("GET", "/browse", None, READ, INSIDE),
        ("GET", "/browse?prefix=", None, READ, INSIDE),
        ("GET", "/browse?prefix=private/", None, READ, OUTSIDE),
        ("GET", rye, None, READ, INSIDE),
        ("GET", f"{rye}?commit={vault_sha}", None, READ, INSIDE),
        ("GET", f"/doc/wiki/kitchen/notes/starter.md?commit={starter_sha}", None, READ, INSIDE),
        ("GET", "/doc/private/vault.md", None, READ, OUTSIDE),
        ("GET", f"/doc/private/vault.md?commit={vault_sha}", None, READ, OUTSIDE),
        ("GET", "/thread/t1", None, READ, OUTSIDE),
        ("GET", f"/turn/{first}", None, READ, OUTSIDE),
        ("GET", f"/turn/{first}/worklog", None, READ, OUTSIDE),
        ("GET", "/coverage", None, READ, WHOLE),
        ("GET", "/graph", None, READ, INSIDE),
        ("GET", "/graph.json", None, READ, INSIDE),
        ("GET", "/graph.json?bundle=money", None, READ, INSIDE),
        ("GET", "/live", None, READ, INSIDE),
        ("GET", "/events?interval=0.1", None, READ, INSIDE),
        ("POST", "/coverage/release", {"path": "", "bundle": "money"}, WRITE, WHOLE),
    ]


@pytest.fixture
def ui_secured(tmp_path: Path) -> Iterator[tuple[Live, dict[str, str], Any]]:
    from uistore import OFFLINE, build

    store = build(tmp_path)
    tokens = {
        "reader": create_token(store.root, "viewer", "read"),
        "writer": create_token(store.root, "scribe", "write"),
        "prefix": create_token(store.root, "cook", "write", "wiki/kitchen/"),
        "admin": create_token(store.root, "boss", "admin"),
    }
    with live_server(store.root, OFFLINE, mcp=False) as live:
        yield live, tokens, store


def unreached(urls: list[str]) -> set[str]:
    """The UI routes none of ``urls`` reaches."""
    from memdir.http import ui

    out = set()
    for route in ui.routes():
        assert isinstance(route, Route)
        if not any(route.path_regex.match(urlsplit(u).path) for u in urls):
            out.add(route.path)
    return out


def ui_expected(who: str | None, scope: str, where: str) -> int | None:
    """The refusal a caller gets (None: it must get past auth)."""
    if who in (None, "wrong"):
        return 401
    have = {"reader": READ, "writer": WRITE, "prefix": WRITE, "admin": ADMIN}[who]
    if auth.SCOPES.index(have) < auth.SCOPES.index(scope):
        return 403
    if who == "prefix" and where != INSIDE:
        return 403
    return None


def ui_ask(
    client: httpx.Client, method: str, url: str, form: Any, origin: str
) -> tuple[int, httpx.Headers, str]:
    """(status, headers, body) of one request; of a live stream, its first event."""
    if url.startswith("/events"):
        with client.stream(method, url) as answer:
            if answer.status_code != 200:
                return answer.status_code, answer.headers, answer.read().decode()
            lines = [line for _, line in zip(range(2), answer.iter_lines(), strict=False)]
            return answer.status_code, answer.headers, "\n".join(lines)
    answer = client.request(method, url, data=form, headers={"Origin": origin})
    return answer.status_code, answer.headers, answer.text


def ui_callers(
    live: Live, tokens: dict[str, str]
) -> Iterator[tuple[str, str | None, httpx.Client]]:
    """(how, who, client): each caller by bearer header, then by sign-in session."""
    yield "nothing", None, live.client()
    yield "bearer", "wrong", live.client("mdt_wrong")
    yield (
        "session",
        "wrong",
        httpx.Client(base_url=live.url, cookies={"memdir_session": "forged"}, timeout=30),
    )
    for who in ("reader", "prefix", "writer", "admin"):
        yield "bearer", who, live.client(tokens[who])
        client = live.client()
        signed = client.post("/signin", data={"token": tokens[who]}, headers={"Origin": live.url})
        assert signed.status_code == 303, signed.text
        yield "session", who, client


def test_auth_matrix_over_the_ui(ui_secured: tuple[Live, dict[str, str], Any]) -> None:
    live, tokens, store = ui_secured
    [entry] = live.mem.quarantine_list()
    # every route of the UI is in the matrix but the open ones (sign-in, sign-out, assets)
    opened = {"/signin", "/signout", "/static/{name}"}
    assert unreached([url for _, url, *_ in ui_routes(store)]) <= opened
    checked = 0
    for how, who, client in ui_callers(live, tokens):
        with contextlib.closing(client):
            for method, url, fields, scope, where in ui_routes(store):
                form = {**fields, "path": entry["path"]} if fields is not None else None
                want = ui_expected(who, scope, where)
                before = snapshot(store.root)
                status, headers, body = ui_ask(client, method, url, form, live.url)
                label = f"{how} {who} {method} {url}"
                checked += 1
                assert status < 500, (label, body[:300])
                if want == 401 and method == "GET" and how != "bearer":
                    # a page asked for without a session goes to the sign-in form
                    assert status == 303, (label, status)
                    assert headers["location"].startswith("/signin?next=%2F"), label
                elif want == 403 and where == OUTSIDE and url.startswith(("/thread", "/turn")):
                    assert status in (403, 404), (label, status)
                elif want is not None:
                    assert status == want, (label, status, body)
                else:
                    assert status not in (401, 403), (label, body[:300])
                if want is not None:
                    assert snapshot(store.root) == before, f"{label} changed files"
                if who in (None, "wrong") or want is not None or who == "prefix":
                    text = body.replace(urlsplit(url).path.removeprefix("/doc/"), "")
                    for values in parse_qs(urlsplit(url).query).values():
                        text = text.replace(values[0], "")  # the caller's own words
                    leaked = [s for s in SECRETS if s in text]
                    assert not leaked, (label, leaked)
    assert checked == 11 * len(ui_routes(store))
    # the one write that got through: a whole-store writer released the source, as itself
    assert live.mem.quarantine_list() == []
    from helpers import git

    assert "scribe" in git(store.root, "log", "-1", "--format=%an")


def test_ui_state_changes_need_this_servers_origin(
    ui_secured: tuple[Live, dict[str, str], Any],
) -> None:
    live, tokens, store = ui_secured
    [entry] = live.mem.quarantine_list()
    form = {"path": entry["path"], "bundle": "money"}
    before = snapshot(store.root)
    refused = [
        {"Origin": "http://evil.test"},
        {"Origin": live.url.replace("127.0.0.1", "localhost")},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site", "Origin": live.url},
        {},  # a browser always sends one of them: neither is refused too
    ]
    with live.client(tokens["admin"]) as client:
        for headers in refused:
            for url, data in (
                ("/coverage/release", form),
                ("/signin", {"token": tokens["admin"]}),
                ("/signout", {}),
            ):
                answer = client.post(url, data=data, headers=headers)
                assert answer.status_code == 403, (url, headers, answer.text)
                assert "set-cookie" not in answer.headers, (url, headers)
        assert snapshot(store.root) == before and live.mem.quarantine_list() == [entry]
        done = client.post("/coverage/release", data=form, headers={"Origin": live.url})
        assert done.status_code == 303 and live.mem.quarantine_list() == []


def test_ui_without_tokens_serves_loopback_names_only(tmp_path: Path) -> None:
    from uistore import OFFLINE, build

    store = build(tmp_path)
    pages = ["/", "/search?q=starter", "/browse", "/doc/wiki/kitchen/notes/rye.md", "/coverage"]
    pages += [
        "/thread/t1",
        f"/turn/{store.turns[0]}",
        f"/turn/{store.turns[0]}/worklog",
        "/graph",
        "/graph.json",
        "/live",
    ]
    pages += ["/events", "/signin", "/static/ui.css"]
    assert not unreached(pages + ["/coverage/release", "/signout"])
    with live_server(store.root, OFFLINE, mcp=False) as live:
        for host in ("evil.test", "evil.test:80", "10.0.0.1", "localhost.evil.test"):
            with live.client(Host=host) as client:
                for url in pages:
                    answer = client.get(url)
                    assert answer.status_code == 403 and "loopback" in answer.text, (host, url)
                    assert "swordfish" not in answer.text
                posted = client.post(
                    "/coverage/release", data={"path": "x"}, headers={"Origin": f"http://{host}"}
                )
                assert posted.status_code == 403
        with live.client(Host="localhost") as client:
            assert client.get("/doc/private/vault.md").status_code == 200
