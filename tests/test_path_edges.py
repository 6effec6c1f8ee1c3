"""Paths at the edges of what a file system holds, through the Python API, the CLI and a real
server on loopback: long names, long paths, folders where files go, files where folders go,
symlink loops, private folders spelled another way. Each is a clear error or a write that
works, never an OSError (a traceback in the CLI, a 500 over HTTP)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from helpers import run_cli
from http_server import Live, live_server
from memdir.errors import Conflict, NotFound, UnsafePath
from memdir.service import Memory

NO_VECTORS: dict[str, dict[str, Any]] = {"embeddings": {"enabled": False}}


@pytest.fixture
def live(store_root: Path) -> Iterator[Live]:
    with live_server(store_root, NO_VECTORS, mcp=False) as server:
        yield server


def code_of(response: httpx.Response) -> str:
    return str(response.json()["error"]["code"])


def long_path(root: Path) -> str:
    """A store-relative path of names under 255 bytes whose full path passes 4096 bytes."""
    folders = (4200 - len(os.fsencode(root))) // 201 + 1
    return "/".join(["d" * 200] * folders) + "/x.md"


def test_a_name_of_255_bytes_is_written_read_and_listed(plain: Memory) -> None:
    """The temp file beside it has a name of its own that must fit as well."""
    name = "n" * 252 + ".md"
    result = plain.write(f"notes/{name}", "# Long\n\nA name as long as the disk allows.\n")
    assert result.path == f"notes/{name}" and result.created
    assert plain.read(f"notes/{name}").content.startswith("# Long")
    assert f"notes/{name}" in [row["path"] for row in plain.ls("notes/")]
    wide = "é" * 126 + ".md"  # two bytes a character: 255 bytes
    assert plain.write(f"notes/{wide}", "# Wide\n").path == f"notes/{wide}"
    assert [p.name for p in (plain.root / "notes").iterdir() if p.name.endswith(".tmp")] == []


def test_a_path_longer_than_the_file_system_allows_is_unsafe(plain: Memory) -> None:
    rel = long_path(plain.root)
    with pytest.raises(UnsafePath, match="too long"):
        plain.write(rel, "# X\n")
    with pytest.raises(UnsafePath, match="too long"):
        plain.read(rel)
    with pytest.raises(UnsafePath, match="too long"):
        plain.forget(rel)
    with pytest.raises(UnsafePath, match="too long"):
        plain.merge(rel, episode="e1")


def test_a_folder_where_the_file_goes_is_a_conflict(plain: Memory) -> None:
    (plain.root / "notes" / "dir.md").mkdir()
    with pytest.raises(Conflict, match="notes/dir.md is a folder"):
        plain.write("notes/dir.md", "# X\n")
    with pytest.raises(Conflict, match="is a folder"):
        plain.store.write_files([("notes/dir.md", "# X\n")])
    assert (plain.root / "notes" / "dir.md").is_dir()
    assert [p.name for p in (plain.root / "notes").iterdir() if p.name.endswith(".tmp")] == []


def test_reading_below_a_file_is_not_found(plain: Memory) -> None:
    with pytest.raises(NotFound):
        plain.read("notes/a.md/b.md")


def test_a_symlink_loop_is_an_unsafe_path(plain: Memory) -> None:
    os.symlink("loop2", plain.root / "loop1")
    os.symlink("loop1", plain.root / "loop2")
    os.symlink("self.md", plain.root / "notes" / "self.md")
    for rel in ("loop1", "loop1/x.md", "notes/self.md"):
        with pytest.raises(UnsafePath, match="symlink loop"):
            plain.read(rel)
    for rel in ("loop1/x.md", "notes/self.md"):
        with pytest.raises(UnsafePath, match="symlink loop"):
            plain.write(rel, "# X\n")
    assert os.path.islink(plain.root / "notes" / "self.md")


@pytest.mark.parametrize("rel", [".GIT/config", ".Git/HEAD", ".git./config", ".MEMDIR/x.md"])
def test_a_private_folder_in_another_case_is_refused(plain: Memory, rel: str) -> None:
    """On a file system that ignores case (macOS, Windows) .GIT is .git."""
    with pytest.raises(UnsafePath, match="private folder"):
        plain.read(rel)
    with pytest.raises(UnsafePath, match="private folder"):
        plain.write(rel if rel.endswith(".md") else rel + ".md", "# X\n")


def test_the_cli_answers_odd_paths_with_one_line_errors(store_root: Path) -> None:
    (store_root / "wiki" / "dir.md").mkdir()
    os.symlink("loop2", store_root / "loop1")
    os.symlink("loop1", store_root / "loop2")
    cases = [
        (["write", long_path(store_root)], "too long"),
        (["write", "wiki/dir.md"], "is a folder"),
        (["write", "n" * 252 + ".md"], None),
        (["read", "index.md/x.md"], "no such file"),
        (["read", "loop1/x.md"], "symlink loop"),
    ]
    for args, message in cases:
        done = run_cli("--root", str(store_root), *args, stdin=b"# X\n")
        if message is None:
            assert done.returncode == 0, done.stderr
            continue
        assert done.returncode != 0
        err = done.stderr.decode()
        assert "Traceback" not in err, err
        assert message in err and err.startswith("error:"), err


def test_odd_paths_over_http_are_client_errors(live: Live, store_root: Path) -> None:
    (store_root / "wiki" / "dir.md").mkdir()
    os.symlink("loop2", store_root / "loop1")
    os.symlink("loop1", store_root / "loop2")
    doc = {"content": "# X\n"}
    with live.client() as client:
        name = "n" * 252 + ".md"
        written = client.put(f"/v1/files/wiki/{name}", json=doc)
        assert written.status_code == 201, written.text
        assert client.get(f"/v1/files/wiki/{name}").json()["content"] == "# X\n"
        far = long_path(store_root)
        for response, status, code in [
            (client.put(f"/v1/files/{far}", json=doc), 400, "unsafe_path"),
            (client.get(f"/v1/files/{far}"), 400, "unsafe_path"),
            (client.put("/v1/files/wiki/dir.md", json=doc), 409, "conflict"),
            (client.get(f"/v1/files/wiki/{name}/x.md"), 404, "not_found"),
            (client.get("/v1/files/loop1"), 400, "unsafe_path"),
            (client.get("/v1/files/loop1/x.md"), 400, "unsafe_path"),
            (client.get("/v1/files/.GIT/config"), 400, "unsafe_path"),
        ]:
            assert (response.status_code, code_of(response)) == (status, code), response.text


def test_the_access_log_shows_control_characters_escaped(
    live: Live, caplog: pytest.LogCaptureFixture
) -> None:
    """A path is percent-decoded before it is logged: %0a must not start a forged line."""
    caplog.set_level(logging.INFO, logger="memdir.access")
    with live.client() as client:
        client.get("/v1/files/wiki/x%0a127.0.0.1 token=admin%1b[2J.md")
    lines: list[str] = []
    deadline = time.monotonic() + 5  # the line is written once the answer is sent
    while not lines and time.monotonic() < deadline:
        lines = [r.getMessage() for r in caplog.records if r.name == "memdir.access"]
        time.sleep(0.02)
    assert len(lines) == 1, lines
    assert "\n" not in lines[0] and "\x1b" not in lines[0], lines
    assert "/v1/files/wiki/x\\n127.0.0.1 token=admin\\x1b[2J.md" in lines[0], lines


@pytest.mark.parametrize("private", [".memdir/config.toml", ".git/config", ".git/HEAD"])
def test_a_symlink_into_a_private_folder_is_never_indexed(plain: Memory, private: str) -> None:
    """``read`` refuses the link (its real path is private), so search, grep and ls must not
    show it either: .git/config can hold a remote's credentials, config.toml the tokens."""
    real = plain.root / private
    real.parent.mkdir(exist_ok=True)
    with real.open("a") as handle:
        handle.write("\nzebrafish = 1\n")
    (plain.root / "notes" / "leak.md").symlink_to(os.path.relpath(real, plain.root / "notes"))
    plain.sync(force=True)
    assert "notes/leak.md" not in [row["path"] for row in plain.ls()]
    assert plain.search("zebrafish", mode="bm25") == []
    assert plain.grep("zebrafish") == [] and plain.grep("kettle")
    plain.index.sync_paths(["notes/leak.md"])  # as the watcher would, for a new path
    assert "notes/leak.md" not in [row["path"] for row in plain.ls()]
    with pytest.raises(UnsafePath, match="private folder"):
        plain.read("notes/leak.md")
