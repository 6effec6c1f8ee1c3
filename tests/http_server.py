"""Loopback servers for the tests: a real memdir server (HTTP and MCP tests), and the
model services (chat, embeddings, rerank) that tests imitate with ``fake_service``."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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


class ServiceHandler(BaseHTTPRequestHandler):
    """Base of an imitated model service: reads and answers JSON, logs nothing."""

    def read_json(self) -> Any:
        return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

    def send_json(self, payload: Any, status: int = 200) -> None:
        self.send_bytes(json.dumps(payload).encode(), status, "application/json")

    def send_bytes(self, data: bytes, status: int = 200, kind: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass

    def note_or_refuse(self, body: Any, seen: list[dict[str, Any]]) -> bool:
        """Note the request in ``seen``; while the class's ``busy`` lasts, answer it with a
        503 instead (True: answered, the caller stops)."""
        seen.append(
            {
                "path": self.path,
                "body": body,
                "auth": self.headers.get("Authorization"),
                "agent": self.headers.get("User-Agent"),
            }
        )
        if getattr(self, "busy", 0):
            type(self).busy -= 1  # type: ignore[attr-defined]
            self.send_bytes(b"overloaded", 503)
            return True
        return False


@contextmanager
def fake_service(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """``handler`` served on a free loopback port; yields ``http://127.0.0.1:PORT``."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
