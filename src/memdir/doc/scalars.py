"""Plain YAML scalars typed as KiwiFS reads them (YAML 1.1), and the quoting that keeps a
string a string when written back."""

from __future__ import annotations

import math
import re
from typing import Any

from .lazyregex import LazyRegex

STR = "tag:yaml.org,2002:str"
INT = "tag:yaml.org,2002:int"
FLOAT = "tag:yaml.org,2002:float"
BOOL = "tag:yaml.org,2002:bool"
NULL = "tag:yaml.org,2002:null"
MERGE = "tag:yaml.org,2002:merge"
TIMESTAMP = "tag:yaml.org,2002:timestamp"


# --------------------------------------------------------------------------------------------
# Scalar typing (YAML 1.1 as KiwiFS reads it)

_MAP: dict[str, tuple[str, Any]] = {}
for _words, _tag, _value in (
    (("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), BOOL, True),
    (("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"), BOOL, False),
    (("", "~", "null", "Null", "NULL"), NULL, None),
    ((".nan", ".NaN", ".NAN"), FLOAT, math.nan),
    ((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), FLOAT, math.inf),
    (("-.inf", "-.Inf", "-.INF"), FLOAT, -math.inf),
    (("<<",), MERGE, "<<"),
):
    for _w in _words:
        _MAP[_w] = (_tag, _value)

_NUMERIC_START = frozenset("+-0123456789")
_DOT_FLOAT_RE = LazyRegex(r"\.[0-9]+(?:[eE][-+]?[0-9]+)?\Z")
_FLOAT_RE = LazyRegex(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?\Z")
_INT_RE = LazyRegex(
    r"([-+]?)(?:0[bB]([01]+)|0[oO]([0-7]+)|0[xX]([0-9a-fA-F]+)|0([0-7]+)|([0-9]+))\Z"
)
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_UINT64_MAX = 2**64 - 1
# PyYAML's own timestamp pattern; used on write only, so that date-like strings are quoted.
_TIMESTAMP_RE = LazyRegex(
    r"""[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?
    (?:(?:[Tt]|[ \t]+)[0-9][0-9]?:[0-9][0-9]:[0-9][0-9](?:\.[0-9]*)?
    (?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?)?\Z""",
    re.VERBOSE,
)
_SEXAGESIMAL_RE = LazyRegex(r"[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?\Z")


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


def resolve_plain(value: str) -> tuple[str, Any]:
    """Tag and value of an unquoted scalar, as KiwiFS's YAML reader types it."""
    hit = _MAP.get(value)
    if hit is not None:
        return hit
    first = value[0]
    if first == ".":
        if _DOT_FLOAT_RE.match(value):
            return FLOAT, float(value)
    elif first in _NUMERIC_START:
        plain = value.replace("_", "")
        iv = _parse_int(plain)
        if iv is not None:
            return INT, iv
        if _FLOAT_RE.match(plain):
            fv = float(plain)
            if not math.isinf(fv):
                return FLOAT, fv
    return STR, value


def plain_type(value: str) -> type:
    """The Python type an unquoted ``value`` would read back as (``str`` when unchanged)."""
    tag, v = resolve_plain(value)
    return str if tag in (STR, MERGE) else type(v)


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


def needs_quotes(value: str) -> bool:
    """True when ``value`` written plain would not read back as this string in some reader."""
    if not value:
        return True
    tag, _ = resolve_plain(value)
    if tag != STR:
        return True
    return bool(_TIMESTAMP_RE.match(value) or _SEXAGESIMAL_RE.match(value) or value == "=")
