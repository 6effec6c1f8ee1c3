"""``memdir store list``: the stores a server of many stores serves (docs/http.md)."""

from __future__ import annotations

from pathlib import Path

import click

from ..files.catalogue import Catalogue, parse_flags
from .common import echo_json


@click.group("store")
def store_group() -> None:
    """The stores of a server of many stores (memdir serve --store / --stores-config).

    Example: memdir store list --stores-config server.toml
    """


@store_group.command("list")
@click.option(
    "--stores-config",
    type=click.Path(dir_okay=False),
    help="A server config whose [stores] table names the stores.",
)
@click.option("--store", "stores", multiple=True, metavar="NAME=PATH", help="A store (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def store_list_cmd(stores: tuple[str, ...], stores_config: str | None, as_json: bool) -> None:
    """List each store: its name, its folder, and whether a store is there.

    Example: memdir store list --stores-config /etc/memdir/server.toml
    """
    catalogue = Catalogue(parse_flags(stores), Path(stores_config) if stores_config else None)
    if stores_config:
        from ..files.catalogue import read_config

        read_config(Path(stores_config))  # a broken file is an error, not an empty list
    rows = []
    for name, path in sorted(catalogue.current().items()):
        if (path / ".memdir" / "config.toml").is_file():
            state = "ok"
        elif path.exists():
            state = "not a store"
        else:
            state = "missing"
        rows.append({"name": name, "path": str(path), "state": state})
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("no stores configured")
    for row in rows:
        click.echo(f"{row['name']}\t{row['path']}\t{row['state']}")
