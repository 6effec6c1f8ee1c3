"""FastAPI glue for auth and the request headers every write takes.

The middleware has already authenticated the request (401); these
dependencies check the scope each route needs (403) and parse ``X-Actor``,
``X-Provenance`` and ``If-Match``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Header, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ..access import LOCAL, Principal
from ..doc import provenance
from ..errors import InvalidInput
from ..files import claims
from ..service import Memory
from .middleware import header_text

bearer = HTTPBearer(auto_error=False, description="A memdir token: memdir token create NAME")


def principal_of(request: Request) -> Principal:
    found = getattr(request.state, "principal", None)
    return found if isinstance(found, Principal) else LOCAL


def need(scope: str) -> Callable[..., Principal]:
    """A dependency that returns the caller when its token has ``scope`` (else 403)."""

    def check(
        request: Request,
        _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)] = None,
    ) -> Principal:
        principal = principal_of(request)
        principal.require(scope, f"{request.method} {request.url.path}")
        return principal

    return check


def memory_of(request: Request) -> Memory:
    mem = request.app.state.memory
    assert isinstance(mem, Memory)
    return mem


Reader = Annotated[Principal, Depends(need("read"))]
Writer = Annotated[Principal, Depends(need("write"))]
Admin = Annotated[Principal, Depends(need("admin"))]
Mem = Annotated[Memory, Depends(memory_of)]


def check_actor(value: str | None, principal: Principal) -> str:
    """The author of record: the token's name when a token authenticated the caller (an
    ``X-Actor`` is then kept as a claim, a commit trailer); else ``X-Actor``; else
    ``anonymous``."""
    if value is None or not value.strip():
        return principal.name if principal.authenticated else "anonymous"
    actor = header_text(value).strip()
    if len(actor) > 200 or any(ord(c) < 32 or c == "\x7f" for c in actor):
        raise InvalidInput("malformed X-Actor header: at most 200 printable characters")
    if not principal.authenticated:
        return actor
    if actor != principal.name:
        claims.claim("X-Actor", actor)
    return principal.name


def check_provenance(value: str | None) -> str | None:
    """``X-Provenance: type:id``; malformed is a 400 (KiwiFS ignores it, memdir does not)."""
    if value is None:
        return None
    value = header_text(value)
    try:
        provenance.parse(value)
    except InvalidInput as exc:
        raise type(exc)(f"malformed X-Provenance header: {exc.message}") from None
    return value


ActorHeader = Annotated[
    str | None,
    Header(alias="X-Actor", description="Who is writing (git author); default: the token's name."),
]
ProvenanceHeader = Annotated[
    str | None,
    Header(
        alias="X-Provenance",
        description="type:id appended to derived-from as {type, id, date, actor}.",
    ),
]
IfMatchHeader = Annotated[
    str | None,
    Header(alias="If-Match", description="The ETag the file must still have (else 412)."),
]
