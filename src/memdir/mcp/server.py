"""Build the MCP server: one tool per verb, resources for the store's key files.

Tools return JSON text. A failing verb is a tool error whose text is exactly
the CLI's error line (``error: <message>``). Over HTTP each call checks the
bearer token's scope and prefix; over stdio the caller is the local user.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast
from urllib.parse import unquote

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, CallToolResult, TextContent
from pydantic import ConfigDict, ValidationError

from .. import __version__, arguments
from ..access import LOCAL, TokenRegistry
from ..errors import MemdirError
from ..service import Memory
from . import tools
from .tooling import Tooling

INSTRUCTIONS = """\
memdir is your memory: a folder of markdown files (episodes, turn records, wiki articles).
Use it in two modes.
Mode one, at the start of every turn: call `context` once with the thread (and user and a few
keywords). It returns a small, fixed-size pack: recent turns of the thread, the user's turns,
turns matching the keywords, recent ancestors, the snapshot; each item says why it is there.
Mode two, during the turn, only when you need something precise: `search` (ranked pointers),
`grep` (regex lines), `read` (a file or one section), `walk` (list a folder), `turn_ancestors`
(walk the turn DAG). Search returns pointers, never bodies: read what you need.
At the end of the turn call `turn_record` with your input, output, the ids of the turns you
used as parents, and your work log. Write files with `write` (give provenance type:id).
When a memory turns out wrong or stale, `forget` it (superseded: hidden, not deleted).
"""


def build_server(memory: Memory, *, registry: TokenRegistry | None = None) -> MCPServer:
    """The MCP server for ``memory`` (tools and resources registered)."""
    server: MCPServer = MCPServer(
        "memdir",
        version=__version__,
        instructions=INSTRUCTIONS,
        log_level="WARNING",
    )
    tooling = Tooling(memory, registry or TokenRegistry([]))
    tools.register(server, tooling)
    _strict_arguments(server)
    _resources(server, tooling)
    return server


_REFUSED = "\0refused"  # no argument can have this name: it carries the refusal to call_fn


class StrictArguments(FuncMetadata):
    """A tool's arguments as the HTTP API takes them: unknown names refused, no coercion
    (``"yes"`` is not ``true``), and the refusal worded as HTTP words it
    (``error: limit: must be at least 1``), not pydantic's report."""

    def pre_parse_json(self, data: dict[str, Any]) -> dict[str, Any]:
        # The SDK reads JSON text in a string ('["a"]' for a list, which some clients send);
        # a boolean stays a boolean: "true" as text is refused like "yes".
        parsed = super().pre_parse_json(data)
        return {
            key: data[key] if isinstance(value, bool) and isinstance(data.get(key), str) else value
            for key, value in parsed.items()
        }

    def validate_arguments(self, arguments_to_validate: dict[str, Any]) -> dict[str, Any]:
        try:
            return super().validate_arguments(arguments_to_validate)
        except ValidationError as exc:
            return {_REFUSED: arguments.describe(exc.errors())}

    async def call_fn(
        self,
        fn: Callable[..., Any],
        fn_is_async: bool,
        arguments: dict[str, Any],
        arguments_to_pass_directly: dict[str, Any] | None = None,
    ) -> Any:
        if _REFUSED in arguments:
            text = f"error: {arguments[_REFUSED]}"
            return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
        return await super().call_fn(fn, fn_is_async, arguments, arguments_to_pass_directly)


def _strict_arguments(server: MCPServer) -> None:
    """Give every tool :class:`StrictArguments` and an input schema that says so
    (``additionalProperties: false``). The SDK keeps its tools in a private manager;
    there is no public way to change how a registered tool validates."""
    for tool in server._tool_manager.list_tools():
        loose = tool.fn_metadata.arg_model
        config = ConfigDict(**{**loose.model_config, "extra": "forbid", "strict": True})
        strict = cast(
            "type[ArgModelBase]",
            type(loose.__name__, (loose,), {"model_config": config, "__module__": __name__}),
        )
        tool.fn_metadata = StrictArguments(
            arg_model=strict,
            output_schema=tool.fn_metadata.output_schema,
            output_model=tool.fn_metadata.output_model,
            wrap_output=tool.fn_metadata.wrap_output,
        )
        tool.parameters = strict.model_json_schema(by_alias=True)


RESOURCE_FILES = (
    ("SNAPSHOT.md", "the tier-0 snapshot injected at session start"),
    ("HARNESS.md", "the frozen contracts (article schema, citations, defects, hard rules)"),
    ("PROGRAM.md", "the iterable behaviour (identity, bundles, budgets, thresholds)"),
)
FILE_PREFIX = "memdir://files/"


def resource_path(uri: str) -> str:
    """The store path a ``memdir://`` resource URI names."""
    if uri.startswith(FILE_PREFIX):
        return unquote(uri[len(FILE_PREFIX) :])
    return unquote(uri.removeprefix("memdir://"))


def _resources(server: MCPServer, tooling: Tooling) -> None:
    """Static resources for the key files and a template for any file.

    Resource handlers take no context in the SDK, so :func:`_guard` checks the
    caller's token and prefix before any ``resources/read`` runs.
    """
    mem = tooling.memory

    def read(path: str) -> str:
        try:
            return mem.read(path).content
        except MemdirError as exc:
            raise ResourceError(f"error: {exc.message}") from None

    def static_resource(name: str) -> Callable[[], str]:
        def resource() -> str:
            return read(name)

        resource.__name__ = name.split(".", maxsplit=1)[0].lower()
        return resource

    for name, what in RESOURCE_FILES:
        server.resource(
            f"memdir://{name}", name=name, description=f"{name}: {what}.", mime_type="text/markdown"
        )(static_resource(name))

    def file(path: str) -> str:
        return read(path)

    server.resource(
        FILE_PREFIX + "{+path}",
        name="file",
        description="Any markdown file of the store by its store-relative path.",
        mime_type="text/markdown",
    )(file)

    async def guard(ctx: Any, call_next: Any) -> Any:
        if ctx.method == "resources/read":
            uri = str((ctx.params or {}).get("uri", ""))
            request = getattr(ctx, "request", None)
            headers = getattr(request, "headers", None)
            try:
                principal = (
                    LOCAL
                    if headers is None
                    else tooling.registry.authenticate(headers.get("authorization"))
                )
                principal.require("read", "reading a resource")
                tooling.path(principal, resource_path(uri))
            except MemdirError as exc:
                raise MCPError(INVALID_PARAMS, f"error: {exc.message}") from None
        return await call_next(ctx)

    server.middleware.append(guard)
