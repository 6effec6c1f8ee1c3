"""Frontmatter through PyYAML: the loader with KiwiFS's scalar typing, and the dumper.

:mod:`memdir.doc.frontmatter` reads the blocks memdir writes itself without PyYAML
(:mod:`memdir.doc.fastyaml`) and comes here for anything else, and to render a new block;
PyYAML is imported only then (it costs a process that reads no frontmatter, such as a hook's
context pack, about ten milliseconds).
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from .scalars import BOOL, FLOAT, INT, NULL, STR, TIMESTAMP, needs_quotes, resolve_plain

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
            return resolve_plain(value)[0]
        if kind is ScalarNode:
            return STR
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
                    key_node.tag = STR
        return super().construct_mapping(node, deep=deep)


def _construct_typed(loader: _Loader, node: ScalarNode) -> Any:
    tag, value = resolve_plain(node.value)
    if tag == node.tag:
        return value
    # An explicit tag (``!!int "7"``): fall back to PyYAML's own constructors.
    fallback = {
        INT: yaml.SafeLoader.construct_yaml_int,
        FLOAT: yaml.SafeLoader.construct_yaml_float,
        BOOL: yaml.SafeLoader.construct_yaml_bool,
        NULL: yaml.SafeLoader.construct_yaml_null,
    }[node.tag]
    return fallback(loader, node)


def _construct_timestamp(loader: _Loader, node: ScalarNode) -> str:
    return str(node.value)


for _t in (INT, FLOAT, BOOL, NULL):
    _Loader.add_constructor(_t, _construct_typed)
_Loader.add_constructor(TIMESTAMP, _construct_timestamp)


def _mark_text(err: yaml.YAMLError) -> str:
    problem = getattr(err, "problem", None) or getattr(err, "context", None) or str(err)
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    if mark is not None:
        # +2: one for 1-based lines, one for the opening "---" line.
        return f"{problem} (line {mark.line + 2}, column {mark.column + 1})"
    return str(problem)


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


def load(raw: str) -> tuple[dict[str, Any], str | None]:
    """The frontmatter block ``raw`` read by PyYAML: (mapping, error)."""
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
            tag = resolve_plain(value)[0]
            if tag == STR and needs_quotes(value):
                return "!quoted"  # never equal to the str tag: forces quoting
            return tag
        tag = super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]
        return tag

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        # Indent block sequences under their key ("key:\n  - a") for readability.
        super().increase_indent(flow, False)


ODD_BREAKS_RE = re.compile("[\r\x85\u2028\u2029\ufeff]")


def _represent_str(dumper: _Dumper, data: str) -> ScalarNode:
    if ODD_BREAKS_RE.search(data):
        return dumper.represent_scalar(STR, data, style='"')
    if "\n" in data and data.strip("\n") and not data.startswith(" "):
        return dumper.represent_scalar(STR, data, style="|")
    return dumper.represent_scalar(STR, data)


_Dumper.add_representer(str, _represent_str)


def dump(fm: dict[str, Any]) -> str:
    """``fm`` as a YAML block (keys in order, strings quoted when they would change type)."""
    out: str = yaml.dump(
        fm,
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=4096,
    )
    return out
