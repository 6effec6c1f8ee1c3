"""Start-up of `memdir serve`: it listens before the API is loaded and loses nothing.

The server answers health while FastAPI, the routes and the service load in a
worker thread (memdir.http.serving.DeferredApp); every other request waits for
the API and gets the answer the API gives.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from helpers import run_cli, wait_for_health
from http_server import free_port, serving
from memdir.access import TokenRegistry
from memdir.http.app import create_api
from memdir.http.middleware import ServerMiddleware
from memdir.http.serving import DeferredApp
from memdir.service import Memory
from memdir.settings import load


def test_serve_subprocess_serves_every_part_after_a_fast_start(store_root: Path) -> None:
    made = run_cli("token", "create", "agent", "--scope", "write", cwd=store_root)
    assert made.returncode == 0, made.stderr
    token = made.stdout.decode().strip()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = store_root.parent / "serve.log"
    env = dict(os.environ, MEMDIR_EMBEDDINGS_ENABLED="false")
    env.pop("MEMDIR_ROOT", None)
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "memdir",
                "--root",
                str(store_root),
                "serve",
                "--port",
                str(port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
        )
    try:
        health = wait_for_health(url, proc)
        assert health.status_code == 200
        assert health.json() == {"status": "ok", "version": "0.1.0"}
        # right after the first answer: auth applies, and a write waits for the API
        assert httpx.get(f"{url}/v1/ls", timeout=30).status_code == 401
        auth = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=url, headers=auth, timeout=60) as client:
            written = client.put(
                "/v1/files/wiki/ops/start.md",
                json={"content": "# Start\n\nThe server listens before the API loads.\n"},
                headers={"X-Actor": "starter", "X-Provenance": "run:s1"},
            )
            assert written.status_code == 201, written.text
            assert "ETag" in written.headers
            hits = client.get("/v1/search", params={"q": "listens", "mode": "bm25"}).json()
            assert [h["path"] for h in hits][:1] == ["wiki/ops/start.md"]
            spec = client.get("/openapi.json").json()
            assert "/v1/search" in spec["paths"] and "/v1/turns" in spec["paths"]
            missing = client.get("/v1/nothing-here")
            assert missing.status_code == 404
            assert missing.json()["error"]["code"] == "not_found"
            assert client.get("/v1/health").json() == health.json()

        async def mcp_tools() -> set[str]:
            transport = streamable_http_client(
                f"{url}/mcp", http_client=create_mcp_http_client(headers=auth)
            )
            async with Client(transport) as session:
                return {t.name for t in (await session.list_tools()).tools}

        assert {"search", "write", "context"} <= anyio.run(mcp_tools)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code in (0, -signal.SIGTERM)  # uvicorn re-raises SIGTERM after a graceful stop
    text = log.read_text(errors="replace")
    assert "API loaded" in text
    assert 'actor=starter "PUT /v1/files/wiki/ops/start.md" 201' in text
    assert '"GET /v1/health" 200' in text
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=store_root, capture_output=True, check=True
    )
    assert status.stdout == b""  # the write was committed by the graceful shutdown


HEAVY_PREFIXES = ("fastapi", "pydantic", "mcp", "memdir.service", "memdir.engine", "memdir.index")

PROBE = """
import json, sys
import uvicorn

def run(self, sockets=None):
    app = self.config.app
    print(json.dumps({
        "app": [type(app).__name__, type(app.app).__name__],
        "loaded": sorted(m for m in sys.modules if m.startswith(tuple(sys.argv[2].split(",")))),
    }))

uvicorn.Server.run = run
from memdir.cli import cli
cli(["--root", sys.argv[1], "serve", "--port", "0"], standalone_mode=False)
"""


def test_serve_listens_before_importing_the_framework_or_the_service(store_root: Path) -> None:
    """The real serve command up to uvicorn's run: nothing heavy imported yet."""
    probe = subprocess.run(
        [sys.executable, "-c", PROBE, str(store_root), ",".join(HEAVY_PREFIXES)],
        capture_output=True,
        check=True,
        timeout=60,
    )
    seen = json.loads(probe.stdout)
    assert seen["app"] == ["ServerMiddleware", "DeferredApp"]
    assert seen["loaded"] == []
    # and the probe does see those modules once they are imported
    check = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, sys, memdir.http.app; print(json.dumps([*sys.modules]))",
        ],
        capture_output=True,
        check=True,
        timeout=60,
    )
    loaded = json.loads(check.stdout)
    assert {"fastapi", "pydantic", "memdir.service"} <= set(loaded)


@contextmanager
def deferred_server(
    store_root: Path, gate: threading.Event, *, fail: bool = False
) -> Iterator[tuple[str, DeferredApp, list[Exception]]]:
    """uvicorn in a thread serving a DeferredApp whose load waits for ``gate``."""
    settings = load(store_root, {"embeddings": {"enabled": False}})
    registry = TokenRegistry.from_settings([], config=store_root / ".memdir" / "config.toml")
    mem = Memory.open(store_root, settings=settings)

    def load_api() -> Any:
        assert gate.wait(30)
        if fail:
            mem.close()
            raise RuntimeError("the routes would not build")
        return create_api(mem, registry, mcp=False)

    failures: list[Exception] = []
    deferred = DeferredApp(load_api, on_failure=failures.append)
    app = ServerMiddleware(deferred, registry=registry, max_body_bytes=1 << 20)
    with serving(app) as (url, _server):
        try:
            yield url, deferred, failures
        finally:
            gate.set()  # a load still waiting must end before the server stops


def test_requests_wait_for_the_api_while_health_answers(store_root: Path) -> None:
    gate = threading.Event()
    with deferred_server(store_root, gate) as (url, deferred, failures):
        early = httpx.get(f"{url}/v1/health", timeout=5)
        assert early.status_code == 200
        assert deferred.app is None  # answered while the API is not loaded
        answers: list[httpx.Response] = []
        waiting = threading.Thread(
            target=lambda: answers.append(httpx.get(f"{url}/v1/ls", timeout=30))
        )
        waiting.start()
        waiting.join(0.5)
        assert waiting.is_alive() and not answers  # held until the API is loaded
        gate.set()
        waiting.join(30)
        assert answers[0].status_code == 200
        assert "index.md" in {row["path"] for row in answers[0].json()}
        late = httpx.get(f"{url}/v1/health", timeout=5)
        assert deferred.app is not None
        assert (late.status_code, late.content, late.headers["content-type"]) == (
            early.status_code,
            early.content,
            early.headers["content-type"],
        )
        assert httpx.head(f"{url}/v1/health", timeout=5).status_code == 405
        assert deferred.loaded_after_seconds is not None
        assert failures == []


def test_a_failed_load_answers_503_and_reports_it(store_root: Path) -> None:
    gate = threading.Event()
    with deferred_server(store_root, gate, fail=True) as (url, deferred, failures):
        gate.set()
        response = httpx.get(f"{url}/v1/ls", timeout=30)
        assert response.status_code == 503
        error = response.json()["error"]
        assert error["code"] == "unavailable"
        assert "the routes would not build" in error["message"]
        assert [str(e) for e in failures] == ["the routes would not build"]
        assert deferred.app is None


def test_serve_on_a_taken_port_fails_without_loading_the_api(store_root: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli("--root", str(store_root), "serve", "--port", str(port))
    assert result.returncode != 0  # uvicorn exits with its start-up failure code
    assert b"address already in use" in result.stderr.lower()
    assert b"API loaded" not in result.stderr
