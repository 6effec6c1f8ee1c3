"""Provenance: ``type:id`` values and the ``derived-from`` / ``merged-from`` entries."""

from __future__ import annotations

import copy
from collections.abc import MutableMapping
from datetime import UTC, datetime
from typing import Any

from ..errors import InvalidProvenance
from . import frontmatter

# The keys that record where a document came from and what it consumed: a rewrite keeps them
# unless its new content sets them itself.
HISTORY_KEYS = ("derived-from", "merged-from")


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


def append_entry(fm: MutableMapping[str, Any], key: str, entry: dict[str, str]) -> None:
    """Append ``entry`` to the list under ``key``; a value of another shape is kept first."""
    current = fm.get(key)
    if isinstance(current, list):
        current.append(entry)
    elif current is None:
        fm[key] = [entry]
    else:  # an unexpected shape is kept, never dropped
        fm[key] = [current, entry]


def carry_history(
    old: str | None, new: str, entry: dict[str, str] | None
) -> tuple[str, tuple[str, ...]]:
    """``new`` (a document replacing ``old``) with the history it does not replace.

    Each of :data:`HISTORY_KEYS` that ``new`` leaves out keeps ``old``'s value; one that
    ``new`` sets replaces it, and is named in the returned tuple when ``old`` held another
    value. ``entry`` (provenance of this write) is then appended to ``derived-from``. ``old``
    is None when there is no file yet; an old frontmatter that does not parse keeps nothing.
    """
    before = frontmatter.parse(old).fm if old is not None else {}
    if entry is None and not any(k in before for k in HISTORY_KEYS):
        return new, ()  # nothing to keep or add (a new file, most often)
    after = frontmatter.parse(new).fm
    kept = {k: before[k] for k in HISTORY_KEYS if k in before and k not in after}
    replaced = tuple(
        k for k in HISTORY_KEYS if k in before and k in after and after[k] != before[k]
    )
    if not kept and entry is None:
        return new, replaced

    def mutate(fm: MutableMapping[str, Any]) -> None:
        for key, value in kept.items():
            fm[key] = copy.deepcopy(value)
        if entry is not None:
            append_entry(fm, "derived-from", entry)

    return frontmatter.edit(new, mutate), replaced
