"""The stores one server serves: ``--store NAME=PATH`` flags and the ``[stores]`` table of a
server config file, read again when the file changes (memdir.http.stores serves them)."""

from __future__ import annotations

import logging
import os
import re
import time
import tomllib
from pathlib import Path

from ..errors import ConfigError
from ..records import field, recordclass

log = logging.getLogger("memdir.http")

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
RELOAD_EVERY_SECONDS = 1.0


def check_name(name: str) -> str:
    if not NAME.match(name) or name in (".", ".."):
        raise ConfigError(
            f"store name {name!r}: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def parse_flags(values: tuple[str, ...] | list[str]) -> dict[str, Path]:
    """``NAME=PATH`` flags as a mapping; a name given twice is an error."""
    out: dict[str, Path] = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not path:
            raise ConfigError(f"--store {value!r}: expected NAME=PATH")
        if check_name(name) in out:
            raise ConfigError(f"--store {name}: given twice")
        out[name] = Path(path).expanduser()
    return out


def read_config(path: Path) -> dict[str, Path]:
    """The ``[stores]`` table of a server config file (paths relative to the file)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such server config file") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read as TOML: {exc}") from None
    table = data.get("stores", {})
    if not isinstance(table, dict):
        raise ConfigError(f'{path}: [stores] must be a table of NAME = "PATH"')
    out: dict[str, Path] = {}
    for name, value in table.items():
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{path}: stores.{name} must be a path (a string)")
        out[check_name(name)] = (path.parent / Path(value).expanduser()).absolute()
    return out


@recordclass
class Catalogue:
    """The stores a server knows: fixed ones (flags) and a config file read when it changes."""

    fixed: dict[str, Path] = field(default_factory=dict)
    config: Path | None = None
    _stamp: tuple[int, int] | None = None
    _from_file: dict[str, Path] = field(default_factory=dict)
    _checked: float = 0.0

    def current(self) -> dict[str, Path]:
        now = time.monotonic()
        if self.config is not None and now - self._checked >= RELOAD_EVERY_SECONDS:
            self._checked = now
            try:
                st = os.stat(self.config)
                stamp = (st.st_mtime_ns, st.st_size)
            except FileNotFoundError:
                stamp = None
            if stamp != self._stamp:
                try:
                    self._from_file = read_config(self.config) if stamp else {}
                    self._stamp = stamp
                except ConfigError as exc:  # a half-written file: keep what was read before
                    log.warning("server config not reloaded: %s", exc)
        return {**self._from_file, **self.fixed}
