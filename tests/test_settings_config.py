"""A store's config.toml is read as the TOML parser reads it, whether or not the parser runs
(a config that sets nothing is read without it)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from memdir import settings
from memdir.errors import ConfigError

CONFIGS = [
    settings.default_config_toml(),  # what `memdir init` writes: every key commented out
    "",
    "# only a comment\n",
    "[store]\n[search]\n",
    "[store]\r\n# x\r\n",
    "  [store]  \n\t# indented\n",
    "[store]\ngit_commit = false\n",
    "[store] # a comment after the header\n",
    "[ store ]\n",
    '["store"]\n',
    "[store.inner]\n",
    "[[store]]\n",
    "[store]\n[store]\n",  # defined twice
    "[store\n",
    "# a bell \x07 in a comment\n",
    "[store]\rgit_commit = 1\n",  # a lone carriage return
    "[sturm]\n",  # not a section memdir knows
]


def _parsed(text: str) -> object:
    """What the parser makes of the file as Python reads text (newlines made "\\n")."""
    try:
        return tomllib.loads(text.replace("\r\n", "\n").replace("\r", "\n"))
    except tomllib.TOMLDecodeError:
        return ConfigError


def _read(tmp_path: Path, text: str) -> object:
    (tmp_path / ".memdir").mkdir(exist_ok=True)
    settings.config_path(tmp_path).write_bytes(text.encode("utf-8"))
    try:
        return settings.read_config(tmp_path)
    except ConfigError:
        return ConfigError


@pytest.mark.parametrize("text", CONFIGS)
def test_a_config_reads_as_the_toml_parser_reads_it(tmp_path: Path, text: str) -> None:
    assert _read(tmp_path, text) == _parsed(text)


def test_the_config_init_writes_is_read_without_the_parser() -> None:
    assert settings._sections_only(settings.default_config_toml()) is not None
    assert settings._sections_only("[store]\ngit_commit = false\n") is None


def test_settings_of_a_default_config_are_the_defaults(tmp_path: Path) -> None:
    (tmp_path / ".memdir").mkdir()
    settings.config_path(tmp_path).write_text(settings.default_config_toml())
    loaded, default = settings.load(tmp_path, environ={}), settings.Settings()
    for section in settings.SECTIONS:
        assert repr(getattr(loaded, section)) == repr(getattr(default, section))
