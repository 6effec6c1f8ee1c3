"""What a caller says about itself, kept beside the author of record.

With authentication on, a token names who writes: its name is the git author and
the ``derived-from`` actor. A caller may still say who it acts for (HTTP
``X-Actor``, the MCP tools' ``actor``); that is a claim nobody checked, so it is
not made the author but recorded as a trailer of the commit message
(``X-Actor: planner``). The adapter sets the claims for the call it serves; the
git log reads them when it queues the call's writes. Claims live in a context
variable, so concurrent requests never see each other's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_CLAIMS: ContextVar[tuple[tuple[str, str], ...]] = ContextVar("memdir_claims", default=())
MAX_CLAIM_CHARS = 200


def _one_line(text: str) -> str:
    """A claim as one line of printable text (a newline would forge another trailer)."""
    kept = "".join(c if c.isprintable() else " " for c in text)
    return " ".join(kept.split())[:MAX_CLAIM_CHARS]


def claim(key: str, value: str) -> None:
    """Record ``key: value`` for the rest of the current call (once per pair)."""
    pair = (key, _one_line(value))
    if pair[1] and pair not in _CLAIMS.get():
        _CLAIMS.set((*_CLAIMS.get(), pair))


def current() -> tuple[tuple[str, str], ...]:
    return _CLAIMS.get()


@contextmanager
def scope() -> Iterator[None]:
    """Claims made inside the block end with it."""
    token = _CLAIMS.set(())
    try:
        yield
    finally:
        _CLAIMS.reset(token)


def annotate(message: str) -> str:
    """``message`` with the current claims as trailers (unchanged when there are none)."""
    found = _CLAIMS.get()
    if not found:
        return message
    trailers = "\n".join(f"{key}: {value}" for key, value in found)
    return f"{message}\n\n{trailers}" if message.strip() else trailers
