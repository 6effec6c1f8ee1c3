"""The docs list every command and every setting."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

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
        for f in dataclasses.fields(getattr(settings, section))
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
