"""A real memdir server on a loopback port, for the HTTP and MCP tests."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from memdir.http.app import create_app
from memdir.service import Memory
from memdir.settings import load


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Live:
    url: str
    mem: Memory
    server: uvicorn.Server

    def client(self, token: str | None = None, **headers: str) -> httpx.Client:
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


@contextmanager
def serving(app: Any) -> Iterator[tuple[str, uvicorn.Server]]:
    """uvicorn serving ``app`` in a thread on a free loopback port; stopped gracefully after."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}", server
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        assert not thread.is_alive(), "server did not stop"


@contextmanager
def live_server(
    root: Path, overrides: dict[str, dict[str, Any]] | None = None, *, mcp: bool = True
) -> Iterator[Live]:
    """A memdir server for the store at ``root`` (see :func:`serving`)."""
    settings = load(root, overrides)
    mem = Memory.open(root, settings=settings)
    with serving(create_app(mem, mcp=mcp)) as (url, server):
        yield Live(url, mem, server)
