"""One wording for refused arguments, shared by the HTTP API and the MCP tools.

Both adapters validate arguments with pydantic; its messages ("Input should be
greater than or equal to 1") name the library's terms, not the caller's. This
turns one of its error records (a plain mapping: ``type``, ``loc``, ``msg``,
``ctx``) into ``limit: must be at least 1``. It imports no framework.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

_KINDS: dict[str, str] = {
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "missing": "is required",
    "missing_argument": "is required",
    "extra_forbidden": "unknown field",
    "unexpected_keyword_argument": "unknown field",
    "none_required": "must be null",
}


def _plural(n: Any, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


_BOUNDS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "greater_than_equal": lambda c: f"must be at least {c.get('ge')}",
    "greater_than": lambda c: f"must be more than {c.get('gt')}",
    "less_than_equal": lambda c: f"must be at most {c.get('le')}",
    "less_than": lambda c: f"must be less than {c.get('lt')}",
    "too_short": lambda c: f"must have at least {_plural(c.get('min_length'), 'item')}",
    "too_long": lambda c: f"must have at most {_plural(c.get('max_length'), 'item')}",
    "string_too_short": lambda c: f"must be at least {_plural(c.get('min_length'), 'character')}",
    "string_too_long": lambda c: f"must be at most {_plural(c.get('max_length'), 'character')}",
    "literal_error": lambda c: f"must be one of {c.get('expected')}",
    "enum": lambda c: f"must be one of {c.get('expected')}",
}


def problem(error: Mapping[str, Any]) -> str:
    """What is wrong with one value, without saying where (``must be at least 1``)."""
    kind = str(error.get("type", ""))
    if kind in _KINDS:
        return _KINDS[kind]
    bound = _BOUNDS.get(kind)
    if bound is not None:
        return bound(error.get("ctx") or {})
    message = str(error.get("msg") or "invalid")
    if kind == "value_error":  # a validator's own words, after pydantic's "Value error, "
        message = message.removeprefix("Value error, ")
    return message[:1].lower() + message[1:]


def where(loc: Iterable[Any]) -> str:
    """``("sources", 0, "name")`` -> ``sources[0].name``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def describe(errors: Iterable[Mapping[str, Any]], *, limit: int = 3) -> str:
    """One line for the first ``limit`` problems: ``limit: must be at least 1; ...``."""
    lines = [f"{where(e.get('loc', ())) or 'arguments'}: {problem(e)}" for e in errors]
    return "; ".join(lines[:limit]) or "invalid arguments"
