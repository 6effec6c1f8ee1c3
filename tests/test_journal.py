"""The write-ahead journal: new files are durable after one sync, and a crash loses none."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import committed, killed_after
from memdir.files import journal
from memdir.files.store import Store
from memdir.service import Memory
from memdir.settings import load


def journals(root: Path) -> list[Path]:
    where = journal.folder(root)
    return sorted(where.glob("*.log")) if where.is_dir() else []


def test_new_files_are_journaled_synced_once_and_written_without_syncs(
    mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    real_fdatasync, real_fsync, real_replace = os.fdatasync, os.fsync, os.replace

    def fdatasync(fd: int) -> None:
        real_fdatasync(fd)
        events.append("sync " + os.readlink(f"/proc/self/fd/{fd}"))

    def fsync(fd: int) -> None:
        real_fsync(fd)
        events.append("sync " + os.readlink(f"/proc/self/fd/{fd}"))

    def replace(src: str, dst: str) -> None:
        real_replace(src, dst)
        events.append("rename " + str(dst))

    mem.store.write_files([("notes/warm.md", "# warm\n")])  # opens the journal
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    mem.store.write_files([("notes/t.worklog.jsonl", "{}\n"), ("notes/t.md", "# t\n")])
    syncs = [e for e in events if e.startswith("sync ")]
    assert len(syncs) == 1 and syncs[0].endswith(".log")  # the journal, nothing else
    # after the renames: no file is created while the journal's sync commits
    assert events.index(syncs[0]) > max(i for i, e in enumerate(events) if e.startswith("rename"))
    [log] = journals(mem.root)
    records = journal.decode(log.read_bytes())
    assert records[-1] == [("notes/t.worklog.jsonl", b"{}\n"), ("notes/t.md", b"# t\n")]
    events.clear()
    mem.close()
    assert journals(mem.root) == []  # synced and removed at close
    synced = {e.removeprefix("sync ") for e in events if e.startswith("sync ")}
    notes = str((mem.root / "notes").resolve())
    # a few files: each one and its folder, not the whole file system
    assert {f"{notes}/t.md", f"{notes}/t.worklog.jsonl", f"{notes}/warm.md", notes} <= synced


def test_a_record_turn_is_journaled(store_root: Path) -> None:
    mem = Memory.open(store_root)
    try:
        rec = mem.record_turn(thread="t", user="u", input="hello", output="hi")
        [log] = journals(store_root)
        [files] = journal.decode(log.read_bytes())
        assert rec.path in [rel for rel, _ in files]
    finally:
        mem.close()
    fast = Memory.open(store_root, overrides={"store": {"durability": "rename"}})
    try:
        fast.record_turn(thread="t", user="u", input="again", output="ok")
        assert journals(store_root) == []  # rename durability promises no sync
    finally:
        fast.close()


CRASH = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from memdir.files.store import Store
    from memdir.settings import load
    root = Path(sys.argv[1])
    store = Store(root, load(root))
    for n in range(5):
        store.write_files([(f"notes/c{n}.md", f"# crash {n}\\n" + "x" * 100)])
    os._exit(0)  # no close: the journal stays, as after a crash
    """
)


def crash_writer(root: Path) -> None:
    env = dict(os.environ)
    env.pop("MEMDIR_ROOT", None)
    done = subprocess.run([sys.executable, "-c", CRASH, str(root)], env=env, check=False)
    assert done.returncode == 0


def test_a_crashed_writers_journal_is_replayed(store_root: Path) -> None:
    crash_writer(store_root)
    [log] = journals(store_root)
    notes = store_root / "notes"
    # what a power loss may leave of writes that were never synced
    (notes / "c0.md").unlink()
    (notes / "c1.md").write_bytes(b"")
    (notes / "c2.md").write_bytes((notes / "c2.md").read_bytes()[:7])
    (notes / "c3.md").write_text("# edited after the write\n")  # newer: kept
    mem = Memory.open(store_root)
    try:
        for n in (0, 1, 2, 4):
            assert (notes / f"c{n}.md").read_text() == f"# crash {n}\n" + "x" * 100
        assert (notes / "c3.md").read_text() == "# edited after the write\n"
        assert not log.exists()
        assert [h.path for h in mem.search("crash", mode="bm25", limit=10)]
    finally:
        mem.close()
    tracked = committed(store_root, "notes")
    assert {f"notes/c{n}.md" for n in range(5)} <= set(tracked)  # the lost commits, made


def test_a_live_writers_journal_is_left_alone(store_root: Path) -> None:
    from memdir.settings import load

    writer = Store(store_root, load(store_root))
    writer.write_files([("notes/live.md", "# live\n")])
    (store_root / "notes" / "live.md").unlink()  # as if not yet on disk
    other = Store(store_root, load(store_root))  # opening must not replay a live journal
    try:
        assert not (store_root / "notes" / "live.md").exists()
        assert len(journals(store_root)) == 1
    finally:
        other.close()
        writer.close()


def test_a_torn_last_record_ends_the_replay() -> None:
    one = journal.encode([("a.md", b"A")])
    two = journal.encode([("b.md", b"B" * 50)])
    assert journal.decode(one + two) == [[("a.md", b"A")], [("b.md", b"B" * 50)]]
    assert journal.decode(one + two[:-3]) == [[("a.md", b"A")]]
    broken = bytearray(one + two)
    broken[-1] ^= 0xFF
    assert journal.decode(bytes(broken)) == [[("a.md", b"A")]]


HOLD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from memdir.files.store import Store
    from memdir.settings import load
    root = Path(sys.argv[1])
    store = Store(root, load(root))
    store.write_files([("notes/gone.md", "# to be deleted\\n"), ("notes/kept.md", "# kept\\n")])
    print("written", flush=True)
    time.sleep(120)  # alive, journal held, until killed
    """
)


def test_a_path_deleted_after_it_was_journaled_is_not_replayed(store_root: Path) -> None:
    with killed_after(HOLD, store_root, b"written\n"):  # its journal stays behind
        other = Store(store_root, load(store_root))
        other.delete("notes/gone.md")
        other.close()
    assert len(journals(store_root)) == 1
    (store_root / "notes" / "kept.md").unlink()  # as a power loss may leave it
    Memory.open(store_root).close()
    assert not (store_root / "notes" / "gone.md").exists()  # deleted stays deleted
    assert (store_root / "notes" / "kept.md").read_text() == "# kept\n"  # replayed
    assert journals(store_root) == []
    assert not (store_root / ".memdir" / "journal" / journal.TOMBSTONES).exists()
