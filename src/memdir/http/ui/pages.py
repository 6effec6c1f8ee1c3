"""The UI's routes: each page asks :class:`~.model.Views` for its data and renders a template."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import mimetypes
import posixpath
import re
import threading
import time
from collections.abc import AsyncIterator, Callable
from datetime import date
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

import anyio.to_thread
from jinja2 import Environment, FileSystemLoader, pass_context, select_autoescape
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from ... import __version__
from ...access import LOCAL, Principal, TokenRegistry, authorize_path, hash_token
from ...doc import frontmatter
from ...doc.turnrecord import is_turn_id
from ...errors import InvalidInput, MemdirError, NotFound, Unauthorized
from ...records import replace
from ..sessions import COOKIE, MAX_AGE_SECONDS, Sessions, cookie_value
from . import render
from .model import Views

HERE = Path(__file__).parent
STATIC = HERE / "static"
MODES = ("auto", "bm25", "vector", "hybrid")
MAX_FORM_BYTES = 64 * 1024

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
    "form-action 'self'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

_env = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)
_env.filters["doc"] = pass_context(lambda ctx, p: render.doc_href(p, ctx.get("base", "")))
_env.filters["q"] = lambda s: quote(str(s), safe="")
_env.filters["value"] = lambda v: v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
_markdown = render.Markdown()


def _principal(request: Request) -> Principal:
    found = getattr(request.state, "principal", None)
    return found if isinstance(found, Principal) else LOCAL


def views_of(app: Any) -> Views:
    """The app's :class:`Views`, made on first use."""
    views = getattr(app.state, "ui_views", None)
    if views is None:
        views = Views(app.state.memory)
        app.state.ui_views = views
    assert isinstance(views, Views)
    return views


def _views(request: Request) -> Views:
    return views_of(request.app)


def warm(app: Any) -> threading.Thread:
    """Build the pages' views in a background thread as the server starts; a failure (the
    store closed under it at shutdown) only leaves the first page to build them."""

    views = views_of(app)  # made here, before any request can race to make its own

    def run() -> None:
        try:
            views.warm()
        except Exception:  # the first request builds them instead
            logging.getLogger("memdir.http").debug("UI warm-up stopped", exc_info=True)

    thread = threading.Thread(target=run, name="memdir-ui-warm", daemon=True)
    thread.start()
    return thread


def base_of(request: Request) -> str:
    """Where the UI is served: ``""`` at the root, ``/stores/NAME`` for one store of many."""
    return str(request.scope.get("root_path") or "").rstrip("/")


def _page(request: Request, template: str, status: int = 200, **data: Any) -> HTMLResponse:
    principal = _principal(request)
    base = base_of(request)
    html = _env.get_template(template).render(
        me=principal,
        signed_in=principal.authenticated,
        auth_on=_registry(request).required,
        base=base,
        path=request.url.path.removeprefix(base) or "/",
        version=__version__,
        **data,
    )
    return HTMLResponse(html, status_code=status, headers=HEADERS)


def _registry(request: Request) -> TokenRegistry:
    registry = request.app.state.registry
    assert isinstance(registry, TokenRegistry)
    return registry


def _error(request: Request, exc: MemdirError) -> HTMLResponse:
    return _page(request, "error.html", status=exc.http_status, error=exc)


def page(handler: Callable[[Request], Response]) -> Callable[[Request], Any]:
    """A page handler run in a worker thread, needing the read scope; a memdir error is
    shown as a page with its status."""

    async def endpoint(request: Request) -> Response:
        def run() -> Response:
            try:
                _principal(request).require("read", f"{request.method} {request.url.path}")
                return handler(request)
            except MemdirError as exc:
                return _error(request, exc)

        return await anyio.to_thread.run_sync(run)

    return endpoint


async def _form(request: Request) -> dict[str, str]:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise InvalidInput("the form is too large")
    fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {k: v[0] for k, v in fields.items()}


# -- pages ----------------------------------------------------------------------------


def home(request: Request) -> Response:
    data = _views(request).home(_principal(request))
    plots = {}
    if data["whole"]:
        plots["drift"] = Markup(
            render.trend_svg(data["drift"], title="drift", lower_is_better=True)
        )
        plots["mrr"] = Markup(
            render.trend_svg(data["mrr"], title="evaluation MRR", lower_is_better=False)
        )
    snapshot = None
    if data["snapshot"] is not None:
        snapshot = _rendered(request, "SNAPSHOT.md", data["snapshot"])
    return _page(request, "home.html", data=data, plots=plots, snapshot=snapshot)


def search(request: Request) -> Response:
    principal = _principal(request)
    views = _views(request)
    args = request.query_params
    q = args.get("q", "").strip()
    mode = args.get("mode", "auto")
    if mode not in MODES:
        raise InvalidInput(f"mode must be one of {', '.join(MODES)}")
    form = {
        k: args.get(k, "").strip() for k in ("kind", "prefix", "since", "until", "thread", "user")
    }
    form.update(q=q, mode=mode)
    hits: list[Any] = []
    fell_back = None
    if q:
        since, until = _day(form["since"], "since"), _day(form["until"], "until")
        where = [f"{key}={form[key]}" for key in ("thread", "user") if form[key]]
        limit = 50 if (since or until) else 20
        hits = views.mem.search(
            q,
            limit=limit,
            path_prefix=principal.confine(form["prefix"] or None),
            kind=form["kind"] or None,
            where=where,
            mode=None if mode == "auto" else mode,
        )
        if since or until:
            dated = {r.path: r.created[:10] for r in views.rows(principal)}
            hits = [
                h
                for h in hits
                if (d := dated.get(h.path, ""))
                and (not since or d >= since)
                and (not until or d <= until)
            ][:20]
        fell_back = views.mem.search_mode(None if mode == "auto" else mode)
    return _page(request, "search.html", form=form, hits=hits, mode_note=fell_back, modes=MODES)


def _day(value: str, name: str) -> str:
    if not value:
        return ""
    try:
        return date.fromisoformat(value).isoformat()
    except ValueError:
        raise InvalidInput(f"{name}: a date as YYYY-MM-DD") from None


def browse(request: Request) -> Response:
    principal = _principal(request)
    if "prefix" in request.query_params:
        offset = _int(request.query_params.get("offset", "0") or "0", "offset", 0, 10**9)
        folder = _views(request).folder(principal, request.query_params["prefix"], offset)
        return _page(request, "browse.html", folder=folder, tree=None)
    return _page(request, "browse.html", tree=_views(request).tree(principal), folder=None)


def _rendered(request: Request, path: str, content: str) -> Markup:
    parsed = frontmatter.parse(content)
    views = _views(request)
    graph = views.graph()
    principal = _principal(request)
    leaks = views.leaks(principal)
    sources = _sources(parsed.fm if parsed.has_block else {})

    def resolve(target: str) -> str | None:
        found = graph.resolve(path, target, "wikilink")
        return found if found is not None and views.shown(principal, found, leaks) else None

    return Markup(
        _markdown.render(
            parsed.body, path=path, resolve=resolve, sources=sources, base=base_of(request)
        )
    )


def _sources(fm: dict[str, Any]) -> dict[str, str]:
    out = {}
    for item in fm.get("sources") or []:
        if isinstance(item, dict) and item.get("id") and item.get("resource"):
            out[str(item["id"])] = str(item["resource"])
    return out


COMMIT_ID = re.compile(r"[0-9a-f]{7,64}")


def document(request: Request) -> Response:
    principal = _principal(request)
    views = _views(request)
    mem = views.mem
    norm = authorize_path(principal, mem.store, request.path_params["path"])
    result = mem.read(norm)
    parsed = frontmatter.parse(result.content)
    fm = parsed.fm if parsed.has_block and not parsed.error else {}
    sha = request.query_params.get("commit", "")
    if sha and not COMMIT_ID.fullmatch(sha):
        raise InvalidInput("commit: a commit id of 7 to 64 hex digits")
    citations = [
        {"id": k, "resource": v, "shown": principal.covers(v)} for k, v in _sources(fm).items()
    ]
    provenance = {
        key: [e for e in (fm.get(key) or []) if isinstance(e, dict)]
        for key in ("derived-from", "merged-from")
    }
    return _page(
        request,
        "document.html",
        doc_path=norm,
        title=fm.get("title") or posixpath.basename(norm),
        body=_rendered(request, norm, result.content),
        fm={k: v for k, v in fm.items() if k not in ("derived-from", "merged-from", "sources")},
        citations=citations,
        provenance=provenance,
        backlinks=views.backlinks(principal, norm),
        history=views.history(norm),
        commit=sha,
        diff=views.diff(norm, sha) if sha else "",
        turn_id=fm.get("episode_id") if fm.get("type") == "turn" else None,
    )


def thread(request: Request) -> Response:
    principal = _principal(request)
    views = _views(request)
    name = request.path_params["thread"]
    last = _int(request.query_params.get("last", "50"), "last", 1, 10_000)
    found = views.thread(principal, name, last)
    if not found["count"]:
        raise NotFound(f"no turns in thread {name!r}")
    pack = None
    if not principal.prefix:
        newest = found["records"][-1] if found["records"] else None
        user = request.query_params.get("user", newest.user if newest else "")
        pack = views.context(principal, name, user, request.query_params.get("keywords", ""))
    return _page(
        request,
        "thread.html",
        thread=name,
        turns=found["records"],
        earlier=found["earlier"],
        count=found["count"],
        pack=pack,
        last=last,
    )


def _int(value: str, name: str, low: int, high: int) -> int:
    # ASCII digits only ("²" is a digit to str.isdigit but not to int), and few of them
    if not (value.isascii() and value.isdigit() and len(value) <= 18) or not (
        low <= int(value) <= high
    ):
        raise InvalidInput(f"{name}: a whole number from {low} to {high}")
    return int(value)


def _turn_of(request: Request) -> tuple[Any, Any, Any]:
    """(principal, views, record) of the turn the path names, checked against the token."""
    principal = _principal(request)
    views = _views(request)
    ident = request.path_params["turn_id"]
    if not is_turn_id(ident):
        raise NotFound(f"no turn {ident!r}")
    record = views.mem.turn_show(ident)
    authorize_path(principal, views.mem.store, record.path)
    return principal, views, record


def turn(request: Request) -> Response:
    principal, views, record = _turn_of(request)
    ident = record.id
    items, edges = views.dag(principal, ident)
    base = base_of(request)
    items = [replace(i, href=base + i.href) for i in items]
    return _page(
        request,
        "turn.html",
        turn=record,
        dag=Markup(render.dag_svg(items, edges)),
        nodes=items,
    )


def worklog(request: Request) -> Response:
    _, views, record = _turn_of(request)
    data = views.mem.turn_worklog(record.id)
    return Response(data, media_type="text/plain; charset=utf-8", headers=HEADERS)


def coverage(request: Request) -> Response:
    data = _views(request).coverage(_principal(request))
    return _page(
        request,
        "coverage.html",
        data=data,
        now=time.time(),
        done=request.query_params.get("released"),
    )


async def release(request: Request) -> Response:
    principal = _principal(request)
    try:
        form = await _form(request)
        path = form.get("path", "")
        bundle = form.get("bundle", "")
        topic = form.get("topic", "")
        if not bundle:
            raise InvalidInput("bundle: choose the bundle to release the source into")

        def run() -> dict[str, Any]:
            return _views(request).release(principal, path, bundle, topic)

        await anyio.to_thread.run_sync(run)
    except MemdirError as exc:
        return await anyio.to_thread.run_sync(functools.partial(_error, request, exc))
    target = base_of(request) + "/coverage?released=" + quote(path, safe="")
    return RedirectResponse(target, status_code=303)


def graph_page(request: Request) -> Response:
    bundles, size = _views(request).graph_summary(_principal(request))
    return _page(request, "graph.html", bundles=bundles, size=size)


def graph_json(request: Request) -> Response:
    bundle = request.query_params.get("bundle", "")
    body = _views(request).graph_json(_principal(request), bundle)
    return Response(body, media_type="application/json", headers=HEADERS)


def live(request: Request) -> Response:
    return _page(request, "live.html")


# -- live events ------------------------------------------------------------------------


async def events(request: Request) -> Response:
    """Server-sent events: each new turn (``turn``) and engine run (``run``) as it lands."""
    from sse_starlette.sse import EventSourceResponse

    principal = _principal(request)
    principal.require("read", "GET /events")
    views = _views(request)
    interval = _interval(request.query_params.get("interval", ""))

    def snapshot() -> tuple[dict[str, str], int]:
        turns = views.turns(principal)
        runs_file = views.root / ".memdir" / "runs.tsv"
        size = runs_file.stat().st_size if runs_file.is_file() and not principal.prefix else 0
        return turns, size

    async def stream() -> AsyncIterator[dict[str, str]]:
        seen, size = await anyio.to_thread.run_sync(snapshot)
        yield {"event": "hello", "data": json.dumps({"turns": len(seen)})}
        while True:
            if await request.is_disconnected() or not _still_signed_in(request, principal):
                return
            await asyncio.sleep(interval)
            now, new_size = await anyio.to_thread.run_sync(snapshot)
            for path in sorted(now.keys() - seen.keys()):
                title = now[path]
                ident = posixpath.basename(path).removesuffix(".md")
                yield {
                    "event": "turn",
                    "data": json.dumps({"path": path, "title": title, "id": ident}),
                }
            if new_size > size:
                tail = await anyio.to_thread.run_sync(_runs_after, views.root, size)
                for line in tail:
                    yield {"event": "run", "data": json.dumps(line)}
            seen, size = now, new_size

    return EventSourceResponse(stream(), ping=15, headers={"Cache-Control": "no-store"})


def _interval(value: str) -> float:
    """Seconds between two looks at the store: 0.1 to 10, 1 when not given."""
    if not value:
        return 1.0
    try:
        seconds = float(value)
    except ValueError:
        raise InvalidInput("interval: seconds from 0.1 to 10") from None
    if not math.isfinite(seconds):
        raise InvalidInput("interval: seconds from 0.1 to 10")
    return min(max(seconds, 0.1), 10.0)


def _still_signed_in(request: Request, principal: Principal) -> bool:
    """Whether the token (or session) that opened a long stream still holds: a token revoked,
    or a session ended, while the stream is open ends it."""
    if not principal.authenticated:
        return True
    registry = _registry(request)
    authorization = request.headers.get("authorization")
    if authorization:
        try:
            registry.authenticate(authorization, required=True)
        except MemdirError:
            return False
        return True
    sessions = request.state.sessions
    digest = sessions.digest(cookie_value(request.headers.get("cookie")))
    return digest is not None and registry.by_digest(digest) is not None


def _runs_after(root: Path, offset: int) -> list[dict[str, str]]:
    with open(root / ".memdir" / "runs.tsv", "rb") as fh:
        fh.seek(offset)
        text = fh.read().decode("utf-8", "replace")
    out = []
    for line in text.splitlines():
        cols = line.split("\t")
        if len(cols) >= 3 and cols[0] != "timestamp":
            out.append(
                {
                    "timestamp": cols[0],
                    "verb": cols[1],
                    "status": cols[2],
                    "notes": cols[3] if len(cols) > 3 else "",
                }
            )
    return out


# -- sign-in ------------------------------------------------------------------------------


def _next(value: str | None, base: str) -> str:
    """Where to go after signing in: a page of this UI only (no ``//host``, no other store)."""
    if not value or not value.startswith(base + "/") or value.startswith("//") or "\\" in value:
        return base + "/"
    return value


async def signin(request: Request) -> Response:
    registry = _registry(request)
    base = base_of(request)
    target = _next(request.query_params.get("next"), base)
    if request.method == "GET":
        return await anyio.to_thread.run_sync(
            lambda: _page(request, "signin.html", next=target, failed=False)
        )
    form = await _form(request)
    target = _next(form.get("next"), base)
    token = form.get("token", "").strip()
    try:
        if not token:
            raise Unauthorized("enter a token")
        found = registry.authenticate(f"Bearer {token}", required=True)
    except MemdirError:
        return await anyio.to_thread.run_sync(
            lambda: _page(request, "signin.html", status=401, next=target, failed=True)
        )
    sessions = request.state.sessions
    assert isinstance(sessions, Sessions)
    digest = hash_token(token)
    assert registry.by_digest(digest) == found
    session_id = sessions.create(digest)
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        COOKIE,
        session_id,
        max_age=int(MAX_AGE_SECONDS),
        path=base + "/",  # each store of many signs in on its own
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


async def signout(request: Request) -> Response:
    sessions = request.state.sessions
    assert isinstance(sessions, Sessions)
    sessions.end(cookie_value(request.headers.get("cookie")))
    base = base_of(request)
    response = RedirectResponse(base + "/signin", status_code=303)
    response.delete_cookie(COOKIE, path=base + "/", httponly=True, samesite="strict")
    return response


# -- assets -------------------------------------------------------------------------------


def static(request: Request) -> Response:
    name = request.path_params["name"]
    files = {p.name: p for p in STATIC.iterdir() if p.is_file()}
    if name not in files:  # only the package's own files, by exact name
        return Response("not found", status_code=404, media_type="text/plain")
    kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
    if name.endswith(".js"):
        kind = "text/javascript"
    headers = {**HEADERS, "Cache-Control": "max-age=3600"}
    return Response(files[name].read_bytes(), media_type=kind, headers=headers)


def routes() -> list[BaseRoute]:
    """The UI's routes, mounted by :func:`memdir.http.app.create_api` (not in the OpenAPI
    document: they answer HTML)."""
    return [
        Route("/", page(home), methods=["GET"]),
        Route("/search", page(search), methods=["GET"]),
        Route("/browse", page(browse), methods=["GET"]),
        Route("/doc/{path:path}", page(document), methods=["GET"]),
        Route("/thread/{thread}", page(thread), methods=["GET"]),
        Route("/turn/{turn_id}", page(turn), methods=["GET"]),
        Route("/turn/{turn_id}/worklog", page(worklog), methods=["GET"]),
        Route("/coverage", page(coverage), methods=["GET"]),
        Route("/coverage/release", release, methods=["POST"]),
        Route("/graph", page(graph_page), methods=["GET"]),
        Route("/graph.json", page(graph_json), methods=["GET"]),
        Route("/live", page(live), methods=["GET"]),
        Route("/events", events, methods=["GET"]),
        Route("/signin", signin, methods=["GET", "POST"]),
        Route("/signout", signout, methods=["POST"]),
        Route("/static/{name}", static, methods=["GET"]),
    ]
