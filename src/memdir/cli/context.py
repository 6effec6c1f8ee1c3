"""Shared helpers of the CLI modules: opening the store, printing JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

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


def echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False, default=_default))


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
