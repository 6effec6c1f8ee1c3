"""The MCP server (official SDK 2.x): tools and resources over :class:`memdir.service.Memory`.

Needs the ``mcp`` extra. ``memdir mcp`` serves it over stdio; ``memdir serve``
mounts it over streamable HTTP at ``/mcp``.
"""
