"""The fast path of the frontmatter reader: the simple blocks memdir itself writes, read
without PyYAML (the reader falls back to PyYAML for anything else)."""

from __future__ import annotations

import re
from typing import Any

from .lazyregex import LazyRegex
from .scalars import (
    MERGE,
    resolve_plain,
)

# --------------------------------------------------------------------------------------------
# Fast path: flat ``key: scalar`` blocks and block sequences of scalars or flat mappings (the
# shapes of ``merged-from`` and ``derived-from``) are read without PyYAML. Anything else (flow
# collections, nesting, block scalars, anchors, aliases, tags, escapes, comments after values,
# tabs, CR, odd characters) returns None and goes through PyYAML, which also refuses aliases.
# Typing is the same function either way; tests/test_frontmatter_fast.py checks the two paths
# agree on generated blocks.

_FAST_KEY_RE = LazyRegex(r"([A-Za-z_][A-Za-z0-9_.-]{0,127}):(?: +(.*))?\Z")
_FAST_DQ_RE = LazyRegex(r'"([^"\\]*)"\Z')
_FAST_SQ_RE = LazyRegex(r"'([^']*)'\Z")
# Anything PyYAML's reader refuses or treats as a line break, plus tab, CR and BOM.
_FAST_BAD = "[^\n\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]"
_FAST_INDICATORS = frozenset("-?:,[]{}#&*!|>'\"%@`")
_FAIL: Any = object()


def _fast_scalar(text: str) -> Any:
    """The value of a one-line scalar (trailing spaces removed), or _FAIL."""
    first = text[0]
    if first == '"':
        m = _FAST_DQ_RE.match(text)
        return m.group(1) if m else _FAIL
    if first == "'":
        m = _FAST_SQ_RE.match(text)
        return m.group(1) if m else _FAIL
    if first in _FAST_INDICATORS and not (
        first == "-" and len(text) > 1 and text[1] in "0123456789."
    ):
        return _FAIL
    if ": " in text or " #" in text or text[-1] == ":":
        return _FAIL
    tag, value = resolve_plain(text)
    return _FAIL if tag == MERGE else value


def _fast_pair(line: str) -> tuple[str, Any] | None:
    """``key: scalar`` or ``key:`` (None) with a plain string key; None when not that."""
    m = _FAST_KEY_RE.match(line)
    if m is None:
        return None
    key = m.group(1)  # keys are never typed (see _Loader.construct_mapping)
    text = (m.group(2) or "").rstrip(" ")
    if not text:
        return key, None
    if text[0] == "[":
        items = _fast_flow_strings(text)
        return None if items is None else (key, items)
    value = _fast_scalar(text)
    return None if value is _FAIL else (key, value)


_FAST_FLOW_ITEM_RE = LazyRegex(r' *"([^"\\,\[\]{}]*)" *\Z')


def _fast_flow_strings(text: str) -> list[str] | None:
    """``[]`` or a one-line flow list of simple double-quoted strings; None otherwise."""
    if text[-1] != "]":
        return None
    inner = text[1:-1]
    if not inner.strip(" "):
        return []
    items = []
    for part in inner.split(","):
        m = _FAST_FLOW_ITEM_RE.match(part)
        if m is None:
            return None
        items.append(m.group(1))
    return items


def _skippable(line: str) -> bool:
    stripped = line.lstrip(" ")
    return not stripped or stripped[0] == "#"


def _fast_sequence(lines: list[str], i: int) -> tuple[Any, int]:
    """The block sequence starting at ``lines[i]`` (after an empty ``key:``), or None."""
    n = len(lines)
    j = i
    while j < n and _skippable(lines[j]):
        j += 1
    if j == n:
        return None, j
    stripped = lines[j].lstrip(" ")
    ind = len(lines[j]) - len(stripped)
    if not stripped.startswith("- "):
        return (None, j) if ind == 0 else (_FAIL, j)
    items: list[Any] = []
    current: dict[str, Any] | None = None
    col = -1
    while j < n:
        line = lines[j]
        stripped = line.lstrip(" ")
        if not stripped or stripped[0] == "#":
            j += 1
            continue
        li = len(line) - len(stripped)
        if li == ind and stripped.startswith("- "):
            rest = stripped[1:]
            content = rest.lstrip(" ")
            col = ind + 1 + len(rest) - len(content)
            content = content.rstrip(" ")
            if not content:
                return _FAIL, j
            pair = _fast_pair(content) if ":" in content else None
            if pair is not None:
                current = {pair[0]: pair[1]}
                items.append(current)
            else:
                value = _fast_scalar(content)
                if value is _FAIL:
                    return _FAIL, j
                items.append(value)
                current = None
        elif li == col and li > ind and current is not None:
            pair = _fast_pair(stripped)
            if pair is None:
                return _FAIL, j
            current[pair[0]] = pair[1]
        elif li == 0:
            break
        else:
            return _FAIL, j
        j += 1
    return items, j


def fast_load(raw: str) -> dict[str, Any] | None:
    """The frontmatter mapping when ``raw`` is in the simple subset, else None."""
    # Compiled on first use (re caches it): the class costs milliseconds to compile, and a
    # process that parses no frontmatter (a hook's context pack) should not pay for it.
    if re.search(_FAST_BAD, raw):
        return None
    out: dict[str, Any] = {}
    lines = raw.split("\n")
    n = len(lines)
    i = 0
    while i < n:
        line = lines[i]
        if _skippable(line):
            i += 1
            continue
        if line[0] == " ":
            return None
        pair = _fast_pair(line)
        if pair is None:
            return None
        key, value = pair
        i += 1
        if value is None:
            value, i = _fast_sequence(lines, i)
            if value is _FAIL:
                return None
        out[key] = value
    return out
