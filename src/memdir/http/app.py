"""Build the ASGI app: the JSON API under ``/v1/``, KiwiFS's report path, MCP at ``/mcp``,
and the web UI at ``/`` (:mod:`memdir.http.ui`).

One :class:`~memdir.service.Memory` serves every request. Handlers are plain
functions run in a thread pool, so reads run in parallel (SQLite WAL, one
connection per thread) while the store lock and the index's write mutex keep
one writer at a time. Shutdown waits for in-flight requests, then commits
pending git work and closes the index.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.to_thread
from fastapi import FastAPI
from starlette.routing import Route

from .. import __version__
from ..access import TokenRegistry
from ..service import Memory
from . import apidocs, engine_routes, errors, routes, turn_routes, ui
from .middleware import ServerMiddleware

log = logging.getLogger("memdir.http")

MCP_FACTORY = "memdir.mcp.server:build_server"

DESCRIPTION = """\
memdir's JSON API. Every verb of the service, the same errors as the CLI in one
shape: `{"error": {"code", "message"}}`. Writes take `X-Provenance: type:id`,
`X-Actor` and `If-Match` (the `ETag` of a read; a stale one is a 412). Send a
bearer token when the store has tokens (`memdir token create`).
"""


def create_app(memory: Memory, *, mcp: bool = True, require_auth: bool | None = None) -> FastAPI:
    """The app serving ``memory``; ``mcp`` mounts the MCP endpoint at ``/mcp``."""
    server = memory.settings.server
    registry = TokenRegistry.from_settings(
        server.tokens,
        required=server.require_auth if require_auth is None else require_auth,
        config=memory.store.config_file,
    )
    app = create_api(memory, registry, mcp=mcp)
    app.add_middleware(ServerMiddleware, registry=registry, max_body_bytes=server.max_body_bytes)
    return app


def create_api(memory: Memory, registry: TokenRegistry, *, mcp: bool = True) -> FastAPI:
    """The routes, error handlers and MCP mount, without :class:`ServerMiddleware`.

    The caller guards it: :func:`create_app` adds the middleware; ``memdir serve``
    wraps the middleware around :class:`~memdir.http.serving.DeferredApp`, which
    loads this app after the server listens.
    """
    server = memory.settings.server
    mount = MCPMount(memory, registry, server.max_body_bytes) if mcp else None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        ui.warm(app)  # the UI's views built in the background, not by the first page
        try:
            if mount is not None:
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(mount.serve)
                    yield
                    mount.stop.set()
            else:
                yield
        finally:
            memory.close()

    app = FastAPI(
        title="memdir",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # served by memdir.http.apidocs, with no CDN
        redoc_url=None,
    )
    app.state.memory = memory
    app.state.registry = registry
    app.state.mcp = mount is not None
    errors.install(app)
    app.include_router(routes.router)
    app.include_router(turn_routes.router)
    app.include_router(engine_routes.router)
    app.include_router(apidocs.router)
    if mount is not None:
        app.router.routes.append(Route("/mcp", endpoint=mount, include_in_schema=False))
    app.router.routes.extend(ui.routes())  # the web UI at /, over the same Memory
    return app


class MCPMount:
    """MCP over streamable HTTP at ``/mcp``, loaded after start-up.

    The JSON API answers as soon as the server listens. The MCP SDK (slower to
    import) loads on the first ``/mcp`` request, or a few seconds after start if
    none came, in a worker thread; ``/mcp`` requests wait for it.
    """

    def __init__(self, memory: Memory, registry: TokenRegistry, max_body_bytes: int) -> None:
        self.memory = memory
        self.registry = registry
        self.max_body_bytes = max_body_bytes
        self.ready = anyio.Event()
        self.stop = anyio.Event()
        self.wanted = anyio.Event()
        self.preload_after_seconds = 5.0
        self.app: Any = None
        self.error: str | None = None

    def _build(self) -> Any:
        build_server = _mcp_factory()
        if build_server is None:
            return None
        server = build_server(self.memory, registry=self.registry)
        server.streamable_http_app(
            streamable_http_path="/mcp",
            max_request_body_size=self.max_body_bytes,
            transport_security=_transport_security(),
        )
        return server

    async def serve(self) -> None:
        await self._until_wanted_or_stopped()
        if self.stop.is_set():  # stopped before MCP was needed: nothing to load or close
            self.error = "the server is stopping"
            self.ready.set()
            return
        try:
            server = await anyio.to_thread.run_sync(self._build)
        except Exception as exc:
            log.exception("MCP failed to load")
            self.error = f"MCP failed to load: {exc}"
            server = None
        if server is None:
            self.error = self.error or "MCP is not available: install the mcp extra"
            self.ready.set()
            return
        from mcp.server.streamable_http_manager import StreamableHTTPASGIApp

        async with server.session_manager.run():
            self.app = StreamableHTTPASGIApp(server.session_manager)
            self.ready.set()
            await self.stop.wait()

    async def _until_wanted_or_stopped(self) -> None:
        """Wait for the first ``/mcp`` request, the preload delay, or ``stop``, whichever
        comes first: a server stopped just after it started must not sit out the delay."""
        with anyio.move_on_after(self.preload_after_seconds):
            async with anyio.create_task_group() as tasks:

                async def wait_for(event: anyio.Event) -> None:
                    await event.wait()
                    tasks.cancel_scope.cancel()

                tasks.start_soon(wait_for, self.wanted)
                tasks.start_soon(wait_for, self.stop)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.wanted.set()
        with anyio.move_on_after(30):
            await self.ready.wait()
        if self.app is None:
            message = self.error or "MCP is still loading"
            response = errors.error_response(503, "unavailable", message)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _mcp_factory() -> Any:
    """MCP's server factory, loaded by name.

    MCP is a separate adapter behind its own extra (``mcp``); the HTTP adapter
    does not import it, it only mounts it when it is installed.
    """
    try:
        module = importlib.import_module(MCP_FACTORY.partition(":")[0])
    except ImportError as exc:
        if exc.name and exc.name.split(".")[0] == "mcp":
            log.warning("MCP is not mounted: the mcp extra is not installed (%s)", exc)
            return None
        raise
    return getattr(module, MCP_FACTORY.partition(":")[2])


def _transport_security() -> Any:
    """MCP's own Host/Origin checks are off: the server middleware does them for every path
    (loopback ``Host`` without auth, a foreign ``Origin`` or ``Sec-Fetch-Site`` refused)."""
    from mcp.server.transport_security import TransportSecuritySettings

    return TransportSecuritySettings(enable_dns_rebinding_protection=False)
