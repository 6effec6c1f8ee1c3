"""Links, sections and titles of a markdown body.

What :func:`extract` finds, in order of appearance:

- ``[[target]]``, ``[[target|label]]``, ``[[target#heading]]``, ``[[target#heading|label]]`` and
  ``[[#heading]]`` (target "") -> kind ``"wikilink"``; the same with a leading ``!`` -> kind
  ``"embed"``.
- ``[text](url)`` and ``[text](url "title")`` -> kind ``"markdown"``; images ``![alt](url)`` are
  also kind ``"markdown"`` with ``image=True``. A ``#fragment`` goes to ``heading``; local targets
  are percent-decoded; ``external`` is true for URLs with a scheme (``https:``...) or ``//``.
  Pure ``#anchor`` links, ``mailto:`` and ``tel:`` are skipped. Reference-style links and
  ``<autolinks>`` are not links here. Markdown link text is read on one line.

Nothing is found inside code: inline code spans (backtick runs of any length, closed by a run of
the same length in the same paragraph), fenced blocks (``` and ~~~; a closing fence may be longer;
an unclosed fence runs to the end) and indented code blocks (four spaces or a tab after a blank
line, outside lists). Backslash-escaped brackets are not link syntax.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from pathlib import PurePath
from typing import Any, NamedTuple
from urllib.parse import unquote

from ..records import recordclass
from .lazyregex import LazyRegex

__all__ = ["Link", "Section", "extract", "section", "sections", "title_of"]


class Link(NamedTuple):
    """One link. ``label``/``heading`` are None when the link has none."""

    kind: str  # "wikilink" | "embed" | "markdown"
    target: str
    label: str | None = None
    heading: str | None = None
    external: bool = False
    image: bool = False
    offset: int = 0  # position of the link in the body


@recordclass(frozen=True, slots=True)
class Section:
    """An ATX heading and everything under it up to the next heading of the same or higher level.

    ``text`` (``body[start:end]``) starts with the heading line and includes sub-sections.
    """

    level: int
    heading: str
    start: int
    end: int
    text: str


_INDENTED_RE = LazyRegex(r"^(?: {4}|[ ]{0,3}\t)", re.MULTILINE)
_LIST_ITEM_RE = LazyRegex(r" {0,3}(?:[-+*]|[0-9]{1,9}[.)])(?:[ \t]|$)")
_PARA_BREAK_RE = LazyRegex(r"\n[ \t]*(?:\n|\Z)")
_ESCAPE_RE = LazyRegex(r"\\[\[\]!\\()`]")
_LINK_RE = LazyRegex(
    r"""
    \[(?:
        \[
        (?P<wtarget>[^\[\]\n|\#\x00]*+)
        (?:\#(?P<wheading>[^\[\]\n|\x00]*+))?
        (?:\|(?P<wlabel>[^\[\]\n\x00]*+))?
        \]\]
    |
        (?P<mlabel>(?:[^\[\]\n]++|\[[^\[\]\n]*+\])*+)\]
        \([ \t]*
        (?P<mdest><[^<>\n\x00]*+>|(?:[^\s()\x00]++|\([^\s()\x00]*+\))*+)
        (?:[ \t]++(?:"[^"\n]*+"|'[^'\n]*+'|\([^()\n]*+\)))?
        [ \t]*\)
    )
    """,
    re.VERBOSE,
)
_SCHEME_RE = LazyRegex(r"[A-Za-z][A-Za-z0-9+.\-]*:")
_SKIP_SCHEMES = ("mailto:", "tel:")
_HEADING_RE = LazyRegex(r" {0,3}(#{1,6})(?:[ \t]+([^\n]*?))?(?:[ \t]+#+)?[ \t]*\r?\Z")


def _fence_line(body: str, fence: str, pos: int) -> tuple[int, int, int] | None:
    """The next line at or after ``pos`` that starts (after blanks) with ``fence``.

    Returns (line_start, run_end, line_end) where run_end is the end of the fence run.
    """
    while True:
        i = body.find(fence, pos)
        if i < 0:
            return None
        ls = body.rfind("\n", 0, i) + 1
        if ls == i or not body[ls:i].strip(" \t"):
            le = body.find("\n", i)
            if le < 0:
                le = len(body)
            ch = fence[0]
            j = i + len(fence)
            while j < le and body[j] == ch:
                j += 1
            return ls, j, le
        pos = i + len(fence)


def _fence_ranges(body: str) -> list[tuple[int, int]]:
    """Fenced code blocks (``` or ~~~, any indentation), closing fence included."""
    ranges: list[tuple[int, int]] = []
    pos = 0
    n = len(body)
    while pos < n:
        tick = _fence_line(body, "```", pos) if "```" in body else None
        tilde = _fence_line(body, "~~~", pos) if "~~~" in body else None
        if tick is None and tilde is None:
            break
        if tick is None or (tilde is not None and tilde[0] < tick[0]):
            assert tilde is not None
            start, run_end, line_end = tilde
            char = "~"
        else:
            start, run_end, line_end = tick
            char = "`"
        length = run_end - body.find(char * 3, start)
        if char == "`" and "`" in body[run_end:line_end]:
            pos = line_end + 1  # an inline code span, not a fence
            continue
        end = n
        search = line_end + 1
        while search < n:
            close = _fence_line(body, char * length, search)
            if close is None:
                break
            c_start, c_run_end, c_end = close
            if not body[c_run_end:c_end].strip(" \t\r"):
                end = c_end
                break
            search = c_end + 1
        ranges.append((start, end))
        pos = end + 1
    return ranges


def _indent_width(line: str) -> int:
    width = 0
    for ch in line:
        if ch == " ":
            width += 1
        elif ch == "\t":
            width += 4 - width % 4
        else:
            break
    return width


def _indented_ranges(body: str, fences: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Indented code blocks: 4+ columns after a blank line, not inside a list."""
    ranges: list[tuple[int, int]] = []
    fence_i = 0
    prev_blank = True
    in_list = False
    code_start = -1
    code_end = -1
    pos = 0
    n = len(body)
    while pos < n:
        nl = body.find("\n", pos)
        end = n if nl < 0 else nl
        while fence_i < len(fences) and fences[fence_i][1] < pos:
            fence_i += 1
        if fence_i < len(fences) and fences[fence_i][0] <= pos < fences[fence_i][1]:
            if code_start >= 0:
                ranges.append((code_start, code_end))
                code_start = -1
            pos = fences[fence_i][1] + 1
            prev_blank = False
            continue
        line = body[pos:end]
        blank = not line.strip()
        if code_start >= 0:
            if blank:
                pos = end + 1
                continue
            if _indent_width(line) >= 4:
                code_end = end
                pos = end + 1
                continue
            ranges.append((code_start, code_end))
            code_start = -1
        if blank:
            prev_blank = True
        else:
            indent = _indent_width(line)
            if indent >= 4 and prev_blank and not in_list:
                code_start, code_end = pos, end
            elif indent < 4:
                if _LIST_ITEM_RE.match(line):
                    in_list = True
                elif prev_blank and indent == 0:
                    in_list = False
            prev_blank = False
        pos = end + 1
    if code_start >= 0:
        ranges.append((code_start, code_end))
    return ranges


def _code_blocks(body: str) -> list[tuple[int, int]]:
    fences = _fence_ranges(body) if ("```" in body or "~~~" in body) else []
    if not (
        body.startswith("    ") or "\n    " in body or ("\t" in body and _INDENTED_RE.search(body))
    ):
        return fences
    indented = _indented_ranges(body, fences)
    return sorted(fences + indented) if indented else fences


def _blank_out(text: str, ranges: list[tuple[int, int]], fill: str) -> str:
    if not ranges:
        return text
    parts: list[str] = []
    pos = 0
    for first, end in ranges:
        if end <= pos:
            continue
        start = max(first, pos)
        parts.append(text[pos:start])
        parts.append(fill * (end - start))
        pos = end
    parts.append(text[pos:])
    return "".join(parts)


def _code_spans(text: str) -> list[tuple[int, int]]:
    """Ranges of inline code spans (CommonMark pairing: equal-length runs, one paragraph)."""
    runs: list[tuple[int, int]] = []
    find = text.find
    n = len(text)
    i = find("`")
    while i >= 0:
        j = i + 1
        while j < n and text[j] == "`":
            j += 1
        runs.append((i, j))
        i = find("`", j)
    if len(runs) < 2:
        return []
    breaks = [m.start() for m in _PARA_BREAK_RE.finditer(text)]
    spans: list[tuple[int, int]] = []
    nruns = len(runs)
    i = 0
    while i < nruns:
        start, end = runs[i]
        if start > 0 and text[start - 1] == "\\":
            # An escaped backtick is literal; the rest of the run may still open a span.
            k = start - 1
            while k >= 0 and text[k] == "\\":
                k -= 1
            if (start - 1 - k) % 2 == 1:
                start += 1
                if start == end:
                    i += 1
                    continue
        length = end - start
        b = bisect_left(breaks, end)
        limit = breaks[b] if b < len(breaks) else len(text)
        j = i + 1
        while j < nruns:
            js, je = runs[j]
            if js >= limit:
                j = nruns
                break
            if je - js == length:
                break
            j += 1
        if j < nruns:
            spans.append((start, runs[j][1]))
            i = j + 1
        else:
            i += 1
    return spans


def _masked(body: str) -> str:
    """``body`` with code blocks blanked (lines kept), code spans and escapes as NUL."""
    text = _blank_out(body, _code_blocks(body), "\n")
    if "`" in text:
        text = _blank_out(text, _code_spans(text), "\x00")
    if "\\" in text:
        text = _ESCAPE_RE.sub("\x00\x00", text)
    return text


def _markdown_link(dest: str, label: str, start: int, image: bool) -> Link | None:
    if dest.startswith("<"):
        dest = dest[1:-1]
    dest = dest.strip()
    if not dest or dest[0] == "#":
        return None
    external = False
    if ":" in dest:
        if dest.lower().startswith(_SKIP_SCHEMES):
            return None
        external = _SCHEME_RE.match(dest) is not None
    if dest.startswith("//"):
        external = True
    heading: str | None = None
    if not external:
        if "#" in dest:
            dest, _, frag = dest.partition("#")
            heading = (unquote(frag) if "%" in frag else frag) or None
        if "%" in dest:
            dest = unquote(dest)
    return Link("markdown", dest, label, heading, external, image, start - 1 if image else start)


def extract(body: str) -> list[Link]:
    """Every link in ``body`` outside code, in order of appearance."""
    if "[" not in body:
        return []
    text = _masked(body)
    links: list[Link] = []
    append = links.append
    for m in _LINK_RE.finditer(text):
        start = m.start()
        bang = start > 0 and text[start - 1] == "!"
        target, heading, label, mlabel, dest = m.groups()
        if target is not None:
            target = target.strip()
            if heading is not None:
                heading = heading.strip()
            if not target and not heading:
                continue
            append(
                Link(
                    "embed" if bang else "wikilink",
                    target,
                    label.strip() if label is not None else None,
                    heading or None,
                    False,
                    False,
                    start - 1 if bang else start,
                )
            )
        else:
            s, e = m.span(4)
            link = _markdown_link(dest, body[s:e] if "\x00" in mlabel else mlabel, start, bang)
            if link is not None:
                append(link)
    return links


def _headings(body: str) -> list[tuple[int, int, str]]:
    """(offset, level, text) of ATX headings outside code blocks."""
    if "#" not in body:
        return []
    text = _blank_out(body, _code_blocks(body), "\n")
    out: list[tuple[int, int, str]] = []
    find = text.find
    pos = find("#")
    while pos >= 0:
        ls = text.rfind("\n", 0, pos) + 1
        le = find("\n", pos)
        if le < 0:
            le = len(text)
        if pos - ls <= 3 and not text[ls:pos].strip(" "):
            m = _HEADING_RE.match(text, ls, le)
            if m is not None:
                out.append((ls, len(m.group(1)), (m.group(2) or "").strip()))
        pos = find("#", le)
    return out


def sections(body: str) -> list[Section]:
    """Every ATX heading with its section (sub-sections included), in document order."""
    heads = _headings(body)
    out: list[Section] = []
    for i, (start, level, heading) in enumerate(heads):
        end = len(body)
        for later_start, later_level, _ in heads[i + 1 :]:
            if later_level <= level:
                end = later_start
                break
        out.append(Section(level, heading, start, end, body[start:end]))
    return out


def section(body: str, heading: str) -> str | None:
    """The text of the first section whose heading matches ``heading`` (case-insensitive).

    Leading ``#`` marks in ``heading`` are ignored, so ``"## Input"`` and ``"input"`` match
    the same section. None when there is no such heading.
    """
    want = heading.strip().lstrip("#").strip().casefold()
    for sec in sections(body):
        if sec.heading.casefold() == want:
            return sec.text
    return None


def title_of(fm: dict[str, Any], body: str, path: str | PurePath) -> str:
    """``fm["title"]`` when a non-empty string, else the first ``# `` heading, else the stem."""
    title = fm.get("title")
    if isinstance(title, str) and title.strip():
        return title.strip()
    for _, level, text in _headings(body):
        if level == 1 and text:
            return text
    return PurePath(path).stem
