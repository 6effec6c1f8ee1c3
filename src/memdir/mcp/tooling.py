"""What every MCP tool needs: the memory, the caller, and one error translation."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from ..access import LOCAL, Principal, TokenRegistry, authorize_path
from ..errors import MemdirError
from ..files import claims
from ..records import asdict, is_record
from ..service import Memory

F = TypeVar("F", bound=Callable[..., Any])

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
REMOVES = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)

Path = Annotated[str, Field(description="Store-relative path, e.g. wiki/ops/deploys.md")]
Prefix = Annotated[
    str | None, Field(description="Only paths starting with this prefix, e.g. episodes/")
]
Limit = Annotated[int | None, Field(description="How many results (default 10).", ge=1, le=1000)]
Provenance = Annotated[
    str | None, Field(description="Where this came from, as type:id (e.g. run:42, session:abc).")
]
Actor = Annotated[str | None, Field(description="Who is writing (your agent name).")]
Superseded = Annotated[
    bool, Field(description="Also documents that were forgotten (superseded); default no.")
]
SearchMode = Literal["auto", "bm25", "vector", "hybrid"]


def _principal(ctx: Context | None, registry: TokenRegistry) -> Principal:
    """The caller: from the bearer token over HTTP, the local user over stdio."""
    headers = None
    if ctx is not None:
        try:
            headers = ctx.headers
        except (ValueError, AttributeError):
            headers = None
    if headers is None:
        return LOCAL
    lowered = {k.lower(): v for k, v in headers.items()}
    return registry.authenticate(lowered.get("authorization"))


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=1, default=_default)


def _default(value: Any) -> Any:
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    if is_record(value) and not isinstance(value, type):
        return asdict(value)
    return str(value)


class Tooling:
    """What every tool needs: the memory, the caller, and the error translation."""

    def __init__(self, memory: Memory, registry: TokenRegistry) -> None:
        self.memory = memory
        self.registry = registry

    def run(
        self, ctx: Context | None, scope: str, name: str, body: Callable[[Principal], Any]
    ) -> CallToolResult:
        try:
            with claims.scope():
                principal = _principal(ctx, self.registry)
                principal.require(scope, f"the {name} tool")
                result = body(principal)
        except MemdirError as exc:
            return CallToolResult(
                content=[TextContent(type="text", text=f"error: {exc.message}")], is_error=True
            )
        text = result if isinstance(result, str) else _dumps(result)
        return CallToolResult(content=[TextContent(type="text", text=text)])

    def author(self, principal: Principal, actor: str | None) -> str | None:
        """The author of record: the token's name over HTTP with a token (the ``actor``
        argument is then kept as a claim, a commit trailer), else ``actor``."""
        if not principal.authenticated:
            return actor
        if actor and actor.strip() and actor.strip() != principal.name:
            claims.claim("X-Actor", actor)
        return principal.name

    def path(self, principal: Principal, path: str) -> str:
        return authorize_path(principal, self.memory.store, path)
