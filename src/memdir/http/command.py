"""``memdir serve``: the HTTP API, with MCP over streamable HTTP at ``/mcp``."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import click

from ..access import is_loopback
from ..errors import ConfigError, MemdirError, MissingExtra


def server_settings(root: str | None) -> Any:
    """Settings for a long-running server: sync on an interval, batch git commits.

    ``store.sync_interval_seconds`` and ``store.git_batch_seconds`` win when set
    (non-zero); otherwise the ``server.*`` values of the same name apply.
    """
    from ..files.layout import find_root
    from ..settings import load

    found = find_root(explicit=root)
    settings = load(found)
    store: dict[str, Any] = {}
    if settings.store.sync_interval_seconds == 0:
        store["sync_interval_seconds"] = settings.server.sync_interval_seconds
    if settings.store.git_batch_seconds == 0:
        store["git_batch_seconds"] = settings.server.git_batch_seconds
    return found, settings.replace(store=store) if store else settings


def _root(ctx: click.Context, root: str | None) -> str | None:
    if root:
        return root
    obj = ctx.find_root().obj or {}
    value = obj.get("root")
    return value if isinstance(value, str) else None


@click.command("serve")
@click.option("--host", help="Address to listen on (default server.host: 127.0.0.1).")
@click.option("--port", type=int, help="Port (default server.port: 3333).")
@click.option("--no-mcp", is_flag=True, help="Do not mount the MCP endpoint at /mcp.")
@click.option(
    "--root",
    "root",
    type=click.Path(file_okay=False),
    default=None,
    help="The store (default: --root of memdir, MEMDIR_ROOT, or found by walking up).",
)
@click.option(
    "--store",
    "stores",
    multiple=True,
    metavar="NAME=PATH",
    help="Serve this store at /v1/stores/NAME/ and /mcp/NAME (repeatable; docs/http.md).",
)
@click.option(
    "--stores-config",
    type=click.Path(dir_okay=False),
    help="A server config whose [stores] table names the stores (read again when it changes).",
)
@click.option("--max-open", type=int, default=16, show_default=True, help="Stores open at once.")
@click.option(
    "--idle-seconds",
    type=float,
    default=300.0,
    show_default=True,
    help="Close a store no request used for this long.",
)
@click.pass_context
def serve_cmd(
    ctx: click.Context,
    host: str | None,
    port: int | None,
    no_mcp: bool,
    root: str | None,
    stores: tuple[str, ...],
    stores_config: str | None,
    max_open: int,
    idle_seconds: float,
) -> None:
    """Serve the HTTP API (/v1/ ...) and MCP over streamable HTTP (/mcp).

    Refuses a non-loopback address unless the store has tokens (memdir token
    create). Ctrl-C or SIGTERM stop it gracefully: in-flight requests finish,
    pending git commits are written. The OpenAPI document is at /openapi.json.

    Example: memdir serve --port 3333
    """
    started = time.perf_counter()
    # Found, not imported: the server listens before the framework loads (DeferredApp).
    absent = [name for name in ("uvicorn", "fastapi") if not _installed(name)]
    if absent:
        raise MissingExtra(
            f"memdir serve needs the server extra ({absent[0]} is missing): "
            "pip install 'memdir[server]'"
        )
    import uvicorn

    if stores or stores_config:
        _serve_many(host, port, not no_mcp, stores, stores_config, max_open, idle_seconds)
        return

    from ..access import TokenRegistry
    from ..settings import config_path
    from .middleware import ServerMiddleware
    from .serving import DeferredApp

    found, settings = server_settings(_root(ctx, root))
    conf = settings.server
    host = host or conf.host
    port = conf.port if port is None else port
    auth_on = bool(conf.tokens) or conf.require_auth
    public = not is_loopback(host)
    if public and not auth_on:
        raise ConfigError(
            f"refusing to listen on {host} without auth: create a token first "
            "(memdir token create NAME --scope write), or listen on 127.0.0.1"
        )
    _configure_logging(conf.access_log)
    # Listening off loopback, auth stays on for good: revoking the last token (or losing
    # the config) must not open the store to the network.
    registry = TokenRegistry.from_settings(
        conf.tokens, required=conf.require_auth or public, config=config_path(found)
    )
    mcp = not no_mcp

    def load_api() -> Any:
        # Runs in a worker thread once the server listens (see memdir.http.serving).
        from ..service import Memory
        from .app import create_api

        mem = Memory.open(found, settings=settings)
        try:
            if settings.server.watch:
                mem.start_watcher()
            return create_api(mem, registry, mcp=mcp)
        except BaseException:
            mem.close()
            raise

    failures: list[Exception] = []

    def failed(exc: Exception) -> None:
        failures.append(exc)
        server.should_exit = True

    deferred = DeferredApp(
        load_api, on_failure=failed, started=started, listening=lambda: server.started
    )
    config = uvicorn.Config(
        ServerMiddleware(deferred, registry=registry, max_body_bytes=conf.max_body_bytes),
        host=host,
        port=port,
        access_log=False,
        log_level="warning",
        timeout_graceful_shutdown=conf.shutdown_timeout_seconds,
        lifespan="on",
        ws="none",
    )
    server = uvicorn.Server(config)
    logging.getLogger("memdir.http").warning(
        "memdir serving %s on http://%s:%d (auth %s; MCP %s); configured %.2fs after start, "
        "the API loads once the server listens",
        found,
        host,
        port,
        "on" if auth_on else "off, loopback only",
        "at /mcp" if mcp else "off",
        time.perf_counter() - started,
    )
    server.run()
    if failures:
        exc = failures[0]
        if isinstance(exc, MemdirError):
            raise exc
        raise click.ClickException(f"the server stopped: {exc}")


def _serve_many(
    host: str | None,
    port: int | None,
    mcp: bool,
    flags: tuple[str, ...],
    config_file: str | None,
    max_open: int,
    idle_seconds: float,
) -> None:
    """One server, many stores (memdir.http.stores): each store's own tokens, MCP and close."""
    from pathlib import Path

    import uvicorn

    from ..files.catalogue import Catalogue, parse_flags, read_config
    from ..settings import Settings
    from .stores import StoreRouter

    defaults = Settings().server
    host = host or defaults.host
    port = defaults.port if port is None else port
    public = not is_loopback(host)
    catalogue = Catalogue(parse_flags(flags), Path(config_file).absolute() if config_file else None)
    if config_file:
        read_config(Path(config_file))  # a broken file is an error now, not at the first request
    if max_open < 1:
        raise ConfigError("--max-open must be at least 1")

    def open_app(name: str, path: Path) -> Any:
        from ..service import Memory
        from .app import create_app

        found, settings = server_settings(str(path))
        mem = Memory.open(found, settings=settings)
        try:
            # Off loopback every store needs its tokens: a store without one answers 401.
            return create_app(mem, mcp=mcp, require_auth=True if public else None)
        except BaseException:
            mem.close()
            raise

    _configure_logging(True)
    router = StoreRouter(catalogue, open_app, max_open=max_open, idle_seconds=idle_seconds)
    logging.getLogger("memdir.http").warning(
        "memdir serving %d store(s) on http://%s:%d at /v1/stores/NAME/ (MCP %s); at most %d "
        "open, closed after %gs idle",
        len(catalogue.current()),
        host,
        port,
        "at /mcp/NAME" if mcp else "off",
        max_open,
        idle_seconds,
    )
    uvicorn.Server(
        uvicorn.Config(
            router,
            host=host,
            port=port,
            access_log=False,
            log_level="warning",
            lifespan="on",
            ws="none",
        )
    ).run()


def _configure_logging(access: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
    for name in ("memdir.http", "memdir.access"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        quiet = name == "memdir.access" and not access
        logger.setLevel(logging.WARNING if quiet else logging.INFO)
        logger.propagate = False


def _installed(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
