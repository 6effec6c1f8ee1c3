"""The KiwiFS memory report: which episodes no page has consumed yet, and health metrics.

The rules follow KiwiFS (``kiwifs memory report``) exactly, so both tools give the same JSON on
the same folder. The work is split so an index can cache it: :func:`facts_for` reduces one
file's frontmatter to a small, prefix-independent :class:`FileFacts` (storable as compact
JSON), and :func:`build_report` folds facts given in walk order into a :class:`Report`.
:func:`report_for_folder` does the plain walk + parse + build on any folder and writes nothing.

JSON output mirrors Go's ``encoding/json`` (``MarshalIndent`` with two spaces): ``<``, ``>``,
``&``, U+2028 and U+2029 are escaped as ``\\u003c``-style sequences, other non-ASCII text is
kept, and floats print in Go's shortest form (``100``, ``0``, ``33.333333333333336``).
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, NamedTuple

from memdir.doc import frontmatter

from ..doc.lazyregex import LazyRegex
from ..records import field, recordclass
from .gojson import dumps_go

__all__ = [
    "COMPATIBLE_TYPES",
    "DEFAULT_PREFIX",
    "FileEntry",
    "FileFacts",
    "Report",
    "build_report",
    "dumps_report",
    "facts_for",
    "normalize_prefix",
    "prefix_from_kiwi_config",
    "render_text",
    "report_for_folder",
    "report_to_json",
    "walk_key",
    "walk_markdown",
]

DEFAULT_PREFIX = "episodes/"
COMPATIBLE_TYPES = ("episode", "run", "session", "trace", "event", "ingest")
SHAPE_WARNING = "memory: merged-from has unsupported shape"
_MISSING_ID = (
    "missing episode_id in {path} \u2014 set memory_kind: episodic and episode_id, "
    "or match merged-from by path"
)

# --------------------------------------------------------------------------------------------
# Walk


def walk_markdown(root: Path) -> Iterator[tuple[str, Path]]:
    """(root-relative path, absolute path) of every markdown file, in KiwiFS walk order.

    Depth-first; entries of each folder sorted byte-wise by name, a subfolder visited at its
    sorted position; names starting with ``.`` skipped at any depth; ``.md`` matched
    case-insensitively. Symlinked folders are not followed.
    """
    root = Path(root)
    yield from _walk(root, "")


def _walk(folder: Path, rel: str) -> Iterator[tuple[str, Path]]:
    try:
        with os.scandir(folder) as it:
            entries = [e for e in it if not e.name.startswith(".")]
    except OSError:
        return
    entries.sort(key=lambda e: os.fsencode(e.name))
    for entry in entries:
        name = entry.name
        child_rel = f"{rel}{name}"
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            continue
        if is_dir:
            yield from _walk(Path(entry.path), child_rel + "/")
        elif name.lower().endswith(".md"):
            try:
                if entry.is_file():
                    yield child_rel, Path(entry.path)
            except OSError:
                continue


def walk_key(relpath: str) -> bytes:
    """A key whose byte order is the walk order (components in UTF-8 joined by NUL)."""
    return b"\x00".join(os.fsencode(part) for part in relpath.split("/"))


# --------------------------------------------------------------------------------------------
# Per-file facts


@recordclass(frozen=True, slots=True)
class FileFacts:
    """What the report needs from one file, independent of the episodes prefix."""

    path: str
    memory_kind_raw: str | None = None  # as written; None when empty or not a string
    mk_class: str = "other"  # "semantic" | "episodic" | "other"
    episode_id_raw: str | None = None  # the id as reported
    episode_id: str | None = None  # trimmed, used for matching
    merged_keys: tuple[str, ...] = ()
    merged_from_refs: int = 0
    shape_warning: bool = False
    memory_status: str = ""
    expires_at: float | None = None  # epoch seconds
    contradiction: bool = False
    has_scope: bool = False
    scope: str = ""
    mtime: float = 0.0
    # True when any of the rarely set facts above is set (a fast path for build_report).
    extra: bool = field(default=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "extra",
            bool(
                self.merged_keys
                or self.merged_from_refs
                or self.shape_warning
                or self.expires_at is not None
                or self.contradiction
                or self.has_scope
            ),
        )

    @property
    def missing_id(self) -> bool:
        return self.episode_id is None

    def to_json(self) -> str:
        data: dict[str, Any] = {"p": self.path, "c": self.mk_class, "t": self.mtime}
        if self.memory_kind_raw is not None:
            data["k"] = self.memory_kind_raw
        if self.episode_id_raw is not None:
            data["r"] = self.episode_id_raw
        if self.episode_id is not None:
            data["i"] = self.episode_id
        if self.merged_keys:
            data["m"] = list(self.merged_keys)
        if self.merged_from_refs:
            data["n"] = self.merged_from_refs
        if self.shape_warning:
            data["w"] = 1
        if self.memory_status:
            data["s"] = self.memory_status
        if self.expires_at is not None:
            data["e"] = self.expires_at
        if self.contradiction:
            data["x"] = 1
        if self.has_scope:
            data["o"] = self.scope
        return json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> FileFacts:
        d = json.loads(text)
        return cls(
            path=d["p"],
            memory_kind_raw=d.get("k"),
            mk_class=d.get("c", "other"),
            episode_id_raw=d.get("r"),
            episode_id=d.get("i"),
            merged_keys=tuple(d.get("m", ())),
            merged_from_refs=d.get("n", 0),
            shape_warning=bool(d.get("w")),
            memory_status=d.get("s", ""),
            expires_at=d.get("e"),
            contradiction=bool(d.get("x")),
            has_scope="o" in d,
            scope=d.get("o", ""),
            mtime=d.get("t", 0.0),
        )


def _nonblank(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value
    return None


def _merged_keys(value: Any) -> tuple[tuple[str, ...], int, bool]:
    """(match keys, mapping items, unsupported-shape) for a ``merged-from`` value."""
    if value is None:
        return (), 0, False
    if not isinstance(value, list):
        return (), 0, True
    keys: list[str] = []
    refs = 0
    for item in value:
        if not isinstance(item, dict):
            continue
        refs += 1
        typ = item.get("type")
        ident = item.get("id")
        path = item.get("path")
        ident = ident if isinstance(ident, str) else ""
        path = path if isinstance(path, str) else ""
        if not (isinstance(typ, str) and typ) or not (ident or path):
            continue
        kind = typ.strip().lower()
        if ident.strip():
            keys.append(f"{kind}:{ident.strip()}")
        else:
            keys.append(f"{kind}:path:{path.strip().replace(chr(92), '/')}")
        if path:
            keys.append(f"episode:path:{path}")
    return tuple(keys), refs, False


_DATE_RE = LazyRegex(r"([0-9]{4})-([0-9]{2})-([0-9]{2})\Z")
_RFC3339_RE = LazyRegex(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?"
    r"(?:(Z)|([+-])([0-9]{2}):([0-9]{2}))\Z"
)


def parse_expiry(value: Any) -> float | None:
    """Epoch seconds of a ``YYYY-MM-DD`` (UTC midnight) or RFC 3339 value; None otherwise."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    try:
        m = _DATE_RE.match(text)
        if m:
            y, mo, d = (int(g) for g in m.groups())
            return datetime(y, mo, d, tzinfo=UTC).timestamp()
        m = _RFC3339_RE.match(text)
        if m:
            y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
            frac = m.group(7)
            if m.group(8):
                tz = UTC
            else:
                oh, om = int(m.group(10)), int(m.group(11))
                if oh > 23 or om > 59:
                    return None
                offset = timedelta(hours=oh, minutes=om)
                tz = timezone(-offset if m.group(9) == "-" else offset)
            stamp = datetime(y, mo, d, h, mi, s, tzinfo=tz).timestamp()
            return stamp + (float("0" + frac) if frac else 0.0)
    except ValueError:
        return None
    return None


def _contradicts(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            text = item.strip()
            if text.startswith("[[") and text.endswith("]]"):
                text = text[2:-2].strip()
            if text.lstrip("/").strip():
                return True
    return False


def facts_for(path: str, fm: dict[str, Any], mtime: float) -> FileFacts:
    """Reduce one file's frontmatter to the facts the report needs."""
    raw_kind = fm.get("memory_kind")
    kind_raw: str | None = None
    mk_class = "other"
    if isinstance(raw_kind, str):
        kind_raw = raw_kind or None
        norm = raw_kind.strip().lower()
        if norm in ("semantic", "consolidation"):
            mk_class = "semantic"
        elif norm == "episodic":
            mk_class = "episodic"
    reported = _nonblank(fm.get("episode_id"))
    match: str | None
    if reported is not None:
        match = reported.strip()
    else:
        fallback = _nonblank(fm.get("id"))
        reported = match = fallback.strip() if fallback is not None else None
    keys, refs, bad_shape = _merged_keys(fm.get("merged-from"))
    status_raw = fm.get("memory_status")
    status = status_raw.strip().lower() if isinstance(status_raw, str) else ""
    has_scope = "scope" in fm
    scope_raw = fm.get("scope")
    scope = scope_raw.strip() if isinstance(scope_raw, str) else ""
    return FileFacts(
        path=path,
        memory_kind_raw=kind_raw,
        mk_class=mk_class,
        episode_id_raw=reported,
        episode_id=match,
        merged_keys=keys,
        merged_from_refs=refs,
        shape_warning=bad_shape,
        memory_status=status,
        expires_at=parse_expiry(fm.get("expires_at")),
        contradiction=status == "contested" or _contradicts(fm.get("contradicts")),
        has_scope=has_scope,
        scope=scope,
        mtime=float(mtime),
    )


# --------------------------------------------------------------------------------------------
# Report


class FileEntry(NamedTuple):
    """One entry of ``episodic_files`` / ``unmerged``."""

    path: str
    episode_id: str | None = None
    memory_kind: str | None = None

    def to_json(self) -> dict[str, str]:
        out = {"path": self.path}
        if self.episode_id:
            out["episode_id"] = self.episode_id
        if self.memory_kind:
            out["memory_kind"] = self.memory_kind
        return out


@recordclass(slots=True)
class Report:
    """The memory report; field order is KiwiFS's JSON order."""

    episodic_count: int = 0
    total_episodic: int = 0
    total_unmerged: int = 0
    contradictions: int = 0
    merged_from_refs: int = 0
    coverage_pct: float = 0.0
    avg_age_days: float = 0.0
    expired_count: int = 0
    contested_count: int = 0
    scope_counts: dict[str, int] | None = None
    episodic_files: list[FileEntry] = field(default_factory=list)
    unmerged: list[FileEntry] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def normalize_prefix(value: str | None) -> str:
    """Empty or None -> ``episodes/``; otherwise ``value`` with a trailing ``/``."""
    if not value:
        return DEFAULT_PREFIX
    return value if value.endswith("/") else value + "/"


def prefix_from_kiwi_config(root: Path) -> str | None:
    """``[memory] episodes_path_prefix`` from ``<root>/.kiwi/config.toml``, if set."""
    path = Path(root) / ".kiwi" / "config.toml"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    memory = data.get("memory")
    if isinstance(memory, dict):
        value = memory.get("episodes_path_prefix")
        if isinstance(value, str) and value:
            return value
    return None


def build_report(facts_in_walk_order: Iterable[FileFacts], prefix: str, now: datetime) -> Report:
    """Fold per-file facts (in walk order) into the report."""
    now_ts = now.timestamp()
    episodes: list[FileFacts] = []
    warnings: list[str] = []
    keys: set[str] = set()
    refs = 0
    mtime_sum = 0.0
    age_n = 0
    expired = contested = contradictions = 0
    scopes: dict[str, int] | None = None
    for f in facts_in_walk_order:
        cls = f.mk_class
        if cls == "episodic" or (cls == "other" and f.path.startswith(prefix)):
            episodes.append(f)
            if f.episode_id is None:
                warnings.append(_MISSING_ID.format(path=f.path))
        status = f.memory_status
        if not status or status == "active":
            mtime_sum += f.mtime
            age_n += 1
        elif status == "contested":
            contested += 1
        if not f.extra:
            continue
        if f.shape_warning:
            warnings.append(SHAPE_WARNING)
        if f.merged_keys:
            keys.update(f.merged_keys)
        refs += f.merged_from_refs
        if f.expires_at is not None and f.expires_at < now_ts:
            expired += 1
        if f.contradiction:
            contradictions += 1
        if f.has_scope:
            if scopes is None:
                scopes = {}
            scopes[f.scope] = scopes.get(f.scope, 0) + 1
    # "type:I" is a key for a compatible type  <=>  I is in covered_ids
    covered_ids: set[str] = set()
    for key in keys:
        typ, sep, rest = key.partition(":")
        if sep and typ in COMPATIBLE_TYPES:
            covered_ids.add(rest)
    episodic_files = [FileEntry(f.path, f.episode_id_raw, f.memory_kind_raw) for f in episodes]
    unmerged = [
        entry
        for f, entry in zip(episodes, episodic_files, strict=True)
        if not (
            (f.episode_id and f.episode_id in covered_ids) or ("episode:path:" + f.path) in keys
        )
    ]
    total = len(episodic_files)
    missing = len(unmerged)
    return Report(
        episodic_count=total,
        total_episodic=total,
        total_unmerged=missing,
        contradictions=contradictions,
        merged_from_refs=refs,
        coverage_pct=(total - missing) / total * 100 if total else 0.0,
        avg_age_days=(now_ts - mtime_sum / age_n) / 86400.0 if age_n else 0.0,
        expired_count=expired,
        contested_count=contested,
        scope_counts=dict(sorted(scopes.items(), key=lambda kv: kv[0].encode()))
        if scopes is not None
        else None,
        episodic_files=episodic_files,
        unmerged=unmerged,
        warnings=warnings,
    )


def report_for_folder(root: Path, prefix: str | None = None, now: datetime | None = None) -> Report:
    """Walk, parse and report on any folder of markdown. Reads only; writes nothing.

    ``prefix`` None means ``.kiwi/config.toml`` ``[memory] episodes_path_prefix``, else the
    default ``episodes/``.
    """
    root = Path(root)
    chosen = normalize_prefix(prefix if prefix else prefix_from_kiwi_config(root))
    facts: list[FileFacts] = []
    for rel, path in walk_markdown(root):
        try:
            raw = path.read_bytes()
            mtime = path.stat().st_mtime_ns / 1e9  # the same float the index derives
        except OSError:
            continue
        fm = frontmatter.parse(raw.decode("utf-8", errors="replace")).fm
        facts.append(facts_for(rel, fm, mtime))
    return build_report(facts, chosen, now or datetime.now(UTC))


def report_to_json(report: Report) -> dict[str, Any]:
    """The report as a dict in KiwiFS's field order (``warnings`` omitted when empty)."""
    data: dict[str, Any] = {
        "episodic_count": report.episodic_count,
        "total_episodic": report.total_episodic,
        "total_unmerged": report.total_unmerged,
        "contradictions": report.contradictions,
        "merged_from_refs": report.merged_from_refs,
        "coverage_pct": report.coverage_pct,
        "avg_age_days": report.avg_age_days,
        "expired_count": report.expired_count,
        "contested_count": report.contested_count,
        "scope_counts": report.scope_counts,
        "episodic_files": [e.to_json() for e in report.episodic_files],
        "unmerged": [e.to_json() for e in report.unmerged],
    }
    if report.warnings:
        data["warnings"] = list(report.warnings)
    return data


def report_from_json(data: dict[str, Any]) -> Report:
    """The inverse of :func:`report_to_json`."""

    def entries(items: list[dict[str, str]]) -> list[FileEntry]:
        return [FileEntry(e["path"], e.get("episode_id"), e.get("memory_kind")) for e in items]

    return Report(
        episodic_count=data["episodic_count"],
        total_episodic=data["total_episodic"],
        total_unmerged=data["total_unmerged"],
        contradictions=data["contradictions"],
        merged_from_refs=data["merged_from_refs"],
        coverage_pct=float(data["coverage_pct"]),
        avg_age_days=float(data["avg_age_days"]),
        expired_count=int(data["expired_count"]),
        contested_count=data["contested_count"],
        scope_counts=data["scope_counts"],
        episodic_files=entries(data["episodic_files"]),
        unmerged=entries(data["unmerged"]),
        warnings=list(data.get("warnings", [])),
    )


def dumps_report(report: Report) -> str:
    """The report's JSON exactly as KiwiFS prints it (no trailing newline)."""
    return dumps_go(report_to_json(report))


# --------------------------------------------------------------------------------------------
# Text output


def render_text(report: Report) -> str:
    """The human-readable report KiwiFS prints on stdout (warnings go to stderr)."""
    lines = [
        f"episodic files:          {report.total_episodic}",
        f"merged-from references:  {report.merged_from_refs}",
        f"unmerged (no merged-from): {report.total_unmerged}",
        f"coverage:                {report.coverage_pct:.1f}%",
        f"avg age (active pages):  {report.avg_age_days:.1f} days",
        f"expired pages:           {report.expired_count}",
        f"contested pages:         {report.contested_count}",
        f"contradictions:          {report.contradictions}",
    ]
    if report.scope_counts is None:
        lines.append("scope breakdown:         (none)")
    else:
        lines.append("scope breakdown:")
        for key in sorted(report.scope_counts, key=lambda k: k.encode()):
            lines.append(f"  {key}: {report.scope_counts[key]}")
    if not report.unmerged:
        lines.append("all episodic files are referenced by at least one merged-from list")
    for entry in report.unmerged:
        if entry.episode_id:
            lines.append(f"  - {entry.path}  (episode_id={entry.episode_id})")
        else:
            lines.append(f"  - {entry.path}  (set episode_id)")
    return "\n".join(lines) + "\n"
