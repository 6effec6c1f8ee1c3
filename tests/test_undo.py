"""An engine run whose process dies before it commits is put back when the store is next
opened (memdir.files.undo): a real consolidate, killed with SIGKILL by its own writer plugin."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import SOURCES, assert_untouched, folders, git, snapshot
from memdir.files import journal
from memdir.files.atomic import atomic_write
from memdir.files.store import Store
from memdir.files.undo import SUFFIX, Undo, recover
from memdir.service import Memory

# The child process: a writer plugin that kills its own process on its second draft, so
# the first source's article (and its folders) are on disk and nothing is committed.
KILLED_RUN = """
import os, signal, sys
from memdir.engine.writer import ExtractiveWriter
from memdir.providers.plugins import hookimpl, manager
from memdir.service import Memory

class Killer:
    name = "killer"
    calls = 0
    def __init__(self, settings=None):
        self.inner = ExtractiveWriter()
    def write(self, request):
        Killer.calls += 1
        if Killer.calls == int(sys.argv[2]):
            os.kill(os.getpid(), signal.SIGKILL)
        return self.inner.write(request)

class Plugin:
    @hookimpl
    def register_writers(self, register):
        register("killer", Killer)

manager().register(Plugin())
mem = Memory.open(sys.argv[1], overrides={"engine": {"writer": "killer"}})
mem.consolidate()
"""


def undo_files(root: Path) -> list[str]:
    where = journal.folder(root)
    return sorted(n for n in os.listdir(where) if n.endswith(SUFFIX)) if where.is_dir() else []


def kill_a_consolidate(root: Path, on_call: int = 2) -> None:
    command = [sys.executable, "-c", KILLED_RUN, str(root), str(on_call)]
    done = subprocess.run(command, capture_output=True, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = Store.init(tmp_path / "store")
    with Memory.open(root) as mem:
        mem.bundle_add("kitchen", "baking bread, sourdough starter, flour, yeast, oven")
        mem.ingest(SOURCES)
    return root


def test_a_consolidate_killed_mid_run_is_put_back_when_the_store_is_next_opened(
    store: Path, caplog: pytest.LogCaptureFixture
) -> None:
    before, dirs = snapshot(store), folders(store)
    head = git(store, "rev-parse", "HEAD")

    kill_a_consolidate(store)

    # The killed run left its first article and its folders, uncommitted, and its record.
    assert snapshot(store) != before
    assert folders(store) != dirs
    assert git(store, "status", "--porcelain", "--untracked-files=all") != ""
    assert len(undo_files(store)) == 1

    with caplog.at_level("WARNING", logger="memdir.undo"), Memory.open(store) as mem:
        assert_untouched(mem, before, dirs, head)
        assert undo_files(store) == []
    assert "consolidate stopped before it committed" in caplog.text

    # The inbox is whole, so the next run consolidates every source.
    with Memory.open(store) as mem:
        result = mem.consolidate()
    assert len(result["articles"]) == len(SOURCES)


def test_a_file_changed_after_the_killed_run_wrote_it_is_left_as_it_is(store: Path) -> None:
    before = snapshot(store)
    kill_a_consolidate(store)
    made = sorted(p for p in set(snapshot(store)) - set(before) if p.startswith("wiki/"))
    assert made
    edited = store / made[0]
    edited.write_text(edited.read_text(encoding="utf-8") + "\nA note added by hand.\n")

    Store(store, Memory.open(store).settings)  # opening recovers
    assert edited.read_text(encoding="utf-8").endswith("A note added by hand.\n")
    others = {p: b for p, b in snapshot(store).items() if p != made[0]}
    assert others == before  # everything else is back
    assert undo_files(store) == []


def test_a_run_that_commits_leaves_no_undo_file(store: Path) -> None:
    with Memory.open(store) as mem:
        mem.consolidate()
        assert undo_files(store) == []
    assert git(store, "status", "--porcelain") == ""


def test_the_undo_file_of_a_live_run_is_not_played_back(tmp_path: Path) -> None:
    root = Store.init(tmp_path / "store")
    target = root / "notes" / "a.md"
    undo = Undo(root)
    undo.keep_on_disk("ingest")
    undo.folder("notes")
    target.parent.mkdir()
    undo.file("notes/a.md", None, b"new\n")
    atomic_write(target, b"new\n")
    assert len(undo_files(root)) == 1

    assert recover(root, atomic_write) == []  # its owner holds the lock: alive
    assert target.read_bytes() == b"new\n"

    undo.release()  # as if the process had died
    [(verb, restored, kept)] = recover(root, atomic_write)
    assert (verb, restored, kept) == ("ingest", ["notes/a.md"], [])
    assert not target.exists() and not target.parent.exists()
    assert undo_files(root) == []


def test_a_torn_last_record_was_never_acted_on(tmp_path: Path) -> None:
    root = Store.init(tmp_path / "store")
    page = root / "page.md"
    page.write_bytes(b"first\n")
    undo = Undo(root)
    undo.keep_on_disk("reflect")
    undo.file("page.md", b"first\n", b"second\n")
    atomic_write(page, b"second\n")
    undo.line(".memdir/runs.tsv", "a row\n", created=True, header="head\n")
    (root / ".memdir" / "runs.tsv").write_text("head\na row\n")
    path = next(iter(journal.folder(root).glob(f"*{SUFFIX}")))
    undo.release()
    # A record cut short by the crash: written before its change, so the change never was.
    with open(path, "ab") as fh:
        fh.write(journal.frame({"file": "other.md", "after": [None], "before": 3}, b"abc")[:-2])

    [(_verb, restored, _kept)] = recover(root, atomic_write)
    assert restored == ["page.md"]
    assert page.read_bytes() == b"first\n"
    assert not (root / ".memdir" / "runs.tsv").exists()  # made by the run, only its row


def test_lines_appended_by_others_meanwhile_stay(tmp_path: Path) -> None:
    root = tmp_path
    log = root / "runs.tsv"
    log.write_text("head\nold\n")
    undo = Undo(root, durable=False)
    undo.line("runs.tsv", "mine\n", created=False, header="head\n")
    log.write_text("head\nold\nmine\ntheirs\n")
    undo.put_back(atomic_write)
    assert log.read_text() == "head\nold\ntheirs\n"
