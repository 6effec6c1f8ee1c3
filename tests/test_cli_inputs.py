"""Bad input to the CLI (found by fuzzing): one line `error: ...` on stderr, exit 2, nothing
written; input is read within the store's file size limit."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from memdir.cli import cli
from memdir.files.store import Store

HUGE = "99999999999999999999"  # past SQLite's INTEGER


def run(*args: str, stdin: bytes | None = None) -> Any:
    """The CLI in process (click's runner): exit code, stdout and stderr as text."""
    res = CliRunner().invoke(cli, list(args), input=stdin, prog_name="memdir")
    return SimpleNamespace(code=res.exit_code, out=res.stdout, err=res.stderr)


def one_error_line(result: Any) -> str:
    """The single line `error: ...` of a refused command (exit 2, no traceback)."""
    assert result.code == 2, (result.code, result.out, result.err)
    assert result.err.startswith("error: ") and result.err.count("\n") == 1, result.err
    assert "Traceback" not in result.err + result.out
    line: str = result.err.rstrip("\n")
    return line


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return Store.init(tmp_path / "s", git=False)


def turn_files(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "turns").rglob("*") if p.is_file())


def inbox_files(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "inbox").rglob("*.md"))


# -- 1. walk flags: click ranges matching the HTTP API --------------------------------------


def test_turn_walk_flags_out_of_range_are_one_line_usage_errors(root: Path) -> None:
    made = run("--root", str(root), "turn", "record", "--thread", "t1", "--input", "hi")
    assert made.code == 0, made.err
    turn = made.out.strip()
    cases = [
        (["ancestors", turn, "--depth", HUGE], "--depth", "1<=x<=1000"),
        (["ancestors", turn, "--limit", HUGE], "--limit", "1<=x<=100000"),
        (["descendants", turn, "--depth", HUGE], "--depth", "1<=x<=1000"),
        (["descendants", turn, "--limit", HUGE], "--limit", "1<=x<=100000"),
        (["thread", "t1", "--last", HUGE], "--last", "1<=x<=10000"),
        (["ancestors", turn, "--depth", "0"], "--depth", "1<=x<=1000"),
        (["descendants", turn, "--limit", "-1"], "--limit", "1<=x<=100000"),
        (["thread", "t1", "--last", "0"], "--last", "1<=x<=10000"),
    ]
    for args, flag, bounds in cases:
        line = one_error_line(run("--root", str(root), "turn", *args))
        assert line.startswith(f"error: Invalid value for '{flag}'") and bounds in line, line
        assert f"(see 'memdir turn {args[0]} --help')" in line
    # the HTTP API's largest values are accepted
    walk = ["ancestors", turn, "--depth", "1000", "--limit", "100000"]
    at_max = run("--root", str(root), "turn", *walk)
    assert at_max.code == 0 and at_max.out == "no turns\n"
    last = run("--root", str(root), "turn", "thread", "t1", "--last", "10000", "--json")
    assert last.code == 0 and [n["id"] for n in json.loads(last.out)] == [turn]


def test_usage_errors_are_one_line_and_a_bare_group_still_shows_its_help(root: Path) -> None:
    line = one_error_line(run("--root", str(root), "turn", "thread", "t1", "--last", "abc"))
    assert "Invalid value for '--last'" in line
    assert (
        one_error_line(run("--bogus")) == "error: No such option '--bogus'. (see 'memdir --help')"
    )
    assert "Missing argument 'PATTERN'" in one_error_line(run("--root", str(root), "grep"))
    bare = run("turn")
    assert "Usage: memdir turn" in bare.out + bare.err and "ancestors" in bare.out + bare.err


# -- 2. the JSON object of `turn record` is type-checked ------------------------------------


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"actor": {"x": 1}}, "actor must be a string, got dict"),
        ({"actor": 5}, "actor must be a string, got int"),
        ({"actor": ["a"]}, "actor must be a string, got list"),
        ({"user": False}, "user must be a string, got bool"),
        ({"channel": 0}, "channel must be a string, got int"),
        ({"input": False, "output": "y"}, "input must be a string, got bool"),
        ({"output": 1.5}, "output must be a string, got float"),
        ({"thread": 7}, "thread must be a string, got int"),
        ({"provenance": 5}, "provenance must be a string, got int"),
        ({"parents": 0}, "parents must be a list of strings, got int"),
        ({"parents": {"a": 1}}, "parents must be a list of strings, got dict"),
        ({"keywords": {"a": 1}}, "keywords must be a list of strings, got dict"),
        ({"keywords": ["ok", 1]}, "keywords must be a list of strings, got an item of type int"),
        ({"worklog": 5}, "worklog must be a list of JSON objects or JSON Lines text, got int"),
    ],
)
def test_turn_record_json_keys_of_the_wrong_type(
    root: Path, obj: dict[str, Any], message: str
) -> None:
    body = {"thread": "t3", "input": "x", **obj}
    result = run("--root", str(root), "turn", "record", stdin=json.dumps(body).encode())
    assert one_error_line(result) == f"error: {message}"
    assert turn_files(root) == []


def test_turn_record_json_with_every_key_well_typed(root: Path) -> None:
    body = {
        "thread": "t3",
        "input": "deploy?",
        "output": "done",
        "worklog": [{"tool": "sh"}],
        "user": "ana",
        "channel": "cli",
        "parents": [],
        "keywords": "deploy,ops",
        "provenance": "run:1",
        "actor": "planner",
    }
    result = run("--root", str(root), "turn", "record", "--json", stdin=json.dumps(body).encode())
    assert result.code == 0, result.err
    record = json.loads(result.out)
    assert record["user"] == "ana" and record["keywords"] == ["deploy", "ops"]
    nulls = {"thread": "t4", "input": "x", "actor": None, "user": None, "parents": None}
    assert run("--root", str(root), "turn", "record", stdin=json.dumps(nulls).encode()).code == 0


# -- 3. unreadable files ---------------------------------------------------------------------


def test_ingest_of_a_missing_file_or_a_folder(root: Path, tmp_path: Path) -> None:
    good = tmp_path / "good.md"
    good.write_text("a source\n")
    missing = tmp_path / "nonexistent.md"
    line = one_error_line(run("--root", str(root), "ingest", str(good), str(missing)))
    assert line == f"error: cannot read {missing}: No such file or directory"
    line = one_error_line(run("--root", str(root), "ingest", str(tmp_path)))
    assert line == f"error: cannot read {tmp_path}: Is a directory"
    assert inbox_files(root) == []
    assert run("--root", str(root), "ingest", str(good)).code == 0
    assert [name.endswith("-good.md") for name in inbox_files(root)] == [True]


def test_unreadable_files_of_write_and_turn_record(root: Path, tmp_path: Path) -> None:
    missing = str(tmp_path / "nonexistent")
    cases = [
        (["write", "notes/z.md", "--file", missing], f"cannot read --file {missing}"),
        (["turn", "record", "--thread", "t", "--input-file", missing], f"cannot read {missing}"),
        (
            ["turn", "record", "--thread", "t", "--input", "x", "--worklog", missing],
            f"cannot read the work log {missing}",
        ),
    ]
    for args, message in cases:
        line = one_error_line(run("--root", str(root), *args))
        assert line == f"error: {message}: No such file or directory"
    assert turn_files(root) == [] and not (root / "notes/z.md").exists()


# -- 4. input is read within store.max_file_bytes --------------------------------------------


def _bounded_memory() -> None:
    """Let the child fail fast (MemoryError) instead of filling the machine if it reads on."""
    cap = 1 << 30
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def run_capped(*args: str, stdin: Path | None = None, limit: int | None = 1000) -> Any:
    """The real `memdir` in a subprocess with 1 GB of address space; `stdin` is a file."""
    env = dict(os.environ)
    env.pop("MEMDIR_ROOT", None)
    env.pop("MEMDIR_STORE_MAX_FILE_BYTES", None)
    if limit is not None:
        env["MEMDIR_STORE_MAX_FILE_BYTES"] = str(limit)
    with open(stdin or os.devnull, "rb") as handle:
        done = subprocess.run(
            [sys.executable, "-m", "memdir", *args],
            stdin=handle,
            capture_output=True,
            env=env,
            check=False,
            timeout=120,
            preexec_fn=_bounded_memory,
        )
    return SimpleNamespace(code=done.returncode, out=done.stdout.decode(), err=done.stderr.decode())


ZERO = Path("/dev/zero")


@pytest.mark.skipif(not ZERO.exists(), reason="needs /dev/zero")
def test_endless_input_is_refused_at_the_store_limit(root: Path) -> None:
    r = str(root)
    over = "more than 1000 bytes is over the limit of 1000 bytes"
    cases = [
        (["write", "notes/z.md", "--file", str(ZERO)], None, f"--file {ZERO}: {over}"),
        (["write", "notes/z.md"], ZERO, f"stdin: {over}"),
        (["turn", "record", "--thread", "t", "--input-file", str(ZERO)], None, f"{ZERO}: {over}"),
        (["turn", "record", "--thread", "t", "--output-file", str(ZERO)], None, f"{ZERO}: {over}"),
        (
            ["turn", "record", "--thread", "t", "--input", "x", "--worklog", str(ZERO)],
            None,
            f"the work log {ZERO}: {over}",
        ),
        (["turn", "record"], ZERO, f"stdin: {over}"),
        (["ingest", str(ZERO)], None, f"{ZERO}: {over}"),
        (["ingest", "-"], ZERO, f"stdin: {over}"),
    ]
    for args, stdin, message in cases:
        line = one_error_line(run_capped("--root", r, *args, stdin=stdin))
        assert line == f"error: {message}", args
    # the default limit (32 MB) holds too
    line = one_error_line(run_capped("--root", r, "write", "n.md", "--file", str(ZERO), limit=None))
    assert (
        line
        == f"error: --file {ZERO}: more than 33554432 bytes is over the limit of 33554432 bytes"
    )
    assert turn_files(root) == [] and inbox_files(root) == []
    assert not (root / "notes").exists() or not any((root / "notes").iterdir())


def test_a_file_over_the_limit_is_refused_with_its_size(root: Path, tmp_path: Path) -> None:
    big = tmp_path / "big.md"
    big.write_bytes(b"x" * 1500)
    line = one_error_line(run_capped("--root", str(root), "write", "n.md", "--file", str(big)))
    assert line == f"error: --file {big}: 1500 bytes is over the limit of 1000 bytes"
    line = one_error_line(run_capped("--root", str(root), "ingest", str(big)))
    assert line == f"error: {big}: 1500 bytes is over the limit of 1000 bytes"
    at_limit = tmp_path / "ok.md"
    at_limit.write_bytes(b"y" * 1000)
    wrote = run_capped("--root", str(root), "write", "n.md", "--file", str(at_limit))
    assert wrote.code == 0 and wrote.out == "created n.md (1000 bytes)\n", wrote.err
    assert inbox_files(root) == []


# -- 5. grep --limit -------------------------------------------------------------------------


def test_grep_limit_below_one_is_refused(root: Path) -> None:
    wrote = run(
        "--root", str(root), "write", "notes/a.md", "--text", "# A\nquokka one\nquokka two\n"
    )
    assert wrote.code == 0, wrote.err
    for value in ("0", "-1"):
        result = run("--root", str(root), "grep", "quokka", "--limit", value)
        line = one_error_line(result)
        assert line.startswith("error: Invalid value for '--limit'") and "x>=1" in line
        assert result.out == ""
    one = run("--root", str(root), "grep", "quokka", "--limit", "1")
    assert one.code == 0 and one.out == "notes/a.md:2:quokka one\n"
    both = run("--root", str(root), "grep", "quokka")
    assert both.out.splitlines() == ["notes/a.md:2:quokka one", "notes/a.md:3:quokka two"]


def test_consolidate_limit_below_one_is_refused(root: Path) -> None:
    line = one_error_line(run("--root", str(root), "consolidate", "--limit", "-1"))
    assert line.startswith("error: Invalid value for '--limit'") and "x>=1" in line
