"""One way to look a provider up: a configured provider that does not exist is an error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from helpers import run_cli
from memdir.errors import ConfigError
from memdir.files.store import Store
from memdir.providers import plugins
from memdir.service import Memory
from memdir.turns.compaction import compact_worklog

#: Each kind, its setting, and built-in providers its error must list.
BUILT_IN = {
    "embedder": ("embeddings", "provider", ["minilm", "openai"]),
    "reranker": ("rerank", "provider", ["http"]),
    "compactor": ("turns", "compactor", ["default", "llm"]),
    "writer": ("engine", "writer", ["extractive", "openai"]),
}


@pytest.mark.parametrize("kind", sorted(BUILT_IN))
def test_an_unknown_name_of_each_kind_names_it_and_what_is_registered(kind: str) -> None:
    section, key, known = BUILT_IN[kind]
    with pytest.raises(ConfigError) as err:
        plugins.factory(kind, "no-such-thing")
    message = str(err.value)
    label = plugins.KINDS[kind].label
    assert message.startswith(f"unknown {label} 'no-such-thing' in {section}.{key} (registered: ")
    assert all(name in message for name in known)
    # Every built-in is found by the same function.
    assert all(callable(plugins.factory(kind, name)) for name in known)


def _open(root: Path, section: str, values: dict[str, Any]) -> Memory:
    overrides: dict[str, dict[str, Any]] = {"store": {"git_commit": False}, section: values}
    if section != "embeddings":
        overrides["embeddings"] = {"enabled": False}
    return Memory.open(root, overrides=overrides)


def test_an_unknown_compactor_is_an_error_and_no_turn_is_written(tmp_path: Path) -> None:
    root = Store.init(tmp_path / "store", git=False)
    with _open(root, "turns", {"compactor": "summarise-please"}) as mem:
        with pytest.raises(ConfigError, match=r"unknown compactor 'summarise-please'.*default"):
            mem.record_turn(thread="t1", input="hello", output="hi")
        assert mem.thread("t1") == []
    assert [p.name for p in root.rglob("*.md") if "turns" in p.parts] == []
    # The Settings-level function says the same, instead of falling back to the default.
    settings = mem.settings
    with pytest.raises(ConfigError, match="unknown compactor 'summarise-please'"):
        compact_worklog([], input="x", output="y", settings=settings)


def test_an_unknown_compactor_stops_the_cli_with_config_error(tmp_path: Path) -> None:
    root = Store.init(tmp_path / "store", git=False)
    done = run_cli(
        "--root",
        str(root),
        "turn",
        "record",
        "--thread",
        "t1",
        "--input",
        "hello",
        "--output",
        "hi",
        env={"MEMDIR_TURNS_COMPACTOR": "summarise-please"},
    )
    assert done.returncode == 2, done.stderr
    assert b"unknown compactor 'summarise-please' in turns.compactor" in done.stderr


def test_an_unknown_writer_is_a_config_error_and_the_inbox_stays(tmp_path: Path) -> None:
    root = Store.init(tmp_path / "store")
    with Memory.open(root, overrides={"engine": {"writer": "poet"}}) as mem:
        mem.bundle_add("kitchen", "baking bread, sourdough starter, flour, yeast")
        mem.ingest([("bread.md", "# Starter\n\nFeed the sourdough starter with flour daily.\n")])
        waiting = sorted(p.name for p in (root / "inbox").rglob("*.md"))
        with pytest.raises(
            ConfigError, match=r"unknown writer 'poet' in engine.writer.*extractive"
        ):
            mem.consolidate()
    assert sorted(p.name for p in (root / "inbox").rglob("*.md")) == waiting != []


def test_an_unknown_embedder_and_reranker_stop_the_search(tmp_path: Path) -> None:
    root = Store.init(tmp_path / "store", git=False)
    with _open(root, "embeddings", {"provider": "word2vec"}) as mem:
        mem.write("notes/a.md", "# A\n\nmorning tea\n")
        with pytest.raises(ConfigError, match=r"unknown embeddings provider 'word2vec'.*minilm"):
            mem.search("morning", mode="vector")
    unknown = r"unknown rerank provider 'cross-encoder'.*http"
    with (
        _open(root, "rerank", {"provider": "cross-encoder"}) as mem,
        pytest.raises(ConfigError, match=unknown),
    ):
        mem.search("morning", mode="bm25")
