"""Fuzz the HTTP API against its own OpenAPI document (schemathesis): never a 500.

Bounded: a few examples per operation, so the whole run takes seconds.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote

import httpx
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.routing import Route

from http_server import live_server

EXAMPLES = 5
UI_EXAMPLES = 25
# Each operation of a schema: a few examples, no deadline, nothing kept between runs.
PER_OPERATION = settings(
    max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)


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

                @PER_OPERATION
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


# -- the web UI -----------------------------------------------------------------------------
# The UI's pages answer HTML and are not in the OpenAPI document, so schemathesis cannot
# reach them. Instead every UI route is listed here with its path, query and form
# parameters, and hypothesis sends each one hostile values: traversal, NUL and control
# characters, markup, huge and unicode text, bad dates and numbers. A route the UI serves
# that this list does not name fails the test, so a new page joins the fuzz or the build
# breaks.

HOSTILE = [
    "",
    " ",
    "../../etc/passwd",
    "..%2f..%2f.git%2fconfig",
    ".git/config",
    ".memdir/config.toml",
    "/etc/passwd",
    "\x00",
    "a\x00b",
    "\r\nSet-Cookie: x=1",
    "\x1b[2J",
    "<script>alert(1)</script>",
    "\"'><img src=x onerror=alert(1)>",
    "javascript:alert(1)",
    "//evil.test/",
    "%",
    "%zz",
    "ü\u202e💥\ufeff",
    "2026-13-45",
    "0000-00-00",
    "-1",
    "1e99",
    "9" * 40,
    "x" * 6000,
    "wiki/",
    "episodes/turns/",
    "quarantine/",
    "inbox/",
]
UI_STRINGS = st.one_of(
    st.sampled_from(HOSTILE),
    st.text(st.characters(blacklist_categories=["Cs"]), max_size=60),
    st.builds(lambda a, b: a + b, st.sampled_from(HOSTILE), st.text(max_size=8)),
)

# (method, route as the app names it, path parameters, query parameters, form fields)
UI_ROUTES: list[tuple[str, str, tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = [
    ("GET", "/", (), (), ()),
    (
        "GET",
        "/search",
        (),
        ("q", "mode", "kind", "prefix", "since", "until", "thread", "user"),
        (),
    ),
    ("GET", "/browse", (), ("prefix", "offset"), ()),
    ("GET", "/doc/{path:path}", ("path",), ("commit",), ()),
    ("GET", "/thread/{thread}", ("thread",), ("last", "user", "keywords"), ()),
    ("GET", "/turn/{turn_id}", ("turn_id",), (), ()),
    ("GET", "/turn/{turn_id}/worklog", ("turn_id",), (), ()),
    ("GET", "/coverage", (), ("released",), ()),
    ("POST", "/coverage/release", (), (), ("path", "bundle", "topic")),
    ("GET", "/graph", (), (), ()),
    ("GET", "/graph.json", (), ("bundle",), ()),
    ("GET", "/live", (), (), ()),
    ("GET", "/events", (), ("interval",), ()),
    ("GET", "/signin", (), ("next",), ()),
    ("POST", "/signin", (), (), ("token", "next")),
    ("POST", "/signout", (), (), ()),
    ("GET", "/static/{name}", ("name",), (), ()),
]
KNOWN = {
    "thread": ["t1"],
    "turn_id": [],  # filled with the store's turn ids
    "path": ["wiki/kitchen/notes/rye.md", "private/vault.md"],
    "mode": ["bm25", "hybrid", "vector", "auto"],
    "last": ["1", "50", "0", "10001"],
    "offset": ["0", "500"],
    "since": ["2020-01-01"],
    "until": ["2999-12-31"],
    "name": ["ui.css", "ui.js", "..", "../pages.py"],
    "interval": ["0.1", "nan", "inf", "-5"],
}
TRACE = re.compile(r"Traceback \(most recent call last\)|File \"/[^\"]+\.py\", line \d+")


def _ui_value(name: str) -> st.SearchStrategy[str]:
    known = KNOWN.get(name) or []
    return st.one_of(st.sampled_from(known), UI_STRINGS) if known else UI_STRINGS


def _fill(route: str, values: dict[str, str]) -> str:
    out = route
    for name, value in values.items():
        safe = "/" if name == "path" else ""
        out = re.sub(r"\{" + name + r"(:path)?\}", quote(value, safe=safe), out)
    return out


def _ask(
    client: httpx.Client,
    method: str,
    target: str,
    query: dict[str, str],
    form: dict[str, str],
    headers: dict[str, str],
) -> tuple[httpx.Response, str]:
    if target.startswith("/events"):  # a stream: read its first event, then hang up
        with client.stream("GET", target, params=query) as answer:
            if answer.status_code == 200:
                return answer, next(answer.iter_lines(), "")
            return answer, answer.read().decode()
    answer = client.request(method, target, params=query, data=form or None, headers=headers)
    return answer, answer.text


def _reflected(value: str, body: str) -> bool:
    """Whether markup the caller sent reaches the page as markup (not escaped)."""
    return len(value) >= 3 and any(c in value for c in "<>\"'") and value in body


def test_no_ui_route_answers_500_or_reflects_its_input(tmp_path: Path) -> None:
    from memdir.http import ui
    from uistore import OFFLINE, build

    store = build(tmp_path)
    KNOWN["turn_id"] = [*store.turns, "0" * 26]
    served = {
        (method, route.path)
        for route in ui.routes()
        if isinstance(route, Route)
        for method in (route.methods or ())
        if method != "HEAD"
    }
    assert served == {(m, r) for m, r, *_ in UI_ROUTES}, "a UI route is missing from the fuzz"
    failures: list[str] = []
    tried: dict[str, int] = {}
    with live_server(store.root, OFFLINE, mcp=False) as live, live.client() as client:
        for spec in UI_ROUTES:
            _fuzz_route(client, live.url, spec, failures, tried)
    for _, route, *names in UI_ROUTES:  # a route without parameters has one case
        assert tried.get(route, 0) >= (3 if any(names) else 1), (route, tried)
    assert not failures, failures[:8]


def _fuzz_route(
    client: httpx.Client,
    url: str,
    spec: tuple[str, str, tuple[str, ...], tuple[str, ...], tuple[str, ...]],
    failures: list[str],
    tried: dict[str, int],
) -> None:
    method, route, path_names, query_names, form_names = spec
    fields = {n: _ui_value(n) for n in path_names + query_names + form_names}

    @settings(
        max_examples=UI_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(values=st.fixed_dictionaries({}, optional=fields))
    def check(values: dict[str, str]) -> None:
        target = _fill(route, {n: values.get(n, "x") for n in path_names})
        query = {n: values[n] for n in query_names if n in values}
        form = {n: values[n] for n in form_names if n in values}
        label = f"{method} {target} {query or form}"[:300]
        tried[route] = tried.get(route, 0) + 1
        headers = {"Origin": url} if method == "POST" else {}
        try:
            answer, body = _ask(client, method, target, query, form, headers)
        except httpx.TransportError as exc:  # the server dropped the connection
            failures.append(f"{label}: {exc!r}")
            return
        if answer.status_code >= 500:
            failures.append(f"{label}: {answer.status_code} {body[:200]}")
        if TRACE.search(body):
            failures.append(f"{label}: a stack trace in the body")
        if answer.headers.get("content-type", "").startswith("text/html"):
            if "Content-Security-Policy" not in answer.headers:
                failures.append(f"{label}: no Content-Security-Policy")
            for value in values.values():
                if _reflected(value, body):
                    failures.append(f"{label}: {value!r} reflected unescaped")
        location = answer.headers.get("location", "").removeprefix(url)
        if location and (not location.startswith("/") or location.startswith("//")):
            failures.append(f"{label}: redirected off this server to {location!r}")

    check()


def ui_openapi() -> dict[str, object]:
    """An OpenAPI document of the UI's routes (HTML pages, forms, a stream), written from
    :data:`UI_ROUTES`, so schemathesis can drive them as it drives the JSON API."""
    paths: dict[str, dict[str, object]] = {}
    for method, route, path_names, query_names, form_names in UI_ROUTES:
        path = re.sub(r"\{(\w+):path\}", r"{\1}", route)
        parameters = [
            {"name": n, "in": "path", "required": True, "schema": {"type": "string"}}
            for n in path_names
        ] + [{"name": n, "in": "query", "schema": {"type": "string"}} for n in query_names]
        operation: dict[str, object] = {
            "parameters": parameters,
            "responses": {"200": {"description": "a page", "content": {"text/html": {}}}},
        }
        if form_names:
            properties = {n: {"type": "string"} for n in form_names}
            form = {"schema": {"type": "object", "properties": properties}}
            operation["requestBody"] = {
                "content": {"application/x-www-form-urlencoded": form},
            }
        paths.setdefault(path, {})[method.lower()] = operation
    return {"openapi": "3.0.3", "info": {"title": "memdir web UI", "version": "1"}, "paths": paths}


def test_schemathesis_reaches_every_ui_route(tmp_path: Path) -> None:
    from uistore import OFFLINE, build

    store = build(tmp_path)
    schema = schemathesis.openapi.from_dict(ui_openapi())
    seen: set[tuple[str, str]] = set()
    failures: list[str] = []
    with live_server(store.root, OFFLINE, mcp=False) as live, live.client() as client:
        for result in schema.get_all_operations():
            operation = result.ok()

            @PER_OPERATION
            @given(case=operation.as_strategy())
            def check(case: schemathesis.Case) -> None:
                seen.add((case.method.upper(), case.operation.path))
                query = {k: str(v) for k, v in (case.query or {}).items()}
                form = case.body if isinstance(case.body, dict) else {}
                form = {k: str(v) for k, v in form.items()}
                headers = {"Origin": live.url} if case.method.upper() == "POST" else {}
                label = f"{case.method} {case.formatted_path} {query or form}"[:300]
                try:
                    answer, body = _ask(
                        client, case.method, case.formatted_path, query, form, headers
                    )
                except httpx.TransportError as exc:
                    failures.append(f"{label}: {exc!r}")
                    return
                if answer.status_code >= 500 or TRACE.search(body):
                    failures.append(f"{label}: {answer.status_code} {body[:200]}")
                html = answer.headers.get("content-type", "").startswith("text/html")
                if html and "Content-Security-Policy" not in answer.headers:
                    failures.append(f"{label}: no Content-Security-Policy")

            check()
    wanted = {(m, re.sub(r"\{(\w+):path\}", r"{\1}", r)) for m, r, *_ in UI_ROUTES}
    assert seen == wanted
    assert not failures, failures[:8]
