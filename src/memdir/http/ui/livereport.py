"""The memory report as the UI shows it, kept in step document by document.

:func:`memdir.kiwi.report.build_report` folds every document's facts into the report; at
100,000 documents reading and folding them costs seconds, which the first page after each
write would pay. :class:`LiveReport` holds the same facts by document id and, when the
index's change log names a few ids, takes those documents out and puts their new facts in,
updating the counts, the merge keys and which episodes are covered. What it answers equals
what ``build_report`` gives on the same facts (tests/test_ui_cache.py checks it after random
writes); the figures that depend on the clock are computed when asked.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime

from ...kiwi import report as coverage
from ...records import recordclass

PATH_KEY = "episode:path:"


def _covering(key: str) -> str | None:
    """The episode id a merge key covers (``type:id`` of a compatible type), else None."""
    typ, sep, rest = key.partition(":")
    return rest if sep and typ in coverage.COMPATIBLE_TYPES else None


@recordclass(frozen=True)
class Summary:
    """What the home and coverage pages show of the report, at one moment."""

    total_episodic: int
    total_unmerged: int
    coverage_pct: float
    contradictions: int
    merged_from_refs: int
    expired_count: int
    contested_count: int
    scope_counts: dict[str, int] | None
    warnings: list[str]
    oldest: list[tuple[coverage.FileEntry, float]]  # unmerged, oldest first, with mtimes
    by_folder: list[tuple[str, int]]  # unmerged episodes per folder (two levels)


class LiveReport:
    """Every document's report facts by id, and the report's state derived from them."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.facts: dict[int, coverage.FileFacts] = {}
        self.walk: dict[int, bytes] = {}
        self.keys: Counter[str] = Counter()  # merge keys: how many documents name each
        self.covered: Counter[str] = Counter()  # episode ids the keys cover
        self.episodes: set[int] = set()
        self.by_episode_id: dict[str, set[int]] = {}
        self.by_path: dict[str, int] = {}
        self.unmerged: set[int] = set()
        self.folders: Counter[str] = Counter()
        self.warned: set[int] = set()
        self.expires: dict[int, float] = {}
        self.scopes: Counter[str] | None = None
        self.contradictions = 0
        self.refs = 0
        self.contested = 0

    def apply(self, gone: Iterable[int], rows: Iterable[tuple[int, bytes, str]]) -> None:
        """Take the documents of ids ``gone`` out, then put ``rows`` (id, walk key, facts
        as the index stores them) in; an id in both is a document changed."""
        dirty: set[int] = set()
        for ident in gone:
            self._drop(ident, dirty)
        for ident, key, text in rows:
            if ident in self.facts:
                self._drop(ident, dirty)
            self._add(ident, key, coverage.FileFacts.from_json(text), dirty)
        for ident in dirty:
            self._settle(ident)

    def _is_episode(self, f: coverage.FileFacts) -> bool:
        if f.mk_class == "episodic":
            return True
        return f.mk_class == "other" and f.path.startswith(self.prefix)

    def _touch(self, key: str, step: int, dirty: set[int]) -> None:
        self.keys[key] += step
        if self.keys[key] <= 0:
            del self.keys[key]
        if key.startswith(PATH_KEY) and (found := self.by_path.get(key[len(PATH_KEY) :])):
            dirty.add(found)
        ident = _covering(key)
        if ident is not None:
            self.covered[ident] += step
            if self.covered[ident] <= 0:
                del self.covered[ident]
            dirty.update(self.by_episode_id.get(ident, ()))

    def _add(self, ident: int, key: bytes, f: coverage.FileFacts, dirty: set[int]) -> None:
        self.facts[ident] = f
        self.walk[ident] = key
        if self._is_episode(f):
            self.episodes.add(ident)
            self.by_path[f.path] = ident
            if f.episode_id:
                self.by_episode_id.setdefault(f.episode_id, set()).add(ident)
            dirty.add(ident)
        if (self._is_episode(f) and f.episode_id is None) or f.shape_warning:
            self.warned.add(ident)
        if f.memory_status == "contested":
            self.contested += 1
        if not f.extra:
            return
        for k in set(f.merged_keys):
            self._touch(k, 1, dirty)
        self.refs += f.merged_from_refs
        if f.expires_at is not None:
            self.expires[ident] = f.expires_at
        if f.contradiction:
            self.contradictions += 1
        if f.has_scope:
            self.scopes = self.scopes if self.scopes is not None else Counter()
            self.scopes[f.scope] += 1

    def _drop(self, ident: int, dirty: set[int]) -> None:
        f = self.facts.pop(ident, None)
        if f is None:
            return
        del self.walk[ident]
        self.warned.discard(ident)
        if ident in self.episodes:
            self.episodes.discard(ident)
            if self.by_path.get(f.path) == ident:
                del self.by_path[f.path]
            if f.episode_id:
                same = self.by_episode_id.get(f.episode_id, set())
                same.discard(ident)
                if not same:
                    self.by_episode_id.pop(f.episode_id, None)
            self._unmerge(ident, f, False)
        if f.memory_status == "contested":
            self.contested -= 1
        if not f.extra:
            return
        for k in set(f.merged_keys):
            self._touch(k, -1, dirty)
        self.refs -= f.merged_from_refs
        self.expires.pop(ident, None)
        if f.contradiction:
            self.contradictions -= 1
        if f.has_scope and self.scopes is not None:
            self.scopes[f.scope] -= 1
            if self.scopes[f.scope] <= 0:
                del self.scopes[f.scope]
            if not self.scopes:
                self.scopes = None

    def _unmerge(self, ident: int, f: coverage.FileFacts, missing: bool) -> None:
        """Put episode ``ident`` in the unmerged set (``missing``) or take it out."""
        if missing == (ident in self.unmerged):
            return
        folder = "/".join(f.path.split("/")[:-1][:2])
        if missing:
            self.unmerged.add(ident)
            self.folders[folder] += 1
        else:
            self.unmerged.discard(ident)
            self.folders[folder] -= 1
            if self.folders[folder] <= 0:
                del self.folders[folder]

    def _settle(self, ident: int) -> None:
        """Whether episode ``ident`` is covered, after the keys changed."""
        f = self.facts.get(ident)
        if f is None or ident not in self.episodes:
            return
        covered = bool(f.episode_id and self.covered.get(f.episode_id)) or bool(
            self.keys.get(PATH_KEY + f.path)
        )
        self._unmerge(ident, f, not covered)

    # -- what the pages read ------------------------------------------------------------

    def summary(self, now: float, oldest: int = 500) -> Summary:
        total = len(self.episodes)
        missing = len(self.unmerged)
        warnings: list[str] = []
        epoch = datetime.fromtimestamp(0, UTC)
        for ident in sorted(self.warned, key=self.walk.__getitem__):
            # one document's warnings, worded by the report's own fold
            warnings += coverage.build_report([self.facts[ident]], self.prefix, epoch).warnings
        first = heapq.nsmallest(
            oldest, self.unmerged, key=lambda i: (self.facts[i].mtime, self.walk[i])
        )
        facts = self.facts
        return Summary(
            total_episodic=total,
            total_unmerged=missing,
            coverage_pct=(total - missing) / total * 100 if total else 0.0,
            contradictions=self.contradictions,
            merged_from_refs=self.refs,
            expired_count=sum(1 for e in self.expires.values() if e < now),
            contested_count=self.contested,
            scope_counts=(
                dict(sorted(self.scopes.items(), key=lambda kv: kv[0].encode()))
                if self.scopes is not None
                else None
            ),
            warnings=warnings,
            oldest=[
                (
                    coverage.FileEntry(
                        facts[i].path, facts[i].episode_id_raw, facts[i].memory_kind_raw
                    ),
                    facts[i].mtime,
                )
                for i in first
            ],
            by_folder=sorted(self.folders.items()),
        )
