"""Helpers and data shared by test modules (fixtures and hooks stay in conftest.py): the real
`memdir` command, git, the toy embedders, an MCP client, files compared byte for byte."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
import httpx
import numpy as np
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import CallToolResult

from memdir.cli import COMMANDS, cli
from memdir.errors import MissingExtra, ProviderError
from memdir.files.store import Store
from memdir.providers.plugins import hookimpl
from memdir.service import Memory
from memdir.vectors import embedder as emb


def run_cli(
    *args: str,
    cwd: Path | None = None,
    stdin: bytes | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run the real `memdir` command in a subprocess."""
    full_env = dict(os.environ)
    full_env.pop("MEMDIR_ROOT", None)
    if env:
        full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "memdir", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        env=full_env,
        check=False,
        timeout=120,
    )


def memdir_script(folder: Path) -> Path:
    """A `memdir` command in ``folder`` that runs this checkout, as an agent would start it."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "memdir"
    src = Path(__file__).resolve().parents[1] / "src"
    script.write_text(f'#!/bin/sh\nPYTHONPATH={src} exec {sys.executable} -m memdir "$@"\n')
    script.chmod(0o755)
    return script


def create_token(root: Path, name: str, scope: str, prefix: str | None = None) -> str:
    """A token made by the real `memdir token create`; returns the token itself."""
    args = ["token", "create", name, "--scope", scope, "--json"]
    if prefix:
        args += ["--prefix", prefix]
    result = run_cli(*args, cwd=root)
    assert result.returncode == 0, result.stderr
    return str(json.loads(result.stdout)["token"])


def committed(root: Path, folder: str = "") -> list[str]:
    """The paths under ``folder`` in the store's last git commit (not merely staged)."""
    args = ["git", "-C", str(root), "ls-tree", "-r", "--name-only", "HEAD"]
    out = subprocess.run(
        [*args, *([folder] if folder else [])], capture_output=True, text=True, check=True
    )
    return out.stdout.split()


def serve_process(root: Path, log: Path, **env: str) -> tuple[subprocess.Popen[bytes], str]:
    """``memdir serve`` in a subprocess on a free loopback port, answering; (process, url)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    full_env = dict(os.environ, MEMDIR_EMBEDDINGS_ENABLED="false", **env)
    full_env.pop("MEMDIR_ROOT", None)
    with log.open("ab") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memdir", "--root", str(root), "serve", "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=full_env,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}: {log.read_text()}")
        try:
            httpx.get(f"{url}/v1/health", timeout=5)
            return proc, url
        except httpx.TransportError:
            time.sleep(0.02)
    proc.kill()
    raise AssertionError("server did not answer")


@contextmanager
def killed_after(script: str, root: Path, line: bytes) -> Iterator[None]:
    """Run ``python -c script root`` until it prints ``line``, then SIGKILL it on leaving:
    a writer that dies holding what it wrote (its journal, its uncommitted files)."""
    env = dict(os.environ)
    env.pop("MEMDIR_ROOT", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(root)], stdout=subprocess.PIPE, env=env
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == line
        yield
    finally:
        proc.kill()
        proc.wait(timeout=30)


def files_of(root: Path) -> dict[str, bytes]:
    """The bytes of every file of the store under ``root`` outside ``.git/`` and ``.memdir/``,
    by path: what a refused request must leave as it was."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in (".git", ".memdir")]
        for name in filenames:
            path = Path(dirpath) / name
            out[str(path.relative_to(root))] = path.read_bytes()
    return out


def files_holding(root: Path, needle: str) -> list[str]:
    """Every file under ``root`` outside ``.git/`` whose bytes hold ``needle`` (as given or
    lower-cased, as the full-text index folds it)."""
    wanted = {needle.encode(), needle.lower().encode()}
    found: list[str] = []
    for folder, dirs, names in os.walk(root):
        if Path(folder) == root:
            dirs[:] = [d for d in dirs if d != ".git"]
        for name in names:
            path = Path(folder) / name
            data = path.read_bytes()
            if any(w in data for w in wanted):
                found.append(path.relative_to(root).as_posix())
    return sorted(found)


BREAD = (
    "# Sourdough starter care\n\nFeed the sourdough starter every day with equal weights of "
    "flour and water. A starter kept in the fridge needs feeding the day before baking bread.\n"
)


BROKEN = (
    "---\ntitle: [never closed\nbundle: kitchen\n---\n# Bread crust\n\nA hot oven with steam "
    "gives bread a crisp crust when baking.\n"
)


def git(root: Path, *args: str) -> str:
    """The output of ``git -C root args...`` (which must succeed)."""
    out = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
    )
    return out.stdout


# The toy embedders: letter counts, no model. CALLS holds the batch size of every embed call.
CALLS: list[int] = []


class Letters(emb.Embedder):
    """A deterministic toy embedder: letter counts (so 'sunrise' is near 'sunrises')."""

    dim = 26
    window = 64

    def __init__(self, model_id: str) -> None:
        self.model_id = model_id

    def embed(self, texts: Sequence[str]) -> Any:
        CALLS.append(len(texts))
        out = np.zeros((len(texts), 26), dtype=np.float32)
        for row, text in enumerate(texts):
            for ch in text.lower():
                if "a" <= ch <= "z":
                    out[row, ord(ch) - 97] += 1
        return emb.normalise(out)


class Wide(Letters):
    """Letter counts returned as float64, as a plugin built on numpy defaults may do."""

    def embed(self, texts: Sequence[str]) -> Any:
        return super().embed(texts).astype(np.float64)


class Short(Letters):
    """Rows one value short of the dimension the embedder declares."""

    def embed(self, texts: Sequence[str]) -> Any:
        return super().embed(texts)[:, :25]


class Flaky(Letters):
    """Works until the test takes its service away."""

    down = False

    def embed(self, texts: Sequence[str]) -> Any:
        if Flaky.down:
            raise ProviderError("embeddings provider 'flaky': connection refused")
        return super().embed(texts)


def _broken(settings: Any) -> emb.Embedder:
    raise MissingExtra("the toy model is not installed: pip install 'memdir[vectors]'")


class ToyPlugin:
    @hookimpl
    def register_embedders(self, register: Callable[[str, Callable[..., Any]], None]) -> None:
        register("letters", lambda settings: Letters("letters-v1"))
        register("letters2", lambda settings: Letters("letters-v2"))
        register("absent", _broken)
        register("wide", lambda settings: Wide("wide-v1"))
        register("flaky", lambda settings: Flaky("flaky-v1"))
        register("short", lambda settings: Short("short-v1"))


def text_of(result: CallToolResult) -> str:
    """The text an MCP tool answered."""
    return "".join(getattr(block, "text", "") for block in result.content)


def ok(result: CallToolResult) -> Any:
    """The JSON an MCP tool answered, which must not be an error."""
    assert not result.is_error, text_of(result)
    return json.loads(text_of(result))


def http_client(url: str, token: str | None = None) -> Client:
    """An MCP client over streamable HTTP to ``url``/mcp, with a bearer token if given."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    transport = streamable_http_client(
        f"{url}/mcp", http_client=create_mcp_http_client(headers=headers)
    )
    return Client(transport)


SOURCES = [
    (
        "starter.md",
        "# Sourdough starter care\n\nFeed the sourdough starter every day with equal weights "
        "of flour and water. A starter kept in the fridge needs feeding the day before baking "
        "bread.\n",
    ),
    (
        "crust.md",
        "# Bread crust\n\nA hot oven with steam gives bread a crisp crust when baking. Bake the "
        "loaf on a preheated stone so the flour crust sets quickly.\n",
    ),
    (
        "yeast.md",
        "# Dried yeast\n\nDried yeast keeps for months in a closed jar. Wake the yeast in warm "
        "water with a pinch of flour before baking bread dough.\n",
    ),
]


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file of the store a run may change (the derived index.db and locks aside)."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if not path.is_file() or rel.startswith(".git/"):
            continue
        if rel.startswith(".memdir/") and rel not in (".memdir/runs.tsv", ".memdir/config.toml"):
            continue
        out[rel] = path.read_bytes()
    return out


def folders(root: Path) -> set[str]:
    """Every folder of the store outside ``.git`` and ``.memdir``."""
    return {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_dir() and not p.relative_to(root).as_posix().startswith((".git", ".memdir"))
    }


def assert_untouched(mem: Memory, before: dict[str, bytes], dirs: set[str], head: str) -> None:
    """The store is as ``snapshot``, ``folders`` and git HEAD found it, and so is its index."""
    root = mem.root
    after = snapshot(root)
    assert sorted(set(after) - set(before)) == []  # no new file
    assert sorted(set(before) - set(after)) == []  # none gone (inbox sources stay)
    assert [p for p in before if before[p] != after[p]] == []  # byte-identical
    assert folders(root) == dirs  # no empty topic or dated folder left behind
    assert git(root, "status", "--porcelain", "--untracked-files=all") == ""
    assert git(root, "rev-parse", "HEAD") == head
    assert mem.index.compare().in_step
    # The derived index forgets whatever it saw of the failed run.
    indexed = {row[0] for row in mem.index.conn.execute("SELECT path FROM docs")}
    assert {p for p in indexed if p not in before} == set()
    inbox = sorted(p for p in before if p.startswith("inbox/") and p.endswith(".md"))
    unmerged = {e.path for e in mem.memory_report().unmerged}
    assert set(inbox) <= unmerged


def wait_for_health(url: str, proc: subprocess.Popen[bytes] | None = None) -> httpx.Response:
    """The first answer of ``url``/v1/health, within 60 s (failing early if ``proc`` exits)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}")
        try:
            return httpx.get(f"{url}/v1/health", timeout=5)
        except httpx.TransportError:
            time.sleep(0.01)
    raise AssertionError("server did not answer")


# No model: for tests about the command line, not about vectors.
OFFLINE = {"MEMDIR_EMBEDDINGS_ENABLED": "false"}


def every_command() -> list[tuple[str, click.Command]]:
    """Every command and subcommand of the CLI, by its full name (``turn record``)."""
    ctx = click.Context(cli)
    found: list[tuple[str, click.Command]] = []
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None
        found.append((name, command))
        if isinstance(command, click.Group):
            for sub in command.list_commands(ctx):
                child = command.get_command(ctx, sub)
                assert child is not None
                found.append((f"{name} {sub}", child))
    return found


NO_GIT: dict[str, Any] = {"store": {"git_commit": False}, "embeddings": {"enabled": False}}


def write_turn_page(
    mem: Memory, path: str, thread: str, user: str, created: str, said: str
) -> None:
    """A hand-written turn page (frontmatter and the three sections) at ``path``."""
    mem.write(
        path,
        f'---\ntype: turn\nmemory_kind: episodic\nthread: "{thread}"\nuser: "{user}"\n'
        f'created: "{created}"\n---\n\n## Input\n\n{said}\n\n## Compact\n\n- No tool calls.\n\n'
        "## Output\n\n\n",
    )


def open_turns_store(tmp_path: Path, **turns: Any) -> Memory:
    """A new store without git or vectors under ``tmp_path``, with these ``turns`` settings."""
    root = Store.init(tmp_path / "s", git=False)
    return Memory.open(root, overrides={**NO_GIT, "turns": turns} if turns else NO_GIT)


def error_of(response: httpx.Response) -> dict[str, str]:
    """The ``error`` of an HTTP answer, which must hold only a code and a message."""
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message"}, body
    return dict(body["error"])


def open_postgres(root: Path, dsn: str, store: str, **index: Any) -> Memory:
    """A store whose searches rank in Postgres under ``store`` (the toy letters embedder)."""
    overrides: dict[str, Any] = {
        "store": {"git_commit": False},
        "embeddings": {"provider": "letters"},
        "index": {"engine": "postgres", "dsn": dsn, "store": store, **index},
    }
    return Memory.open(root, overrides=overrides)


def postgres_of(mem: Memory) -> Any:
    """The store's Postgres engine (memdir.index.postgres.PgIndex); it must have one."""
    pg = mem.retrieval.pg
    assert pg is not None
    return pg
