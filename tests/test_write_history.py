"""A write that replaces a document keeps the history it does not replace (derived-from,
merged-from), through the Python API, the CLI, HTTP PUT and MCP write."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import anyio.from_thread
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from helpers import run_cli
from http_server import live_server
from memdir.doc import frontmatter, provenance
from memdir.files.store import Store
from memdir.service import Memory

PAGE = "wiki/ops/deploys.md"
EPISODE = "episodes/operational/e1.md"
NO_VECTORS: dict[str, dict[str, Any]] = {"embeddings": {"enabled": False}}
FIRST = "# Deploys\n\nRoll back with the blue switch.\n"
SECOND = "---\ntitle: Deploys\n---\n# Deploys\n\nRoll back with the green switch.\n"
EXPLICIT = "---\nderived-from: []\n---\n# Deploys\n\nRewritten from scratch.\n"


class Driver(Protocol):
    def write(self, content: str, provenance: str) -> list[str]: ...  # -> replaced
    def merge(self) -> None: ...
    def coverage(self) -> float: ...


def _history(root: Path) -> tuple[list[str], list[str]]:
    """(derived-from ids, merged-from ids) of the page on disk."""
    fm = frontmatter.parse((root / PAGE).read_text(encoding="utf-8")).fm
    return (
        [f"{e['type']}:{e['id']}" for e in fm.get("derived-from") or []],
        [f"{e['type']}:{e['id']}" for e in fm.get("merged-from") or []],
    )


def _scenario(root: Path, driver: Driver) -> None:
    (root / EPISODE).write_text("---\nmemory_kind: episodic\nepisode_id: e1\n---\n# E1\n")
    assert driver.write(FIRST, "run:1") == []
    driver.merge()
    assert _history(root) == (["run:1"], ["episode:e1"])
    assert driver.coverage() == 100.0
    # a rewrite that leaves the history keys out keeps them and appends its provenance
    assert driver.write(SECOND, "run:2") == []
    assert _history(root) == (["run:1", "run:2"], ["episode:e1"])
    text = (root / PAGE).read_text(encoding="utf-8")
    assert text.startswith("---\ntitle: Deploys\n") and text.endswith("green switch.\n")
    assert driver.coverage() == 100.0
    # one that sets derived-from replaces it, and says so; merged-from is still kept
    assert driver.write(EXPLICIT, "run:3") == ["derived-from"]
    assert _history(root) == (["run:3"], ["episode:e1"])
    assert driver.coverage() == 100.0


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return Store.init(tmp_path / "s")


class ApiDriver:
    def __init__(self, mem: Memory) -> None:
        self.mem = mem

    def write(self, content: str, provenance: str) -> list[str]:
        return list(self.mem.write(PAGE, content, provenance=provenance).replaced)

    def merge(self) -> None:
        self.mem.merge(PAGE, episode="e1")

    def coverage(self) -> float:
        return self.mem.memory_report().coverage_pct


def test_python_api_keeps_history(root: Path) -> None:
    with Memory.open(root, overrides=NO_VECTORS) as mem:
        _scenario(root, ApiDriver(mem))


class CliDriver:
    def __init__(self, root: Path) -> None:
        self.root = str(root)

    def _run(self, *args: str) -> tuple[str, str]:
        done = run_cli("--root", self.root, *args, env={"MEMDIR_EMBEDDINGS_ENABLED": "false"})
        assert done.returncode == 0, done.stderr.decode()
        return done.stdout.decode(), done.stderr.decode()

    def write(self, content: str, provenance: str) -> list[str]:
        out, err = self._run("write", PAGE, "--text", content, "--provenance", provenance, "--json")
        replaced: list[str] = json.loads(out)["replaced"]
        assert ("note: the content set derived-from" in err) == bool(replaced), err
        return replaced

    def merge(self) -> None:
        self._run("merge", PAGE, "--episode", "e1")

    def coverage(self) -> float:
        out, _ = self._run("memory", "report", "--json")
        return float(json.loads(out)["coverage_pct"])


def test_cli_keeps_history(root: Path) -> None:
    _scenario(root, CliDriver(root))
    done = run_cli(
        "--root", str(root), "write", PAGE, "--text", EXPLICIT, "--provenance", "run:4",
        env={"MEMDIR_EMBEDDINGS_ENABLED": "false"},
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.decode().startswith(f"updated {PAGE}")
    assert "note: the content set derived-from, replacing" in done.stderr.decode()


class HttpDriver:
    def __init__(self, client: Any) -> None:
        self.http = client

    def write(self, content: str, provenance: str) -> list[str]:
        resp = self.http.put(
            f"/v1/files/{PAGE}", json={"content": content}, headers={"X-Provenance": provenance}
        )
        assert resp.status_code in (200, 201), resp.text
        replaced: list[str] = resp.json()["replaced"]
        return replaced

    def merge(self) -> None:
        resp = self.http.post("/v1/merge", json={"page": PAGE, "episode": "e1"})
        assert resp.status_code == 200, resp.text

    def coverage(self) -> float:
        resp = self.http.get("/v1/memory/report")
        assert resp.status_code == 200, resp.text
        return float(resp.json()["coverage_pct"])


def test_http_put_keeps_history(root: Path) -> None:
    with live_server(root, NO_VECTORS, mcp=False) as live, live.client() as http:
        _scenario(root, HttpDriver(http))


class McpDriver:
    def __init__(self, call: Callable[[str, dict[str, Any]], Any]) -> None:
        self.call = call

    def write(self, content: str, provenance: str) -> list[str]:
        result = self.call("write", {"path": PAGE, "content": content, "provenance": provenance})
        replaced: list[str] = result["replaced"]
        return replaced

    def merge(self) -> None:
        self.call("merge", {"page": PAGE, "episode": "e1"})

    def coverage(self) -> float:
        return float(self.call("memory_report", {})["coverage_pct"])


@contextmanager
def _mcp_calls(url: str) -> Iterator[Callable[[str, dict[str, Any]], Any]]:
    """A real MCP client session over streamable HTTP, driven from this thread."""
    with anyio.from_thread.start_blocking_portal() as portal:
        client = Client(streamable_http_client(f"{url}/mcp"))
        with portal.wrap_async_context_manager(client):

            def call(name: str, args: dict[str, Any]) -> Any:
                result = portal.call(client.call_tool, name, args)
                text = "".join(getattr(block, "text", "") for block in result.content)
                assert not result.is_error, text
                return json.loads(text)

            yield call


def test_mcp_write_keeps_history(root: Path) -> None:
    with live_server(root, NO_VECTORS) as live, _mcp_calls(live.url) as call:
        _scenario(root, McpDriver(call))


def test_concurrent_rewrites_lose_no_entry(root: Path) -> None:
    with Memory.open(root, overrides={"store": {"git_commit": False}, **NO_VECTORS}) as mem:
        mem.write(PAGE, FIRST, provenance="run:0")
        errors: list[BaseException] = []

        def rewrite(n: int) -> None:
            try:
                mem.write(PAGE, f"# Deploys\n\nVersion {n}.\n", provenance=f"run:{n}")
            except BaseException as exc:  # reported below, in the test's thread
                errors.append(exc)

        threads = [threading.Thread(target=rewrite, args=(n,)) for n in range(1, 9)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors
        derived, _merged = _history(root)
        assert sorted(derived) == sorted(f"run:{n}" for n in range(9))
        assert derived[0] == "run:0"


@pytest.mark.parametrize(
    ("old", "new", "derived", "merged", "replaced"),
    [
        # no file yet: only the new provenance
        (None, "# A\n", ["run:9"], [], ()),
        # a scalar of an unexpected shape is kept, first
        ("---\nderived-from: by hand\n---\n# A\n", "# A\n", ["by hand", "run:9"], [], ()),
        # an old block that does not parse keeps nothing
        ("---\nderived-from: [\n---\n# A\n", "# A\n", ["run:9"], [], ()),
        # merged-from set by the content replaces the file's; derived-from is kept
        (
            "---\nderived-from:\n  - {type: run, id: '1'}\n"
            "merged-from:\n  - {type: episode, id: a}\n---\n",
            "---\nmerged-from:\n  - {type: episode, id: b}\n---\n# A\n",
            ["run:1", "run:9"],
            ["episode:b"],
            ("merged-from",),
        ),
        # content that sets a key to what the file holds replaces nothing
        (
            "---\nmerged-from:\n  - {type: episode, id: a}\n---\n",
            "---\nmerged-from:\n  - {type: episode, id: a}\n---\n# A\n",
            ["run:9"],
            ["episode:a"],
            (),
        ),
    ],
)
def test_carry_history_cases(
    old: str | None, new: str, derived: list[str], merged: list[str], replaced: tuple[str, ...]
) -> None:
    entry = provenance.derived_entry("run", "9", "tester")
    text, said = provenance.carry_history(old, new, entry)
    fm = frontmatter.parse(text).fm

    def ids(key: str) -> list[str]:
        return [e if isinstance(e, str) else f"{e['type']}:{e['id']}" for e in fm.get(key) or []]

    assert (ids("derived-from"), ids("merged-from"), said) == (derived, merged, replaced)
    assert frontmatter.parse(text).body == frontmatter.parse(new).body
