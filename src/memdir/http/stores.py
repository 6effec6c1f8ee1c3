"""Many stores behind one server: ``/v1/stores/NAME/...``, ``/mcp/NAME`` and the web UI of
each at ``/stores/NAME/`` (a store picker at ``/``).

Each store is served by its own app (:func:`memdir.http.app.create_app`: the same routes,
its own tokens, scopes and prefixes, its own MCP endpoint), opened on the first request that
names it and closed again once idle, with a bound on how many are open at once: a server of
100 stores holds only the ones in use. A token is a token of one store (its config holds
it), so a token of one store is refused by every other.

The stores come from ``--store NAME=PATH`` flags and from the ``[stores]`` table of a server
config file (``NAME = "PATH"``). The file is read again when it changes, so a store added or
removed while the server runs is picked up without a restart; requests in flight on a removed
store finish first.

Each open store runs its app's lifespan in a task of the server's own task group (an anyio
task group must be left by the task that entered it), so the store's MCP session manager
and its close at shutdown work as they do for one store.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import anyio.abc

from ..errors import ConfigError
from ..files.catalogue import Catalogue
from ..records import recordclass
from . import storepicker
from .serving import ASGIApp, Message, Receive, Scope, Send, _send_json

log = logging.getLogger("memdir.http")

STORE_PATH = re.compile(r"^/v1/stores/([^/]+)(/.*)?$")
MCP_PATH = re.compile(r"^/mcp/([^/]+)/?$")
UI_PATH = re.compile(r"^/stores/([^/]+)(/.*)?$")


@recordclass
class _Open:
    name: str
    path: Path
    app: ASGIApp
    stop: anyio.Event
    done: anyio.Event
    active: int = 0
    last_used: float = 0.0


class StoreRouter:
    """The ASGI app of a server of many stores. ``open_app(name, path)`` builds a store's app
    (in a worker thread); its lifespan runs while the store is open."""

    def __init__(
        self,
        catalogue: Catalogue,
        open_app: Callable[[str, Path], ASGIApp],
        *,
        max_open: int = 16,
        idle_seconds: float = 300.0,
    ) -> None:
        if max_open < 1:
            raise ConfigError("max_open must be at least 1")
        self.catalogue = catalogue
        self.open_app = open_app
        self.max_open = max_open
        self.idle_seconds = idle_seconds
        self.open: dict[str, _Open] = {}
        self._opening: dict[str, anyio.Event] = {}
        self._tasks: anyio.abc.TaskGroup | None = None
        self.opened = 0  # stores opened since start (a store reopened counts again)

    # -- ASGI ----------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path = scope.get("path", "")
        if path in ("/health", "/v1/health"):
            known = len(self.catalogue.current())
            await _json(send, 200, {"status": "ok", "stores": known, "open": len(self.open)})
            return
        if path == "/":
            await storepicker.picker(scope, send, sorted(self.catalogue.current()))
            return
        match = STORE_PATH.match(path)
        inner_prefix = "/v1"
        if match is None:
            match = MCP_PATH.match(path)
            inner_prefix = "/mcp"
        if match is None:
            match = UI_PATH.match(path)
            inner_prefix = "/stores/"
            if match is not None and match.group(2) is None:  # /stores/NAME: its UI's home
                await storepicker.redirect(send, quote(path, safe="/") + "/")
                return
        if match is None:
            await _json(send, 404, _error("not_found", "this server serves /v1/stores/NAME/..."))
            return
        name = match.group(1)
        rest = (match.group(2) or "") if inner_prefix == "/v1" else ""
        target = self.catalogue.current().get(name)
        if target is None:
            await _json(send, 404, _error("store_not_found", f"no store named {name!r} here"))
            return
        try:
            store = await self._get(name, target)
        except Exception as exc:
            log.warning("store %s (%s) could not be opened: %s", name, target, exc)
            await _json(send, 503, _error("store_unavailable", f"store {name!r}: {exc}"))
            return
        store.active += 1
        store.last_used = time.monotonic()
        inner = dict(scope)
        if inner_prefix == "/stores/":  # the store's web UI, below its own root path
            inner["root_path"] = f"/stores/{name}"
        else:
            inner["path"] = inner_prefix + rest
            inner["raw_path"] = inner["path"].encode()
        inner["state"] = {}  # the store's own (its app's lifespan state is not the server's)
        try:
            await store.app(inner, receive, send)
        finally:
            store.active -= 1
            store.last_used = time.monotonic()

    # -- opening and closing ---------------------------------------------------------------

    async def _get(self, name: str, target: Path) -> _Open:
        assert self._tasks is not None, "lifespan not started"
        while True:
            current = self.open.get(name)
            if current is not None and current.path == target and not current.stop.is_set():
                return current
            waiting = self._opening.get(name)
            if waiting is not None:
                await waiting.wait()
                continue
            break
        ready = anyio.Event()
        self._opening[name] = ready
        try:
            if current is not None:  # its path changed in the config: close the old one
                await self._close(current)
            await self._make_room()
            app = await anyio.to_thread.run_sync(self.open_app, name, target)
            store = _Open(name, target, app, anyio.Event(), anyio.Event())
            started = anyio.Event()
            failure: list[BaseException] = []
            self._tasks.start_soon(self._run, store, started, failure)
            await started.wait()
            if failure:
                raise failure[0]
            self.open[name] = store
            self.opened += 1
            return store
        finally:
            del self._opening[name]
            ready.set()

    async def _run(self, store: _Open, started: anyio.Event, failure: list[BaseException]) -> None:
        """The store's app lifespan, from open to close, in one task."""
        to_app: anyio.abc.ObjectSendStream[Message]
        to_app, from_server = anyio.create_memory_object_stream[Message](4)
        to_server, from_app = anyio.create_memory_object_stream[Message](4)

        async def receive() -> Message:
            return await from_server.receive()

        async def send(message: Message) -> None:
            await to_server.send(message)

        try:
            async with anyio.create_task_group() as tasks:
                lifespan: Scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}

                async def run_app() -> None:
                    await store.app(lifespan, receive, send)

                tasks.start_soon(run_app)
                await to_app.send({"type": "lifespan.startup"})
                answer = await from_app.receive()
                if answer["type"] != "lifespan.startup.complete":
                    failure.append(ConfigError(answer.get("message") or "the store did not start"))
                    started.set()
                    tasks.cancel_scope.cancel()
                    return
                started.set()
                await store.stop.wait()
                while store.active:  # requests in flight finish first
                    await anyio.sleep(0.05)
                await to_app.send({"type": "lifespan.shutdown"})
                await from_app.receive()
        except Exception as exc:  # the store's own close failed: logged, the server goes on
            log.warning("store %s closed with an error: %s", store.name, exc)
            if not started.is_set():
                failure.append(exc)
                started.set()
        finally:
            store.done.set()

    async def _close(self, store: _Open) -> None:
        store.stop.set()
        await store.done.wait()
        if self.open.get(store.name) is store:
            del self.open[store.name]

    async def _make_room(self) -> None:
        while len(self.open) >= self.max_open:
            idle = [s for s in self.open.values() if not s.active]
            victim = min(idle or self.open.values(), key=lambda s: s.last_used)
            await self._close(victim)

    async def _reaper(self) -> None:
        """Close stores idle for ``idle_seconds``, and stores the config no longer names."""
        while True:
            await anyio.sleep(min(5.0, max(0.05, self.idle_seconds / 4)))
            known = self.catalogue.current()
            now = time.monotonic()
            for store in list(self.open.values()):
                gone = known.get(store.name) != store.path
                idle = not store.active and now - store.last_used >= self.idle_seconds
                if gone or idle:
                    await self._close(store)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        message = await receive()
        assert message["type"] == "lifespan.startup"
        try:
            self.catalogue.current()
        except ConfigError as exc:
            await send({"type": "lifespan.startup.failed", "message": str(exc)})
            return
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            tasks.start_soon(self._reaper)
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
            for store in list(self.open.values()):
                await self._close(store)
            tasks.cancel_scope.cancel()
        await send({"type": "lifespan.shutdown.complete"})


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


async def _json(send: Send, status: int, body: Mapping[str, Any]) -> None:
    await _send_json(send, status, json.dumps(body).encode())
