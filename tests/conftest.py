"""Shared fixtures: real stores in tmp_path, real git, real SQLite."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
def kitchen(eng: Memory) -> Memory:
    """The engine's kitchen store: one bundle (helpers.BREAD routes to it, helpers.BROKEN does
    not parse)."""
    return eng


@pytest.fixture
def bare(tmp_path: Path) -> Iterator[Memory]:
    """An empty store without git or embeddings: for what reads the index alone."""
    root = Store.init(tmp_path / "s", git=False)
    overrides = {"embeddings": {"enabled": False}, "store": {"git_commit": False}}
    with Memory.open(root, overrides=overrides) as memory:
        yield memory


@pytest.fixture
def plain(tmp_path: Path) -> Iterator[Memory]:
    """A store without git, holding notes/a.md (a test module may define its own)."""
    root = Store.init(tmp_path / "s", git=False)
    with Memory.open(root, overrides={"store": {"git_commit": False}}) as memory:
        memory.write("notes/a.md", "# A\n\nThe kettle is descaled with vinegar.\n")
        yield memory


@pytest.fixture
def toy() -> Iterator[None]:
    """The toy embedders of helpers.py (letter counts, no model) registered as plugins."""
    from helpers import CALLS, ToyPlugin
    from memdir.providers.plugins import manager
    from memdir.vectors import embedder as embeddings

    plugin = ToyPlugin()
    manager().register(plugin)
    embeddings.clear_cache()
    CALLS.clear()
    yield
    manager().unregister(plugin)
    embeddings.clear_cache()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """One throwaway PostgreSQL with pgvector per test session (memdir.index.pglocal).

    Tests skip, saying why, when no such server can be had (`make postgres` provides one).
    """
    pytest.importorskip("psycopg", reason="the postgres extra (psycopg) is not installed")
    from memdir.index import pglocal

    try:
        server = pglocal.start()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"no PostgreSQL with pgvector: {exc}")
    yield server
    server.remove()
