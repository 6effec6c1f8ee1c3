"""The ASGI app ``memdir serve`` runs: it listens first and loads the API after.

Importing FastAPI, pydantic and the route tables costs most of a second of CPU,
and the service modules more on top. :class:`DeferredApp` lets the server
listen before that: its lifespan starts the load in a worker thread and returns
at once. Until the API is loaded, ``GET /health`` and ``GET /v1/health`` are
answered here (the same body the API's route gives), and every other request
waits for the API and is then served by it, so no request is answered
differently. The API's own lifespan (MCP at ``/mcp``, closing the service at
shutdown) runs inside this one. If the load fails, waiting requests get a 503
and ``on_failure`` is called (``memdir serve`` then exits with an error).

This module imports neither FastAPI nor the service; it stays cheap to import.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio
import anyio.to_thread

from .. import __version__

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger("memdir.http")

HEALTH_PATHS = frozenset({"/health", "/v1/health"})


def health_body() -> bytes:
    """What the API's health route answers (FastAPI renders JSON compactly)."""
    body = {"status": "ok", "version": __version__}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


async def _send_json(send: Send, status: int, body: bytes) -> None:
    headers = [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class DeferredApp:
    """Serve health at once; load the API (``load()``, run in a thread) after listening.

    ``listening`` tells when the server's socket is bound (the load starts then);
    without it the load starts with the lifespan.
    """

    def __init__(
        self,
        load: Callable[[], ASGIApp],
        *,
        on_failure: Callable[[Exception], None] | None = None,
        started: float | None = None,
        listening: Callable[[], bool] | None = None,
    ) -> None:
        self.load = load
        self.on_failure = on_failure
        self.listening = listening
        self.started = time.perf_counter() if started is None else started
        self.app: ASGIApp | None = None
        self.error: str | None = None
        self.loaded_after_seconds: float | None = None
        self._done: anyio.Event | None = None
        self._stopping: anyio.Event | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if self.app is None:
            if (
                scope["type"] == "http"
                and scope.get("method") == "GET"
                and scope.get("path") in HEALTH_PATHS
            ):
                await _send_json(send, 200, health_body())
                return
            if self._done is not None:
                await self._done.wait()
        if self.app is None:
            if scope["type"] != "http":
                return
            message = self.error or "the API is not loaded"
            body = json.dumps({"error": {"code": "unavailable", "message": message}})
            await _send_json(send, 503, body.encode())
            return
        await self.app(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        message = await receive()
        assert message["type"] == "lifespan.startup"
        self._done = anyio.Event()
        self._stopping = anyio.Event()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._load_and_run)
            await send({"type": "lifespan.startup.complete"})
            message = await receive()
            assert message["type"] == "lifespan.shutdown"
            self._stopping.set()
        await send({"type": "lifespan.shutdown.complete"})

    async def _load_and_run(self) -> None:
        """Load the API, start its lifespan, serve until shutdown, then stop it."""
        assert self._done is not None and self._stopping is not None
        # The lifespan starts before the socket is bound: wait for it, so the
        # load does not hold up the first answer.
        while self.listening is not None and not self.listening():
            if self._stopping.is_set():  # the server stopped before it listened
                self._done_set()
                return
            await anyio.sleep(0.002)
        try:
            app = await anyio.to_thread.run_sync(self.load)
        except Exception as exc:
            self._fail(exc, "the API failed to load")
            return
        stopping = self._stopping
        started = {"sent": False}

        async def inner_receive() -> Message:
            if not started["sent"]:
                started["sent"] = True
                return {"type": "lifespan.startup"}
            await stopping.wait()
            return {"type": "lifespan.shutdown"}

        async def inner_send(message: Message) -> None:
            kind = message["type"]
            if kind == "lifespan.startup.complete":
                self.app = app
                self.loaded_after_seconds = time.perf_counter() - self.started
                log.info("API loaded %.2fs after start", self.loaded_after_seconds)
                self._done_set()
            elif kind.endswith(".failed"):
                raise RuntimeError(message.get("message") or kind)

        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}}
        try:
            await app({**scope, "state": {}}, inner_receive, inner_send)
        except Exception as exc:
            if self.app is None:
                self._fail(exc, "the API failed to start")
                return
            log.exception("the API's shutdown failed")
        finally:
            self._done_set()

    def _done_set(self) -> None:
        if self._done is not None:
            self._done.set()

    def _fail(self, exc: Exception, what: str) -> None:
        log.error("%s: %s", what, exc, exc_info=exc)
        self.error = f"{what}: {exc}"
        self._done_set()
        if self.on_failure is not None:
            self.on_failure(exc)
