"""``GET /docs``: the API's reference page, rendered on the server from the OpenAPI document.

Plain HTML with inline styles and no script, so it works with no network (the framework's
interactive page loads its code from a CDN) and under a strict Content-Security-Policy.
"""

from __future__ import annotations

from html import escape
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

router = APIRouter()

METHODS = ("get", "post", "put", "patch", "delete")
POLICY = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
STYLE = """
body { font: 15px/1.5 system-ui, sans-serif; max-width: 960px; margin: 2em auto; padding: 0 1em; }
h2 { margin-top: 2em; border-bottom: 1px solid #ccc; }
.op { margin: 1.2em 0; } .verb { font: bold 13px monospace; padding: 2px 6px; background: #eee; }
code, td { font-size: 13px; } table { border-collapse: collapse; margin: .4em 0; }
td, th { border: 1px solid #ddd; padding: 2px 8px; text-align: left; }
"""


@router.get("/docs", include_in_schema=False)
def docs_page(request: Request) -> HTMLResponse:
    """The reference page (the schema itself is at ``/openapi.json``)."""
    page = render(request.app.openapi())
    return HTMLResponse(page, headers={"Content-Security-Policy": POLICY})


def render(spec: dict[str, Any]) -> str:
    """The page for an OpenAPI document: every operation grouped by tag, with its
    parameters, request body and responses."""
    info = spec.get("info", {})
    groups: dict[str, list[str]] = {}
    for path, item in spec.get("paths", {}).items():
        for method in METHODS:
            if method in item:
                op = item[method]
                tag = (op.get("tags") or ["other"])[0]
                groups.setdefault(tag, []).append(_operation(method, path, op))
    title = escape(f"{info.get('title', 'API')} {info.get('version', '')}".strip())
    body = [f"<h1>{title}</h1>", f"<p>{escape(str(info.get('description', '')))}</p>"]
    body.append('<p>The schema: <a href="/openapi.json">/openapi.json</a>.</p>')
    for tag in sorted(groups):
        body.append(f"<h2>{escape(tag)}</h2>")
        body.extend(groups[tag])
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title><style>{STYLE}</style></head><body>"
        + "\n".join(body)
        + "</body></html>"
    )


def _operation(method: str, path: str, op: dict[str, Any]) -> str:
    parts = [
        '<div class="op">',
        f'<span class="verb">{method.upper()}</span> <code>{escape(path)}</code>',
    ]
    if op.get("summary"):
        parts.append(f" — {escape(str(op['summary']))}")
    if op.get("description"):
        parts.append(f"<p>{escape(str(op['description']).split(chr(10) * 2)[0])}</p>")
    params = op.get("parameters") or []
    if params:
        parts.append("<table><tr><th>parameter</th><th>in</th><th>type</th><th>required</th></tr>")
        for p in params:
            kind = _type_name(p.get("schema") or {})
            need = "yes" if p.get("required") else ""
            parts.append(
                f"<tr><td><code>{escape(str(p.get('name', '')))}</code></td>"
                f"<td>{escape(str(p.get('in', '')))}</td><td>{escape(kind)}</td>"
                f"<td>{need}</td></tr>"
            )
        parts.append("</table>")
    content = (op.get("requestBody") or {}).get("content") or {}
    for media, entry in content.items():
        kind = _type_name(entry.get("schema") or {})
        parts.append(f"<p>Body: <code>{escape(media)}</code> {escape(kind)}</p>")
    codes = ", ".join(escape(str(c)) for c in (op.get("responses") or {}))
    if codes:
        parts.append(f"<p>Responses: {codes}</p>")
    parts.append("</div>")
    return "".join(parts)


def _type_name(schema: dict[str, Any]) -> str:
    """A short name for a schema: its component's name, its type, or the union of its parts."""
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " | ".join(_type_name(s) for s in schema[key])
    if schema.get("type") == "array":
        return f"array of {_type_name(schema.get('items') or {})}"
    return str(schema.get("type", "any"))
