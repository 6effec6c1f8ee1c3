"""The one translation point from errors to HTTP: ``{"error": {"code", "message"}}``."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

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


def describe_validation(exc: RequestValidationError) -> str:
    """One readable line for the first problem pydantic found."""
    problems = []
    for err in exc.errors():
        if err.get("type") == "json_invalid":
            ctx = err.get("ctx") or {}
            detail = ctx.get("error", "")
            return f"malformed JSON body: {detail}".rstrip(": ")
        loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path", "header")]
        where = ".".join(loc) or "body"
        problems.append(f"{where}: {err.get('msg', 'invalid')}")
    return "; ".join(problems[:3]) or "invalid request"


def install(app: FastAPI) -> None:
    """Register the handlers: MemdirError, validation, routing errors, and crashes."""

    async def memdir_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, MemdirError)
        return error_response(exc.http_status, exc.code, exc.message)

    async def validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        message = describe_validation(exc)
        code = "malformed_json" if message.startswith("malformed JSON") else "invalid_input"
        return error_response(400, code, message)

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = _STATUS_CODES.get(exc.status_code, "http_error")
        message = str(exc.detail) if exc.detail else code.replace("_", " ")
        if exc.status_code == 404 and message == "Not Found":
            message = f"no route {request.method} {request.url.path}"
        response = error_response(exc.status_code, code, message)
        if exc.headers:
            response.headers.update(exc.headers)
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
