"""The one translation point from errors to HTTP: ``{"error": {"code", "message"}}``."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from .. import arguments
from ..errors import MemdirError

log = logging.getLogger("memdir.http")

_STATUS_CODES = {
    400: "invalid_input",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    412: "precondition_failed",
    413: "too_large",
    415: "unsupported_media_type",
}


def error_body(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def error_response(status: int, code: str, message: str) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(error_body(code, message), status_code=status, headers=headers)


_SOURCES = ("body", "query", "path", "header", "cookie")


def describe_validation(exc: RequestValidationError) -> str:
    """One readable line for the first problems pydantic found."""
    problems = []
    for err in exc.errors():
        if err.get("type") == "json_invalid":
            ctx = err.get("ctx") or {}
            detail = ctx.get("error", "")
            return f"malformed JSON body: {detail}".rstrip(": ")
        loc = list(err.get("loc", ()))
        if loc and loc[0] in _SOURCES:
            # only the first item says where the value came from; a field may be called
            # "path" or "query" too (forget's path)
            loc = loc[1:]
        if not loc and tuple(err.get("loc", ())) == ("body",):
            return _whole_body(err)
        problems.append(f"{arguments.where(loc) or 'body'}: {arguments.problem(err)}")
    return "; ".join(problems[:3]) or "invalid request"


def _whole_body(err: Any) -> str:
    """What is wrong with the body as a whole: missing, or not a JSON object."""
    if err.get("type") == "missing":
        return "the request body is missing: send a JSON object"
    value = err.get("input")
    for kind, name in _JSON_KINDS:
        if isinstance(value, kind):
            return f"the request body must be a JSON object, not {name}"
    return "the request body must be a JSON object"


_JSON_KINDS: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (bool, "true or false"),
    ((int, float), "a number"),
    (str, "a string"),
    (list, "an array"),
)


def _not_json(request: Request, exc: RequestValidationError) -> str | None:
    """The Content-Type of a body sent as something other than JSON (FastAPI did not parse
    it), else None. A missing body is not this case: it has nothing to mislabel."""
    whole = [e for e in exc.errors() if tuple(e.get("loc", ())) == ("body",)]
    if not whole or whole[0].get("type") == "missing":
        return None
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/json" or kind.endswith("+json"):
        return None
    return kind or "none"


_METHODS = ("DELETE", "GET", "HEAD", "PATCH", "POST", "PUT")


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at this path (Starlette names only the first route's,
    so a DELETE on /v1/files/... was told to use GET when PUT works too)."""
    routes = request.app.router.routes
    allowed = []
    for method in _METHODS:
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] == Match.FULL for route in routes):
            allowed.append(method)
    return allowed


def install(app: FastAPI) -> None:
    """Register the handlers: MemdirError, validation, routing errors, and crashes."""

    async def memdir_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, MemdirError)
        return error_response(exc.http_status, exc.code, exc.message)

    async def validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        sent_as = _not_json(request, exc)
        if sent_as is not None:
            message = f"send the body as JSON with Content-Type: application/json (got {sent_as})"
            return error_response(415, "unsupported_media_type", message)
        message = describe_validation(exc)
        code = "malformed_json" if message.startswith("malformed JSON") else "invalid_input"
        return error_response(400, code, message)

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = _STATUS_CODES.get(exc.status_code, "http_error")
        message = str(exc.detail) if exc.detail else code.replace("_", " ")
        if exc.status_code == 404 and message == "Not Found":
            message = f"no route {request.method} {request.url.path}"
        headers = dict(exc.headers or {})
        allowed = _allowed_methods(request) if exc.status_code == 405 else []
        if allowed:
            named = " or ".join(m for m in allowed if m != "HEAD")
            message = f"{request.method} is not allowed on {request.url.path}; use {named}"
            headers["Allow"] = ", ".join(allowed)
        response = error_response(exc.status_code, code, message)
        response.headers.update(headers)
        return response

    async def not_unicode(request: Request, exc: Exception) -> JSONResponse:
        # A lone surrogate ("\ud800") is valid JSON but no text; the verbs refuse it where
        # they write, and this answers any other place it reaches.
        return error_response(400, "invalid_input", "text is not valid Unicode (a lone surrogate)")

    async def crash(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "internal_error", "internal server error")

    app.add_exception_handler(MemdirError, memdir_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(UnicodeEncodeError, not_unicode)
    app.add_exception_handler(Exception, crash)
