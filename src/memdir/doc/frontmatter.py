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
import re
from collections.abc import Callable, MutableMapping
from typing import Any

from memdir.errors import InvalidDocument

from ..records import recordclass
from .fastyaml import fast_load
from .lazyregex import LazyRegex
from .scalars import (
    STR,
    json_value,
    needs_quotes,
    plain_type,
)

__all__ = ["Parsed", "edit", "json_value", "load_strict", "parse", "plain_type", "render"]


_CLOSE_RE = LazyRegex(r"^---[ \t]*\r?$", re.MULTILINE)


@recordclass(slots=True)
class Parsed:
    """The result of :func:`parse`."""

    fm: dict[str, Any]
    body: str
    has_block: bool
    error: str | None = None
    raw: str = ""


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


def _load(raw: str) -> tuple[dict[str, Any], str | None]:
    if not raw.strip():
        return {}, None
    fast = fast_load(raw)
    if fast is not None:
        return fast, None
    return _load_yaml(raw)


def _load_yaml(raw: str) -> tuple[dict[str, Any], str | None]:
    """The PyYAML path (any YAML); also the reference the fast path is tested against."""
    from . import pyyaml

    return pyyaml.load(raw)


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


def _dump(fm: dict[str, Any]) -> str:
    from . import pyyaml

    return pyyaml.dump(fm)


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

    from .pyyaml import ODD_BREAKS_RE

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
        if needs_quotes(data) or ODD_BREAKS_RE.search(data):
            return self.represent_scalar(STR, data, style='"')
        return self.represent_str(data)

    Representer.add_representer(Plain, represent_plain)
    Representer.add_representer(str, represent_new_str)
    return Plain, Constructor, Representer


_RT: tuple[type, type, type] | None = None

_SEQ_INDENT_RE = LazyRegex(r"^( *)[^\s#-][^\n]*:[ \t]*\r?\n(?:[ \t]*\r?\n)*( *)- ", re.MULTILINE)
_MAP_INDENT_RE = LazyRegex(
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
