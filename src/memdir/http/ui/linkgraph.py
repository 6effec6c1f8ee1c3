"""The wiki's link graph as the UI draws it: visible documents and their resolved links.

Built whole from the index's rows once, then brought forward from the index's change log
(:meth:`LinkGraph.updated`), so a page after a write does not rebuild it.
"""

from __future__ import annotations

import bisect
import posixpath

from ...index import uirows
from ...records import field, recordclass


def _stem(path: str) -> str:
    return posixpath.basename(path).removesuffix(".md").lower()


def _link_stems(source: str, kind: str, target: str) -> tuple[str, ...]:
    """The stems of the documents a link could name: only a change to a document of one of
    these stems can change what the link resolves to (see :meth:`LinkGraph.resolve`)."""
    target = target.strip().split("#", 1)[0].split("|", 1)[0].strip()
    if not target:
        return ()
    if kind == "markdown":
        return (_stem(posixpath.normpath(posixpath.join(posixpath.dirname(source), target))),)
    base = posixpath.basename(target.lstrip("/")).lower()
    return (base.removesuffix(".md"), base)


@recordclass
class LinkGraph:
    """The visible documents and their link edges resolved to paths (one index generation).

    Built whole once, then brought forward by :meth:`updated` from the ids the index's
    change log names: the documents changed, and the links of other documents whose
    targets share a stem with one of them (the only links whose target can change). An
    update copies what it changes, so a page still reading the old graph is not disturbed.
    """

    rows: list[uirows.DocRow] = field(default_factory=list)
    titles: dict[str, str] = field(default_factory=dict)
    backlinks: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    stems: dict[str, list[str]] = field(default_factory=dict)
    keys: list[bytes] = field(default_factory=list)  # walk keys, parallel to rows
    key_of: dict[str, bytes] = field(default_factory=dict)
    path_of: dict[int, str] = field(default_factory=dict)  # document id -> path
    raw: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # (kind, target)
    linking: dict[str, frozenset[str]] = field(default_factory=dict)  # stem -> sources
    out: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # (dest, kind)

    @property
    def edges(self) -> list[tuple[str, str, str]]:
        """``(source, target, kind)`` of every resolved link, both paths."""
        return [(s, d, k) for s, found in self.out.items() for d, k in found]

    def resolve(self, source: str, target: str, kind: str) -> str | None:
        """The path a link of ``source`` names, or None when it names no visible document."""
        target = target.strip()
        if not target or "://" in target or target.startswith(("mailto:", "#")):
            return None
        target = target.split("#", 1)[0].split("|", 1)[0].strip()
        if not target:
            return None
        if kind == "markdown":
            rel = posixpath.normpath(posixpath.join(posixpath.dirname(source), target))
            return rel if rel in self.titles else None
        bare = target.lstrip("/")
        for candidate in (bare, bare + ".md"):
            if candidate in self.titles:
                return candidate
        stem = posixpath.basename(bare).removesuffix(".md").lower()
        found = self.stems.get(stem, [])
        if not found:
            return None
        bundle = "/".join(source.split("/")[:2]) + "/"
        same = [p for p in found if p.startswith(bundle)]
        return (same or found)[0]

    # -- building and updating ---------------------------------------------------------

    def updated(
        self, gone: list[int], rows: list[uirows.KeyedRow], links: list[tuple[str, str, str]]
    ) -> LinkGraph:
        """A copy with the documents of ids ``gone`` taken out and ``rows`` (with their
        ``links``) put in; an id in both is a document changed."""
        new = LinkGraph(
            rows=list(self.rows),
            titles=dict(self.titles),
            backlinks=dict(self.backlinks),
            stems=dict(self.stems),
            keys=list(self.keys),
            key_of=dict(self.key_of),
            path_of=dict(self.path_of),
            raw=dict(self.raw),
            linking=dict(self.linking),
            out=dict(self.out),
        )
        dirty: set[str] = set()
        for ident in gone:
            path = new.path_of.pop(ident, None)
            if path is not None:
                dirty.add(_stem(path))
                new._drop(path)
        fresh = new._add(rows, links)
        dirty.update(_stem(p) for p in fresh)
        again = set(fresh)
        for stem in dirty:
            again.update(new.linking.get(stem, ()))
        new._resolve(sorted(again))
        return new

    def _drop(self, path: str) -> None:
        key = self.key_of.pop(path)
        at = bisect.bisect_left(self.keys, key)
        if at < len(self.keys) and self.keys[at] == key:
            del self.keys[at]
            del self.rows[at]
        self.titles.pop(path, None)
        stem = _stem(path)
        rest = [p for p in self.stems.get(stem, []) if p != path]
        if rest:
            self.stems[stem] = rest
        else:
            self.stems.pop(stem, None)
        for kind, target in self.raw.pop(path, []):
            for s in _link_stems(path, kind, target):
                sources = self.linking.get(s, frozenset()) - {path}
                if sources:
                    self.linking[s] = sources
                else:
                    self.linking.pop(s, None)
        self._unlink(path)

    def _unlink(self, source: str) -> None:
        for dest, _kind in self.out.pop(source, []):
            rest = [b for b in self.backlinks.get(dest, []) if b[0] != source]
            if rest:
                self.backlinks[dest] = rest
            else:
                self.backlinks.pop(dest, None)

    def _add(
        self,
        rows: list[uirows.KeyedRow],
        links: list[tuple[str, str, str]],
        fresh: bool = False,
    ) -> list[str]:
        """Put ``rows`` in; ``fresh``: into a graph no one reads yet, in walk order."""
        added = []
        for ident, key, row in rows:
            path = row.path
            if path in self.key_of:  # the same path under another id: the old one goes
                old = next((i for i, p in self.path_of.items() if p == path), None)
                if old is not None:
                    del self.path_of[old]
                self._drop(path)
            self.path_of[ident] = path
            self.key_of[path] = key
            at = bisect.bisect_left(self.keys, key)
            self.keys.insert(at, key)
            self.rows.insert(at, row)
            self.titles[path] = row.title
            stem = _stem(path)
            if fresh:
                self.stems.setdefault(stem, []).append(path)
            else:
                self.stems[stem] = sorted(
                    [*self.stems.get(stem, []), path], key=lambda p: self.key_of.get(p, b"")
                )
            self.raw[path] = []
            added.append(path)
        grouped: dict[str, list[tuple[str, str]]] = {}
        for source, kind, target in links:
            if source in self.raw:
                grouped.setdefault(source, []).append((kind, target))
        by_stem: dict[str, set[str]] = {}
        for source, found in grouped.items():
            self.raw[source] = found
            for kind, target in found:
                for s in _link_stems(source, kind, target):
                    by_stem.setdefault(s, set()).add(source)
        for s, sources in by_stem.items():
            self.linking[s] = self.linking.get(s, frozenset()) | sources
        return added

    def _resolve(self, sources: list[str], fresh: bool = False) -> None:
        for source in sources:
            self._unlink(source)
            if source not in self.raw:
                continue
            seen: set[str] = set()
            found = []
            for kind, target in self.raw[source]:
                dest = self.resolve(source, target, kind)
                if dest is None or dest == source or dest in seen:
                    continue
                seen.add(dest)
                found.append((dest, kind))
                if fresh:
                    self.backlinks.setdefault(dest, []).append((source, kind))
                else:
                    self.backlinks[dest] = [*self.backlinks.get(dest, []), (source, kind)]
            if found:
                self.out[source] = found


def build_graph(rows: list[uirows.KeyedRow], raw: list[tuple[str, str, str]]) -> LinkGraph:
    """The graph of ``rows`` (in walk order) and their links, built whole."""
    graph = LinkGraph()
    graph._add(rows, raw, fresh=True)
    graph._resolve(list(graph.raw), fresh=True)
    return graph
