"""Checks on text that callers hand to memdir: ids, names and notes, and file content.

Strings reach memdir from JSON (HTTP, MCP, ``turn record`` on stdin), where a lone
surrogate (``"\\ud800"``) is valid syntax but no UTF-8 text: written into a file it
breaks YAML and git. Every value is checked before anything is written.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

from ..errors import InvalidDocument, InvalidInput

# Actor names become git authors; longer names are refused rather than cut.
MAX_ACTOR_CHARS = 200


def bad_char(value: str) -> str | None:
    """The first control character, lone surrogate or line separator in ``value``, if any."""
    for ch in value:
        if unicodedata.category(ch) in {"Cc", "Cs"} or ch in "\u2028\u2029":
            return ch
    return None


def lone_surrogate(value: str) -> int | None:
    """The position of the first lone surrogate (text that is not Unicode), if any."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def one_line(kind: str, value: object, *, max_chars: int | None = None) -> str:
    """A one-line string (an id, a type, a reason): no control characters at all."""
    if not isinstance(value, str):
        raise InvalidInput(f"{kind} must be a string, got {type(value).__name__}")
    bad = bad_char(value)
    if bad is not None:
        raise InvalidInput(f"{kind} {value!r} contains a control character ({bad!r})")
    if max_chars is not None and len(value) > max_chars:
        raise InvalidInput(f"{kind} is longer than {max_chars} characters")
    return value


def unicode_text(kind: str, value: str) -> str:
    """Any text (newlines allowed) that is real Unicode: no lone surrogate, no NUL."""
    at = lone_surrogate(value)
    if at is not None:
        raise InvalidInput(f"{kind} is not valid Unicode text (a lone surrogate at character {at})")
    if "\x00" in value:
        raise InvalidInput(f"{kind} contains a NUL character")
    return value


def actor_name(value: object) -> str:
    """An actor name (a git author): one line of at most ``MAX_ACTOR_CHARS``; empty = anonymous."""
    if value is None:
        return "anonymous"
    name = one_line("actor", value, max_chars=MAX_ACTOR_CHARS).strip()
    return name or "anonymous"


def read_utf8(path: Path) -> str:
    """A file the engine must understand (a contract, a router, a log): UTF-8, or refused.

    A stray byte that is not UTF-8 is an InvalidDocument naming the file, not a crash.
    """
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidDocument(
            f"{path.name} is not valid UTF-8 text ({exc.reason} at byte {exc.start}); "
            "fix or restore it"
        ) from None


def content_hash(data: bytes) -> str:
    """The SHA-256 of a document's bytes, in hex: what the index and the store compare."""
    import hashlib  # here, not at the top: a hook whose index is in step never hashes

    return hashlib.sha256(data).hexdigest()
