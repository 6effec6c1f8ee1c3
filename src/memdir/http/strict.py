"""Strict arguments: booleans are booleans and unknown names are refused.

Body models refuse unknown fields and coercion (``"full": "yes"`` is a 400, not a
rebuild). A query boolean is ``true`` or ``false``. A query parameter no route
declares, or a body sent to a route that takes none, is a 400 naming it.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from pydantic import BaseModel, BeforeValidator, ConfigDict

from ..errors import InvalidInput

_UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_PROBES = frozenset({"/health", "/v1/health"})
"""Answered whatever the query (a probe may add a cache-buster), as before the API loads."""


class StrictBody(BaseModel):
    """A request body: no unknown fields, no coercion (``1`` is not ``true``)."""

    model_config = ConfigDict(extra="forbid", strict=True)


def _query_bool(value: Any) -> Any:
    """``true`` or ``false`` (any case); pydantic would also take ``yes``, ``on``, ``1``."""
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        raise ValueError("must be true or false")
    return value


QueryBool = Annotated[bool, BeforeValidator(_query_bool)]
"""A boolean query parameter: ``true`` or ``false``."""

_QUERY_NAMES: dict[int, frozenset[str]] = {}


def _query_names(route: APIRoute) -> frozenset[str]:
    """The query parameters a route declares (its own and its dependencies')."""
    names = _QUERY_NAMES.get(id(route))
    if names is None:
        names = frozenset(_walk_query(route.dependant))
        _QUERY_NAMES[id(route)] = names
    return names


def _walk_query(dependant: Dependant) -> list[str]:
    found = [field.alias for field in dependant.query_params]
    for sub in dependant.dependencies:
        found += _walk_query(sub)
    return found


async def strict_request(request: Request) -> None:
    """Refuse query parameters the route does not declare, and a body it does not take."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute) or route.path in _PROBES:
        return
    allowed = _query_names(route)
    unknown = sorted({name for name in request.query_params if name not in allowed})
    if unknown:
        takes = ", ".join(sorted(allowed)) or "none"
        raise InvalidInput(
            f"{unknown[0]}: unknown query parameter ({request.method} {route.path} takes: {takes})"
        )
    if route.body_field is None and request.method in _UNSAFE:
        await _no_body(request, route)


async def _no_body(request: Request, route: APIRoute) -> None:
    """A route without a body takes none; ``{}`` and ``null`` are no body too."""
    raw = await request.body()
    if not raw.strip():
        return
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        raise InvalidInput(f"{request.method} {route.path} takes no body") from None
    if value is None or value == {}:
        return
    if isinstance(value, dict):
        first = sorted(str(k) for k in value)[0]
        raise InvalidInput(f"{first}: unknown field ({request.method} {route.path} takes no body)")
    raise InvalidInput(f"{request.method} {route.path} takes no body")
