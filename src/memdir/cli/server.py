"""Token commands: memdir token create|list|revoke (hashed in .memdir/config.toml).

``memdir serve`` lives in :mod:`memdir.http.command` and ``memdir mcp`` in
:mod:`memdir.mcp.command`; the command table loads them by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..errors import ConfigError, InvalidInput, NotFound
from .common import echo_json, root_flag, root_option


@click.group("token")
def token_group() -> None:
    """Bearer tokens for the HTTP API and MCP over HTTP (stored hashed in .memdir/config.toml).

    Example: memdir token create planner --scope write --prefix episodes/
    """


def _config_path(ctx: click.Context, root: str | None) -> Path:
    from ..files.layout import find_root
    from ..settings import config_path

    return config_path(find_root(explicit=root_option(ctx, root)))


def _edit_tokens(path: Path, change: Any, message: str) -> list[Any]:
    """Read-modify-write of the token tables under the store's write lock."""
    import tomllib

    from .. import access as auth
    from ..files.atomic import atomic_write
    from ..files.locks import FileLock

    with FileLock(path.parent / "write.lock").hold():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise ConfigError(f"{path} is not UTF-8 text") from None
        entries = auth.entries_in_config(text)
        entries = change(entries)
        new_text = auth.config_with_tokens(text, entries)
        try:
            tomllib.loads(new_text)  # never write a config that does not parse
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"refusing to write {path}: it would not parse ({exc})") from None
        atomic_write(path, new_text.encode("utf-8"))
    from ..files.gitlog import GitLog

    log = GitLog(path.parent.parent)
    log.queue([".memdir/config.toml"], "memdir", message)
    return list(entries)


@token_group.command("create")
@click.argument("name")
@click.option(
    "--scope",
    type=click.Choice(["read", "write", "admin"]),
    default="read",
    show_default=True,
    help="read: read and search; write: also write and record; admin: also purge and reindex.",
)
@click.option("--prefix", help="Confine the token to paths under this prefix (e.g. episodes/).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@root_flag
@click.pass_context
def token_create(
    ctx: click.Context,
    *,
    name: str,
    scope: str,
    prefix: str | None,
    as_json: bool,
    root: str | None,
) -> None:
    """Create a token NAME and print it once (only its hash is stored).

    Example: memdir token create planner --scope write --prefix episodes/
    """
    from .. import access as auth
    from ..doc import provenance

    auth.check_name(name)
    token = auth.new_token()
    entry = auth.TokenEntry(
        name, auth.hash_token(token), scope, auth.normalize_prefix(prefix), provenance.now_rfc3339()
    )

    def add(entries: list[Any]) -> list[Any]:
        if any(e.name == name for e in entries):
            raise InvalidInput(f"a token named {name!r} exists; revoke it first")
        return [*entries, entry]

    _edit_tokens(_config_path(ctx, root), add, f"token create {name}")
    if as_json:
        echo_json({**entry.public(), "token": token})
        return
    click.echo(token)
    where = f", prefix {entry.prefix}" if entry.prefix else ""
    click.echo(f"created token {name!r} (scope {scope}{where}); it is shown only now", err=True)


@token_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@root_flag
@click.pass_context
def token_list(ctx: click.Context, as_json: bool, root: str | None) -> None:
    """List tokens (name, id, scope, prefix, created); never the tokens themselves.

    Example: memdir token list
    """
    from .. import access as auth

    path = _config_path(ctx, root)
    entries = auth.entries_in_config(path.read_text(encoding="utf-8"))
    rows = [e.public() for e in entries]
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("no tokens (the server accepts loopback requests without auth)")
    for row in rows:
        click.echo(
            f"{row['name']}\t{row['id']}\t{row['scope']}\t{row['prefix'] or '/'}\t{row['created']}"
        )


@token_group.command("revoke")
@click.argument("name")
@root_flag
@click.pass_context
def token_revoke(ctx: click.Context, name: str, root: str | None) -> None:
    """Revoke the token NAME (a running server refuses it at once).

    Example: memdir token revoke planner
    """

    def drop(entries: list[Any]) -> list[Any]:
        kept = [e for e in entries if e.name != name]
        if len(kept) == len(entries):
            raise NotFound(f"no token named {name!r}")
        return kept

    _edit_tokens(_config_path(ctx, root), drop, f"token revoke {name}")
    click.echo(f"revoked token {name!r}")
