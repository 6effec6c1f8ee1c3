"""Fuzz the HTTP API against its own OpenAPI document (schemathesis): never a 500.

Bounded: a few examples per operation, so the whole run takes seconds.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import schemathesis
from hypothesis import HealthCheck, given, settings

from http_server import live_server

EXAMPLES = 5


def test_no_operation_answers_500(store_root: Path) -> None:
    (store_root / "episodes/e.md").write_text("---\nepisode_id: e\n---\n# E\n\nnote\n")
    overrides = {"embeddings": {"enabled": False}, "server": {"max_body_bytes": 65536}}
    with live_server(store_root, overrides, mcp=False) as live:
        doc = httpx.get(f"{live.url}/openapi.json").json()
        schema = schemathesis.openapi.from_dict(doc)
        seen: list[str] = []
        failures: list[str] = []
        with httpx.Client(base_url=live.url, timeout=30) as client:
            for result in schema.get_all_operations():
                operation = result.ok()
                seen.append(f"{operation.method.upper()} {operation.path}")

                @settings(
                    max_examples=EXAMPLES,
                    deadline=None,
                    database=None,
                    suppress_health_check=list(HealthCheck),
                )
                @given(case=operation.as_strategy())
                def check(case: schemathesis.Case) -> None:
                    kwargs = case.as_transport_kwargs(base_url=live.url)
                    kwargs.pop("url", None)
                    response = client.request(
                        kwargs.pop("method"),
                        case.formatted_path,
                        params=kwargs.get("params"),
                        headers=_clean(kwargs.get("headers") or {}),
                        json=kwargs.get("json"),
                    )
                    if response.status_code >= 500:
                        failures.append(f"{case.method} {case.formatted_path}: {response.text}")
                    if response.status_code >= 400:
                        body = response.json()
                        assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}

                check()
    assert len(seen) >= 25, seen
    assert not failures, failures[:5]


def _clean(headers: dict[str, str]) -> dict[str, str]:
    """Header values httpx can send (the fuzzer may produce bytes h11 refuses)."""
    out = {}
    for key, value in headers.items():
        text = str(value)
        if text == text.strip() and text.isprintable() and text.isascii():
            out[key] = text
    return out
