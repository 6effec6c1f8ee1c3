"""ASGI middleware: cross-site refusal (403, 415), authentication (401), request size
limit (413), access log.

Pure ASGI so it also guards the MCP endpoint mounted on the same server.
Scope and prefix checks (403) happen per route, where the verb is known.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import quote

from starlette.exceptions import HTTPException

from ..access import LOCAL, Principal, TokenRegistry, is_loopback
from ..errors import Forbidden, MemdirError, TooLarge, Unauthorized, UnsupportedMediaType
from .sessions import Sessions, cookie_value

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

access_log = logging.getLogger("memdir.access")

OPEN_PATHS = frozenset({"/health", "/v1/health"})
"""Answered without a token (they reveal nothing about the store)."""

API_ROOTS = frozenset({"v1", "api", "mcp", "openapi.json", "docs", "health"})
"""First path segments of the API; every other path belongs to the web UI (``memdir.http.ui``),
which also takes a sign-in session cookie instead of a bearer header."""

UI_OPEN_PATHS = frozenset({"/signin", "/favicon.ico"})
"""UI paths answered before sign-in (the sign-in form; ``/static/`` too: the package's assets)."""


def is_ui_path(path: str) -> bool:
    return path.lstrip("/").split("/", 1)[0] not in API_ROOTS


def route_path(scope: Scope) -> str:
    """The path below ``root_path`` (a store's UI served at ``/stores/NAME``)."""
    path = str(scope.get("path", ""))
    root = str(scope.get("root_path") or "").rstrip("/")
    if root and (path == root or path.startswith(root + "/")):
        return path[len(root) :] or "/"
    return path


def _ui_open(path: str) -> bool:
    return path in UI_OPEN_PATHS or path.startswith("/static/")


class SignInNeeded(Exception):
    """A UI request without a valid session where auth is on: sent to the sign-in page."""


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def header_text(value: str) -> str:
    """A header value as the client wrote it.

    The server hands headers over decoded as Latin-1, so ``X-Actor: José`` sent as UTF-8
    (what clients send) arrived as ``JosÃ©`` and was recorded so in derived-from and git.
    Bytes that are not UTF-8 keep their Latin-1 reading.
    """
    try:
        return value.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return value


def printable(text: str) -> str:
    """``text`` with what a terminal or a log reader would act on escaped (``\\n``, ``\\x1b``).

    The path is logged percent-decoded, so ``%0a`` in a request would start a forged line.
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


async def _send_error(send: Send, status: int, code: str, message: str) -> None:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _send_sign_in(send: Send, scope: Scope) -> None:
    """A page asked for without a session goes to the sign-in form; anything else is a 401."""
    if str(scope.get("method", "GET")).upper() not in ("GET", "HEAD"):
        error = Unauthorized("sign in first: this page needs a session")
        await _send_error(send, error.http_status, error.code, error.message)
        return
    query = scope.get("query_string", b"").decode("latin-1")
    target = str(scope.get("path", "/")) + (f"?{query}" if query else "")
    root = str(scope.get("root_path") or "").rstrip("/")
    location = root + "/signin?next=" + quote(target, safe="")
    headers = [(b"location", location.encode("latin-1")), (b"content-length", b"0")]
    await send({"type": "http.response.start", "status": 303, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


def _check_host(scope: Scope) -> None:
    """Without auth only loopback Host names are served (no DNS rebinding from a browser)."""
    host = _header(scope, b"host") or ""
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    if not is_loopback(name.strip("[]")):
        raise Forbidden(
            f"Host {host!r} refused: without tokens memdir serves only loopback names "
            "(localhost, 127.0.0.1, [::1]); create a token to serve other names"
        )


UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
"""Methods that may change the store; a browser sends them cross-site without a preflight."""

_DEFAULT_PORTS = {"http": ":80", "https": ":443"}


def _peer_is_loopback(scope: Scope) -> bool:
    """Whether the client connected from this machine (its address, not what it claims).

    No address at all (a Unix socket) is local too.
    """
    client = scope.get("client")
    if not client:
        return True
    return is_loopback(str(client[0]))


def _origin_of(scheme: str, host: str) -> str:
    origin = f"{scheme}://{host}".strip().lower()
    default = _DEFAULT_PORTS.get(scheme, "")
    return origin.removesuffix(default) if default else origin


def _own_origin(scope: Scope) -> str:
    """The origin a page served by this server has: scheme and the Host it was asked by."""
    scheme = str(scope.get("scheme") or "http")
    host = _header(scope, b"host")
    if not host:
        server = scope.get("server") or ("", 0)
        host = f"{server[0]}:{server[1]}"
    return _origin_of(scheme, host)


def _is_mcp(scope: Scope) -> bool:
    path = str(scope.get("path", ""))
    return path == "/mcp" or path.startswith("/mcp/")


def _check_cross_site(scope: Scope) -> None:
    """Refuse what a web page on another origin can make a browser send.

    A page may POST a form or ``text/plain`` to any address without a preflight, and
    a page reached by DNS rebinding talks to ``/mcp`` as if it were local. Browsers
    say where a request comes from (``Sec-Fetch-Site``, ``Origin``); clients that are
    not browsers send neither and are served as before.
    """
    method = str(scope.get("method", "GET")).upper()
    if method not in UNSAFE_METHODS and not _is_mcp(scope):
        return
    ui = is_ui_path(route_path(scope))
    site = (_header(scope, b"sec-fetch-site") or "").strip().lower()
    if site and site not in ("same-origin", "none"):
        raise Forbidden(
            f"cross-site request refused (Sec-Fetch-Site: {site}): memdir serves "
            "state-changing requests and MCP only to its own pages and to non-browser clients"
        )
    origin = _header(scope, b"origin")
    if origin is not None:
        own = _own_origin(scope)
        given = origin.strip().lower()
        if given != own:
            raise Forbidden(
                f"cross-origin request refused: Origin {printable(origin)!r} is not this "
                f"server's origin ({own})"
            )
    if ui and method in UNSAFE_METHODS:
        # The UI's forms change the store: only its own pages may send them. Browsers send
        # Origin (or Sec-Fetch-Site) with every POST; a request that carries neither is
        # refused rather than trusted.
        if origin is None and site != "same-origin":
            raise Forbidden(
                "a state-changing request to the web UI must come from its own pages "
                "(no Origin header was sent)"
            )
        return  # forms post application/x-www-form-urlencoded; Origin was checked above
    _check_content_type(scope, method)


def _check_content_type(scope: Scope, method: str) -> None:
    """A state-changing request with a body sends JSON (a form or ``text/plain`` is refused).

    An empty body is no body, whatever it is labelled (``curl -X POST`` sends a form type).
    """
    if method not in UNSAFE_METHODS:
        return
    kind = (_header(scope, b"content-type") or "").split(";")[0].strip().lower()
    length = (_header(scope, b"content-length") or "").strip()
    has_body = length not in ("", "0") or _header(scope, b"transfer-encoding") is not None
    if not has_body or kind == "application/json" or kind.endswith("+json"):
        return
    raise UnsupportedMediaType(
        f"send the body as JSON with Content-Type: application/json (got {kind or 'none'})"
    )


def _default_actor(principal: Principal | None) -> str:
    """The actor a write without ``X-Actor`` records (see ``http.auth.check_actor``)."""
    if principal is None:
        return "-"
    return principal.name if principal.authenticated else "anonymous"


class ServerMiddleware:
    """Authenticates every request, bounds its body and writes one access-log line."""

    def __init__(
        self,
        app: ASGIApp,
        registry: TokenRegistry,
        max_body_bytes: int,
        sessions: Sessions | None = None,
    ) -> None:
        self.app = app
        self.registry = registry
        self.max_body_bytes = max_body_bytes
        self.sessions = sessions if sessions is not None else Sessions()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = {"code": 0}

        async def send_logged(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = int(message["status"])
            await send(message)

        principal: Principal | None = None
        try:
            principal = self._authenticate(scope)
            if principal is None:
                return
            state = scope.setdefault("state", {})
            state["principal"] = principal
            state["sessions"] = self.sessions
            await self._guarded(scope, receive, send_logged)
        except SignInNeeded:
            await _send_sign_in(send_logged, scope)
        except MemdirError as exc:
            if status["code"] == 0:
                await _send_error(send_logged, exc.http_status, exc.code, exc.message)
        except HTTPException as exc:
            if status["code"] == 0:
                code = "too_large" if exc.status_code == 413 else "http_error"
                await _send_error(send_logged, exc.status_code, code, str(exc.detail))
        finally:
            self._log(scope, principal, status["code"], started)

    def _authenticate(self, scope: Scope) -> Principal | None:
        _check_cross_site(scope)
        authorization = _header(scope, b"authorization")
        self.registry.refresh()
        # Auth is off only for a loopback client: a client off this machine needs a
        # token whatever the token table holds now (the last one may have been revoked).
        remote = not _peer_is_loopback(scope)
        if not self.registry.required and not remote:
            _check_host(scope)
        path = route_path(scope)
        if path in OPEN_PATHS:
            try:
                return self.registry.authenticate(authorization, required=remote)
            except MemdirError:
                return Principal("anonymous", "read", authenticated=False)
        if not authorization and is_ui_path(path):
            return self._ui_principal(scope, path, remote)
        return self.registry.authenticate(authorization, required=remote)

    def _ui_principal(self, scope: Scope, path: str, remote: bool) -> Principal:
        """The caller of a UI page sent without a bearer header: its session's token."""
        if not (self.registry.required or remote):
            return LOCAL
        digest = self.sessions.digest(cookie_value(_header(scope, b"cookie")))
        found = self.registry.by_digest(digest) if digest else None
        if found is not None:
            return found
        if _ui_open(path):
            return Principal("anonymous", "read", authenticated=False)
        raise SignInNeeded

    async def _guarded(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = self.max_body_bytes
        declared = _header(scope, b"content-length")
        size = declared.strip() if declared is not None else ""
        if size.isascii() and size.isdigit() and len(size) <= 18 and int(size) > limit:
            raise TooLarge(f"request body of {int(size)} bytes is over the limit of {limit}")
        seen = {"bytes": 0}

        async def bounded_receive() -> Message:
            message = await receive()
            if message.get("type") == "http.request":
                seen["bytes"] += len(message.get("body", b""))
                if seen["bytes"] > limit:
                    # an HTTPException passes through FastAPI's body reader unchanged
                    raise HTTPException(413, f"request body is over the limit of {limit} bytes")
            return message

        await self.app(scope, bounded_receive, send)

    def _log(self, scope: Scope, principal: Principal | None, status: int, started: float) -> None:
        if not access_log.isEnabledFor(logging.INFO):
            return
        client = scope.get("client") or ("-", 0)
        actor = header_text(_header(scope, b"x-actor") or "").strip() or _default_actor(principal)
        token = principal.name if principal is not None and principal.authenticated else "-"
        query = scope.get("query_string", b"").decode("latin-1")
        target = scope.get("path", "") + (f"?{query}" if query else "")
        access_log.info(
            '%s token=%s actor=%s "%s %s" %d %.1fms',
            client[0],
            token,
            printable(actor.replace(" ", "_")[:80]),
            scope.get("method", "-"),
            printable(target[:300]),
            status,
            (time.perf_counter() - started) * 1000,
        )
