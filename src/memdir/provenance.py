"""Provenance: ``type:id`` values and the ``derived-from`` / ``merged-from`` entries."""

from __future__ import annotations

from datetime import UTC, datetime

from .errors import InvalidProvenance


def parse(value: str) -> tuple[str, str]:
    """Split ``type:id`` at the first colon; both halves trimmed and non-empty.

    KiwiFS ignores a malformed value silently; memdir refuses it.
    """
    if not isinstance(value, str) or ":" not in value:
        raise InvalidProvenance(
            f"malformed provenance {value!r}: expected type:id, for example run:abc123"
        )
    kind, _, ident = value.partition(":")
    kind, ident = kind.strip(), ident.strip()
    if not kind or not ident:
        raise InvalidProvenance(
            f"malformed provenance {value!r}: both type and id must be non-empty (type:id)"
        )
    return kind, ident


def now_rfc3339() -> str:
    """The current time in RFC 3339 UTC with seconds, as KiwiFS writes dates."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def derived_entry(kind: str, ident: str, actor: str | None) -> dict[str, str]:
    return {
        "type": kind,
        "id": ident,
        "date": now_rfc3339(),
        "actor": (actor or "").strip() or "anonymous",
    }
