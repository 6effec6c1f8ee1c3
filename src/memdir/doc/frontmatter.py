"""YAML frontmatter: read it as KiwiFS does, write it so it reads back the same.

A document's frontmatter is the YAML between a first line ``---`` (line 1, trailing spaces and
CRLF tolerated) and the next ``---`` line. Reading follows KiwiFS's YAML 1.1 typing: unquoted
dates and timestamps stay strings; ``y``, ``yes``, ``on`` (and ``n``, ``no``, ``off``) are
booleans; ``42``, ``0x1f``, ``1_000`` are ints; ``1.5`` and ``1e3`` are floats. Sexagesimal
numbers (``1:30``) are strings. Keys are never typed: ``y: 1``, ``1: a`` and ``null: b`` have
the string keys ``y``, ``1`` and ``null``. Invalid YAML reads as an empty mapping with ``error``
set.

Aliases (``*name``) are invalid here, wherever they appear: a block that uses one reads as an
empty mapping with ``error`` set, like any other invalid YAML, so that no reader ever gets a
cyclic value (``a: &a [*a]``) or one that expands to far more than the text (nested lists of
aliases). An anchor (``&name``) that nothing refers to is harmless and reads as its value.

Writing comes in two forms: :func:`render` builds a new document from a mapping (PyYAML), and
:func:`edit` changes an existing one in place (ruamel.yaml round-trip), keeping key order,
comments, quoting and the body byte for byte. Both quote a string whenever the plain form would
read back as another type (``"42"``, ``"yes"``, ``"2026-01-01"``, ``"null"``, ``""``), and both
write a value used twice in the mapping out in full each time, never as an anchor and alias.
"""

from __future__ import annotations

import copy
import io
import math
import re
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from memdir.errors import InvalidDocument

__all__ = ["Parsed", "edit", "json_value", "load_strict", "parse", "plain_type", "render"]

_STR = "tag:yaml.org,2002:str"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"
_MERGE = "tag:yaml.org,2002:merge"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"

_CLOSE_RE = re.compile(r"^---[ \t]*\r?$", re.MULTILINE)


@dataclass(slots=True)
class Parsed:
    """The result of :func:`parse`."""

    fm: dict[str, Any]
    body: str
    has_block: bool
    error: str | None = None
    raw: str = ""


# --------------------------------------------------------------------------------------------
# Scalar typing (YAML 1.1 as KiwiFS reads it)

_MAP: dict[str, tuple[str, Any]] = {}
for _words, _tag, _value in (
    (("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), _BOOL, True),
    (("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"), _BOOL, False),
    (("", "~", "null", "Null", "NULL"), _NULL, None),
    ((".nan", ".NaN", ".NAN"), _FLOAT, math.nan),
    ((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), _FLOAT, math.inf),
    (("-.inf", "-.Inf", "-.INF"), _FLOAT, -math.inf),
    (("<<",), _MERGE, "<<"),
):
    for _w in _words:
        _MAP[_w] = (_tag, _value)

_NUMERIC_START = frozenset("+-0123456789")
_DOT_FLOAT_RE = re.compile(r"\.[0-9]+(?:[eE][-+]?[0-9]+)?\Z")
_FLOAT_RE = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?\Z")
_INT_RE = re.compile(
    r"([-+]?)(?:0[bB]([01]+)|0[oO]([0-7]+)|0[xX]([0-9a-fA-F]+)|0([0-7]+)|([0-9]+))\Z"
)
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_UINT64_MAX = 2**64 - 1
# PyYAML's own timestamp pattern; used on write only, so that date-like strings are quoted.
_TIMESTAMP_RE = re.compile(
    r"""[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?
    (?:(?:[Tt]|[ \t]+)[0-9][0-9]?:[0-9][0-9]:[0-9][0-9](?:\.[0-9]*)?
    (?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?)?\Z""",
    re.VERBOSE,
)
_SEXAGESIMAL_RE = re.compile(r"[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?\Z")


def _parse_int(plain: str) -> int | None:
    m = _INT_RE.match(plain)
    if m is None:
        return None
    sign, b2, b8o, b16, b8, b10 = m.groups()
    if b2 is not None:
        v = int(b2, 2)
    elif b8o is not None:
        v = int(b8o, 8)
    elif b16 is not None:
        v = int(b16, 16)
    elif b8 is not None:
        v = int(b8, 8)
    else:
        if len(b10) > 1 and b10[0] == "0":
            return None  # "08", "09": not octal; KiwiFS reads these as floats
        v = int(b10)
    if sign == "-":
        v = -v
    if v < _INT64_MIN or v > _UINT64_MAX or (sign and v > 2**63 - 1):
        return None
    return v


def _resolve_plain(value: str) -> tuple[str, Any]:
    """Tag and value of an unquoted scalar, as KiwiFS's YAML reader types it."""
    hit = _MAP.get(value)
    if hit is not None:
        return hit
    first = value[0]
    if first == ".":
        if _DOT_FLOAT_RE.match(value):
            return _FLOAT, float(value)
    elif first in _NUMERIC_START:
        plain = value.replace("_", "")
        iv = _parse_int(plain)
        if iv is not None:
            return _INT, iv
        if _FLOAT_RE.match(plain):
            fv = float(plain)
            if not math.isinf(fv):
                return _FLOAT, fv
    return _STR, value


def plain_type(value: str) -> type:
    """The Python type an unquoted ``value`` would read back as (``str`` when unchanged)."""
    tag, v = _resolve_plain(value)
    return str if tag in (_STR, _MERGE) else type(v)


def json_value(value: Any) -> Any:
    """``value`` with every number SQLite cannot hold exactly (at any depth) as text.

    JSON has no NaN or infinity, and SQLite's JSON functions refuse a document that holds one,
    so the index stores ``.nan``, ``.inf`` and ``-.inf`` as those strings; an int beyond
    SQLite's 64-bit integers (YAML reads up to 2**64 - 1) would become a float that other ints
    round to, so it is stored as its decimal text. A ``where`` filter on such a number compares
    with the same text.
    """
    return _json_value(value, set())


def _json_value(value: Any, within: set[int]) -> Any:
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        return value
    if isinstance(value, int) and not _INT64_MIN <= value <= _INT64_MAX:
        return str(value)
    if not isinstance(value, dict | list):
        return value
    if id(value) in within:  # the reader refuses aliases; a guard, worded as json.dumps does
        raise ValueError("Circular reference detected")
    within.add(id(value))
    out: Any
    if isinstance(value, dict):
        out = {k: _json_value(v, within) for k, v in value.items()}
    else:
        out = [_json_value(v, within) for v in value]
    within.discard(id(value))
    return out


def _needs_quotes(value: str) -> bool:
    """True when ``value`` written plain would not read back as this string in some reader."""
    if not value:
        return True
    tag, _ = _resolve_plain(value)
    if tag != _STR:
        return True
    return bool(_TIMESTAMP_RE.match(value) or _SEXAGESIMAL_RE.match(value) or value == "=")


try:
    _BaseLoader: type = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - PyYAML without libyaml
    _BaseLoader = yaml.SafeLoader


class _AliasUsed(yaml.YAMLError):
    """Raised by :class:`_Loader` when the document uses an alias."""


def _uses_alias(root: Node) -> bool:
    """True when a node is reached twice, which only an alias does.

    The composer makes a new node for every piece of the text and hands back the anchored node
    itself for an alias, so a repeat means an alias. The walk stops at the first repeat: it
    visits each node once and never follows a cycle.
    """
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            return True
        seen.add(id(node))
        if isinstance(node, SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, MappingNode):
            for key, value in node.value:
                stack.append(key)
                stack.append(value)
    return False


class _Loader(_BaseLoader):  # type: ignore[misc]
    """PyYAML safe loader with KiwiFS's scalar typing (no timestamps, no sexagesimal).

    A document that uses an alias raises :class:`_AliasUsed` before any value is built.
    """

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        if _uses_alias(node):
            raise _AliasUsed("YAML aliases are not supported in frontmatter")
        return self.construct_document(node)

    def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
        if kind is ScalarNode and implicit[0]:
            return _resolve_plain(value)[0]
        if kind is ScalarNode:
            return _STR
        tag: str = super().resolve(kind, value, implicit)
        return tag

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        # Keys are never typed: "y: 1" keeps the key "y" (YAML 1.1 reads True, and "on: 2"
        # would then overwrite it), "1", "null" and "2024-01-01" stay the text written.
        # Merge keys are taken out first, so "<<" still merges.
        if isinstance(node, MappingNode):
            self.flatten_mapping(node)
            for key_node, _value in node.value:
                if isinstance(key_node, ScalarNode):
                    key_node.tag = _STR
        return super().construct_mapping(node, deep=deep)


def _construct_typed(loader: _Loader, node: ScalarNode) -> Any:
    tag, value = _resolve_plain(node.value)
    if tag == node.tag:
        return value
    # An explicit tag (``!!int "7"``): fall back to PyYAML's own constructors.
    fallback = {
        _INT: yaml.SafeLoader.construct_yaml_int,
        _FLOAT: yaml.SafeLoader.construct_yaml_float,
        _BOOL: yaml.SafeLoader.construct_yaml_bool,
        _NULL: yaml.SafeLoader.construct_yaml_null,
    }[node.tag]
    return fallback(loader, node)


def _construct_timestamp(loader: _Loader, node: ScalarNode) -> str:
    return str(node.value)


for _t in (_INT, _FLOAT, _BOOL, _NULL):
    _Loader.add_constructor(_t, _construct_typed)
_Loader.add_constructor(_TIMESTAMP, _construct_timestamp)


def _split(text: str) -> tuple[bool, str, str, str, str]:
    """(has_block, open_line, raw, close_line, body); lines keep their line breaks."""
    if not text.startswith("---"):
        return False, "", "", "", text
    nl = text.find("\n")
    first = text if nl < 0 else text[: nl + 1]
    if first.rstrip(" \t\r\n") != "---":
        return False, "", "", "", text
    if nl < 0:
        return False, "", "", "", text
    start = nl + 1
    m = _CLOSE_RE.search(text, start)
    if m is None:
        return False, "", "", "", text
    end = m.end()
    if end < len(text):  # the "\n" that ends the closing line
        end += 1
    return True, first, text[start : m.start()], text[m.start() : end], text[end:]


def _mark_text(err: yaml.YAMLError) -> str:
    problem = getattr(err, "problem", None) or getattr(err, "context", None) or str(err)
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    if mark is not None:
        # +2: one for 1-based lines, one for the opening "---" line.
        return f"{problem} (line {mark.line + 2}, column {mark.column + 1})"
    return str(problem)


# --------------------------------------------------------------------------------------------
# Fast path: flat ``key: scalar`` blocks and block sequences of scalars or flat mappings (the
# shapes of ``merged-from`` and ``derived-from``) are read without PyYAML. Anything else (flow
# collections, nesting, block scalars, anchors, aliases, tags, escapes, comments after values,
# tabs, CR, odd characters) returns None and goes through PyYAML, which also refuses aliases.
# Typing is the same function either way; tests/test_frontmatter_fast.py checks the two paths
# agree on generated blocks.

_FAST_KEY_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_.-]{0,127}):(?: +(.*))?\Z")
_FAST_DQ_RE = re.compile(r'"([^"\\]*)"\Z')
_FAST_SQ_RE = re.compile(r"'([^']*)'\Z")
# Anything PyYAML's reader refuses or treats as a line break, plus tab, CR and BOM.
_FAST_BAD_RE = re.compile(
    "[^\n\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]"
)
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
    tag, value = _resolve_plain(text)
    return _FAIL if tag == _MERGE else value


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


_FAST_FLOW_ITEM_RE = re.compile(r' *"([^"\\,\[\]{}]*)" *\Z')


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


def _fast_load(raw: str) -> dict[str, Any] | None:
    """The frontmatter mapping when ``raw`` is in the simple subset, else None."""
    if _FAST_BAD_RE.search(raw):
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


def _load(raw: str) -> tuple[dict[str, Any], str | None]:
    if not raw.strip():
        return {}, None
    fast = _fast_load(raw)
    if fast is not None:
        return fast, None
    return _load_yaml(raw)


def _alias_text(raw: str) -> str:
    """The error for a block that uses an alias, naming the first one and where it is."""
    message = "invalid YAML frontmatter: YAML aliases are not supported in frontmatter"
    for event in yaml.parse(raw, Loader=_BaseLoader):
        if isinstance(event, yaml.AliasEvent):
            mark = event.start_mark
            if mark is None:  # pragma: no cover - both PyYAML parsers mark every event
                return f"{message} (*{event.anchor})"
            # +2: one for 1-based lines, one for the opening "---" line.
            where = f"line {mark.line + 2}, column {mark.column + 1}"
            return f"{message} (*{event.anchor} at {where})"
    return message  # pragma: no cover - the loader saw an alias, so the events hold one


def _load_yaml(raw: str) -> tuple[dict[str, Any], str | None]:
    """The PyYAML path (any YAML); also the reference the fast path is tested against."""
    try:
        data = yaml.load(raw, Loader=_Loader)
    except _AliasUsed:
        return {}, _alias_text(raw)
    except yaml.YAMLError as err:
        return {}, f"invalid YAML frontmatter: {_mark_text(err)}"
    except (TypeError, ValueError, OverflowError) as err:  # unhashable keys, odd tags
        return {}, f"invalid YAML frontmatter: {err}"
    if data is None:
        return {}, None
    if not isinstance(data, dict):
        return {}, f"frontmatter is not a mapping (got {type(data).__name__})"
    return data, None


def parse(text: str) -> Parsed:
    """Split ``text`` into frontmatter and body. Never raises on bad YAML."""
    has_block, _, raw, _, body = _split(text)
    if not has_block:
        return Parsed({}, text, False, None, "")
    fm, error = _load(raw)
    return Parsed(fm, body, True, error, raw)


def split(text: str) -> tuple[str, str] | None:
    """(the frontmatter block with its ``---`` lines, the body after it), or None when the
    text opens no block or never closes it. The one place a document's block is found:
    LF and CRLF line ends alike."""
    has_block, first, raw, close, body = _split(text)
    return (first + raw + close, body) if has_block else None


def body_of(text: str) -> str:
    """The text after the frontmatter block (all of it when there is no closed block)."""
    found = split(text)
    return text if found is None else found[1]


def load_strict(text: str) -> dict[str, Any]:
    """The frontmatter of document ``text``; raises InvalidDocument when it does not parse."""
    has_block, _, raw, _, _ = _split(text)
    if not has_block:
        return {}
    fm, error = _load(raw)
    if error is not None:
        raise InvalidDocument(error)
    return fm


# --------------------------------------------------------------------------------------------
# render: a new document


class _Dumper(yaml.SafeDumper):
    """Safe dumper that quotes every string whose plain form would change type on re-read.

    A list or mapping used twice is written out twice: an alias would make the document
    unreadable here.
    """

    def ignore_aliases(self, data: Any) -> bool:
        return True

    def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
        tag: str
        if kind is ScalarNode and implicit[0]:
            tag = _resolve_plain(value)[0]
            if tag == _STR and _needs_quotes(value):
                return "!quoted"  # never equal to the str tag: forces quoting
            return tag
        tag = super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]
        return tag

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        # Indent block sequences under their key ("key:\n  - a") for readability.
        super().increase_indent(flow, False)


_ODD_BREAKS_RE = re.compile("[\r\x85\u2028\u2029\ufeff]")


def _represent_str(dumper: _Dumper, data: str) -> ScalarNode:
    if _ODD_BREAKS_RE.search(data):
        return dumper.represent_scalar(_STR, data, style='"')
    if "\n" in data and data.strip("\n") and not data.startswith(" "):
        return dumper.represent_scalar(_STR, data, style="|")
    return dumper.represent_scalar(_STR, data)


_Dumper.add_representer(str, _represent_str)


def _dump(fm: dict[str, Any]) -> str:
    out: str = yaml.dump(
        fm,
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=4096,
    )
    return out


def render(fm: dict[str, Any], body: str) -> str:
    """A new document: ``fm`` as frontmatter (keys in order), then ``body`` unchanged.

    With an empty ``fm`` the body is returned alone, unless it would itself read as
    frontmatter, in which case an empty block is written first.
    """
    if not fm:
        return "---\n---\n" + body if _split(body)[0] else body
    return "---\n" + _dump(fm) + "---\n" + body


# --------------------------------------------------------------------------------------------
# edit: a round-trip change of an existing document


def _rt_classes() -> tuple[type, type, type]:
    from ruamel.yaml.constructor import RoundTripConstructor
    from ruamel.yaml.nodes import ScalarNode as RtScalarNode
    from ruamel.yaml.representer import RoundTripRepresenter

    class Plain(str):
        """A plain scalar read from the document: written back exactly as it was."""

        __slots__ = ()

    class Constructor(RoundTripConstructor):
        # (the signature is RoundTripConstructor's own, which overrides its base's so too)
        def construct_mapping(  # type: ignore[override]
            self, node: Any, maptyp: Any, deep: bool = False
        ) -> Any:
            # A plain key is text written back as it was ("y", "null", "1" stay so): as
            # the reader above, the round trip never types a key.
            for key_node, _value in getattr(node, "value", ()):
                if (
                    isinstance(key_node, RtScalarNode)
                    and key_node.style is None
                    and key_node.value != "<<"
                ):
                    self.constructed_objects[key_node] = Plain(key_node.value)
            return super().construct_mapping(node, maptyp, deep)

    def construct_plain_timestamp(self: Any, node: Any) -> Plain:
        return Plain(node.value)

    Constructor.add_constructor("tag:yaml.org,2002:timestamp", construct_plain_timestamp)

    class Representer(RoundTripRepresenter):
        def ignore_aliases(self, data: Any) -> bool:
            return True  # a value used twice is written twice: aliases do not read back

    def represent_plain(self: Any, data: Plain) -> Any:
        tag = self.dumper.resolver.resolve(RtScalarNode, str(data), (True, False))
        return self.represent_scalar(getattr(tag, "suffix", tag), str(data), style=None)

    def represent_new_str(self: Any, data: str) -> Any:
        if _needs_quotes(data) or _ODD_BREAKS_RE.search(data):
            return self.represent_scalar(_STR, data, style='"')
        return self.represent_str(data)

    Representer.add_representer(Plain, represent_plain)
    Representer.add_representer(str, represent_new_str)
    return Plain, Constructor, Representer


_RT: tuple[type, type, type] | None = None

_SEQ_INDENT_RE = re.compile(r"^( *)[^\s#-][^\n]*:[ \t]*\r?\n(?:[ \t]*\r?\n)*( *)- ", re.MULTILINE)
_MAP_INDENT_RE = re.compile(
    r"^( *)[^\s#-][^\n]*:[ \t]*\r?\n(?:[ \t]*\r?\n)*( +)[^\s#-]", re.MULTILINE
)


def _rt_yaml(raw: str) -> Any:
    global _RT
    from ruamel.yaml import YAML

    if _RT is None:
        _RT = _rt_classes()
    _, constructor, representer = _RT
    y = YAML(typ="rt")
    y.Constructor = constructor
    y.Representer = representer
    y.preserve_quotes = True
    y.width = 4096
    mapping, offset = 2, 2
    m = _MAP_INDENT_RE.search(raw)
    if m and len(m.group(2)) > len(m.group(1)):
        mapping = len(m.group(2)) - len(m.group(1))
    m = _SEQ_INDENT_RE.search(raw)
    if m:
        offset = max(0, len(m.group(2)) - len(m.group(1)))
    y.indent(mapping=mapping, sequence=max(offset + 2, 2), offset=offset)
    return y


def _wrap_plain(node: Any, plain: type) -> None:
    """Mark every plain string value read from the document so it is written back as is."""
    if isinstance(node, dict):
        for k, v in node.items():
            if type(v) is str:
                node[k] = plain(v)
            else:
                _wrap_plain(v, plain)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            if type(v) is str:
                node[i] = plain(v)
            else:
                _wrap_plain(v, plain)


def edit(text: str, mutate: Callable[[MutableMapping[str, Any]], None]) -> str:
    """Apply ``mutate`` to the frontmatter of ``text`` and return the new document.

    ``mutate`` gets a mutable mapping (round-trip types: values read from the document keep
    their YAML 1.2 meaning, e.g. ``yes`` reads as the string "yes" there) and changes it in
    place. Key order, comments, quoting and the body are kept; new string values are quoted
    when they would otherwise change type. A change that leaves the frontmatter as it was
    returns ``text`` unchanged. Raises InvalidDocument when the existing frontmatter is not a
    YAML mapping or uses an alias (checked by :func:`parse`'s reader before ruamel.yaml reads it).
    """
    from ruamel.yaml.comments import CommentedMap
    from ruamel.yaml.error import YAMLError as RuamelError

    has_block, open_line, raw, close_line, body = _split(text)
    read: dict[str, Any] = {}
    if has_block:
        read, error = _load(raw)
        if error is not None:
            raise InvalidDocument(error)
    y = _rt_yaml(raw)
    assert _RT is not None
    plain = _RT[0]
    data: Any = None
    if has_block and raw.strip():
        try:
            data = y.load(raw)
        except RuamelError:
            # PyYAML reads what ruamel.yaml refuses (a tab after a colon, a key given twice)
            return _edit_anew(text, read, mutate, open_line, close_line, body)
    if data is None:
        data = CommentedMap()
    if not isinstance(data, CommentedMap):
        raise InvalidDocument("frontmatter is not a mapping")
    _wrap_plain(data, plain)

    def dump(obj: Any) -> str:
        buf = io.StringIO()
        y.dump(obj, buf)
        out = buf.getvalue()
        return "" if out.strip() == "{}" else out

    before = dump(data) if data else ""
    if before and _load(before) != (read, None):
        # written back, the block would read otherwise (``!!set {x, y}`` comes back with
        # other keys): change what memdir reads instead
        return _edit_anew(text, read, mutate, open_line, close_line, body)
    mutate(data)
    after = dump(data) if data else ""
    if after == before:
        return text
    if not has_block:
        return "---\n" + after + "---\n" + text
    crlf = open_line.endswith("\r\n")
    if crlf:
        after = after.replace("\r\n", "\n").replace("\n", "\r\n")
    return open_line + after + close_line + body


def _edit_anew(
    text: str,
    fm: dict[str, Any],
    mutate: Callable[[MutableMapping[str, Any]], None],
    open_line: str,
    close_line: str,
    body: str,
) -> str:
    """:func:`edit` for a block ruamel.yaml cannot keep: ``mutate`` changes the values memdir
    reads and the block is written anew (comments and layout go, every value stays)."""
    changed = copy.deepcopy(fm)
    mutate(changed)
    if changed == fm:
        return text
    after = _dump(changed) if changed else ""
    if open_line.endswith("\r\n"):
        after = after.replace("\n", "\r\n")
    return open_line + after + close_line + body
