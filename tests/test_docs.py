"""The docs list every command, option and setting, and the README tour runs as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import click

from helpers import OFFLINE, every_command
from memdir import records
from memdir.cli import COMMANDS, cli
from memdir.settings import SECTIONS, Settings

DOCS = Path(__file__).resolve().parents[1] / "docs"


def all_commands() -> list[str]:
    ctx = click.Context(cli)
    names: list[str] = []
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None, name
        if isinstance(command, click.Group):
            names += [f"{name} {sub}" for sub in command.list_commands(ctx)]
        else:
            names.append(name)
    return names


def test_commands_doc_lists_every_command() -> None:
    text = (DOCS / "commands.md").read_text(encoding="utf-8")
    missing = [name for name in all_commands() if f"memdir {name}" not in text]
    assert not missing, f"docs/commands.md does not describe: {missing}"


def test_settings_doc_lists_every_setting() -> None:
    text = (DOCS / "settings.md").read_text(encoding="utf-8")
    settings = Settings()
    missing = [
        f"{section}.{f.name}"
        for section in SECTIONS
        for f in records.fields(getattr(settings, section))
        if f"`{section}.{f.name}`" not in text
    ]
    assert not missing, f"docs/settings.md does not describe: {missing}"


def test_readme_names_the_two_commands() -> None:
    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    assert "make demo" in readme and "make test" in readme


def test_the_docs_say_where_consolidate_reports_skipped_sources() -> None:
    docs = Path(__file__).resolve().parent.parent / "docs"
    for name in ("commands.md", "engine.md"):
        text = " ".join((docs / name).read_text(encoding="utf-8").split())
        assert "`skipped <path>: <why>`" in text, name
        assert "stderr with `--plan`" in text, name


README = DOCS.parent / "README.md"


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
