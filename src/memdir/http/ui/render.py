"""HTML the UI draws on the server: markdown made safe, trend plots and the turn DAG as SVG.

Markdown goes through markdown-it with raw HTML turned off: every ``<`` in a document is
text, so no tag or attribute written in a file reaches the page. What markdown itself
makes into an attribute is a link's or an image's URL; :func:`safe_url` lets through only
relative URLs and ``http``, ``https`` and ``mailto`` (no ``javascript:``, ``data:``,
``vbscript:``, ``file:``). The pages also send a Content-Security-Policy with no inline
script, so a mistake here still runs nothing.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from html import escape
from typing import Any
from urllib.parse import quote

from markdown_it import MarkdownIt
from markdown_it.rules_inline import StateInline
from markdown_it.token import Token

from ...records import recordclass

Resolver = Callable[[str], str | None]
"""A wikilink's target -> the store path it names (None: it names nothing)."""

_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*):")
_ALLOWED_SCHEMES = frozenset({"http", "https", "mailto"})


def safe_url(url: str) -> bool:
    """True for a relative URL or one whose scheme is http, https or mailto."""
    text = "".join(c for c in url if c > " " and c != "\x7f")  # browsers drop these
    match = _SCHEME.match(text)
    if match is None:
        return not text.startswith("//") and not text.startswith("\\\\")
    return match.group(1).lower() in _ALLOWED_SCHEMES


def doc_href(path: str, base: str = "") -> str:
    """The UI's page of a document; ``base``: where the UI is served (a store's prefix)."""
    return base + "/doc/" + quote(path, safe="/")


def _wikilink(state: StateInline, silent: bool) -> bool:
    src, pos = state.src, state.pos
    if not src.startswith("[[", pos):
        return False
    end = src.find("]]", pos + 2)
    inner = src[pos + 2 : end] if end > 0 else ""
    if not inner.strip() or "\n" in inner or "[" in inner:
        return False
    if not silent:
        target, _, label = inner.partition("|")
        token = state.push("wikilink", "", 0)
        token.meta = {"target": target.strip(), "label": (label or target).strip()}
    state.pos = end + 2
    return True


def _citation(state: StateInline, silent: bool) -> bool:
    src, pos = state.src, state.pos
    if not src.startswith("[^", pos):
        return False
    end = src.find("]", pos + 2)
    ident = src[pos + 2 : end] if end > 0 else ""
    if not re.fullmatch(r"[A-Za-z0-9._:-]{1,100}", ident):
        return False
    if not silent:
        token = state.push("citation", "", 0)
        token.meta = {"id": ident}
    state.pos = end + 1
    return True


class Markdown:
    """A markdown renderer for one document: its wikilinks, relative links and citations
    resolved to pages of the UI."""

    def __init__(self) -> None:
        md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
        md.enable("table")
        md.enable("strikethrough")
        md.validateLink = safe_url  # type: ignore[method-assign]
        md.inline.ruler.before("link", "wikilink", _wikilink)
        md.inline.ruler.before("link", "citation", _citation)
        md.add_render_rule("wikilink", self._render_wikilink)
        md.add_render_rule("citation", self._render_citation)
        md.add_render_rule("link_open", self._render_link_open)
        self.md = md

    def render(
        self,
        text: str,
        *,
        path: str,
        resolve: Resolver,
        sources: Mapping[str, str],
        base: str = "",
    ) -> str:
        env: dict[str, Any] = {"path": path, "resolve": resolve, "sources": sources, "base": base}
        return str(self.md.render(text, env))

    @staticmethod
    def _render_wikilink(
        renderer: Any, tokens: Sequence[Token], idx: int, options: Any, env: dict[str, Any]
    ) -> str:
        meta = tokens[idx].meta
        found = env["resolve"](meta["target"])
        label = escape(meta["label"])
        if found is None:
            return f'<span class="broken" title="resolves to nothing">{label}</span>'
        return f'<a class="wikilink" href="{escape(doc_href(found, env["base"]))}">{label}</a>'

    @staticmethod
    def _render_citation(
        renderer: Any, tokens: Sequence[Token], idx: int, options: Any, env: dict[str, Any]
    ) -> str:
        ident = tokens[idx].meta["id"]
        resource = env["sources"].get(ident)
        if resource is None:
            return f'<sup class="cite broken" title="no such source">[{escape(ident)}]</sup>'
        return (
            f'<sup class="cite"><a href="{escape(doc_href(resource, env["base"]))}" '
            f'title="{escape(resource)}">[{escape(ident)}]</a></sup>'
        )

    @staticmethod
    def _render_link_open(
        renderer: Any, tokens: Sequence[Token], idx: int, options: Any, env: dict[str, Any]
    ) -> str:
        token = tokens[idx]
        href = str(token.attrGet("href") or "")
        if href and not _SCHEME.match(href) and not href.startswith(("/", "#")):
            target = href.split("#", 1)[0]
            if target:
                rel = posixpath.normpath(posixpath.join(posixpath.dirname(env["path"]), target))
                if not rel.startswith("../"):
                    token.attrSet("href", doc_href(rel, env["base"]))
        elif _SCHEME.match(href):
            token.attrSet("rel", "noopener noreferrer")
        return str(renderer.renderToken(tokens, idx, options, env))


# -- plots ------------------------------------------------------------------------------


@recordclass(frozen=True)
class Point:
    label: str  # the run's time
    value: float
    verdict: str  # advance / hold / regress


def trend_svg(points: Sequence[Point], *, title: str, lower_is_better: bool) -> str:
    """A line plot, one point per run, regressions drawn as red diamonds (inline SVG)."""
    width, height, pad = 480, 160, 28
    if not points:
        return f'<p class="empty">No {escape(title)} runs yet.</p>'
    values = [p.value for p in points]
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    step = (width - 2 * pad) / max(len(points) - 1, 1)

    def xy(i: int, v: float) -> tuple[float, float]:
        return pad + i * step, height - pad - (v - low) / span * (height - 2 * pad)

    coords = [xy(i, p.value) for i, p in enumerate(points)]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
    better = "lower is better" if lower_is_better else "higher is better"
    parts = [
        f'<svg class="plot" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(title)}: {len(points)} runs, {better}">',
        f"<title>{escape(title)} ({better})</title>",
        f'<line class="axis" x1="{pad}" y1="{height - pad}" x2="{width - pad}" '
        f'y2="{height - pad}"/>',
        f'<text class="tick" x="2" y="{pad}">{high:g}</text>',
        f'<text class="tick" x="2" y="{height - pad}">{low:g}</text>',
        f'<polyline class="trend" points="{line}"/>',
    ]
    for (x, y), p in zip(coords, points, strict=True):
        tip = f"{p.label}: {p.value:g} ({p.verdict})"
        if p.verdict == "regress":
            d = 6
            parts.append(
                f'<path class="regress" d="M{x:.1f} {y - d:.1f} L{x + d:.1f} {y:.1f} '
                f'L{x:.1f} {y + d:.1f} L{x - d:.1f} {y:.1f} Z"><title>{escape(tip)}</title></path>'
            )
        else:
            parts.append(
                f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="3.5">'
                f"<title>{escape(tip)}</title></circle>"
            )
    parts.append("</svg>")
    return "".join(parts)


# -- the turn DAG ------------------------------------------------------------------------


@recordclass(frozen=True)
class DagItem:
    id: str
    label: str
    depth: int  # negative: an ancestor; 0: the turn itself; positive: a descendant
    href: str
    kind: str  # turn / document


def dag_svg(items: Sequence[DagItem], edges: Sequence[tuple[str, str]]) -> str:
    """Rows by depth (ancestors above, descendants below), an arrow from parent to child;
    each node a link (keyboard-reachable)."""
    if not items:
        return '<p class="empty">No turns.</p>'
    rows: dict[int, list[DagItem]] = {}
    for item in items:
        rows.setdefault(item.depth, []).append(item)
    box_w, box_h, gap_x, gap_y = 150, 34, 18, 46
    widest = max(len(r) for r in rows.values())
    width = max(widest * (box_w + gap_x) + gap_x, 300)
    depths = sorted(rows)
    height = len(depths) * (box_h + gap_y) + gap_y
    where: dict[str, tuple[float, float]] = {}
    for r, depth in enumerate(depths):
        row = rows[depth]
        offset = (width - len(row) * (box_w + gap_x) + gap_x) / 2
        for c, item in enumerate(row):
            where[item.id] = (offset + c * (box_w + gap_x), gap_y / 2 + r * (box_h + gap_y))
    parts = [
        f'<svg class="dag" viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" '
        f'height="{height:.0f}" role="img" '
        f'aria-label="the turn graph: {len(items)} nodes, {len(edges)} edges">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto"><path d="M0 0 L10 5 L0 10 z" class="arrowhead"/>'
        "</marker></defs>",
    ]
    for parent, child in edges:
        if parent in where and child in where:
            (px, py), (cx, cy) = where[parent], where[child]
            parts.append(
                f'<line class="edge" x1="{px + box_w / 2:.1f}" y1="{py + box_h:.1f}" '
                f'x2="{cx + box_w / 2:.1f}" y2="{cy:.1f}" marker-end="url(#arrow)"/>'
            )
    for item in items:
        x, y = where[item.id]
        cls = "node self" if item.depth == 0 else f"node {item.kind}"
        label = item.label if len(item.label) <= 22 else item.label[:21] + "…"
        parts.append(
            f'<a href="{escape(item.href)}" class="dagnode" data-id="{escape(item.id)}">'
            f"<title>{escape(item.label)}</title>"
            f'<rect class="{cls}" x="{x:.1f}" y="{y:.1f}" width="{box_w}" height="{box_h}" rx="6"/>'
            f'<text class="{"self" if item.depth == 0 else "other"}" x="{x + box_w / 2:.1f}" '
            f'y="{y + box_h / 2 + 4:.1f}" text-anchor="middle">'
            f"{escape(label)}</text></a>"
        )
    parts.append("</svg>")
    return "".join(parts)
