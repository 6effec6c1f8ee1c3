"""Stopping a server: immediate, with MCP mounted, and still graceful (writes committed)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from http_server import live_server

NO_VECTORS = {"embeddings": {"enabled": False}}


def test_a_server_with_mcp_stops_at_once_and_commits_its_writes(store_root: Path) -> None:
    """The MCP mount used to wait out its 5 s preload delay before the server could stop."""
    with live_server(store_root, NO_VECTORS, mcp=True) as live, live.client() as client:
        written = client.put("/v1/files/notes/stop.md", json={"content": "# Stop\n"})
        assert written.status_code == 201, written.text
        stopping = time.perf_counter()
    took = time.perf_counter() - stopping
    assert took < 2.0, f"stopping took {took:.2f}s"
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=store_root, capture_output=True, check=True
    )
    assert status.stdout == b""
    log = subprocess.run(
        ["git", "log", "-1", "--format=%s", "--", "notes/stop.md"],
        cwd=store_root,
        capture_output=True,
        check=True,
        text=True,
    )
    assert log.stdout.strip()
