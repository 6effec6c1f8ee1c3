"""Cross-site requests: what a web page can make a browser send is refused.

A page may POST a form or ``text/plain`` anywhere without a preflight; browsers
mark such requests with ``Origin`` and ``Sec-Fetch-Site``. Non-browser clients
send neither and keep working; a page of the server's own origin does too.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from helpers import files_of, run_cli
from http_server import Live, live_server

ENGINE_POSTS = ["/v1/consolidate", "/v1/reflect", "/v1/refine", "/v1/reindex", "/v1/evaluate"]
EVIL = "http://evil.example"


@pytest.fixture
def live(store_root: Path) -> Iterator[Live]:
    added = run_cli("bundle", "add", "notes", "--scope", "notes and facts", cwd=store_root)
    assert added.returncode == 0, added.stderr
    with live_server(store_root, {"embeddings": {"enabled": False}}) as server:
        with server.client() as client:
            sources = [
                {"name": f"note-{n}.md", "content": f"# Note {n}\n\nfact {n}\n"} for n in range(3)
            ]
            assert client.post("/v1/ingest", json={"sources": sources}).status_code == 201
        yield server


@pytest.mark.parametrize("path", ENGINE_POSTS)
@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": EVIL, "Content-Type": "text/plain"},
        {"Origin": EVIL, "Content-Type": "application/json"},
        {"Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"},
        {"Origin": "null", "Content-Type": "application/x-www-form-urlencoded"},
    ],
    ids=["origin-text", "origin-json", "fetch-site", "null-origin-form"],
)
def test_a_cross_site_post_is_refused_and_writes_nothing(
    live: Live, store_root: Path, path: str, headers: dict[str, str]
) -> None:
    before = files_of(store_root)
    with live.client() as client:
        answer = client.post(path, content=b"{}", headers=headers)
    assert answer.status_code == 403, answer.text
    error = answer.json()["error"]
    assert error["code"] == "forbidden" and "cross-" in error["message"]
    assert files_of(store_root) == before


@pytest.mark.parametrize("path", ENGINE_POSTS)
def test_a_post_that_is_not_json_is_refused_without_an_origin(
    live: Live, store_root: Path, path: str
) -> None:
    before = files_of(store_root)
    with live.client() as client:
        answer = client.post(path, content=b"x=1", headers={"Content-Type": "text/plain"})
    assert answer.status_code == 415, answer.text
    assert answer.json()["error"]["code"] == "unsupported_media_type"
    assert "text/plain" in answer.json()["error"]["message"]
    assert files_of(store_root) == before


def test_same_origin_and_non_browser_clients_keep_working(live: Live, store_root: Path) -> None:
    own = {"Origin": live.url, "Sec-Fetch-Site": "same-origin"}
    with live.client() as client:
        page = client.put("/v1/files/notes/ui.md", json={"content": "# UI\n"}, headers=own)
        assert page.status_code == 201, page.text
        plain = client.post("/v1/consolidate")  # no body, no Origin: curl or the Python client
        assert plain.status_code == 200, plain.text
        assert plain.json()["articles"], plain.json()
        assert client.post("/v1/reindex", json={"full": False}, headers=own).status_code == 200
        assert client.get("/v1/ls", headers={"Origin": EVIL}).status_code == 200  # reads: CORS
    assert "# UI" in (store_root / "notes/ui.md").read_text()


def test_mcp_refuses_a_cross_origin_page(live: Live) -> None:
    """A page reached by DNS rebinding or on another origin must not drive the tools."""
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    accept = {"Accept": "application/json, text/event-stream"}
    for headers in ({"Origin": EVIL}, {"Sec-Fetch-Site": "cross-site"}):
        answer = httpx.post(f"{live.url}/mcp", json=ping, headers={**accept, **headers})
        assert answer.status_code == 403, answer.text
        assert answer.json()["error"]["code"] == "forbidden"
    answer = httpx.get(f"{live.url}/mcp", headers={**accept, "Origin": EVIL})
    assert answer.status_code == 403
