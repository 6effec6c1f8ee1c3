"""Many stores behind one server (memdir.http.stores): routes, tokens, MCP, config, bounds."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from helpers import create_token, ok, wait_for_health
from http_server import serving
from memdir.errors import ConfigError
from memdir.files.catalogue import Catalogue, parse_flags, read_config
from memdir.http.app import create_app
from memdir.http.command import server_settings
from memdir.http.stores import StoreRouter
from memdir.service import Memory

NOTE = "# {title}\n\n{body}\n"


def make_stores(tmp_path: Path, *names: str) -> dict[str, Path]:
    out = {}
    for name in names:
        root = tmp_path / name
        Memory.init(root).close()
        out[name] = root
    return out


def opener(name: str, path: Path) -> Any:
    found, settings = server_settings(str(path))
    settings = settings.replace(embeddings={"enabled": False})
    return create_app(Memory.open(found, settings=settings), mcp=True)


def write(client: httpx.Client, store: str, rel: str, body: str) -> httpx.Response:
    return client.put(
        f"/v1/stores/{store}/files/{rel}",
        json={"content": NOTE.format(title=rel, body=body)},
        headers={"X-Provenance": "run:test"},
    )


def hits(client: httpx.Client, store: str, q: str, **headers: str) -> list[str]:
    r = client.get(f"/v1/stores/{store}/search", params={"q": q, "mode": "bm25"}, headers=headers)
    assert r.status_code == 200, r.text
    return [h["path"] for h in r.json()]


def test_each_store_is_its_own_memory(tmp_path: Path) -> None:
    stores = make_stores(tmp_path, "alpha", "beta")
    router = StoreRouter(Catalogue(stores), opener)
    with serving(router) as (url, _), httpx.Client(base_url=url, timeout=30) as client:
        assert write(client, "alpha", "notes/a.md", "the axolotl").status_code in (200, 201)
        assert write(client, "beta", "notes/b.md", "the basilisk").status_code in (200, 201)
        assert hits(client, "alpha", "axolotl") == ["notes/a.md"]
        assert hits(client, "beta", "axolotl") == []
        assert hits(client, "beta", "basilisk") == ["notes/b.md"]
        r = client.get("/v1/stores/gamma/search", params={"q": "x"})
        assert r.status_code == 404 and r.json()["error"]["code"] == "store_not_found"
        r = client.get("/v1/search", params={"q": "x"})  # no one-store routes on this server
        assert r.status_code == 404
        assert client.get("/v1/health").json()["open"] == 2
    assert (stores["alpha"] / "notes/a.md").is_file() and not (
        stores["beta"] / "notes/a.md"
    ).exists()


def test_a_token_is_bound_to_its_store(tmp_path: Path) -> None:
    stores = make_stores(tmp_path, "alpha", "beta")
    token_a = create_token(stores["alpha"], "agent-a", "write")
    token_b = create_token(stores["beta"], "agent-b", "read")
    router = StoreRouter(Catalogue(stores), opener)
    with serving(router) as (url, _), httpx.Client(base_url=url, timeout=30) as client:
        auth_a = {"Authorization": f"Bearer {token_a}"}
        auth_b = {"Authorization": f"Bearer {token_b}"}
        r = client.get("/v1/stores/alpha/search", params={"q": "x"})
        assert r.status_code == 401  # the store has tokens: none given
        assert client.get("/v1/stores/alpha/ls", headers=auth_a).status_code == 200
        assert client.get("/v1/stores/beta/ls", headers=auth_a).status_code == 401
        assert client.get("/v1/stores/beta/ls", headers=auth_b).status_code == 200
        r = client.put(
            "/v1/stores/beta/files/notes/x.md",
            json={"content": "# x\n"},
            headers={**auth_b, "X-Provenance": "run:t"},
        )
        assert r.status_code == 403  # a read token of beta cannot write there


def test_mcp_per_store(tmp_path: Path) -> None:
    stores = make_stores(tmp_path, "alpha", "beta")
    with Memory.open(stores["beta"]) as mem:
        mem.write(
            "notes/only-beta.md", NOTE.format(title="B", body="the bonobo"), provenance="run:t"
        )
    router = StoreRouter(Catalogue(stores), opener)
    with serving(router) as (url, _):
        found_b = asyncio.run(_mcp_search(url, "beta"))
        found_a = asyncio.run(_mcp_search(url, "alpha"))
    assert [h["path"] for h in found_b] == ["notes/only-beta.md"]
    assert found_a == []


async def _mcp_search(url: str, store: str) -> Any:
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    transport = streamable_http_client(f"{url}/mcp/{store}", http_client=create_mcp_http_client())
    async with Client(transport) as client:
        return ok(await client.call_tool("search", {"query": "bonobo", "mode": "bm25"}))


def test_stores_added_and_removed_in_the_config_while_running(tmp_path: Path) -> None:
    stores = make_stores(tmp_path, "alpha", "beta")
    config = tmp_path / "server.toml"
    config.write_text('[stores]\nalpha = "alpha"\n')
    router = StoreRouter(Catalogue(config=config), opener, idle_seconds=3600)
    with serving(router) as (url, _), httpx.Client(base_url=url, timeout=30) as client:
        assert client.get("/v1/stores/alpha/ls").status_code == 200
        assert client.get("/v1/stores/beta/ls").status_code == 404
        config.write_text('[stores]\nbeta = "beta"\n')
        deadline = time.monotonic() + 10
        while client.get("/v1/stores/beta/ls").status_code != 200:
            assert time.monotonic() < deadline, "the new store was not picked up"
            time.sleep(0.2)
        assert client.get("/v1/stores/alpha/ls").status_code == 404
        deadline = time.monotonic() + 15  # the removed store is closed by the reaper
        while client.get("/v1/health").json()["open"] != 1:
            assert time.monotonic() < deadline, "the removed store stayed open"
            time.sleep(0.2)
        config.write_text("[stores\n")  # half written: what was read before stays
        time.sleep(1.2)
        assert client.get("/v1/stores/beta/ls").status_code == 200
    del stores


def test_a_bound_on_open_stores_and_idle_stores_closed(tmp_path: Path) -> None:
    names = [f"s{n}" for n in range(5)]
    stores = make_stores(tmp_path, *names)
    router = StoreRouter(Catalogue(stores), opener, max_open=2, idle_seconds=0.5)
    with serving(router) as (url, _), httpx.Client(base_url=url, timeout=30) as client:
        for name in names * 2:
            assert client.get(f"/v1/stores/{name}/ls").status_code == 200
            assert client.get("/v1/health").json()["open"] <= 2
        assert router.opened >= 5
        deadline = time.monotonic() + 10
        while client.get("/v1/health").json()["open"] != 0:
            assert time.monotonic() < deadline, "idle stores were not closed"
            time.sleep(0.1)


def test_hostile_names_and_config(tmp_path: Path) -> None:
    for bad in ("../x", "", ".", "a/b", "-x", "x" * 65, "a b"):
        with pytest.raises(ConfigError):
            parse_flags([f"{bad}=/tmp"])
    with pytest.raises(ConfigError):
        parse_flags(["a=/x", "a=/y"])
    with pytest.raises(ConfigError):
        parse_flags(["noequals"])
    bad = tmp_path / "bad.toml"
    bad.write_text('[stores]\n"../up" = "x"\n')
    with pytest.raises(ConfigError):
        read_config(bad)
    bad.write_text("[stores]\nx = 3\n")
    with pytest.raises(ConfigError):
        read_config(bad)
    router = StoreRouter(Catalogue(make_stores(tmp_path, "ok")), opener)
    with serving(router) as (url, _), httpx.Client(base_url=url, timeout=30) as client:
        for path in ("/v1/stores/..%2Fok/ls", "/v1/stores/%2e%2e/ls", "/mcp/../v1/stores/ok"):
            assert client.get(path).status_code == 404


def test_serve_with_store_flags(tmp_path: Path) -> None:
    stores = make_stores(tmp_path, "alpha", "beta")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    env = {**os.environ, "MEMDIR_EMBEDDINGS_ENABLED": "false"}
    env.pop("MEMDIR_ROOT", None)
    args = [sys.executable, "-m", "memdir", "serve", "--port", str(port)]
    for name, root in stores.items():
        args += ["--store", f"{name}={root}"]
    proc = subprocess.Popen(args, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        assert wait_for_health(url, proc).json()["stores"] == 2
        with httpx.Client(base_url=url, timeout=30) as client:
            assert write(client, "beta", "notes/b.md", "the binturong").status_code in (200, 201)
            assert hits(client, "beta", "binturong") == ["notes/b.md"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert (stores["beta"] / "notes/b.md").is_file()
    out = subprocess.run(
        [sys.executable, "-m", "memdir", "serve", "--store", "bad name=/tmp"],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2 and out.stderr.decode().startswith("error: store name")


def store_list(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memdir", "store", "list", "--stores-config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_store_list(tmp_path: Path) -> None:
    make_stores(tmp_path, "alpha")
    (tmp_path / "plain").mkdir()
    config = tmp_path / "server.toml"
    config.write_text('[stores]\nalpha = "alpha"\nplain = "plain"\ngone = "gone"\n')
    out = store_list(config)
    assert out.returncode == 0, out.stderr
    rows = [line.split("\t") for line in out.stdout.splitlines()]
    assert [(r[0], r[2]) for r in rows] == [
        ("alpha", "ok"),
        ("gone", "missing"),
        ("plain", "not a store"),
    ]
    config.write_text("[stores\n")
    out = store_list(config)
    assert out.returncode == 2 and out.stderr.startswith("error: ")
