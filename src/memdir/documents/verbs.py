"""The document verbs of a store: write, read, keyword search, grep, ls, the memory report,
merge, forget, reindex, doctor. Every verb brings the index in step with the files first
(:meth:`Documents.sync`). :class:`memdir.Memory` holds one :class:`Documents` beside the
turns, retrieval and the knowledge engine, and hands it to retrieval as its document side.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .. import lazy
from ..doc import links, paths, patterns, provenance
from ..doc.text import content_hash, one_line
from ..doc.turnrecord import TURNS_DIR, WORKLOG_SUFFIX
from ..doc.where import parse_where
from ..errors import ConfigError, IndexBusy, InvalidInput, InvalidQuery, NotFound
from ..files.store import Store, WriteResult
from ..index import Difference, Index, SyncStats, listing, watch
from ..index.search import Filters, Hit, bm25
from ..records import field, recordclass, replace
from ..settings import Settings
from . import grep as grepping
from .grep import around, grep_line
from .reportcache import ReportEntry, ReportText

if TYPE_CHECKING:
    from ..kiwi import report as coverage
else:  # the report's module costs a hook ~15 ms; loaded when a file's facts are first read
    coverage = lazy.module("memdir.kiwi.report")

if TYPE_CHECKING:
    pass


@recordclass(frozen=True)
class ReadResult:
    path: str
    content: str
    etag: str
    section: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "etag": self.etag,
            "section": self.section,
            "content": self.content,
        }


@recordclass(frozen=True)
class GrepHit:
    path: str
    line: int
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "text": self.text}


@recordclass
class DoctorReport:
    difference: Difference
    ok: bool = field(init=False)

    def __post_init__(self) -> None:
        self.ok = self.difference.in_step

    def to_dict(self) -> dict[str, Any]:
        d = self.difference
        return {
            "ok": self.ok,
            "missing_in_index": d.missing_in_index,
            "missing_on_disk": d.missing_on_disk,
            "stale": d.stale,
            "doc_rows": d.doc_rows,
            "fts_rows": d.fts_rows,
            "invalid_yaml": [{"path": p, "error": e} for p, e in d.invalid_yaml],
            "invalid_utf8": d.invalid_utf8,
        }


class Documents:
    """The document verbs of one store, and the sync every other verb goes through.

    Built once by :meth:`memdir.Memory.open` with the store, its index and settings; holds
    when the files were last walked, whether a caller holds one sync for a whole command,
    and the watcher this process runs, if any.
    """

    def __init__(self, store: Store, index: Index, settings: Settings) -> None:
        self.store = store
        self.index = index
        self.settings = settings
        self._last_sync = 0.0
        self._sync_held = False
        self._watcher: watch.Watcher | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def sync(self, *, force: bool = False) -> SyncStats:
        """Bring the index in step with the files (cheap when nothing changed)."""
        if self._sync_held and not force:
            return SyncStats()
        # While a full rebuild runs (here or in another process) a verb answers from the
        # index as it stands instead of waiting for the commit to apply what it found
        # changed: the rebuild reads every file, and the first sync after it catches up.
        if self.index.rebuilding():
            return SyncStats()
        # A running watcher (memdir.index.watch) brings the index in step for a round trip, so
        # it is always asked; the interval only spaces out the walks made without one.
        if watch.confirm(self.store.root):
            self._last_sync = time.monotonic()
            return SyncStats()
        interval = self.settings.store.sync_interval_seconds
        if not force and interval > 0 and time.monotonic() - self._last_sync < interval:
            return SyncStats()
        stats = self.index.sync()
        self._last_sync = time.monotonic()
        return stats

    def sync_once(self) -> SyncStats:
        """Sync now, then make later ``sync()`` calls no-ops (one command = one sync).

        Writes made through memdir still update the index for their own paths.
        """
        stats = self.sync(force=True)
        self.hold()
        return stats

    def hold(self) -> None:
        """Make later ``sync()`` calls no-ops without walking now (the caller walks later)."""
        self._sync_held = True

    def synced(self) -> AbstractContextManager[SyncStats]:
        """Sync once, then let the verbs called inside the block skip their own sync."""

        @contextmanager
        def block() -> Iterator[SyncStats]:
            held = self._sync_held
            stats = self.sync()
            self._sync_held = True
            try:
                yield stats
            finally:
                self._sync_held = held

        return block()

    def start_watcher(self) -> bool:
        """Keep the index in step from change events (servers; see :mod:`memdir.index.watch`).

        Starts a watcher thread unless one already runs for the store (then this process
        asks that one) or the platform has no inotify. While one runs, every verb's sync
        is a round trip to it (:meth:`sync`). True when this process or another one
        watches the store.
        """
        if watch.running(self.store.root):
            return True
        watcher = watch.Watcher(self.store.root, self.index)
        try:
            watcher.start_thread()
        except (ConfigError, OSError):
            return False
        self._watcher = watcher
        return True

    def close(self) -> None:
        """Stop a watcher this process runs, commit pending git work and close the index."""
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None
        self.store.close()
        self.index.close()

    # -- writing -----------------------------------------------------------------------

    def write(
        self,
        path: str,
        content: str | bytes,
        *,
        provenance: str | None = None,
        actor: str | None = None,
        message: str | None = None,
        if_match: str | None = None,
    ) -> WriteResult:
        """Write a markdown document atomically; ``provenance`` is ``type:id``."""
        prov = _parse_provenance(provenance)
        result = self.store.write_text(
            path,
            content,
            actor=actor,
            message=message,
            provenance_value=prov,
            if_match=if_match,
        )
        self.index.sync_paths([result.path])
        return result

    def _memory_page(self, rel: str, verb: str) -> str:
        """``rel`` normalised, if it is a document ``verb`` may change: markdown, not a contract.

        HARNESS.md and PROGRAM.md are the engine's contracts (``memdir harness accept``,
        ``memdir bundle``): superseding, purging or merging into them is refused.
        """
        norm, target = self.store.resolve(rel)
        if target.is_dir():
            raise InvalidInput(f"{norm} is a folder, not a file")
        if not paths.is_markdown(norm):
            raise InvalidInput(f"cannot {verb} {norm}: only markdown (.md) files are memory")
        if norm in CONTRACTS:
            raise InvalidInput(
                f"cannot {verb} {norm}: it is the store's {CONTRACTS[norm]}; edit it instead"
            )
        if _generated_router(norm):
            self.store._outside_nested_repository(norm)  # a nested store's index is its own
            raise InvalidInput(
                f"cannot {verb} {norm}: memdir regenerates this index or log from the "
                "articles (frontmatter there breaks the OKF bundle and is lost on the next "
                "run); use an article instead"
            )
        return norm

    def merge(
        self,
        page: str,
        *,
        episode: str | None = None,
        type: str = "episode",
        path: str | None = None,
        note: str | None = None,
        actor: str | None = None,
    ) -> dict[str, Any]:
        """Record in ``page``'s ``merged-from`` that it consumed an episode (idempotent)."""
        kind = one_line("type", type or "", max_chars=MAX_MERGE_CHARS).strip()
        ident = one_line("episode id", episode or "", max_chars=MAX_MERGE_CHARS).strip()
        ep_path = one_line("episode path", path or "", max_chars=MAX_MERGE_CHARS).strip()
        if note is not None:
            one_line("note", note, max_chars=MAX_MERGE_CHARS)
        if ep_path:
            paths.normalize(ep_path)  # refuses absolute paths, "..", control characters
        page = self._memory_page(page, "merge into")
        if not kind:
            raise InvalidInput("merge needs a type")
        if not ident and not ep_path:
            raise InvalidInput("merge needs an episode id or an episode path (or both)")
        key = _merge_key({"type": kind, "id": ident, "path": ep_path})
        assert key is not None  # a type, and an id or a path, were checked above
        entry: dict[str, Any] = {"type": kind}
        if ident:
            entry["id"] = ident
        if ep_path:
            entry["path"] = ep_path
        entry["date"] = provenance.now_rfc3339()
        # As for derived-from: every surface records who merged, "anonymous" when unnamed.
        entry["actor"] = (actor or "").strip() or "anonymous"
        if note:
            entry["note"] = note
        added = {"value": False}

        def mutate(fm: Any) -> None:
            current = fm.get("merged-from")
            items = current if isinstance(current, list) else [current]
            for item in items:
                if isinstance(item, Mapping) and _merge_key(item) == key:
                    return
            if isinstance(current, list):
                current.append(entry)
            elif current is None:
                fm["merged-from"] = [entry]
            else:
                fm["merged-from"] = [current, entry]
            added["value"] = True

        self.sync()
        result = self.store.update_frontmatter(
            page, mutate, actor=actor, message=f"merge {key} into {page}"
        )
        self.index.sync_paths([result.path])
        return {"page": result.path, "key": key, "added": added["value"], "entry": entry}

    def forget(
        self,
        path: str,
        *,
        reason: str | None = None,
        purge: bool = False,
        actor: str | None = None,
    ) -> dict[str, Any]:
        """Supersede a document (kept, hidden from retrieval) or purge it entirely."""
        if reason is not None:
            one_line("reason", reason, max_chars=MAX_MERGE_CHARS)
        self.sync()
        norm = self._memory_page(path, "forget")
        if purge:
            gone = [norm]
            # A turn's raw work log sits beside its record: what is purged for holding a
            # secret often holds it there too.
            side = norm[: -len(".md")] + WORKLOG_SUFFIX
            if norm.startswith(f"{TURNS_DIR}/") and (self.store.root / side).is_file():
                gone.append(side)
            for rel in gone:
                self.store.delete(rel, actor=actor, message=f"purge {rel}" + _reason(reason))
            self.index.remove([norm])
            return {"path": norm, "purged": True, "removed": gone}
        stamp = {"valid_until": provenance.now_rfc3339(), "already": False}

        def mutate(fm: Any) -> None:
            # Forgotten before: the time it stopped being valid and its reason stand.
            earlier = fm.get("valid_until")
            if fm.get("memory_status") == "superseded" and earlier:
                stamp["valid_until"], stamp["already"] = str(earlier), True
                if reason and not fm.get("superseded_reason"):
                    fm["superseded_reason"] = reason
                return
            fm["memory_status"] = "superseded"
            fm["valid_until"] = stamp["valid_until"]
            if reason:
                fm["superseded_reason"] = reason

        result = self.store.update_frontmatter(
            norm, mutate, actor=actor, message=f"forget {norm}" + _reason(reason)
        )
        self.index.sync_paths([result.path])
        return {
            "path": norm,
            "purged": False,
            "memory_status": "superseded",
            "valid_until": stamp["valid_until"],
            "already": stamp["already"],
        }

    # -- reading -----------------------------------------------------------------------

    def read(self, path: str, *, section: str | None = None) -> ReadResult:
        """A file's content, or one section of it (by heading)."""
        norm, _ = self.store.resolve(path)
        raw = self.store.read_bytes(norm)
        text = raw.decode("utf-8", errors="replace")
        etag = f'"{content_hash(raw)[:32]}"'
        if section is None:
            return ReadResult(norm, text, etag)
        from ..doc.frontmatter import parse

        found = links.section(parse(text).body, section)
        if found is None:
            raise NotFound(f"{norm} has no section {section!r}")
        return ReadResult(norm, found, etag, section=section)

    def filters(
        self,
        *,
        path_prefix: str | None = None,
        kind: str | None = None,
        type: str | None = None,
        where: Iterable[str] | Mapping[str, Any] | None = None,
        include_superseded: bool = False,
    ) -> Filters:
        return Filters(
            path_prefix=path_prefix or None,
            kind=kind or None,
            type=type or None,
            where=parse_where(where),
            include_superseded=include_superseded,
        )

    def leading_out(self, flt: Filters) -> Filters:
        """``flt`` leaving out what leads out of its path prefix through a symlink.

        A path prefix confines what a result shows, not only the path it names (a token's
        prefix arrives here as one): a file whose real path is outside the prefix is no
        result. Costs a walk of the prefix's folders; nothing without a prefix.
        """
        if not flt.path_prefix:
            return flt
        out = paths.links_out(self.store.root, flt.path_prefix)
        return replace(flt, exclude=(*flt.exclude, *out)) if out else flt

    def leaks(self, rels: list[str], flt: Filters) -> set[str]:
        """The results among ``rels`` whose real file lies outside ``flt``'s path prefix.

        Only paths through a symlink can (one ``lstat`` each, folders looked at once).
        """
        if not flt.path_prefix:
            return set()
        root = self.store.root
        linked = paths.through_symlinks(root, rels)
        return {rel for rel in linked if not paths.shown_within(root, rel, flt.path_prefix)}

    def keyword_search(
        self, query: str, *, limit: int | None = None, filters: Filters | None = None
    ) -> list[Hit]:
        """BM25 over titles and bodies; any string is a valid query."""
        self.sync()
        size = self.limit_of(limit)
        return bm25(self.index.conn, query, filters or Filters(), size)

    def limit_of(self, limit: int | None) -> int:
        size = self.settings.search.default_limit if limit is None else limit
        if size < 1 or size > 1000:
            raise InvalidInput(f"limit must be between 1 and 1000, got {size}")
        return size

    def grep(
        self,
        pattern: str,
        *,
        path_prefix: str | None = None,
        ignore_case: bool = False,
        limit: int = 200,
        include_superseded: bool = False,
    ) -> list[GrepHit]:
        """Regular-expression search over the visible files, in walk order.

        Patterns are run by the ``regex`` module (the syntax of Python's ``re``) with a
        time limit: a pattern that backtracks without end ("(a+)+$") stops after
        ``GREP_SECONDS`` in all with ``invalid_query``, instead of holding a server. What
        would take memory without a bound is refused first (:func:`memdir.doc.patterns.check`:
        recursion, huge counts, long patterns), and a long line is searched in windows of
        ``GREP_WINDOW`` characters, since the engine's stack grows with the text it is given.
        """
        import regex

        if limit < 1:
            raise InvalidInput(f"limit must be at least 1, got {limit}")
        patterns.check(pattern)
        try:
            compiled = regex.compile(pattern, regex.IGNORECASE if ignore_case else 0)
        except (regex.error, OverflowError, RecursionError, ValueError) as exc:
            raise InvalidQuery(f"invalid regular expression {pattern!r}: {exc}") from None
        except MemoryError:
            raise InvalidQuery(f"the regular expression {pattern!r} is too large") from None
        self.sync()
        flt = self.filters(path_prefix=path_prefix, include_superseded=include_superseded)
        rels = listing.paths(self.index.conn, flt)
        real_root = os.path.realpath(self.store.root)
        deadline = time.monotonic() + grepping.GREP_SECONDS
        hits: list[GrepHit] = []
        confined = (path_prefix or "").lstrip("/")
        for rel in rels:
            target = self.store.root / rel
            real = paths.real_rel(real_root, os.fspath(target))
            if real is None:
                continue  # a symlink out of the store (an index older than that rule)
            if not real.startswith(confined):
                continue  # a symlink under the prefix to a file outside it shows that file
            try:
                text = target.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            for number, line in enumerate(text.splitlines(), start=1):
                span = grep_line(compiled, pattern, line, deadline)
                if span is not None:
                    hits.append(GrepHit(rel, number, around(line, *span)))
                    if len(hits) >= limit:
                        return hits
        return hits

    def ls(
        self, prefix: str | None = None, *, include_superseded: bool = False
    ) -> list[dict[str, Any]]:
        """The visible documents under ``prefix``, in walk order.

        A symlink under ``prefix`` whose file or folder lies outside it is not listed: its
        title and size are the other file's (:func:`memdir.doc.paths.links_out`).
        """
        self.sync()
        flt = self.filters(path_prefix=prefix, include_superseded=include_superseded)
        flt = self.leading_out(flt)
        from ..index.search import present

        rows = listing.rows(self.index.conn, flt)
        # A turn is titled as search shows it (thread · user · time), not by its id.
        return [
            {
                "path": row["path"],
                "title": (
                    present(str(row["title"] or ""), "", row)[0]
                    if str(row["type"] or "").lower() == "turn"
                    else row["title"]
                ),
                "type": row["type"],
                "memory_kind": row["memory_kind"],
                "size": row["size"],
            }
            for row in rows
        ]

    # -- memory report ------------------------------------------------------------------

    def episodes_prefix(self, override: str | None = None) -> str:
        if override:
            return coverage.normalize_prefix(override)
        return coverage.normalize_prefix(self.settings.memory.episodes_path_prefix)

    def memory_report(
        self, *, episodes_prefix: str | None = None, now: datetime | None = None
    ) -> coverage.Report:
        """The KiwiFS-compatible coverage report, computed from the index."""
        text = self.memory_report_text(episodes_prefix=episodes_prefix, now=now)
        return coverage.report_from_json(json.loads(text.json))

    def memory_report_text(
        self, *, episodes_prefix: str | None = None, now: datetime | None = None
    ) -> ReportText:
        """The report as the exact JSON text KiwiFS prints, with what a caller checks.

        The text is cached in the index's meta table under the index generation and the
        prefix, with the inputs of the two metrics that depend on the time
        (``avg_age_days``, ``expired_count``); a repeat call on an unchanged store only
        computes those two and puts them in place.
        """
        self.sync()
        prefix = self.episodes_prefix(episodes_prefix)
        when = now or datetime.now(UTC)
        key = "memory_report:" + prefix
        generation = self.index.generation
        entry = ReportEntry.load(self.index.meta(key), generation)
        if entry is None:
            facts = [coverage.FileFacts.from_json(t) for t in listing.facts(self.index.conn)]
            entry = ReportEntry.build(facts, prefix, when, generation)
            try:
                with self.index.transaction() as conn:
                    if self.index.generation == generation:
                        self.index.set_meta(conn, key, entry.dumps())
            except (sqlite3.Error, IndexBusy):
                pass  # a read-only index, or one another process rebuilds: serve uncached
        return entry.at(when)

    # -- index maintenance --------------------------------------------------------------

    def reindex(self, *, full: bool = False) -> SyncStats:
        """Sync the index, or rebuild it from the files with ``full``."""
        stats = self.index.rebuild() if full else self.index.sync()
        self._last_sync = time.monotonic()
        return stats

    def doctor(self) -> DoctorReport:
        """Compare the index with the files (nothing is changed)."""
        return DoctorReport(self.index.compare())


# The engine's contracts at the store's root: changed by editing, never forgotten or merged.
CONTRACTS = {
    "HARNESS.md": "harness (memdir harness accept)",
    "PROGRAM.md": "program (memdir bundle)",
}


def _generated_router(norm: str) -> bool:
    """True for the store's top ``index.md`` and a bundle's reserved OKF ``index.md``/``log.md``
    (at any depth under ``wiki/<bundle>/``): files the engine rewrites from the articles."""
    if norm == "index.md":
        return True
    parts = norm.split("/")
    return len(parts) >= 3 and parts[0] == "wiki" and parts[-1] in ("index.md", "log.md")


MAX_MERGE_CHARS = 1000


def _parse_provenance(value: str | None) -> tuple[str, str] | None:
    if value is None:
        return None
    return provenance.parse(value)


def _reason(reason: str | None) -> str:
    return f": {reason}" if reason else ""


def _merge_key(item: Mapping[str, Any]) -> str | None:
    kind = item.get("type")
    if not isinstance(kind, str) or not kind.strip():
        return None
    ident = item.get("id")
    if isinstance(ident, str) and ident.strip():
        return f"{kind.strip().lower()}:{ident.strip()}"
    path = item.get("path")
    if isinstance(path, str) and path.strip():  # as the memory report reads it (coverage.py)
        return f"{kind.strip().lower()}:path:{path.strip().replace(chr(92), '/')}"
    return None
