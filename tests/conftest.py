"""Shared fixtures: real stores in tmp_path, real git, real SQLite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from memdir.files.store import Store
from memdir.service import Memory


@pytest.fixture(scope="session", autouse=True)
def _model_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Files made from installed models go to a folder of this run, not the user's cache."""
    before = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))
    yield
    if before is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = before


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    """A fresh memdir store (with its git repository)."""
    return Store.init(tmp_path / "store")


@pytest.fixture
def mem(store_root: Path) -> Iterator[Memory]:
    memory = Memory.open(store_root)
    yield memory
    memory.close()


@pytest.fixture
def eng(tmp_path: Path) -> Iterator[Memory]:
    """A store with one bundle, kitchen (a test module may define its own ``eng``)."""
    memory = Memory.open(Store.init(tmp_path / "store"))
    memory.bundle_add("kitchen", "baking bread, sourdough starter, flour, yeast, oven")
    yield memory
    memory.close()


@pytest.fixture
def plain(tmp_path: Path) -> Iterator[Memory]:
    """A store without git, holding notes/a.md (a test module may define its own)."""
    root = Store.init(tmp_path / "s", git=False)
    with Memory.open(root, overrides={"store": {"git_commit": False}}) as memory:
        memory.write("notes/a.md", "# A\n\nThe kettle is descaled with vinegar.\n")
        yield memory


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


@pytest.fixture
def toy() -> Iterator[None]:
    """The toy embedders of test_vectors (letter counts, no model) registered as plugins."""
    from memdir.providers.plugins import manager
    from memdir.vectors import embedder as embeddings
    from test_vectors import CALLS, ToyPlugin

    plugin = ToyPlugin()
    manager().register(plugin)
    embeddings.clear_cache()
    CALLS.clear()
    yield
    manager().unregister(plugin)
    embeddings.clear_cache()


def serve_process(root: Path, log: Path, **env: str) -> tuple[subprocess.Popen[bytes], str]:
    """``memdir serve`` in a subprocess on a free loopback port, answering; (process, url)."""
    import socket
    import time

    import httpx

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
