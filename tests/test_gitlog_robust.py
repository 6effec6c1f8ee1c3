"""Git commits survive what writes say: bad messages and actors, and commits git refuses.

Every test runs real git in ``tmp_path``; a refusal is made with a ``prepare-commit-msg``
hook (``--no-verify`` does not skip it).
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
import unicodedata
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from helpers import committed
from http_server import live_server
from memdir.errors import GitError
from memdir.files.gitlog import GitLog
from memdir.files.gitrun import MAX_MESSAGE_CHARS, MAX_NAME_CHARS, clean_message, clean_name
from memdir.files.store import Store
from memdir.service import Memory

GENERIC = "changes whose own commit git refused"


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
    ).stdout


def history(root: Path) -> list[tuple[str, str, str]]:
    """(author name, author email, full message) of each commit, newest first."""
    out = git(root, "log", "--format=%an%x1f%ae%x1f%B%x1e")
    return [
        (name, email, body.strip())
        for name, email, body in (c.strip("\n").split("\x1f") for c in out.split("\x1e")[:-1])
    ]


def status(root: Path) -> str:
    return git(root, "status", "--porcelain")


def hook(root: Path, body: str) -> Path:
    """A ``prepare-commit-msg`` hook (``$1`` is the message file); non-zero refuses."""
    path = root / ".git" / "hooks" / "prepare-commit-msg"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def write(root: Path, rel: str, text: str = "") -> str:
    target = root / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text or f"# {rel}\n")
    return rel


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return Store.init(tmp_path / "s")


# -- the cleaning rule ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("bad\x00msg", "bad msg"),
        ("lone \ud800 surrogate", "lone \ufffd surrogate"),
        ("x\x1b[31mred", "x [31mred"),
        ("one\r\ntwo\rthree\nfour", "one\ntwo\nthree\nfour"),
        ("tab\there\x7fdel\x85c1", "tab here del c1"),
        ("  \x00\t\n ", ""),
        ("write notes/a.md", "write notes/a.md"),
    ],
)
def test_clean_message(raw: str, clean: str) -> None:
    assert clean_message(raw) == clean


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("ana", "ana"),
        ("a\x00b", "a b"),
        ("\ud800", "\ufffd"),
        ("two\nlines\r\tand  more", "two lines and more"),
        ("ana <ana@example.org>", "ana ana@example.org"),
        ("...", "anonymous"),
        ("", "anonymous"),
        ("\x00 ,;'", "anonymous"),
    ],
)
def test_clean_name(raw: str, clean: str) -> None:
    assert clean_name(raw) == clean


def test_long_messages_and_names_are_cut() -> None:
    message = clean_message("m" * 100_000)
    assert len(message) == MAX_MESSAGE_CHARS and message.endswith("…")
    assert len(clean_name("n" * 1000)) == MAX_NAME_CHARS


@given(st.text(st.characters() | st.characters(categories=["Cs", "Cc"])))
@example("\ud800\x00")
def test_any_string_cleans_to_text_git_takes(raw: str) -> None:
    message, name = clean_message(raw), clean_name(raw)
    message.encode("utf-8")  # no lone surrogate left
    name.encode("utf-8")
    assert all(ch == "\n" or unicodedata.category(ch) != "Cc" for ch in message)
    assert not any(unicodedata.category(ch) == "Cc" or ch in "<>" for ch in name)
    assert len(message) <= MAX_MESSAGE_CHARS and 0 < len(name) <= MAX_NAME_CHARS
    assert name == name.strip() and message == message.strip()


# -- bad messages and actors reach git cleaned -------------------------------------------------


def test_bad_messages_and_actors_are_committed_cleaned(root: Path) -> None:
    log = GitLog(root)
    cases = [
        ("a.md", "ana", "bad\x00msg", ("ana", "ana@memdir.local", "bad msg")),
        (
            "b.md",
            "ana",
            "x\x1b[31mred\r\nline\ttwo",
            ("ana", "ana@memdir.local", "x [31mred\nline two"),
        ),
        ("c.md", "ana", "merge \ud800", ("ana", "ana@memdir.local", "merge \ufffd")),
        ("d.md", "a\x00b", "by a nul", ("a b", "a-b@memdir.local", "by a nul")),
        (
            "e.md",
            "\ud800",
            "by a surrogate",
            ("\ufffd", "anonymous@memdir.local", "by a surrogate"),
        ),
        ("f.md", "...", "by crud", ("anonymous", "anonymous@memdir.local", "by crud")),
        ("g.md", "ana", "\x00\t ", ("ana", "ana@memdir.local", "1 changes by ana")),
    ]
    for rel, actor, message, _ in cases:
        log.queue([write(root, rel)], actor, message)
    log.queue([write(root, "later.md")], "bob", "write later")
    log.close()
    expected = [want for *_, want in cases] + [("bob", "bob@memdir.local", "write later")]
    assert history(root)[:-1] == expected[::-1]
    assert status(root) == ""


def test_long_messages_and_actors_are_committed_cut(root: Path) -> None:
    log = GitLog(root, batch_seconds=30)  # one flush, at close
    log.queue([write(root, "a.md")], "x" * 1000, "m" * 200_000)
    for n in range(40):
        log.queue([write(root, f"b{n}.md")], "bob", f"write {n} " + "w" * 3000)
    log.close()
    (bob, _, combined), (name, email, long) = history(root)[:2]
    assert name == "x" * (MAX_NAME_CHARS - 1) + "…" and email == "x" * 64 + "@memdir.local"
    assert long == "m" * (MAX_MESSAGE_CHARS - 1) + "…"
    assert bob == "bob" and combined.startswith("40 changes by bob\n\n- write 0 www")
    assert combined.endswith(" more") and 10_000 < len(combined) < 20_000
    assert status(root) == ""


def test_a_batched_flush_commits_every_actor_despite_bad_ones(root: Path) -> None:
    log = GitLog(root, batch_seconds=0.05)
    log.queue([write(root, "a.md")], "ana", "bad\x00msg")
    log.queue([write(root, "b.md")], "\ud800", "lone")
    log.queue([write(root, "c.md")], "bob", "fine")
    deadline = time.monotonic() + 10
    while not {"a.md", "b.md", "c.md"} <= set(committed(root)) and time.monotonic() < deadline:
        time.sleep(0.02)  # the background flush commits all three
    assert {"a.md", "b.md", "c.md"} <= set(committed(root))
    log.close()
    assert {(name, body) for name, _, body in history(root)[:3]} == {
        ("ana", "bad msg"),
        ("\ufffd", "lone"),
        ("bob", "fine"),
    }
    assert status(root) == ""


def test_commit_now_cleans_an_engine_message(root: Path) -> None:
    log = GitLog(root)
    log.commit_now([write(root, "wiki/m.md")], "memdir-engine", "merge episode \ud800\x00 done")
    log.close()
    assert history(root)[0] == (
        "memdir-engine",
        "memdir-engine@memdir.local",
        "merge episode \ufffd  done",
    )
    assert status(root) == ""


def test_a_file_name_that_is_not_utf8_is_committed(root: Path) -> None:
    name = os.fsdecode(b"caf\xe9.md")  # as os.listdir names it
    (root / name).write_text("# cafe\n")
    log = GitLog(root)
    log.queue([name], "ana", f"write {name}")
    log.close()
    tree = subprocess.run(
        ["git", "-C", str(root), "ls-tree", "-z", "--name-only", "HEAD"],
        capture_output=True,
        check=True,
    ).stdout
    assert b"caf\xe9.md" in tree.split(b"\0")
    assert history(root)[0][2] == "write caf\ufffd.md"


def test_memory_write_with_a_nul_message_then_another_actor(store_root: Path) -> None:
    mem = Memory.open(store_root)
    mem.write("notes/a.md", "# a\n", actor="ana", message="bad\x00msg")
    mem.write("notes/b.md", "# b\n", actor="bob", message="add b")
    mem.close()
    assert [(n, b) for n, _, b in history(store_root)[:2]] == [("bob", "add b"), ("ana", "bad msg")]
    assert status(store_root) == ""


def test_http_write_with_a_nul_message(store_root: Path) -> None:
    overrides = {"embeddings": {"enabled": False}, "store": {"git_batch_seconds": 0.05}}
    with live_server(store_root, overrides) as live, live.client() as client:
        bad = client.put(
            "/v1/files/x.md",
            json={"content": "# x\n", "message": "bad\u0000msg"},
            headers={"X-Actor": "fuzzer"},
        )
        good = client.put(
            "/v1/files/y.md", json={"content": "# y\n"}, headers={"X-Actor": "planner"}
        )
        assert (bad.status_code, good.status_code) == (201, 201)
    assert {(n, b) for n, _, b in history(store_root)[:2]} == {
        ("fuzzer", "bad msg"),
        ("planner", "write y.md"),
    }
    assert status(store_root) == ""


def test_paths_gitignore_excludes_do_not_fail_the_batch(root: Path) -> None:
    with (root / ".gitignore").open("a") as fh:
        fh.write("private/\n")
    git(root, "commit", "-q", "-m", "ignore private/", "--", ".gitignore")
    log = GitLog(root)
    log.queue([write(root, "private/x.md"), write(root, "notes/y.md")], "ana", "two files")
    log.close()
    assert history(root)[0] == ("ana", "ana@memdir.local", "two files")
    assert "notes/y.md" in committed(root)
    assert "private/x.md" not in committed(root)
    assert status(root) == ""


# -- commits git refuses ------------------------------------------------------------------------


def test_a_commit_refused_once_is_made_under_a_generic_message(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="memdir.git")
    marker = root / ".git" / "refused-once"
    hook(root, f'[ -e "{marker}" ] && exit 0\ntouch "{marker}"\nexit 1')
    log = GitLog(root)
    log.queue([write(root, "a.md")], "ana", "write a")  # refused, then committed as memdir
    log.queue([write(root, "b.md")], "bob", "write b")
    log.close()
    assert history(root)[:2] == [
        ("bob", "bob@memdir.local", "write b"),
        ("memdir", "memdir@memdir.local", f"1 {GENERIC}"),
    ]
    assert status(root) == ""
    warning = next(r.getMessage() for r in caplog.records if r.name == "memdir.git")
    assert "'ana'" in warning and "write a" in warning


def test_a_message_git_always_refuses_does_not_hold_back_others(root: Path) -> None:
    hook(root, 'grep -q FORBIDDEN "$1" && exit 1\nexit 0')
    log = GitLog(root, batch_seconds=30)  # one flush, at close, for every batch
    log.queue([write(root, "a.md")], "ana", "FORBIDDEN word")
    log.queue([write(root, "b.md")], "bob", "write b")
    log.queue([write(root, "c.md")], "cy", "write c")
    log.close()
    assert sorted((n, b) for n, _, b in history(root)[:3]) == [
        ("bob", "write b"),
        ("cy", "write c"),
        ("memdir", f"1 {GENERIC}"),
    ]
    assert status(root) == ""


def test_a_batch_no_commit_can_take_stays_queued_apart_from_later_writes(root: Path) -> None:
    refuse = hook(root, "git diff --cached --name-only | grep -q '^poison' && exit 1\nexit 0")
    log = GitLog(root)
    with pytest.raises(GitError, match="commit failed"):
        log.queue([write(root, "poison.md")], "ana", "write poison")
    assert "poison.md" not in committed(root)
    assert git(root, "diff", "--cached", "--name-only") == ""  # unstaged: nobody else carries it
    with pytest.raises(GitError):  # the old batch fails again, the new one is committed
        log.queue([write(root, "good.md")], "ana", "write good")
    log.commit_now([write(root, "wiki/e.md")], "memdir-engine", "engine")  # logs, no raise
    assert [(n, b) for n, _, b in history(root)[:2]] == [
        ("memdir-engine", "engine"),
        ("ana", "write good"),
    ]
    assert "poison.md" not in committed(root)
    refuse.unlink()
    log.close()  # now the queued batch goes in, with its own actor and message
    assert history(root)[0] == ("ana", "ana@memdir.local", "write poison")
    assert status(root) == ""


def test_a_failed_background_flush_is_logged_then_retried(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="memdir.git")
    refuse = hook(root, "exit 1")
    log = GitLog(root, batch_seconds=0.02)
    log.queue([write(root, "a.md")], "ana", "write a")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(
        r.levelno == logging.ERROR for r in caplog.records
    ):
        time.sleep(0.02)
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors and "background git commit failed" in errors[0]
    assert "a.md" not in committed(root)
    refuse.unlink()
    log.queue([write(root, "b.md")], "bob", "write b")
    log.close()
    assert sorted((n, b) for n, _, b in history(root)[:2]) == [
        ("ana", "write a"),
        ("bob", "write b"),
    ]
    assert status(root) == ""
