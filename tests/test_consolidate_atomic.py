"""A consolidate run that fails part way leaves the store as it was (files, git, index), and
says what failed; ingest records derived-from only for a given provenance."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from helpers import SOURCES, assert_untouched, folders, git, snapshot
from memdir.doc import frontmatter
from memdir.engine import reflect
from memdir.engine.writer import Draft, ExtractiveWriter, WriteRequest
from memdir.errors import InvalidDocument, InvalidInput, MemdirError, ProviderError
from memdir.files.store import Store
from memdir.providers.plugins import hookimpl, manager
from memdir.service import Memory

MISFIT = ("vat.md", "The quarterly VAT return is due a month after the quarter ends.\n")


class Flaky:
    """A writer plugin: the extractive draft, except for one call, which ``spoil`` changes."""

    name = "flaky"
    spoil: Callable[[Draft], Draft] | None = None
    fail_on = 2
    calls = 0

    def __init__(self, settings: Any = None) -> None:
        self.inner = ExtractiveWriter()

    def write(self, request: WriteRequest) -> Draft:
        Flaky.calls += 1
        draft = self.inner.write(request)
        draft.by = "test/flaky"
        if Flaky.calls == Flaky.fail_on and Flaky.spoil is not None:
            return Flaky.spoil(draft)
        return draft


class FlakyPlugin:
    @hookimpl
    def register_writers(self, register: Callable[[str, Callable[..., Any]], None]) -> None:
        register(Flaky.name, Flaky)


@pytest.fixture
def flaky() -> Iterator[type[Flaky]]:
    plugin = FlakyPlugin()
    manager().register(plugin)
    Flaky.calls, Flaky.spoil, Flaky.fail_on = 0, None, 2
    yield Flaky
    manager().unregister(plugin)


@pytest.fixture
def eng(tmp_path: Path, flaky: type[Flaky]) -> Iterator[Memory]:
    root = Store.init(tmp_path / "store")
    mem = Memory.open(root, overrides={"engine": {"writer": "flaky"}})
    mem.bundle_add("kitchen", "baking bread, sourdough starter, flour, yeast, oven")
    mem.ingest(SOURCES)
    yield mem
    mem.close()


def state(mem: Memory) -> tuple[dict[str, bytes], set[str], str]:
    return snapshot(mem.root), folders(mem.root), git(mem.root, "rev-parse", "HEAD")


def with_nul(draft: Draft) -> Draft:
    """A draft the harness accepts but no store write does (a NUL byte in a claim)."""
    sentence, ids = draft.key_points[0]
    draft.key_points[0] = (sentence + " \x00", ids)
    return draft


def test_an_article_refused_late_leaves_the_store_as_it_was(
    eng: Memory, flaky: type[Flaky]
) -> None:
    flaky.spoil = with_nul
    before, dirs, head = state(eng)
    with pytest.raises(InvalidDocument) as err:
        eng.consolidate()
    assert flaky.calls == 2  # the first article was made before the second was refused
    message = str(err.value)
    assert message.startswith("consolidate failed and changed nothing")
    assert "NUL byte" in message and "wiki/kitchen/" in message
    assert_untouched(eng, before, dirs, head)


def test_a_writer_plugin_that_raises_is_named_and_nothing_is_filed(
    eng: Memory, flaky: type[Flaky]
) -> None:
    def boom(draft: Draft) -> Draft:
        raise RuntimeError("the model server went away")

    flaky.spoil = boom
    before, dirs, head = state(eng)
    with pytest.raises(ProviderError) as err:
        eng.consolidate()
    message = str(err.value)
    crust = next(p for p in before if p.endswith("-crust.md"))
    assert "writer 'flaky'" in message and crust in message
    assert "the model server went away" in message
    assert_untouched(eng, before, dirs, head)


def test_a_failure_after_the_articles_puts_back_quarantine_logs_and_runs(
    eng: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    eng.ingest([MISFIT])
    before, dirs, head = state(eng)

    def full_disk(**kwargs: Any) -> str:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(reflect, "render_snapshot", full_disk)
    with pytest.raises(MemdirError) as err:
        eng.consolidate()
    assert "No space left on device" in str(err.value)
    assert str(err.value).startswith("consolidate failed and changed nothing")
    assert_untouched(eng, before, dirs, head)
    # The failed run had moved the misfit and written every article: the same run, without
    # the fault, does so.
    monkeypatch.undo()
    done = eng.consolidate()
    assert [q["source"].endswith("-vat.md") for q in done["quarantined"]] == [True]
    assert len(done["articles"]) == len(SOURCES)
    assert git(eng.root, "status", "--porcelain", "--untracked-files=all") == ""


def test_a_run_after_a_failed_one_files_every_source_once(eng: Memory, flaky: type[Flaky]) -> None:
    flaky.spoil = with_nul
    with pytest.raises(InvalidDocument):
        eng.consolidate()
    flaky.spoil = None
    result = eng.consolidate()
    inbox = sorted(p.relative_to(eng.root).as_posix() for p in (eng.root / "inbox").glob("*.md"))
    assert len(result["articles"]) == len(inbox) == len(SOURCES)
    filed = [frontmatter.parse((eng.root / a).read_text()).fm for a in result["articles"]]
    assert sorted(fm["merged-from"][0]["path"] for fm in filed) == inbox
    assert all(fm["generated"]["by"] == "test/flaky" for fm in filed)
    assert git(eng.root, "status", "--porcelain", "--untracked-files=all") == ""
    changed = git(eng.root, "show", "--name-only", "--format=%s", "HEAD").split()
    assert set(result["articles"]) <= set(changed)
    assert eng.index.compare().in_step
    assert [e.path for e in eng.memory_report().unmerged if e.path.startswith("inbox/")] == []


def test_apply_with_a_second_article_no_write_accepts_files_nothing(eng: Memory) -> None:
    packet = eng.consolidate(plan=True)
    assert len(packet["items"]) == len(SOURCES)
    articles = [
        {
            "source": item["source"]["path"],
            "bundle": item["bundle"],
            "topic": item["topic"],
            "article": item["example_article"].replace("<agent>", "planner"),
        }
        for item in packet["items"]
    ]
    # A lone surrogate: valid JSON and harness-clean, but not Unicode text any file can hold.
    articles[1]["article"] = articles[1]["article"].replace("## Takeaways", "\ud800\n## Takeaways")
    before, dirs, head = state(eng)
    with pytest.raises(InvalidInput) as err:
        eng.consolidate(apply={"articles": articles})
    message = str(err.value)
    assert "articles[2]" in message and articles[1]["source"] in message
    assert "lone surrogate" in message and "articles[1]" not in message
    assert_untouched(eng, before, dirs, head)
    # The same packet, with the bad character gone, files all of it.
    articles[1]["article"] = articles[1]["article"].replace("\ud800", "")
    done = eng.consolidate(apply=json.loads(json.dumps({"articles": articles})))
    assert len(done["articles"]) == len(SOURCES)
    assert git(eng.root, "status", "--porcelain", "--untracked-files=all") == ""


def test_ingest_records_derived_from_only_with_a_provenance(eng: Memory) -> None:
    [plain] = eng.ingest([("plain.md", SOURCES[0][1])], actor="bot")
    fm = frontmatter.parse((eng.root / plain["path"]).read_text()).fm
    assert "derived-from" not in fm
    assert git(eng.root, "log", "-1", "--format=%an").strip() == "bot"
    [given] = eng.ingest([("given.md", SOURCES[0][1])], actor="bot", provenance="run:42")
    fm = frontmatter.parse((eng.root / given["path"]).read_text()).fm
    [entry] = fm["derived-from"]
    assert (entry["type"], entry["id"], entry["actor"]) == ("run", "42", "bot")


def test_ingest_of_a_source_too_large_once_stamped_files_none(tmp_path: Path) -> None:
    root = Store.init(tmp_path / "store")
    mem = Memory.open(root, overrides={"store": {"max_file_bytes": 2000}})
    try:
        mem.sync()
        before, dirs, head = state(mem)
        big = "Flour and water make a starter. " * 60  # under the limit, over it with frontmatter
        assert len(big.encode()) <= 2000
        with pytest.raises(MemdirError) as err:
            mem.ingest([("small.md", SOURCES[0][1]), ("big.md", big)], provenance="run:7")
        assert str(err.value).startswith("ingest failed and changed nothing")
        assert "over the limit of 2000 bytes" in str(err.value)
        assert snapshot(root) == before and folders(root) == dirs
        assert git(root, "status", "--porcelain", "--untracked-files=all") == ""
        assert git(root, "rev-parse", "HEAD") == head and mem.index.compare().in_step
    finally:
        mem.close()


def test_reflect_that_fails_late_unstamps_and_restores_lessons(
    eng: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(2):
        eng.episode_add(kind="signal", situation=f"asked for grams {n}", insights=["Use grams."])
    eng.reflect()
    before, dirs, head = state(eng)
    later = reflect.now_utc() + timedelta(days=30)

    def full_disk(**kwargs: Any) -> str:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(reflect, "render_snapshot", full_disk)
    with pytest.raises(MemdirError) as err:
        eng.reflect(now=later)
    assert str(err.value).startswith("reflect failed and changed nothing")
    assert_untouched(eng, before, dirs, head)
    monkeypatch.undo()
    done = eng.reflect(now=later)  # without the fault, the same run stamps one episode
    assert len(done["distilled"]) == 1
    assert git(eng.root, "status", "--porcelain", "--untracked-files=all") == ""
