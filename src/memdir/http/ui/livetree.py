"""The browse page's tree and the home page's counts, kept in step document by document.

Grouping every visible document by its folder is a loop over every row (a tenth of a
second at 100,000 documents), and counting them in SQL scans the ranges too; the first page
after each write would pay it. :class:`LiveTree` holds each document's group by id and,
when the index's change log names a few ids, moves only those documents. What it answers
equals the tree and the counts reckoned from every row (tests/test_ui_tree.py checks it
after random writes, forgets, deletions and renames).
"""

from __future__ import annotations

import bisect
import posixpath
from collections import Counter
from collections.abc import Iterable
from typing import Any

from ...index.uirows import DocRow, KeyedRow

TURNS = "episodes/turns/"
INBOX = "inbox/"
INLINE_GROUP = 60  # a group lists its documents inline up to this many
INLINE_TOTAL = 1500  # and the page up to this many in all; larger groups open on their own
PAGE = 500  # documents on one page of a folder, and of "Other"

Group = tuple[str, ...]
"""``("day", "2026-12-03")``, ``("episodes", kind)``, ``("wiki", bundle, topic)`` (topic
``""`` for a bundle's own pages), ``("inbox",)`` or ``("other",)``."""


def group_of(path: str) -> Group:
    """Where the tree shows the document at ``path``."""
    parts = path.split("/")
    if path.startswith(TURNS) and len(parts) >= 6:
        return ("day", "-".join(parts[2:5]))
    if parts[0] == "episodes" and len(parts) > 2:
        return ("episodes", parts[1])
    if parts[0] == "wiki" and len(parts) > 2:
        return ("wiki", parts[1], parts[2] if len(parts) > 3 else "")
    if path.startswith(INBOX):
        return ("inbox",)
    return ("other",)


def prefix_of(group: Group) -> str:
    """The path prefix of ``group``'s own page (:meth:`memdir.http.ui.model.Views.folder`)."""
    kind = group[0]
    if kind == "day":
        return TURNS + group[1].replace("-", "/") + "/"
    if kind == "episodes":
        return f"episodes/{group[1]}/"
    if kind == "wiki":
        return f"wiki/{group[1]}/{group[2]}/" if group[2] else f"wiki/{group[1]}/"
    if kind == "inbox":
        return INBOX
    return ""


def tally_of(row: DocRow) -> str:
    """What the home page counts ``row`` as: ``turn``, ``episode``, ``article`` or ``""``."""
    if row.path.startswith(TURNS) and row.type == "turn":
        return "turn"
    if row.path.startswith("episodes/") and row.type != "turn":
        return "episode"
    if row.path.startswith("wiki/") and posixpath.basename(row.path) not in (
        "index.md",
        "log.md",
    ):
        return "article"
    return ""


class LiveTree:
    """Every visible document's group, each group's rows in walk order, and the counts."""

    def __init__(self) -> None:
        self.where: dict[int, tuple[Group, bytes, DocRow]] = {}
        self.groups: dict[Group, list[tuple[bytes, DocRow]]] = {}
        self.tally: Counter[str] = Counter()
        self.threads: Counter[str] = Counter()  # turns per thread

    def apply(self, gone: Iterable[int], rows: Iterable[KeyedRow]) -> None:
        """Take the documents of ids ``gone`` out, then put ``rows`` in; an id in both is a
        document changed (or renamed: the same id under a new path)."""
        for ident in gone:
            self._drop(ident)
        for ident, key, row in rows:
            self._drop(ident)
            group = group_of(row.path)
            self.where[ident] = (group, key, row)
            items = self.groups.setdefault(group, [])
            if not items or items[-1][0] <= key:
                items.append((key, row))  # rows come in walk order when built whole
            else:
                items.insert(bisect.bisect_right(items, key, key=lambda item: item[0]), (key, row))
            kind = tally_of(row)
            self.tally[kind] += 1
            if kind == "turn" and row.thread:
                self.threads[row.thread] += 1

    def _drop(self, ident: int) -> None:
        held = self.where.pop(ident, None)
        if held is None:
            return
        group, key, row = held
        items = self.groups[group]
        at = bisect.bisect_left(items, key, key=lambda item: item[0])
        while items[at][1] is not row:  # rows of one walk key side by side
            at += 1
        del items[at]
        if not items:
            del self.groups[group]
        kind = tally_of(row)
        self.tally[kind] -= 1
        if kind == "turn" and row.thread:
            self.threads[row.thread] -= 1
            if self.threads[row.thread] <= 0:
                del self.threads[row.thread]

    # -- what the pages read ------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """The home page's counts (as :func:`memdir.index.uirows.home_counts` gives them)."""
        return {
            "turns": self.tally["turn"],
            "threads": len(self.threads),
            "episodes": self.tally["episode"],
            "articles": self.tally["article"],
        }

    def view(self, inbox: bool) -> dict[str, Any]:
        """The tree as the browse page draws it: turns by day (newest first), episodes by
        kind, wiki bundles and their topics, the inbox (when ``inbox``), the rest. Small
        groups carry their rows; a large one only its count (it opens on its own page)."""
        budget = [INLINE_TOTAL]

        def group(label: str, key: Group) -> dict[str, Any]:
            items = self.groups.get(key, [])
            inline = len(items) <= INLINE_GROUP and len(items) <= budget[0]
            if inline:
                budget[0] -= len(items)
            return {
                "label": label,
                "prefix": prefix_of(key),
                "count": len(items),
                "rows": [row for _, row in items] if inline else None,
            }

        keys = sorted(self.groups)
        days = sorted((k for k in keys if k[0] == "day"), reverse=True)
        bundles: dict[str, list[Group]] = {}
        for k in keys:
            if k[0] == "wiki":
                bundles.setdefault(k[1], []).append(k)
        other = self.groups.get(("other",), [])
        return {
            "days": [group(k[1], k) for k in days],
            "episodes": [group(k[1], k) for k in keys if k[0] == "episodes"],
            "wiki": [
                (name, [group(k[2] or "(bundle)", k) for k in topics])
                for name, topics in bundles.items()
            ],
            "inbox": group("Inbox", ("inbox",)) if inbox or ("inbox",) in self.groups else None,
            "other": [row for _, row in other[:PAGE]],
            "other_count": len(other),
        }
