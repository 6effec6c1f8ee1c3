"""Frontmatter filters as callers give them (key=value strings or a mapping), with values
typed as the index stores frontmatter (YAML 1.1, as KiwiFS reads it)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import InvalidInput
from .frontmatter import json_value
from .text import bad_char, lone_surrogate


def parse_where(items: Iterable[str] | Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    """``key=value`` filters; values are typed as YAML 1.1 (``yes`` is true, ``42`` a number)."""
    if not items:
        return ()
    pairs: list[tuple[str, Any]] = []
    source = items.items() if isinstance(items, Mapping) else (_split_where(i) for i in items)
    for key, raw in source:
        if not isinstance(key, str) or not key.strip() or bad_char(key) or '"' in key:
            raise InvalidInput(
                f"a where filter needs a frontmatter key without quotes or control "
                f"characters, got {key!r}"
            )
        if isinstance(raw, str) and lone_surrogate(raw) is not None:
            raise InvalidInput(f"the where filter on {key!r} is not valid Unicode text")
        value = typed_scalar(raw) if isinstance(raw, str) else raw
        if isinstance(value, bool):
            value = int(value)
        elif isinstance(value, int | float):
            value = json_value(value)  # ".inf", or an int beyond SQLite's as the index has it
        pairs.append((key, value))
    return tuple(pairs)


def _split_where(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise InvalidInput(f"a where filter is key=value, got {item!r}")
    return key.strip(), value.strip()


def typed_scalar(value: str) -> Any:
    from .frontmatter import parse

    typed = parse(f"---\nv: {value}\n---\n").fm.get("v", value) if value else value
    return typed if isinstance(typed, str | int | float | bool) else value
