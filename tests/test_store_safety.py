"""What memdir refuses or repairs: inputs found by fuzzing the CLI and the HTTP API."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from helpers import run_cli
from memdir.documents import grep as service
from memdir.errors import (
    ConfigError,
    Conflict,
    InvalidDocument,
    InvalidInput,
    InvalidQuery,
    TooLarge,
    UnsafePath,
)
from memdir.files.store import Store
from memdir.service import Memory


def test_engine_writes_reach_the_index_within_the_command(store_root: Path) -> None:
    """A command syncs once when it starts; what the engine writes after must be indexed too."""
    source = store_root.parent / "src1.md"
    source.write_text("# Kettles\n\nDescale a kettle with vinegar.\n")
    ingested = run_cli("--root", str(store_root), "ingest", str(source))
    assert ingested.returncode == 0, ingested.stderr
    doctor = run_cli("--root", str(store_root), "doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    with Memory.open(store_root) as mem:
        mem.sync_once()  # as a command does: no later walk
        mem.bundle_add("kitchen", "kettles, descaling")
        done = mem.consolidate()
        assert done["commit"]
        indexed = {r[0] for r in mem.index.conn.execute("SELECT path FROM docs")}
        on_disk = {
            p.relative_to(store_root).as_posix()
            for p in store_root.rglob("*.md")
            if not any(part.startswith(".") for part in p.relative_to(store_root).parts)
        }
        assert on_disk <= indexed, on_disk - indexed
    doctor = run_cli("--root", str(store_root), "doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr


def test_a_symlink_out_of_the_store_is_never_indexed(plain: Memory, tmp_path: Path) -> None:
    secret = tmp_path / "secret.md"
    secret.write_text("# Secret\n\nroot:x:0:0 zebrafish\n")
    (plain.root / "notes" / "leak.md").symlink_to(secret)
    (plain.root / "notes" / "alias.md").symlink_to(plain.root / "notes" / "a.md")
    plain.sync(force=True)
    indexed = {r[0] for r in plain.index.conn.execute("SELECT path FROM docs")}
    assert "notes/leak.md" not in indexed and "notes/alias.md" in indexed
    assert plain.search("zebrafish", mode="bm25") == []
    assert plain.grep("zebrafish") == [] and plain.grep("kettle")
    plain.index.sync_paths(["notes/leak.md"])  # as the watcher would, for a new path
    assert (
        plain.index.conn.execute("SELECT 1 FROM docs WHERE path = 'notes/leak.md'").fetchone()
        is None
    )
    with pytest.raises(UnsafePath):
        plain.read("notes/leak.md")


def test_forget_and_merge_touch_only_memory_documents(plain: Memory) -> None:
    (plain.root / "notes" / "plain.txt").write_text("data\n")
    for call in (
        lambda: plain.forget(".gitignore"),
        lambda: plain.forget("notes/plain.txt", purge=True),
        lambda: plain.merge(".gitignore", episode="e1"),
        lambda: plain.forget("HARNESS.md", reason="x"),
        lambda: plain.forget("PROGRAM.md", purge=True),
        lambda: plain.merge("HARNESS.md", episode="e1"),
        lambda: plain.forget("notes"),
    ):
        with pytest.raises(InvalidInput):
            call()
    assert (plain.root / "notes" / "plain.txt").read_text() == "data\n"
    assert (plain.root / "HARNESS.md").is_file() and (plain.root / "PROGRAM.md").is_file()
    assert not (plain.root / ".gitignore").read_text().startswith("---")


@pytest.mark.parametrize(
    "fields",
    [
        {"episode": "\ud800"},
        {"episode": "e\x00"},
        {"episode": "e1", "type": "run\nx"},
        {"episode": "e1", "note": "\ud800"},
        {"path": "../../etc/passwd"},
        {"path": "/abs.md"},
    ],
)
def test_merge_refuses_what_it_cannot_record(plain: Memory, fields: dict[str, str]) -> None:
    before = (plain.root / "notes" / "a.md").read_bytes()
    with pytest.raises((InvalidInput, UnsafePath)):
        plain.merge("notes/a.md", **fields)
    assert (plain.root / "notes" / "a.md").read_bytes() == before


def test_text_that_is_not_unicode_is_refused_before_anything_is_written(plain: Memory) -> None:
    before = sorted(p.relative_to(plain.root) for p in plain.root.rglob("*") if p.is_file())
    with pytest.raises(InvalidDocument):
        plain.write("notes/b.md", "# B\n\n\ud800\n")
    with pytest.raises(InvalidInput):
        plain.record_turn(thread="t", input="\ud800", output="x")
    with pytest.raises(InvalidInput):
        plain.record_turn(thread="t", input="x", parents=["\ud800"])
    with pytest.raises(InvalidInput):
        plain.record_turn(thread="t", input="x", worklog=[{"tool": "\ud800"}])
    with pytest.raises(InvalidInput):
        plain.record_turn(thread="t", input="x", actor={"x": 1})  # type: ignore[arg-type]
    with pytest.raises(InvalidDocument):
        plain.ingest([("a.md", "# A\n\n\ud800")])
    with pytest.raises(InvalidQuery):
        plain.search("kettle \ud800")
    with pytest.raises(InvalidInput):
        plain.search("kettle", where={"ti\x00tle": "x"})
    with pytest.raises(InvalidInput):
        plain.search("kettle", where=["title=\ud800"])
    after = sorted(p.relative_to(plain.root) for p in plain.root.rglob("*") if p.is_file())
    assert after == before


def test_grep_stops_a_pattern_that_backtracks_without_end(
    plain: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service, "GREP_SECONDS", 0.3)
    plain.write("notes/redos.md", "# R\n\n" + "a" * 40 + "!\n")
    started = time.monotonic()
    with pytest.raises(InvalidQuery, match="took longer"):
        plain.grep("(.*){1,32000}[bc]")
    assert time.monotonic() - started < 3
    for bad in ("a{99999999999}", "(" * 5000 + ")" * 5000, "(unclosed"):
        with pytest.raises(InvalidQuery):
            plain.grep(bad)
    with pytest.raises(InvalidInput):
        plain.grep("kettle", limit=0)
    assert [h.path for h in plain.grep("kettle", limit=1)] == ["notes/a.md"]


def test_paths_a_file_system_cannot_hold_are_refused(plain: Memory) -> None:
    with pytest.raises(UnsafePath):
        plain.write("notes/" + "x" * 300 + ".md", "# X\n")
    with pytest.raises(UnsafePath):
        plain.write("d/" * 100 + "a.md", "# X\n")
    with pytest.raises(Conflict):
        plain.write("notes/a.md/b.md", "# X\n")


def test_a_damaged_index_is_set_aside_and_rebuilt(
    plain: Memory, capsys: pytest.CaptureFixture[str]
) -> None:
    root = plain.root
    plain.close()
    (root / ".memdir" / "index.db").write_bytes(b"garbage, not a database")
    for suffix in ("-wal", "-shm"):
        (root / ".memdir" / f"index.db{suffix}").unlink(missing_ok=True)
    with Memory.open(root, overrides={"store": {"git_commit": False}}) as again:
        assert [h.path for h in again.search("kettle", mode="bm25")] == ["notes/a.md"]
        assert again.doctor().ok
    assert "could not be read" in capsys.readouterr().err
    assert [p.name for p in (root / ".memdir").glob("index.db.damaged-*")]


def test_init_where_no_folder_can_be_made(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(InvalidInput):
        Store.init(tmp_path / "a-file" / "store", git=False)


def test_a_turn_record_with_a_yaml_alias_is_refused_not_expanded(plain: Memory) -> None:
    record = plain.record_turn(thread="t", input="hello", output="hi")
    target = plain.root / record.path
    text = target.read_text()
    target.write_text(text.replace("compactor:", "loop: &a [*a]\ncompactor:", 1))
    with pytest.raises(InvalidDocument, match="alias"):
        plain.turn_show(record.id)


def test_walk_sizes_are_checked_by_the_verbs_themselves(plain: Memory) -> None:
    record = plain.record_turn(thread="t", input="hello", output="hi")
    for call in (
        lambda: plain.ancestors(record.id, depth=99999999999999999999),
        lambda: plain.descendants(record.id, limit=0),
        lambda: plain.thread("t", last=10**20),
        lambda: plain.consolidate(limit=-1),
    ):
        with pytest.raises(InvalidInput):
            call()
    assert [n.id for n in plain.thread("t", last=1)] == [record.id]


def test_content_a_memory_cannot_hold(plain: Memory) -> None:
    with pytest.raises(InvalidDocument, match="NUL"):
        plain.write("notes/nul.md", "# N\n\na\x00b\n")
    assert not (plain.root / "notes" / "nul.md").exists()
    big = "x" * (plain.settings.store.max_file_bytes + 1)
    with pytest.raises(TooLarge):
        plain.ingest([("big.md", big)])
    assert not list((plain.root / "inbox").glob("*big*"))
    # A byte order mark hides the frontmatter: merge and forget refuse to add a second block.
    bom = plain.root / "notes" / "bom.md"
    bom.write_text("\ufeff---\ntitle: Bom\n---\n# Bom\n")
    before = bom.read_bytes()
    with pytest.raises(InvalidDocument, match="byte order mark"):
        plain.merge("notes/bom.md", episode="e1")
    with pytest.raises(InvalidDocument, match="byte order mark"):
        plain.forget("notes/bom.md")
    assert bom.read_bytes() == before


def test_a_write_into_a_store_nested_in_this_one_is_refused(tmp_path: Path) -> None:
    outer = Store.init(tmp_path / "outer")
    # init refuses a folder inside a store: make the inner store outside and move it in.
    Store.init(tmp_path / "inner").rename(outer / "wiki" / "inner")
    with Memory.open(outer) as mem:
        with pytest.raises(Conflict, match="wiki/inner/"):
            mem.write("wiki/inner/notes/x.md", "# X\n")
        # Changing or deleting a file of the inner store is refused the same way.
        for call in (
            lambda: mem.merge("wiki/inner/index.md", episode="e1"),
            lambda: mem.forget("wiki/inner/index.md", purge=True),
        ):
            with pytest.raises(Conflict, match="wiki/inner/"):
                call()
        assert (outer / "wiki" / "inner" / "index.md").is_file()
        mem.write("wiki/outer-note.md", "# Fine\n")
    assert not (outer / "wiki" / "inner" / "notes" / "x.md").exists()


def test_what_the_engine_writes_is_checked_like_any_write(plain: Memory) -> None:
    with pytest.raises(InvalidInput):
        plain.ingest([("n\x00.md", "# N\n\nfine text\n")])
    with pytest.raises(InvalidDocument):
        plain.episode_add(kind="signal", outcome="success", situation="s\x00", insights=["x"])
    with pytest.raises(InvalidDocument):
        plain.episode_add(kind="signal", outcome="success", situation="s", tags=["\ud800"])
    assert not list((plain.root / "episodes").rglob("signal-*"))


@pytest.mark.parametrize("name", ["PROGRAM.md", "HARNESS.md", "evals/questions.yaml"])
def test_a_contract_that_is_not_utf8_is_a_clear_error(plain: Memory, name: str) -> None:
    with (plain.root / name).open("ab") as handle:
        handle.write(b"\xff\n")
    with pytest.raises(InvalidDocument, match="not valid UTF-8"):
        if name == "evals/questions.yaml":
            plain.evaluate()
        else:
            plain.refine()


def test_a_pipe_is_not_read(plain: Memory) -> None:
    os.mkfifo(plain.root / "notes" / "fifo.md")
    started = time.monotonic()
    with pytest.raises(InvalidInput, match="not a regular file"):
        plain.read("notes/fifo.md")
    assert time.monotonic() - started < 2


@pytest.mark.parametrize(
    "damage", ["create table meta(x int); create table migrations(y int);", "folder"]
)
def test_other_kinds_of_damaged_index_are_rebuilt(plain: Memory, damage: str) -> None:
    root = plain.root
    plain.close()
    db = root / ".memdir" / "index.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    if damage == "folder":
        db.mkdir()
    else:
        conn = sqlite3.connect(db)
        conn.executescript(damage)
        conn.close()
    with Memory.open(root, overrides={"store": {"git_commit": False}}) as again:
        assert [h.path for h in again.search("kettle", mode="bm25")] == ["notes/a.md"]


def test_consolidate_without_a_program_is_an_error_not_a_quarantine(plain: Memory) -> None:
    plain.ingest([("kettle.md", "# Kettles\n\nDescale a kettle with vinegar.\n")])
    (plain.root / "PROGRAM.md").unlink()
    with pytest.raises(ConfigError, match="PROGRAM.md is missing"):
        plain.consolidate()
    assert not list((plain.root / "quarantine").glob("*kettle*"))


def test_grep_cuts_a_huge_line_to_the_part_around_its_match(tmp_path: Path) -> None:
    mem = Memory.open(Store.init(tmp_path / "s"))
    try:
        mem.write("notes/one-line.md", "x" * 200_000 + " needle " + "y" * 200_000 + "\n")
        mem.write("notes/start.md", "needle " + "z" * 5_000 + "\n")
        [hit] = mem.grep("needle", path_prefix="notes/one")
        assert hit.text.startswith("…x") and hit.text.endswith("y…") and " needle " in hit.text
        assert len(hit.text) == service.GREP_LINE_CHARS + 2
        [start] = mem.grep("needle", path_prefix="notes/start")
        assert start.text.startswith("needle ") and start.text.endswith("z…")
        short = mem.grep("needle", path_prefix="notes/")
        assert len(short) == 2
    finally:
        mem.close()


def test_a_where_filter_on_a_number_beyond_sqlite_integers_is_a_plain_filter(
    tmp_path: Path,
) -> None:
    mem = Memory.open(Store.init(tmp_path / "s"))
    try:
        mem.write("a.md", "---\nk: 1\n---\n# Apples\n")
        assert mem.search("apples", where={"k": 10**30}) == []
        assert [h.path for h in mem.search("apples", where={"k": 1})] == ["a.md"]
    finally:
        mem.close()


def test_processes_that_meet_one_damaged_index_at_once_share_one_new_index(
    plain: Memory,
) -> None:
    root = plain.root
    plain.close()
    db = root / ".memdir" / "index.db"
    db.write_bytes(b"garbage, not a database")
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    script = textwrap.dedent(
        """
        import sys, time
        from pathlib import Path
        from memdir.index import db
        first_open = db._connect
        def slow_to_notice(path):  # widens the moment between finding damage and acting
            db._connect = first_open
            try:
                return first_open(path)
            except Exception:
                time.sleep(0.5)
                raise
        db._connect = slow_to_notice
        go = Path(sys.argv[2])
        Path(f"{go}.ready-{sys.argv[3]}").touch()
        while not go.exists():  # all start at one moment, however slow their start-up
            time.sleep(0.005)
        conn = db.connect(Path(sys.argv[1]))
        conn.execute("CREATE TABLE IF NOT EXISTS seen (who TEXT)")
        conn.execute("INSERT INTO seen VALUES (?)", (sys.argv[3],))
        conn.close()
        """
    )
    go = root.parent / "go"
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(db), str(go), str(n)]) for n in range(6)
    ]
    deadline = time.monotonic() + 60
    while len(list(root.parent.glob("go.ready-*"))) < 6:
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.01)
    go.touch()
    assert [proc.wait(timeout=60) for proc in procs] == [0] * 6
    # One copy set aside, and every process wrote into the one index now in place.
    assert len(list((root / ".memdir").glob("index.db.damaged-*[0-9]"))) == 1
    conn = sqlite3.connect(db)
    try:
        assert sorted(w for (w,) in conn.execute("SELECT who FROM seen")) == list("012345")
    finally:
        conn.close()
