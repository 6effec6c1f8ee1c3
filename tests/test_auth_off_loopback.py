"""Auth never switches itself off for a client off this machine.

A server listening off loopback keeps requiring a token after the last one is
revoked or the config is lost; a client whose address is not loopback needs a
token even on a server that has none. Both are decided from addresses (the bound
one and the peer's), never from the Host header.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx

from helpers import create_token, run_cli
from http_server import free_port
from memdir.http.app import create_app
from memdir.service import Memory


def _wait_for_health(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"server exited with {proc.returncode}"
        try:
            httpx.get(f"{url}/v1/health", timeout=5)
            return
        except httpx.TransportError:
            time.sleep(0.02)
    raise AssertionError("server did not answer")


def test_a_public_server_keeps_auth_after_the_last_token_and_the_config_go(
    store_root: Path,
) -> None:
    (store_root / "notes").mkdir()
    (store_root / "notes/keep.md").write_text("# Keep\n\nstill here\n")
    token = create_token(store_root, "ops", "admin")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "MEMDIR_ROOT"}
    env["MEMDIR_EMBEDDINGS_ENABLED"] = "false"
    command = [sys.executable, "-m", "memdir", "--root", str(store_root), "serve"]
    proc = subprocess.Popen(
        [*command, "--host", "0.0.0.0", "--port", str(port), "--no-mcp"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    purge = {"path": "notes/keep.md", "purge": True}
    try:
        _wait_for_health(url, proc)
        with httpx.Client(base_url=url, timeout=60) as client:
            headers = {"Authorization": f"Bearer {token}"}
            assert client.get("/v1/ls", headers=headers).status_code == 200
            assert run_cli("token", "revoke", "ops", cwd=store_root).returncode == 0
            for answer in (client.get("/v1/ls"), client.post("/v1/forget", json=purge)):
                assert answer.status_code == 401, answer.text
                assert answer.json()["error"]["code"] == "unauthorized"
            (store_root / ".memdir/config.toml").unlink()
            gone = client.post("/v1/forget", json=purge, headers={"Host": "localhost"})
            assert gone.status_code == 401, gone.text
            assert client.get("/v1/health").status_code == 200  # health stays open
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert (store_root / "notes/keep.md").read_text() == "# Keep\n\nstill here\n"


def _get(mem: Memory, client_address: str, path: str, **headers: str) -> httpx.Response:
    """One request through the real app, from a client at ``client_address``."""
    transport = httpx.ASGITransport(app=create_app(mem, mcp=False), client=(client_address, 40000))

    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
            return await c.get(path, headers=headers)

    return anyio.run(go)


def test_a_client_off_loopback_needs_a_token_even_when_the_store_has_none(mem: Memory) -> None:
    mem.write("notes/a.md", "# A\n\nalpha\n")
    local = _get(mem, "127.0.0.1", "/v1/ls")
    assert local.status_code == 200 and "notes/a.md" in [r["path"] for r in local.json()]
    remote = _get(mem, "203.0.113.9", "/v1/ls", Host="localhost")  # a loopback Host claim
    assert remote.status_code == 401, remote.text
    assert remote.json()["error"]["code"] == "unauthorized"
    assert _get(mem, "203.0.113.9", "/v1/files/notes/a.md").status_code == 401
    assert _get(mem, "203.0.113.9", "/v1/health").json()["status"] == "ok"
