"""The store: layout, confinement, atomic writes with provenance, git history, locking."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from helpers import committed
from memdir.doc import frontmatter
from memdir.errors import (
    Conflict,
    InvalidDocument,
    InvalidProvenance,
    PreconditionFailed,
    StoreExists,
    StoreNotFound,
    TooLarge,
    UnsafePath,
)
from memdir.files.layout import find_root, is_store
from memdir.files.store import Store
from memdir.service import Memory


def git_log(root: Path, fmt: str = "%an|%s") -> list[str]:
    out = subprocess.run(
        ["git", "-C", str(root), "log", f"--format={fmt}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.splitlines()


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file()
        and ".git" not in p.parts
        and "index.db" not in p.name
        and not p.name.endswith(".lock")
    }


def test_init_creates_layout_and_first_commit(store_root: Path) -> None:
    for folder in ("inbox", "quarantine", "episodes/turns", "wiki", "evals", ".memdir"):
        assert (store_root / folder).is_dir(), folder
    for name in ("HARNESS.md", "PROGRAM.md", "index.md", ".memdir/config.toml", ".gitignore"):
        assert (store_root / name).is_file(), name
    assert "index.db" in (store_root / ".gitignore").read_text()
    assert len((store_root / "HARNESS.md").read_text()) > 200
    assert git_log(store_root) == ["memdir|memdir init"]


def test_init_refuses_existing_store_and_force_never_clobbers(store_root: Path) -> None:
    (store_root / "PROGRAM.md").write_text("# mine\n")
    (store_root / "inbox" / ".gitkeep").unlink(missing_ok=True)
    with pytest.raises(StoreExists):
        Store.init(store_root)
    Store.init(store_root, force=True)
    assert (store_root / "PROGRAM.md").read_text() == "# mine\n"


def test_find_root_walks_up_and_honours_explicit(store_root: Path, tmp_path: Path) -> None:
    deep = store_root / "wiki" / "a" / "b"
    deep.mkdir(parents=True)
    assert find_root(start=deep) == store_root
    with pytest.raises(StoreNotFound, match="does not exist"):
        find_root(explicit=tmp_path / "nope")
    with pytest.raises(StoreNotFound, match="no memdir store"):
        find_root(start=tmp_path)


def test_write_appends_provenance_like_kiwifs(mem: Memory) -> None:
    doc = "---\ntitle: Deploys\nid: '42'\ncustom: keep\n---\n# Deploys\n\nbody text\n"
    result = mem.write("wiki/ops/deploys.md", doc, provenance=" run : abc:1 ", actor="planner")
    text = (mem.root / result.path).read_text()
    fm = frontmatter.parse(text).fm
    assert list(fm)[:3] == ["title", "id", "custom"]
    assert fm["id"] == "42"
    entry = fm["derived-from"][0]
    assert (entry["type"], entry["id"], entry["actor"]) == ("run", "abc:1", "planner")
    assert entry["date"].endswith("Z") and entry["date"][:2] == "20"
    assert text.endswith("# Deploys\n\nbody text\n")
    mem.write("wiki/ops/deploys.md", text, provenance="session:s1")
    fm2 = frontmatter.parse((mem.root / result.path).read_text()).fm
    assert [e["id"] for e in fm2["derived-from"]] == ["abc:1", "s1"]
    assert fm2["derived-from"][1]["actor"] == "anonymous"


@pytest.mark.parametrize("value", ["runid", "run:", ":x", " : ", ""])
def test_malformed_provenance_is_refused_and_nothing_written(mem: Memory, value: str) -> None:
    before = snapshot(mem.root)
    with pytest.raises(InvalidProvenance):
        mem.write("notes/a.md", "# a\n", provenance=value)
    assert snapshot(mem.root) == before


@pytest.mark.parametrize(
    "path",
    [
        "../outside.md",
        "/etc/passwd.md",
        "a/../../x.md",
        ".git/config.md",
        ".memdir/x.md",
        "notes/.git/x.md",
        "",
        "a\x00b.md",
    ],
)
def test_unsafe_paths_are_refused(mem: Memory, path: str) -> None:
    before = snapshot(mem.root)
    with pytest.raises(UnsafePath):
        mem.write(path, "# x\n")
    assert snapshot(mem.root) == before


def test_symlink_leading_outside_is_refused(mem: Memory, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, mem.root / "wiki" / "escape")
    os.symlink(tmp_path / "target.md", mem.root / "wiki" / "file.md")
    with pytest.raises(UnsafePath):
        mem.write("wiki/escape/x.md", "# x\n")
    with pytest.raises(UnsafePath):
        mem.write("wiki/file.md", "# x\n")
    assert list(outside.iterdir()) == []
    assert not (tmp_path / "target.md").exists()


def test_confinement_checks_every_component_below_the_root(tmp_path: Path) -> None:
    """A store opened through a symlinked root works; a symlink below the root is followed
    only when it stays inside, at any depth, and a missing tail is not a way out."""
    real = Store.init(tmp_path / "real")
    (tmp_path / "alias").symlink_to(real)
    outside = tmp_path / "outside"
    outside.mkdir()
    with Memory.open(tmp_path / "alias") as mem:
        assert mem.write("wiki/a/b/c.md", "# c\n").created
        os.symlink(real / "wiki" / "a", real / "wiki" / "inner")
        # Inside: allowed, and named by its real path (which git can commit).
        assert mem.write("wiki/inner/b/d.md", "# d\n").path == "wiki/a/b/d.md"
        assert (real / "wiki" / "a" / "b" / "d.md").is_file()
        os.symlink(outside, real / "wiki" / "a" / "b" / "deep")
        with pytest.raises(UnsafePath):
            mem.write("wiki/a/b/deep/new/x.md", "# x\n")
        with pytest.raises(UnsafePath):
            mem.write("wiki/inner/b/deep/x.md", "# x\n")
    assert list(outside.iterdir()) == []
    assert {"wiki/a/b/c.md", "wiki/a/b/d.md"} <= set(committed(real, "wiki"))


def test_bad_content_is_refused(store_root: Path) -> None:
    mem = Memory.open(store_root, overrides={"store": {"max_file_bytes": 100}})
    before = snapshot(store_root)
    with pytest.raises(InvalidDocument, match="UTF-8"):
        mem.write("a.md", b"\xff\xfe bad")
    with pytest.raises(TooLarge):
        mem.write("a.md", "x" * 101)
    with pytest.raises(InvalidDocument, match="markdown"):
        mem.write("a.txt", "hello")
    with pytest.raises(InvalidDocument):
        mem.write("a.md", "---\ntitle: [unclosed\n---\nbody\n")
    assert snapshot(store_root) == before
    mem.close()


def test_each_write_is_a_commit_by_its_actor(mem: Memory) -> None:
    mem.write("notes/a.md", "# a\n", actor="alice")
    mem.write("notes/b.md", "# b\n", actor="bob", message="add b")
    log = git_log(mem.root)
    assert log[:2] == ["bob|add b", "alice|write notes/a.md"]
    status = subprocess.run(
        ["git", "-C", str(mem.root), "status", "--porcelain"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert status.stdout.strip() == ""


def test_batched_commits_share_one_commit_and_lose_none(store_root: Path) -> None:
    mem = Memory.open(store_root, overrides={"store": {"git_batch_seconds": 5.0}})
    for i in range(20):
        mem.write(f"notes/n{i}.md", f"# n{i}\n", actor="burst")
    mem.close()  # flushes the queue
    log = git_log(store_root)
    assert len(log) == 2 and log[0].startswith("burst|20 changes")
    files = committed(store_root, "notes")
    assert len(files) == 20


def test_if_match_detects_a_stale_etag(mem: Memory) -> None:
    first = mem.write("notes/a.md", "# a\n")
    second = mem.write("notes/a.md", "# a2\n", if_match=first.etag)
    with pytest.raises(PreconditionFailed):
        mem.write("notes/a.md", "# a3\n", if_match=first.etag)
    assert (mem.root / "notes/a.md").read_text() == "# a2\n"
    assert mem.read("notes/a.md").etag == second.etag


def test_git_can_be_turned_off(store_root: Path) -> None:
    mem = Memory.open(store_root, overrides={"store": {"git_commit": False}})
    mem.write("notes/a.md", "# a\n")
    mem.close()
    assert len(git_log(store_root)) == 1


def test_purging_a_file_git_never_saw(store_root: Path) -> None:
    mem = Memory.open(store_root, overrides={"store": {"git_commit": False}})
    mem.write("notes/tmp.md", "# tmp\n")
    mem.close()
    with Memory.open(store_root) as mem2:
        result = mem2.forget("notes/tmp.md", purge=True)
    assert result["purged"] is True and not (store_root / "notes/tmp.md").exists()
    assert git_log(store_root) == ["memdir|memdir init"]  # git never knew it: nothing to record


def test_write_files_is_all_or_nothing_on_bad_input(mem: Memory) -> None:
    before = snapshot(mem.root)
    with pytest.raises(UnsafePath):
        mem.store.write_files([("notes/ok.md", "# ok\n"), ("../bad.md", "# bad\n")])
    assert snapshot(mem.root) == before
    results = mem.store.write_files(
        [("notes/a.jsonl", '{"x": 1}\n'), ("notes/a.md", "# a\n")], actor="pair"
    )
    assert [r.path for r in results] == ["notes/a.jsonl", "notes/a.md"]
    assert (mem.root / "notes/a.jsonl").read_text() == '{"x": 1}\n'
    assert git_log(mem.root)[0] == "pair|write notes/a.jsonl, notes/a.md"


def test_durability_setting_is_checked(store_root: Path) -> None:
    from memdir.errors import ConfigError

    with pytest.raises(ConfigError, match="full, rename"):
        Memory.open(store_root, overrides={"store": {"durability": "sometimes"}})
    fast = Memory.open(store_root, overrides={"store": {"durability": "rename"}})
    fast.write("notes/fast.md", "# fast\n")
    fast.close()
    assert (store_root / "notes/fast.md").read_text() == "# fast\n"


@pytest.mark.parametrize(
    ("section", "key", "value", "says"),
    [
        ("store", "max_file_bytes", -1, "at least 1"),
        ("embeddings", "chunk_tokens", 0, "at least 8"),
        ("search", "rrf_k", -10, "at least 1"),
        ("search", "default_limit", 0, "at least 1"),
        ("search", "default_limit", True, "integer"),
        ("search", "default_limit", 1e3 + 0.5, "integer"),
        ("search", "thread_boost", -0.1, "at least 0"),
        ("search", "date_boost", float("nan"), "finite"),
        ("server", "port", "eighty", "integer"),
    ],
)
def test_number_settings_are_checked(
    store_root: Path, section: str, key: str, value: object, says: str
) -> None:
    from memdir.errors import ConfigError
    from memdir.settings import load

    with pytest.raises(ConfigError, match=says):
        load(store_root, {section: {key: value}})
    assert load(store_root, {"search": {"default_limit": 1e3}}).search.default_limit == 1000


def test_full_durability_syncs_data_before_rename_and_folder_before_return(
    mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The order of the real calls when files are replaced: every staged file's data is
    synced before any rename, the folder is synced after the renames, and the call returns
    only after both the folder sync and ``after_rename`` (which already sees the files in
    place). New files go through the journal instead (tests/test_journal.py)."""
    import threading

    mem.store.write_files([("notes/d.jsonl", "old\n"), ("notes/d.md", "# old\n")])

    events: list[tuple[str, str]] = []
    guard = threading.Lock()
    real_fdatasync, real_fsync, real_replace = os.fdatasync, os.fsync, os.replace

    def note(kind: str, what: str) -> None:
        with guard:
            events.append((kind, what))

    def fdatasync(fd: int) -> None:
        real_fdatasync(fd)
        note("data", os.readlink(f"/proc/self/fd/{fd}") if os.path.exists("/proc/self") else "")

    def fsync(fd: int) -> None:
        real_fsync(fd)
        note("folder", os.readlink(f"/proc/self/fd/{fd}") if os.path.exists("/proc/self") else "")

    def replace(src: str, dst: str) -> None:
        real_replace(src, dst)
        note("rename", str(dst))

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)

    def after(results: list[object]) -> None:
        assert (mem.root / "notes/d.md").read_text() == "# d\n"
        assert (mem.root / "notes/d.jsonl").read_text() == "{}\n"
        note("after", str(len(results)))

    mem.store.write_files([("notes/d.jsonl", "{}\n"), ("notes/d.md", "# d\n")], after_rename=after)
    note("returned", "")
    kinds = [kind for kind, _ in events]
    assert kinds.count("data") == 2 and kinds.count("rename") == 2
    assert kinds.count("folder") == 1 and kinds.count("after") == 1
    last_data = max(i for i, k in enumerate(kinds) if k == "data")
    first_rename = kinds.index("rename")
    last_rename = max(i for i, k in enumerate(kinds) if k == "rename")
    assert last_data < first_rename
    assert kinds.index("folder") > last_rename and kinds.index("after") > last_rename
    assert kinds[-1] == "returned"
    if os.path.exists("/proc/self"):
        synced = [what for kind, what in events if kind == "data"]
        assert all(Path(p).name.startswith((".d.jsonl.", ".d.md.")) for p in synced)
        assert [what for kind, what in events if kind == "folder"] == [str(mem.root / "notes")]


def test_a_failing_after_rename_leaves_the_files_written_and_committed(mem: Memory) -> None:
    def boom(_results: list[object]) -> None:
        raise RuntimeError("index down")

    with pytest.raises(RuntimeError, match="index down"):
        mem.store.write_files([("notes/e.md", "# e\n")], actor="ana", after_rename=boom)
    assert (mem.root / "notes/e.md").read_text() == "# e\n"
    assert not [p for p in (mem.root / "notes").iterdir() if p.name.endswith(".tmp")]
    mem.store.commit_pending()
    assert git_log(mem.root)[0] == "ana|write notes/e.md"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_writes_durably_after_the_parent_did(mem: Memory) -> None:
    """The fsync helper threads do not survive a fork; the child makes its own."""
    mem.store.write_files([("notes/p.md", "# p\n"), ("notes/p.jsonl", "{}\n")])
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            mem.store.write_files([("notes/c.md", "# c\n"), ("notes/c.jsonl", "{}\n")])
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert (mem.root / "notes/c.md").read_text() == "# c\n"


def test_store_init_refuses_a_folder_inside_a_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outer = Store.init(tmp_path / "outer")
    inner = outer / "wiki" / "deep" / "inner"
    for make in (
        lambda: Store.init(inner),
        lambda: Store.init(inner, force=True),
        lambda: Memory.init(inner),
    ):
        with pytest.raises(Conflict, match=re.escape(str(outer))):
            make()
    assert not (outer / "wiki" / "deep").exists()  # nothing was made
    # A relative path is resolved first.
    monkeypatch.chdir(outer / "episodes")
    with pytest.raises(Conflict, match=re.escape(str(outer))):
        Store.init(Path("..") / "notes" / "sub")
    assert not (outer / "notes" / "sub").exists()
    # Beside the store (not under it) is fine, and so is re-running init on the store itself.
    assert is_store(Store.init(tmp_path / "beside"))
    assert Store.init(outer, force=True) == outer
