"""What a new user met trying every documented command: each case here once went wrong."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from helpers import run_cli
from memdir.cli import COMMANDS, cli
from memdir.errors import Conflict

DOCS = Path(__file__).resolve().parents[1] / "docs"
README = DOCS.parent / "README.md"
# No model: these tests are about the command line, not about vectors.
OFFLINE = {"MEMDIR_EMBEDDINGS_ENABLED": "false"}


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


def every_command() -> list[tuple[str, click.Command]]:
    ctx = click.Context(cli)
    found: list[tuple[str, click.Command]] = []
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None
        found.append((name, command))
        if isinstance(command, click.Group):
            for sub in command.list_commands(ctx):
                child = command.get_command(ctx, sub)
                assert child is not None
                found.append((f"{name} {sub}", child))
    return found


# -- init ---------------------------------------------------------------------------------


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


# -- write, doctor ------------------------------------------------------------------------


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


# -- turns and the context pack -----------------------------------------------------------


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


# -- the engine ---------------------------------------------------------------------------


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


# -- memory report ------------------------------------------------------------------------


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


# -- help and docs ------------------------------------------------------------------------


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


def test_commands_doc_names_every_option_in_its_row() -> None:
    """Each option (but --root, --json and --help, which every command has) is in its row."""
    rows = (DOCS / "commands.md").read_text(encoding="utf-8").splitlines()
    missing = []
    for name, cmd in every_command():
        if isinstance(cmd, click.Group):
            continue
        row = next((r for r in rows if r.startswith(f"| `memdir {name}")), "")
        assert row, name
        for param in cmd.params:
            if not isinstance(param, click.Option) or param.name in ("root", "as_json"):
                continue
            if not any(re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", row) for o in param.opts):
                missing.append(f"{name} {param.opts[0]}")
    assert not missing, f"docs/commands.md does not name: {missing}"


def test_settings_table_rows_are_whole() -> None:
    for line in (DOCS / "settings.md").read_text(encoding="utf-8").splitlines():
        if not line.startswith("| `"):
            continue
        cells = re.split(r"(?<!\\)\|", line)
        assert len(cells) == 6 and cells[-1] == "", line
        assert line.count("`") % 2 == 0, line


def test_readme_tour_write_makes_the_section_it_then_reads(store_root: Path) -> None:
    """The tour's first write, run by bash (whose echo keeps a literal backslash-n)."""
    lines = README.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if "wiki/ops/deploys.md --provenance" in line)
    command = "\n".join(lines[start - 1 : start + 1])
    read_line = next(line for line in lines if line.startswith("memdir read wiki/ops/deploys.md"))
    env = {**os.environ, **OFFLINE, "MEMDIR_ROOT": str(store_root)}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    for step in (command, read_line.split("#")[0]):
        done = subprocess.run(
            ["bash", "-c", step], env=env, capture_output=True, check=False, timeout=120
        )
        assert done.returncode == 0, (step, done.stderr)
    assert "\\n" not in (store_root / "wiki" / "ops" / "deploys.md").read_text(encoding="utf-8")
