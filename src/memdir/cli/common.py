"""Shared helpers of the CLI modules: opening the store, reading input, printing JSON."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any

import click

from ..errors import InvalidInput, TooLarge

if TYPE_CHECKING:
    from ..service import Memory


def root_option(ctx: click.Context, value: str | None) -> str | None:
    """The ``--root`` given to the subcommand, else to the group."""
    if value:
        return value
    obj = ctx.find_root().obj or {}
    root: str | None = obj.get("root")
    return root


@contextmanager
def memory(ctx: click.Context, root: str | None = None, *, sync: bool = True) -> Iterator[Memory]:
    """Open the store for one command; the index is synced once, first (unless ``sync`` is off)."""
    from ..service import Memory

    mem = Memory.open(root_option(ctx, root))
    try:
        if sync:
            mem.sync_once()
        yield mem
    finally:
        mem.close()


def read_input(mem: Memory, source: str | None, *, label: str | None = None) -> bytes:
    """The content of the file ``source`` (None: stdin), within the store's file size limit.

    Reads at most ``store.max_file_bytes`` + 1 bytes, so /dev/zero or an endless pipe cannot
    fill memory; longer input is refused as the store refuses an oversized write. A file that
    cannot be read (missing, a folder, no permission) is bad input. ``label`` names the source
    in the error (default: the path, or "stdin").
    """
    name = label or ("stdin" if source is None else source)
    limit = mem.settings.store.max_file_bytes
    try:
        if source is None:
            data = _read_up_to(sys.stdin.buffer, limit + 1)
        else:
            with open(source, "rb") as handle:
                info = os.fstat(handle.fileno())
                if stat.S_ISREG(info.st_mode) and info.st_size > limit:
                    raise TooLarge(
                        f"{name}: {info.st_size} bytes is over the limit of {limit} bytes"
                    )
                data = _read_up_to(handle, limit + 1)
    except OSError as exc:
        raise InvalidInput(f"cannot read {name}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise TooLarge(f"{name}: more than {limit} bytes is over the limit of {limit} bytes")
    return data


def _read_up_to(stream: Any, most: int) -> bytes:
    """At most ``most`` bytes, read in blocks (``read(most)`` would set aside all of it)."""
    blocks: list[bytes] = []
    left = most
    while left > 0:
        block = stream.read(min(left, 1 << 20))
        if not block:
            break
        blocks.append(block)
        left -= len(block)
    return b"".join(blocks)


def echo_json(value: Any, *, line: bool = False) -> None:
    """``value`` as indented JSON, or with ``line`` as one line (a stream of reports)."""
    indent = None if line else 2
    click.echo(json.dumps(value, indent=indent, ensure_ascii=False, default=_default))


def _default(value: Any) -> Any:
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    return str(value)


root_flag = click.option(
    "--root",
    "root",
    type=click.Path(file_okay=False),
    default=None,
    help="The store (default: --root of memdir, MEMDIR_ROOT, or found by walking up).",
)


class ProgressPrinter:
    """A plain ``label n/total`` counter on a stream, for jobs of ``min_total`` or more."""

    def __init__(self, label: str, stream: IO[str] | None = None, min_total: int = 200) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.min_total = min_total
        self._last = 0.0

    def __call__(self, done: int, total: int) -> None:
        if total < self.min_total:
            return
        now = time.monotonic()
        if done < total and now - self._last < 0.5:
            return
        self._last = now
        end = "\n" if done >= total else "\r"
        self.stream.write(f"{self.label} {done}/{total}{end}")
        self.stream.flush()
