"""The page at ``/`` of a server of many stores: a link to each store's web UI.

Store names are listed only to a client on this machine asking by a loopback name; others are asked
for the name (each store's UI then asks for one of that store's tokens). The page holds no
store's content and needs no token.
"""

from __future__ import annotations

from html import escape
from urllib.parse import parse_qs, quote

from ..access import is_loopback
from .serving import Scope, Send

_HEADERS = [
    (b"content-type", b"text/html; charset=utf-8"),
    (b"content-security-policy", b"default-src 'none'; style-src 'self'; form-action 'self'"),
    (b"x-content-type-options", b"nosniff"),
    (b"cache-control", b"no-store"),
]


async def redirect(send: Send, location: str) -> None:
    """A 303 to ``location`` (a path of this server, already quoted)."""
    headers = [(b"location", location.encode("latin-1")), (b"content-length", b"0")]
    await send({"type": "http.response.start", "status": 303, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


async def picker(scope: Scope, send: Send, names: list[str]) -> None:
    asked = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("store", [""])[0]
    if asked and "/" not in asked:
        await redirect(send, f"/stores/{quote(asked, safe='')}/")
        return
    client = scope.get("client")
    host = next(
        (bytes(v).decode("latin-1") for k, v in scope.get("headers", ()) if k == b"host"), ""
    )
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    # a loopback peer asking by a loopback name (a page reached by DNS rebinding is not)
    local = (not client or is_loopback(str(client[0]))) and is_loopback(name.strip("[]"))
    if local:
        items = "".join(
            f'<li><a href="/stores/{escape(quote(n, safe=""))}/">{escape(n)}</a></li>'
            for n in names
        )
        listing = f"<ul>{items}</ul>" if names else "<p>No stores are configured.</p>"
    else:
        listing = (
            '<form method="get" action="/"><label for="store">Store</label> '
            '<input id="store" name="store" required> <button type="submit">Open</button></form>'
        )
    page = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>Stores · memdir</title></head><body><main><h1>Stores</h1>"
        f"{listing}<p>Each store has its own tokens and sign-in.</p></main></body></html>"
    ).encode()
    headers = [*_HEADERS, (b"content-length", str(len(page)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": page})
