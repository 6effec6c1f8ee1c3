"""The real `memdir` command, run in subprocesses: every documented command as a new user
tries it, and the help of each."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest

from helpers import OFFLINE, every_command, run_cli
from memdir.errors import Conflict
from memdir.files.store import Store


def test_help_lists_every_command() -> None:
    from memdir.cli import COMMANDS

    result = run_cli("--help")
    assert result.returncode == 0
    text = result.stdout.decode()
    for name in COMMANDS:
        assert name in text


def test_every_command_has_help_with_an_example() -> None:
    import click

    from memdir.cli import COMMANDS, cli

    ctx = click.Context(cli)
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None
        commands = [command]
        if isinstance(command, click.Group):
            commands = [command.get_command(ctx, sub) for sub in command.list_commands(ctx)]
        for cmd in commands:
            assert cmd is not None and cmd.help, name
            assert "Example" in cmd.help or isinstance(cmd, click.Group), (name, cmd.name)


def test_init_write_search_read_roundtrip(tmp_path: Path) -> None:
    root = tmp_path / "s"
    assert run_cli("init", str(root)).returncode == 0
    again = run_cli("init", str(root))
    assert again.returncode != 0
    assert again.stderr.decode().startswith("error: ") and len(again.stderr.splitlines()) == 1
    wrote = run_cli(
        "write",
        "notes/deploy.md",
        "--provenance",
        "run:r1",
        "--actor",
        "bot",
        "--json",
        cwd=root,
        stdin=b"---\ntitle: Deploy notes\n---\nThe blue switch reverts a deploy.\n",
    )
    assert wrote.returncode == 0, wrote.stderr
    assert json.loads(wrote.stdout)["created"] is True
    found = run_cli("search", "blue switch", "--json", cwd=root / "notes")
    hits = json.loads(found.stdout)
    assert hits[0]["path"] == "notes/deploy.md" and "content" not in hits[0]
    read = run_cli("--root", str(root), "read", "notes/deploy.md")
    assert b"derived-from" in read.stdout and b"actor: bot" in read.stdout
    listed = run_cli("ls", "--root", str(root))
    assert b"notes/deploy.md\tDeploy notes" in listed.stdout


def test_bad_inputs_print_one_error_line(tmp_path: Path) -> None:
    root = tmp_path / "s"
    run_cli("init", str(root))
    cases = [
        ("write", "../x.md", "--text", "x"),
        ("write", "a.md", "--text", "x", "--provenance", "runid"),
        ("write", "a.md", "--text", "x", "--provenance", "run:"),
        ("write", "a.md", "--text", "x", "--provenance", ":x"),
        ("write", ".memdir/a.md", "--text", "x"),
        ("write", "a.md", "--text", "---\n: [\n---\n"),
        ("read", "missing.md"),
    ]
    for args in cases:
        result = run_cli(*args, cwd=root)
        err = result.stderr.decode()
        assert result.returncode != 0, args
        assert err.startswith("error: ") and err.count("\n") == 1, (args, err)
    assert not (root / "a.md").exists()
    missing = run_cli("--root", str(tmp_path / "nope"), "ls")
    assert missing.returncode != 0 and b"does not exist" in missing.stderr


def test_write_from_file_with_invalid_utf8(tmp_path: Path) -> None:
    root = tmp_path / "s"
    run_cli("init", str(root))
    bad = tmp_path / "bad.md"
    bad.write_bytes(b"# x\n\xff\n")
    result = run_cli("write", "x.md", "--file", str(bad), cwd=root)
    assert result.returncode != 0 and b"UTF-8" in result.stderr
    assert not (root / "x.md").exists()


def test_doctor_exit_codes(tmp_path: Path) -> None:
    root = tmp_path / "s"
    run_cli("init", str(root))
    assert run_cli("doctor", cwd=root).returncode == 0
    (root / "hand.md").write_text("# by hand\n")
    result = run_cli("doctor", cwd=root)
    assert result.returncode == 1 and b"missing in index: hand.md" in result.stdout
    assert run_cli("reindex", cwd=root).returncode == 0
    assert run_cli("doctor", cwd=root).returncode == 0


def test_memory_report_on_a_plain_folder_writes_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    (folder / "episodes").mkdir(parents=True)
    (folder / "episodes/e1.md").write_text("---\nepisode_id: e1\n---\nx\n")
    (folder / "episodes/e2.md").write_text("---\nepisode_id: e2\n---\nx\n")
    (folder / "page.md").write_text("---\nmerged-from:\n  - {type: episode, id: e1}\n---\n")
    before = sorted(p.name for p in folder.rglob("*"))
    result = run_cli("memory", "report", "--root", str(folder), "--json")
    data = json.loads(result.stdout)
    assert data["total_unmerged"] == 1 and data["coverage_pct"] == 50
    assert [u["path"] for u in data["unmerged"]] == ["episodes/e2.md"]
    assert sorted(p.name for p in folder.rglob("*")) == before
    failing = run_cli("memory", "report", "--root", str(folder), "--fail-under", "60")
    assert failing.returncode == 1 and b"below --fail-under" in failing.stderr
    assert run_cli("memory", "report", "--root", str(folder), "--fail-under", "50").returncode == 0
    text = run_cli("memory", "report", "--root", str(folder)).stdout.decode()
    assert "coverage:                50.0%" in text
    assert "  - episodes/e2.md  (episode_id=e2)" in text


def test_memory_report_in_a_store_matches_the_plain_walk(tmp_path: Path) -> None:
    root = tmp_path / "s"
    run_cli("init", str(root))
    (root / "episodes/a").mkdir(parents=True)
    (root / "episodes/a/z.md").write_text("---\nid: z\n---\n")
    (root / "episodes/a-b.md").write_text("no frontmatter\n")
    (root / "wiki/p.md").write_text("---\nmerged-from: {type: episode, id: z}\n---\n")
    in_store = run_cli("memory", "report", "--json", cwd=root)
    plain = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from memdir.kiwi import report as coverage; "
            "sys.stdout.write(coverage.dumps_report(coverage.report_for_folder("
            f"__import__('pathlib').Path({str(root)!r}))))",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    a = json.loads(in_store.stdout)
    b = json.loads(plain.stdout)
    a.pop("avg_age_days")
    b.pop("avg_age_days")
    assert a == b
    assert [f["path"] for f in a["episodic_files"]][:2] == ["episodes/a/z.md", "episodes/a-b.md"]
    assert a["warnings"] == [
        "missing episode_id in episodes/a-b.md — set memory_kind: episodic and episode_id,"
        " or match merged-from by path",
        "memory: merged-from has unsupported shape",
    ]
    assert b"warning: memory: merged-from has unsupported shape" in in_store.stderr


def test_help_is_fast() -> None:
    started = time.perf_counter()
    result = run_cli("--help")
    assert result.returncode == 0
    assert time.perf_counter() - started < 5  # the real target (0.3 s) is measured in bench/


def test_cli_init_inside_a_store_is_one_error_line(tmp_path: Path) -> None:
    outer = Store.init(tmp_path / "outer")
    for args, cwd in (
        (("init", str(outer / "wiki" / "inner")), None),
        (("init", "inner"), outer / "wiki"),
        (("--root", str(outer / "inner"), "init"), None),
    ):
        result = run_cli(*args, cwd=cwd)
        assert result.returncode != 0
        [line] = result.stderr.decode().splitlines()
        assert line.startswith("error: ") and f"inside the memdir store {outer}" in line
        assert result.stdout == b""
    assert not (outer / "wiki" / "inner").exists() and not (outer / "inner").exists()


DOCS = Path(__file__).resolve().parents[1] / "docs"


def cli_run(
    *args: str, root: Path, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    return run_cli("--root", str(root), *args, stdin=stdin, env=OFFLINE)


def record(root: Path, thread: str, text: str, *more: str) -> str:
    done = cli_run(
        "turn", "record", "--thread", thread, "--input", text, "--output", text, *more, root=root
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.decode().strip()


def test_init_refuses_a_folder_inside_a_store(store_root: Path) -> None:
    inner = store_root / "wiki" / "inner"
    done = run_cli("init", str(inner))
    assert done.returncode == Conflict.exit_code  # refused by Store.init, like an existing store
    message = done.stderr.decode()
    assert message.startswith("error: ") and str(store_root) in message
    assert not inner.exists()
    # the outer store still takes writes there
    wrote = cli_run("write", "wiki/inner/a.md", "--text", "# A\n", root=store_root)
    assert wrote.returncode == 0, wrote.stderr


def test_init_without_a_folder_uses_root_or_memdir_root(tmp_path: Path) -> None:
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    by_flag, by_env = tmp_path / "by-flag", tmp_path / "by-env"
    assert run_cli("--root", str(by_flag), "init", cwd=elsewhere).returncode == 0
    assert run_cli("init", cwd=elsewhere, env={"MEMDIR_ROOT": str(by_env)}).returncode == 0
    assert (by_flag / ".memdir" / "config.toml").is_file()
    assert (by_env / ".memdir" / "config.toml").is_file()
    assert list(elsewhere.iterdir()) == []


def test_write_refuses_empty_stdin_and_keeps_the_file(store_root: Path) -> None:
    assert cli_run("write", "notes/a.md", "--text", "# Kept\n", root=store_root).returncode == 0
    before = (store_root / "notes" / "a.md").read_bytes()
    done = cli_run("write", "notes/a.md", root=store_root, stdin=b"")
    assert done.returncode == 2 and "--text ''" in done.stderr.decode()
    assert (store_root / "notes" / "a.md").read_bytes() == before
    empty = cli_run("write", "notes/e.md", "--text", "", root=store_root)
    assert empty.returncode == 0 and (store_root / "notes" / "e.md").read_bytes() == b""


def test_doctor_says_how_to_repair_a_difference(store_root: Path) -> None:
    (store_root / "notes").mkdir(exist_ok=True)
    (store_root / "notes" / "hand.md").write_text("# By hand\n", encoding="utf-8")
    done = cli_run("doctor", root=store_root)
    assert done.returncode == 1
    assert "memdir reindex" in done.stdout.decode().splitlines()[-1]
    assert cli_run("reindex", root=store_root).returncode == 0
    assert cli_run("doctor", root=store_root).returncode == 0


def test_turn_record_refuses_a_text_and_its_file_together(store_root: Path, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text("from the file", encoding="utf-8")
    for flag in ("input", "output"):
        done = cli_run(
            "turn", "record", "--thread", "t1", f"--{flag}", "x", f"--{flag}-file", str(source),
            root=store_root,
        )  # fmt: skip
        assert done.returncode == 2
        assert f"--{flag}-file" in done.stderr.decode()
    assert not (store_root / "episodes" / "turns").exists() or not list(
        (store_root / "episodes" / "turns").rglob("*.md")
    )


def test_turn_show_raw_says_when_there_is_no_work_log(store_root: Path, tmp_path: Path) -> None:
    bare = record(store_root, "t1", "no tools")
    done = cli_run("turn", "show", bare, "--raw", root=store_root)
    assert done.returncode == 0 and done.stdout == b""
    assert bare in done.stderr.decode()
    log = tmp_path / "run.jsonl"
    log.write_bytes(b'{"tool": "search"}\n')
    logged = record(store_root, "t1", "with tools", "--worklog", str(log))
    done = cli_run("turn", "show", logged, "--raw", root=store_root)
    assert done.stdout == log.read_bytes() and done.stderr == b""


def test_context_text_counts_what_did_not_fit(store_root: Path) -> None:
    for n in range(6):
        record(store_root, "t1", f"turn number {n} " + "words " * 40)
    args = ("context", "--thread", "t1", "--budget", "150")
    pack = json.loads(cli_run(*args, "--json", root=store_root).stdout)
    assert pack["omitted"]
    text = cli_run(*args, root=store_root)
    assert text.returncode == 0 and text.stdout.decode() == pack["text"]
    note = text.stderr.decode()
    assert f"{len(pack['omitted'])} item(s)" in note and str(pack["budget"]) in note
    roomy = cli_run("context", "--thread", "t1", "--budget", "100000", root=store_root)
    assert roomy.stderr == b""


def test_query_prints_no_empty_citation_brackets(store_root: Path, tmp_path: Path) -> None:
    source = tmp_path / "rollback.md"
    source.write_text(
        "# Rollback runbook\n\nTo roll back a deploy, flip the blue switch and watch the "
        "error rate.\n",
        encoding="utf-8",
    )
    assert (
        cli_run("bundle", "add", "ops", "--scope", "deploys, rollbacks", root=store_root).returncode
        == 0
    )
    assert cli_run("ingest", str(source), root=store_root).returncode == 0
    assert cli_run("consolidate", root=store_root).returncode == 0
    question = "how do we roll back a deploy?"
    result = json.loads(cli_run("query", question, "--json", root=store_root).stdout)
    passages = [p for a in result["answers"] for p in a["passages"]]
    uncited = [p["text"] for p in passages if not p["citations"]]
    cited = [p for p in passages if p["citations"]]
    assert uncited and cited, passages
    lines = [
        line.strip()
        for line in cli_run("query", question, root=store_root).stdout.decode().splitlines()
    ]
    for text in uncited:
        assert text in lines
    for p in cited:
        assert f"{p['text']}  ({', '.join(p['citations'])})" in lines


def test_harness_change_blocks_the_engine_verbs_the_doc_names(store_root: Path) -> None:
    assert cli_run("reflect", root=store_root).returncode == 0  # pins the hash
    with (store_root / "HARNESS.md").open("a", encoding="utf-8") as handle:
        handle.write("\nA deliberate change.\n")
    row = next(
        line for line in (DOCS / "commands.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("| `memdir harness accept`")
    )  # fmt: skip
    assert cli_run("reflect", root=store_root).returncode != 0
    assert "`reflect`" in row
    assert cli_run("write", "notes/a.md", "--text", "# A\n", root=store_root).returncode == 0
    assert "`write`" not in row and "writing verbs refuse" not in row


@pytest.mark.parametrize("as_json", [False, True])
def test_fail_under_passes_with_no_episodes_and_fails_with_unmerged(
    store_root: Path, as_json: bool
) -> None:
    args = ["memory", "report", "--fail-under", "90", *(["--json"] if as_json else [])]
    empty = cli_run(*args, root=store_root)
    assert empty.returncode == 0, empty.stderr
    record(store_root, "t1", "an episode nobody merged")
    unmerged = cli_run(*args, root=store_root)
    assert unmerged.returncode == 1 and "below --fail-under" in unmerged.stderr.decode()


def test_fail_under_on_a_plain_folder_without_episodes(tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "page.md").write_text("# A page\n", encoding="utf-8")
    done = run_cli("memory", "report", "--root", str(folder), "--fail-under", "50")
    assert done.returncode == 0, done.stderr


def test_every_group_help_has_an_example_too() -> None:
    missing = [name for name, cmd in every_command() if "Example:" not in (cmd.help or "")]
    assert not missing, missing


def test_every_option_has_help() -> None:
    bare = [
        f"{name} {param.opts[0]}"
        for name, cmd in every_command()
        for param in cmd.params
        if isinstance(param, click.Option) and not param.help
    ]
    assert not bare, bare


def test_search_limit_help_names_the_setting_that_defaults_it() -> None:
    from memdir.settings import Settings

    assert Settings().search.default_limit
    done = run_cli("search", "--help")
    assert "search.default_limit" in " ".join(done.stdout.decode().split())


BLOCK_EXTRAS = '''
import importlib.abc, sys

class _Absent(importlib.abc.MetaPathFinder):
    """As if the server and mcp extras were not installed."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("fastapi", "starlette", "uvicorn", "mcp"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _Absent())
'''


@pytest.mark.parametrize(("command", "extra"), [("serve", "server"), ("mcp", "mcp")])
def test_servers_without_their_extra_name_it_in_one_line(
    tmp_path: Path, command: str, extra: str
) -> None:
    """No traceback: one line saying which extra to install, and a failing exit code."""
    import os

    Store.init(tmp_path / "s", git=False)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(BLOCK_EXTRAS)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    done = subprocess.run(
        [sys.executable, "-m", "memdir", "--root", str(tmp_path / "s"), command],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"memdir[{extra}]" in lines[0], done.stderr
