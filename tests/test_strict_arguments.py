"""Strict arguments on every route and every tool, found by walking the OpenAPI document
and the MCP tool list: unknown names are refused, booleans are booleans, and MCP words a
refusal as HTTP does (``limit: must be at least 1``). Nothing refused changes a file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from helpers import files_of
from http_server import Live, live_server

UNKNOWN = "zz_unknown"
PATH_VALUES = {"path": "notes/a.md", "turn_id": "01aaaaaaaaaaaaaaaaaaaaaaaa", "thread": "t"}
METHODS = ("get", "put", "post", "patch", "delete")


class Schemas:
    """Resolves ``$ref`` and optional (``anyOf`` with null) schemas; makes valid samples."""

    def __init__(self, defs: dict[str, Any]) -> None:
        self.defs = defs

    def resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        while True:
            if "$ref" in schema:
                schema = self.defs[schema["$ref"].rsplit("/", 1)[-1]]
            elif "anyOf" in schema:
                schema = next(s for s in schema["anyOf"] if s.get("type") != "null")
            else:
                return schema

    def sample(self, schema: dict[str, Any]) -> Any:
        schema = self.resolve(schema)
        if "enum" in schema:
            return schema["enum"][0]
        if "const" in schema:
            return schema["const"]
        kind = schema.get("type")
        if kind == "integer":
            return max(int(schema.get("minimum", 1)), 1)
        if kind == "boolean":
            return False
        if kind == "array":
            return [self.sample(schema.get("items", {}))] * int(schema.get("minItems", 0))
        if kind == "object":
            props = schema.get("properties", {})
            return {k: self.sample(props[k]) for k in schema.get("required", [])}
        return "x"

    def properties(self, schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
        resolved = self.resolve(schema)
        return {k: self.resolve(v) for k, v in resolved.get("properties", {}).items()}


def bad_values(schema: dict[str, Any]) -> list[tuple[Any, str]]:
    """Values a field must refuse, with the problem the refusal must name."""
    if schema.get("type") == "boolean":
        return [("yes", "must be true or false")]
    if schema.get("type") == "integer" and "minimum" in schema:
        low = int(schema["minimum"])
        return [(low - 1, f"must be at least {low}")]
    return []


@pytest.fixture
def live(store_root: Path) -> Iterator[Live]:
    with live_server(store_root, {"embeddings": {"enabled": False}}) as server:
        yield server


def operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in doc["paths"].items():
        for method in METHODS:
            if method in item:
                yield method.upper(), path, item[method]


def http_cases(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any], Any, str]]:
    """(method, url, query, json body, the refusal's expected message start) per case."""
    schemas = Schemas(doc.get("components", {}).get("schemas", {}))
    for method, path, op in operations(doc):
        url = path
        for name, value in PATH_VALUES.items():
            url = url.replace("{" + name + "}", value)
        params = [p for p in op.get("parameters", []) if p["in"] == "query"]
        query = {p["name"]: schemas.sample(p["schema"]) for p in params if p.get("required")}
        content = op.get("requestBody", {}).get("content", {}).get("application/json")
        body_schema = content["schema"] if content else None
        body = schemas.sample(body_schema) if body_schema else None
        if not path.endswith("/health"):  # a probe may add a cache-buster
            yield method, url, {**query, UNKNOWN: "1"}, body, f"{UNKNOWN}: unknown query parameter"
        if body_schema is not None or method != "GET":
            yield method, url, query, {**(body or {}), UNKNOWN: 1}, f"{UNKNOWN}: unknown field"
        for p in params:
            for value, problem in bad_values(schemas.resolve(p["schema"])):
                text = str(value).lower() if isinstance(value, bool) else str(value)
                yield method, url, {**query, p["name"]: text}, body, f"{p['name']}: {problem}"
        if body_schema is not None:
            for name, field in schemas.properties(body_schema).items():
                for value, problem in bad_values(field):
                    yield method, url, query, {**(body or {}), name: value}, f"{name}: {problem}"


def test_every_route_refuses_unknown_names_and_non_booleans(live: Live, store_root: Path) -> None:
    before = files_of(store_root)
    with live.client() as client:
        doc = client.get("/openapi.json").json()
        cases = list(http_cases(doc))
        for method, url, query, body, message in cases:
            answer = client.request(method, url, params=query, json=body)
            label = f"{method} {url} {query} {body}"
            assert answer.status_code == 400, (label, answer.text)
            error = answer.json()["error"]
            assert error["code"] == "invalid_input", (label, error)
            assert error["message"].startswith(message), (label, error["message"])
    assert files_of(store_root) == before
    walked = {(m, u) for m, u, *_ in cases}
    assert ("POST", "/v1/reindex") in walked and ("GET", "/v1/grep") in walked
    assert len(walked) == sum(1 for _, path, _ in operations(doc) if not path.endswith("/health"))
    refusals = {(url, message) for _, url, _, _, message in cases}
    for url, name in [
        ("/v1/reindex", "full"),
        ("/v1/forget", "purge"),
        ("/v1/grep", "ignore_case"),
    ]:
        assert (url, f"{name}: must be true or false") in refusals
    assert ("/v1/search", "limit: must be at least 1") in refusals


def test_every_tool_refuses_unknown_names_and_non_booleans(live: Live, store_root: Path) -> None:
    before = files_of(store_root)
    seen: dict[str, list[str]] = {}

    async def go() -> None:
        async with Client(streamable_http_client(f"{live.url}/mcp")) as client:
            for tool in (await client.list_tools()).tools:
                schema = tool.input_schema
                assert schema.get("additionalProperties") is False, tool.name
                schemas = Schemas(schema.get("$defs", {}))
                base = schemas.sample(schema)
                cases = [({**base, UNKNOWN: 1}, f"{UNKNOWN}: unknown field")]
                for name, field in schemas.properties(schema).items():
                    cases += [({**base, name: v}, f"{name}: {p}") for v, p in bad_values(field)]
                    if field.get("type") == "boolean":
                        cases.append(({**base, name: "true"}, f"{name}: must be true or false"))
                for args, message in cases:
                    result = await client.call_tool(tool.name, args)
                    text = "".join(getattr(block, "text", "") for block in result.content)
                    assert result.is_error, (tool.name, args, text)
                    assert text == f"error: {message}", (tool.name, args, text)
                seen[tool.name] = [m for _, m in cases]

    anyio.run(go)
    assert files_of(store_root) == before
    assert "full: must be true or false" in seen["reindex"]
    assert "ignore_case: must be true or false" in seen["grep"]
    assert "limit: must be at least 1" in seen["search"]


def test_mcp_and_http_word_a_refusal_alike(live: Live) -> None:
    with live.client() as client:
        http = client.get("/v1/grep", params={"pattern": "x", "limit": 0}).json()["error"]

    async def go() -> str:
        async with Client(streamable_http_client(f"{live.url}/mcp")) as client:
            result = await client.call_tool("grep", {"pattern": "x", "limit": 0})
            return "".join(getattr(block, "text", "") for block in result.content)

    assert http["message"] == "limit: must be at least 1"
    assert anyio.run(go) == f"error: {http['message']}"
