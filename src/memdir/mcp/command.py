"""``memdir mcp``: the MCP server over stdio."""

from __future__ import annotations

from typing import Any

import click

from ..errors import MissingExtra


def _settings(root: str | None) -> Any:
    from ..files.layout import find_root
    from ..settings import load

    found = find_root(explicit=root)
    settings = load(found)
    if settings.store.sync_interval_seconds == 0:
        interval = settings.server.sync_interval_seconds
        settings = settings.replace(store={"sync_interval_seconds": interval})
    return found, settings


@click.command("mcp")
@click.option(
    "--root",
    "root",
    type=click.Path(file_okay=False),
    default=None,
    help="The store (default: --root of memdir, MEMDIR_ROOT, or found by walking up).",
)
@click.pass_context
def mcp_cmd(ctx: click.Context, root: str | None) -> None:
    """Serve MCP over stdio (for Claude Code, Claude Desktop, Cursor ...).

    The client starts this command; the caller is the local user (no token).
    Errors are tool errors with the same text as the CLI. See docs/mcp.md for
    copy-paste client configuration.

    Example: memdir --root ~/agent-memory mcp
    """
    from ..service import Memory

    try:
        from .server import build_server
    except ImportError as exc:
        raise MissingExtra(
            f"memdir mcp needs the mcp extra ({exc.name or exc} is missing): "
            "pip install 'memdir[mcp]'"
        ) from None

    chosen = root or (ctx.find_root().obj or {}).get("root")
    found, settings = _settings(chosen)
    mem = Memory.open(found, settings=settings)
    try:
        if settings.server.watch:
            mem.start_watcher()
        build_server(mem).run("stdio")
    finally:
        mem.close()
