"""JSON as Go's encoding/json writes it (MarshalIndent, two spaces): <, >, &, U+2028 and U+2029
escaped as \\u003c-style sequences, other non-ASCII text kept, floats in Go's shortest form."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from ..doc.lazyregex import LazyRegex

# --------------------------------------------------------------------------------------------
# Go-compatible JSON


def go_float(value: float) -> str:
    """A float as Go's encoding/json writes it (shortest digits; no ``.0`` on integers)."""
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"unsupported float {value!r}")
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    a = abs(value)
    if a < 1e-6 or a >= 1e21:
        mant, exp = repr(value).split("e")  # repr uses an exponent in this range
        if mant.endswith(".0"):
            mant = mant[:-2]
        sign = exp[0] if exp[0] in "+-" else "+"
        digits = exp.lstrip("+-").lstrip("0") or "0"
        if len(digits) < 2:
            digits = "0" + digits
        if sign == "-" and digits.startswith("0"):
            digits = digits[1:]
        return f"{mant}e{sign}{digits}"
    from decimal import Decimal  # here, not at the top: a hook formats no float

    text = format(Decimal(repr(value)), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


_GO_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\b": "\\b",
    "\f": "\\f",
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
_GO_ESCAPE_RE = LazyRegex('["\\\\<>&\u2028\u2029\x00-\x1f\ud800-\udfff]')


def _go_escape_char(m: re.Match[str]) -> str:
    ch = m.group(0)
    esc = _GO_ESCAPES.get(ch)
    if esc is not None:
        return esc
    if "\ud800" <= ch <= "\udfff":
        return "\ufffd"  # a lone surrogate is not valid UTF-8; Go writes U+FFFD
    return f"\\u{ord(ch):04x}"


def go_string(value: str) -> str:
    if _GO_ESCAPE_RE.search(value) is None:
        return '"' + value + '"'
    return '"' + _GO_ESCAPE_RE.sub(_go_escape_char, value) + '"'


def _go_json(value: Any, indent: str, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(go_float(value))
    elif isinstance(value, str):
        out.append(go_string(value))
    elif isinstance(value, dict):
        if not value:
            out.append("{}")
            return
        inner = indent + "  "
        out.append("{\n")
        for i, (k, v) in enumerate(value.items()):
            if i:
                out.append(",\n")
            out.append(inner + go_string(str(k)) + ": ")
            _go_json(v, inner, out)
        out.append("\n" + indent + "}")
    elif isinstance(value, list | tuple):
        if not value:
            out.append("[]")
            return
        inner = indent + "  "
        if all(type(v) is dict and v and all(type(x) is str for x in v.values()) for v in value):
            _go_flat_entries(value, inner, out)  # the file lists: one pass, no recursion
            return
        out.append("[\n")
        for i, v in enumerate(value):
            if i:
                out.append(",\n")
            out.append(inner)
            _go_json(v, inner, out)
        out.append("\n" + indent + "]")
    else:
        raise TypeError(f"cannot encode {type(value).__name__}")


def _go_flat_entries(entries: Any, indent: str, out: list[str]) -> None:
    """A list of string-valued mappings, laid out exactly as the general case would."""
    inner = indent + "  "
    sep = ",\n" + inner
    texts = [t for entry in entries for item in entry.items() for t in item]
    plain = _GO_ESCAPE_RE.search("/".join(texts)) is None  # nothing anywhere needs escaping
    quote: Callable[[str], str] = '"{}"'.format if plain else go_string
    parts = []
    for entry in entries:
        fields = sep.join(quote(k) + ": " + quote(v) for k, v in entry.items())
        parts.append(indent + "{\n" + inner + fields + "\n" + indent + "}")
    out.append("[\n" + ",\n".join(parts) + "\n" + indent[:-2] + "]")


def dumps_go(value: Any) -> str:
    """``value`` as Go's ``json.MarshalIndent(v, "", "  ")`` would write it."""
    out: list[str] = []
    _go_json(value, "", out)
    return "".join(out)
