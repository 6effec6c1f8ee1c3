"""What the index keeps of one markdown file (derived from its bytes alone)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .. import lazy
from ..doc import frontmatter, links, paths
from ..doc.text import content_hash
from ..doc.turnrecord import without_no_tools_note
from ..records import recordclass

if TYPE_CHECKING:
    from ..kiwi import report as coverage
else:  # the report's module costs a hook ~15 ms; loaded when a file's facts are first read
    coverage = lazy.module("memdir.kiwi.report")

HIDDEN_STATUSES = frozenset({"superseded", "forgotten"})
LINK_LIST_KEYS = ("related", "contradicts", "supersedes")


@recordclass(frozen=True)
class DocRow:
    path: str
    walk_key: bytes
    hash: str
    mtime_ns: int
    size: int
    fm: str
    fm_ok: bool
    fm_error: str | None
    utf8_ok: bool
    title: str
    memory_kind: str | None
    type: str | None
    status: str | None
    episode_id: str | None
    thread: str | None
    user: str | None
    created: str | None
    hidden: bool
    zone: int
    facts: str
    body: str
    links: list[tuple[str, str, str | None]]


def _str(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def _strings(value: Any) -> list[str]:
    """Flatten a string or (nested) list of strings; other values are ignored."""
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, list):
        out: list[str] = []
        for item in value:
            out.extend(_strings(item))
        return out
    return []


def _unwrap(target: str) -> str:
    target = target.strip()
    if target.startswith("[[") and target.endswith("]]"):
        target = target[2:-2]
    return target.strip()


def searchable_body(doc_type: str | None, body: str) -> str:
    """The body the full-text index holds: the body, less a turn's no-tool-calls note."""
    if (doc_type or "").lower() != "turn":
        return body
    return without_no_tools_note(body)


def analyze(rel: str, raw: bytes, mtime_ns: int, size: int) -> DocRow:
    """Parse one file into the row the index stores."""
    try:
        text = raw.decode("utf-8")
        utf8_ok = True
    except UnicodeDecodeError:
        text = raw.decode("utf-8", errors="replace")
        utf8_ok = False
    parsed = frontmatter.parse(text)
    fm = parsed.fm
    fm_error = parsed.error
    try:
        fm_json = json.dumps(
            frontmatter.json_value(fm), ensure_ascii=False, allow_nan=False, default=str
        )
    except (ValueError, TypeError, OverflowError) as err:
        # The reader refuses aliases, so this is a guard: a frontmatter the index cannot store
        # is indexed as invalid (empty), like invalid YAML, rather than failing the whole walk.
        fm, fm_json, fm_error = {}, "{}", f"frontmatter cannot be stored: {err}"
    body = parsed.body
    facts = coverage.facts_for(rel, fm, mtime_ns / 1e9)
    status = (fm.get("memory_status") or "") if isinstance(fm.get("memory_status"), str) else ""
    status = status.strip().lower()
    hidden = status in HIDDEN_STATUSES or fm.get("distilled") is True
    edges: list[tuple[str, str, str | None]] = []
    for link in links.extract(body):
        edges.append((link.kind, link.target, link.label))
    for key in LINK_LIST_KEYS:
        for target in _strings(fm.get(key)):
            edges.append((key, _unwrap(target), None))
    merged = fm.get("merged-from")
    if isinstance(merged, list):
        for item in merged:
            if isinstance(item, dict):
                kind = _str(item.get("type")) or "episode"
                ident = _str(item.get("id"))
                path = _str(item.get("path"))
                if ident:
                    edges.append(("merged-from", f"{kind.lower()}:{ident}", path))
                elif path:
                    edges.append(("merged-from", f"path:{path}", None))
    for parent in _strings(fm.get("parents")):
        edges.append(("parent", parent.strip(), None))
    created = None
    for key in ("created", "timestamp", "date"):
        value = fm.get(key)
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            created = str(value)
            break
    return DocRow(
        path=rel,
        walk_key=coverage.walk_key(rel),
        hash=content_hash(raw),
        mtime_ns=mtime_ns,
        size=size,
        fm=fm_json,
        fm_ok=fm_error is None,
        fm_error=fm_error,
        utf8_ok=utf8_ok,
        title=links.title_of(fm, body, rel),
        memory_kind=_str(fm.get("memory_kind")),
        type=_str(fm.get("type")),
        status=status or None,
        episode_id=facts.episode_id or _str(fm.get("episode_id")) or _str(fm.get("id")),
        thread=_str(fm.get("thread")),
        user=_str(fm.get("user")),
        created=created,
        hidden=hidden,
        zone=1 if paths.in_hidden_zone(rel) else 0,
        facts=facts.to_json(),
        body=searchable_body(_str(fm.get("type")), body),
        links=edges,
    )
