"""What the pages show, gathered from :class:`~memdir.service.Memory` for one caller.

Every list is narrowed to the caller's token as the API narrows it: a prefix token sees
only documents under its prefix (by name, and not through a symlink leading out of it),
and what covers the whole store (coverage, the quarantine queue, runs, the context pack,
the snapshot when it lies outside the prefix) is refused or left out for it.
"""

from __future__ import annotations

import json
import posixpath
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...access import LOCAL, Principal
from ...doc import paths as docpaths
from ...doc.turnrecord import parse_turn
from ...engine import runs
from ...errors import MemdirError
from ...index import uirows
from ...service import Memory
from .linkgraph import LinkGraph, build_graph
from .livereport import LiveReport, Summary
from .livetree import INBOX, PAGE, LiveTree
from .render import DagItem, Point

TURNS = "episodes/turns/"
UPDATE_LIMIT = 5000  # more documents changed at once than this: the graph is rebuilt whole
FULL_TURNS = 50  # a thread page shows this many newest turns whole, the rest as links
QUARANTINE = "quarantine/"


class Views:
    """The data of every page, over one ``Memory`` (one per server)."""

    def __init__(self, memory: Memory) -> None:
        self.mem = memory
        self._lock = threading.Lock()
        # name -> (index generation, the change log's number it is as of, the value)
        self._derived: dict[str, tuple[int, int, Any]] = {}
        self.builds = 0  # graphs built whole, and brought forward (for tests and benches)
        self.updates = 0
        self.report_builds = 0  # the same of the live report
        self.report_updates = 0
        self.tree_builds = 0  # and of the live tree
        self.tree_updates = 0
        self._memo: dict[tuple[Any, ...], tuple[int, Any]] = {}
        self._release_lock = threading.Lock()

    @property
    def root(self) -> Path:
        return self.mem.root

    # -- the caller's view of the store ---------------------------------------------

    def graph(self) -> LinkGraph:
        """The whole store's link graph, brought forward when the index changed: by the
        documents its change log names, or rebuilt whole when the log cannot say."""

        def build(conn: Any) -> LinkGraph:
            self.builds += 1
            return build_graph(uirows.visible_keyed(conn), uirows.edges_of(conn))

        def update(graph: LinkGraph, ids: list[int], conn: Any) -> LinkGraph:
            self.updates += 1
            return graph.updated(ids, uirows.visible_keyed(conn, ids), uirows.edges_of(conn, ids))

        with self._lock:
            graph: LinkGraph = self._follow("graph", build, update)
            return graph

    def warm(self) -> None:
        """Build what the first pages read (the link graph, the tree and counts, the memory
        report): several seconds at 100,000 documents that the first person to look would
        otherwise wait for. Run once in the background when a server starts."""
        self.graph()
        self.live_tree(LiveTree.counts)
        self.report()

    def report(self) -> Summary:
        """The memory report's figures and its oldest unmerged episodes, kept in step with
        the index like the graph (the same change log) instead of folded again whole."""

        def build(conn: Any) -> LiveReport:
            self.report_builds += 1
            live = LiveReport(self.mem.episodes_prefix())
            live.apply((), uirows.facts_keyed(conn))
            return live

        def update(live: LiveReport, ids: list[int], conn: Any) -> LiveReport:
            self.report_updates += 1
            live.apply(ids, uirows.facts_keyed(conn, ids))
            return live

        def summary() -> Summary:
            with self._lock:
                live: LiveReport = self._follow("report", build, update)
                return live.summary(time.time())

        found: Summary = self.cached("report", LOCAL, summary)
        return found

    def live_tree(self, read: Callable[[LiveTree], Any]) -> Any:
        """``read(tree)`` of the whole store's tree (browse) and counts (home), brought
        forward like the graph; ``read`` runs under the lock (the tree changes in place)."""

        def build(conn: Any) -> LiveTree:
            self.tree_builds += 1
            tree = LiveTree()
            tree.apply((), uirows.visible_keyed(conn))
            return tree

        def update(tree: LiveTree, ids: list[int], conn: Any) -> LiveTree:
            self.tree_updates += 1
            tree.apply(ids, uirows.visible_keyed(conn, ids))
            return tree

        with self._lock:
            return read(self._follow("tree", build, update))

    def _follow(
        self,
        name: str,
        build: Callable[[Any], Any],
        update: Callable[[Any, list[int], Any], Any],
    ) -> Any:
        """The value ``name`` derived from the whole index, as of its generation now:
        kept, brought forward by ``update`` from the ids the change log names since it was
        made, or made again by ``build`` when the log cannot say. Under ``self._lock``."""
        self.mem.sync()
        generation = self.mem.index.generation
        held = self._derived.get(name)
        if held is not None and held[0] == generation:
            return held[2]
        conn = self.mem.index.conn
        found = uirows.changes(conn, held[1], UPDATE_LIMIT) if held is not None else None
        if held is not None and found is not None:
            seq, ids = found
            value = update(held[2], ids, conn)
        else:
            with self.mem.index.transaction() as tx:  # the log's last number first
                seq = uirows.watch(tx)
            value = build(conn)
        self._derived[name] = (generation, seq, value)
        return value

    def leaks(self, principal: Principal) -> list[str]:
        """Paths under the caller's prefix that lead out of it through a symlink."""
        if not principal.prefix:
            return []
        return docpaths.links_out(self.root, principal.prefix)

    def shown(self, principal: Principal, path: str, leaks: list[str]) -> bool:
        if not principal.covers(path):
            return False
        return not any(path == x or (x.endswith("/") and path.startswith(x)) for x in leaks)

    def rows(self, principal: Principal) -> list[uirows.DocRow]:
        rows = self.graph().rows
        if not principal.prefix:
            return rows
        leaks = self.leaks(principal)
        return [r for r in rows if self.shown(principal, r.path, leaks)]

    def turns(self, principal: Principal) -> dict[str, str]:
        """Path and title of every turn record the caller sees (what the live stream
        compares each second): the turn rows of the index, not a loop over every row."""
        self.mem.sync()
        leaks = self.leaks(principal)
        rows = uirows.turn_rows(self.mem.index.conn, principal.prefix or "")
        return {r.path: r.title for r in rows if self.shown(principal, r.path, leaks)}

    def cached(self, name: str, principal: Principal, build: Callable[[], Any]) -> Any:
        """``build()``, kept while the index generation stays the same (per prefix: what a
        page derives from every row costs most of a second at 100k documents)."""
        self.mem.sync()
        generation = self.mem.index.generation
        key = (name, principal.prefix, tuple(self.leaks(principal)))
        with self._lock:
            hit = self._memo.get(key)
            if hit is not None and hit[0] == generation:
                return hit[1]
        value = build()
        with self._lock:
            if len(self._memo) > 64:
                self._memo.clear()
            self._memo[key] = (generation, value)
        return value

    # -- home --------------------------------------------------------------------------

    def home(self, principal: Principal) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.cached("home", principal, lambda: self._home(principal)))
        out["counts"] = dict(out["counts"])
        if not principal.prefix:
            out["drift"] = trend(self.root, "refine", "drift")
            out["mrr"] = trend(self.root, "evaluate", "mrr")
        snapshot = "SNAPSHOT.md"
        out["snapshot"] = None
        if principal.covers(snapshot) and (self.root / snapshot).is_file():
            out["snapshot"] = self.mem.read(snapshot).content
        return out

    def _home(self, principal: Principal) -> dict[str, Any]:
        conn = self.mem.index.conn
        found: dict[str, int | None]
        if self.leaks(principal):  # a symlink leads out of the prefix: count what it shows
            rows = self.rows(principal)
            turns = [r for r in rows if r.type == "turn" and r.path.startswith(TURNS)]
            found = {
                "turns": len(turns),
                "threads": len({r.thread for r in turns if r.thread}),
                "episodes": sum(
                    1 for r in rows if r.path.startswith("episodes/") and r.type != "turn"
                ),
                "articles": sum(
                    1
                    for r in rows
                    if r.path.startswith("wiki/")
                    and posixpath.basename(r.path) not in ("index.md", "log.md")
                ),
            }
            latest = sorted(turns, key=lambda r: r.created, reverse=True)[:10]
        elif principal.prefix:  # the index counts the prefix's range
            found = dict(uirows.home_counts(conn, principal.prefix))
            latest = uirows.latest_turns(conn, principal.prefix)
        else:  # the live tree's counts, brought forward by the documents a write changed
            found = dict(self.live_tree(LiveTree.counts))
            latest = uirows.latest_turns(conn)
        counts: dict[str, int | None] = {**found, "inbox": None, "quarantine": None}
        out: dict[str, Any] = {"counts": counts, "whole": not principal.prefix}
        out["latest"] = latest
        if not principal.prefix:
            counts["inbox"] = uirows.zone_count(conn, INBOX)
            counts["quarantine"] = uirows.zone_count(conn, QUARANTINE)
            report = self.report()
            out["coverage"] = report.coverage_pct
            out["unmerged"] = report.total_unmerged
        return out

    # -- browse ------------------------------------------------------------------------

    def tree(self, principal: Principal) -> dict[str, Any]:
        """The store grouped as a person looks for it: turns by day, episodes, wiki bundles
        and topics, the inbox (raw sources), the rest. Small groups list their documents; a
        large one links to its own page (:meth:`folder`)."""
        inbox = not principal.prefix or INBOX.startswith(principal.prefix)
        if not principal.prefix:
            found: dict[str, Any] = self.live_tree(lambda tree: tree.view(inbox))
            return found
        return dict(self.cached("tree", principal, lambda: self._tree(principal, inbox)))

    def _tree(self, principal: Principal, inbox: bool) -> dict[str, Any]:
        """The tree of what a prefix token sees, grouped from its rows."""
        graph = self.graph()
        leaks = self.leaks(principal)
        tree = LiveTree()
        tree.apply(
            (),
            (
                uirows.KeyedRow(i, key, row)
                for i, (key, row) in enumerate(zip(graph.keys, graph.rows, strict=True))
                if self.shown(principal, row.path, leaks)
            ),
        )
        return tree.view(inbox)

    def folder(self, principal: Principal, prefix: str, offset: int) -> dict[str, Any]:
        """One page of the documents under ``prefix`` (the inbox's raw sources included):
        read by the index's path range, or from the caller's rows when a symlink leads out
        of its prefix."""
        asked = principal.confine(prefix) or ""
        if self.leaks(principal):
            rows = [r for r in self.rows(principal) if r.path.startswith(asked)]
            count, shown = len(rows), rows[offset : offset + PAGE]
        else:
            self.mem.sync()
            count, shown = uirows.under(self.mem.index.conn, asked, offset, PAGE)
        return {"prefix": asked, "count": count, "offset": offset, "rows": shown, "page": PAGE}

    # -- document ----------------------------------------------------------------------

    def backlinks(self, principal: Principal, path: str) -> list[tuple[str, str, str]]:
        graph = self.graph()
        leaks = self.leaks(principal)
        return [
            (source, graph.titles.get(source, source), kind)
            for source, kind in graph.backlinks.get(path, [])
            if self.shown(principal, source, leaks)
        ]

    def history(self, path: str, limit: int = 50) -> list[dict[str, str]]:
        """The file's commits, newest first (empty without git)."""
        from ...files.gitrun import run_git

        if not (self.root / ".git").exists():
            return []
        sep = "\x1f"
        out = run_git(
            self.root,
            "log",
            f"--max-count={limit}",
            f"--format=%H{sep}%an{sep}%aI{sep}%s",
            "--",
            path,
            check=False,
        )
        commits = []
        for line in out.splitlines():
            parts = line.split(sep)
            if len(parts) == 4:
                commits.append(dict(zip(("sha", "author", "date", "subject"), parts, strict=True)))
        return commits

    def diff(self, path: str, sha: str) -> str:
        """What commit ``sha`` changed in ``path`` (one file's patch)."""
        from ...files.gitrun import run_git

        if not all(c in "0123456789abcdef" for c in sha) or not 7 <= len(sha) <= 64:
            return ""
        return run_git(
            self.root,
            "show",
            "--format=",
            "--no-color",
            "--no-ext-diff",
            sha,
            "--",
            path,
            check=False,
        )

    # -- turns -------------------------------------------------------------------------

    def thread(self, principal: Principal, thread: str, last: int) -> dict[str, Any]:
        """The latest ``last`` turns of a thread, oldest first: the newest ``FULL_TURNS`` as
        records (input, compact, output), the earlier ones as index rows (a link each)."""
        leaks = self.leaks(principal)
        nodes = [
            n for n in self.mem.thread(thread, last=last) if self.shown(principal, n.path, leaks)
        ]
        full, earlier = nodes[:FULL_TURNS], nodes[FULL_TURNS:]
        linked = docpaths.through_symlinks(self.root, [n.path for n in full])
        records = []
        for node in reversed(full):
            if node.path in linked:
                continue
            try:
                records.append(parse_turn(self.mem.store.read_text(node.path)))
            except (OSError, MemdirError):
                continue  # removed or rewritten since the index saw it
        return {"records": records, "earlier": list(reversed(earlier)), "count": len(nodes)}

    def dag(
        self, principal: Principal, turn_id: str, depth: int = 4
    ) -> tuple[list[DagItem], list[tuple[str, str]]]:
        leaks = self.leaks(principal)
        up = [
            n
            for n in self.mem.ancestors(turn_id, depth, 60)
            if self.shown(principal, n.path, leaks)
        ]
        down = [
            n
            for n in self.mem.descendants(turn_id, depth, 60)
            if self.shown(principal, n.path, leaks)
        ]
        me = self.mem.turn_show(turn_id)
        items = [
            DagItem(me.id, _turn_label(me.thread, me.created, me.id), 0, f"/turn/{me.id}", "turn")
        ]
        seen = {me.id}
        for sign, nodes in ((-1, up), (1, down)):
            for n in nodes:
                if n.id in seen:
                    continue
                seen.add(n.id)
                if n.type == "turn":
                    items.append(
                        DagItem(
                            n.id,
                            _turn_label(n.thread, n.created, n.id),
                            sign * n.depth,
                            f"/turn/{n.id}",
                            "turn",
                        )
                    )
                else:
                    items.append(
                        DagItem(n.id, n.path, sign * n.depth, "/doc/" + n.path, "document")
                    )
        edges: list[tuple[str, str]] = []
        for item in items:
            if item.kind != "turn":
                continue
            record = me if item.id == me.id else self.mem.turn_show(item.id)
            for parent in record.parents:
                if parent in seen:
                    edges.append((parent, item.id))
        return items, edges

    def context(self, principal: Principal, thread: str, user: str, keywords: str) -> Any:
        principal.require_unconfined("the context pack")
        return self.mem.context(thread, user, keywords.split() if keywords else ())

    # -- coverage ----------------------------------------------------------------------

    def coverage(self, principal: Principal) -> dict[str, Any]:
        """The memory report's figures, its oldest unmerged episodes (their age from the
        file's mtime as the index saw it) and counts by folder, the quarantine queue."""
        principal.require_unconfined("the memory report")
        report = self.report()
        return {
            "report": report,
            "unmerged": [entry for entry, _ in report.oldest],
            "ages": {entry.path: mtime for entry, mtime in report.oldest},
            "by_folder": report.by_folder,
            "quarantine": self.mem.quarantine_list(),
            "bundles": [b.name for b in self.mem.program().bundles],
        }

    def release(self, principal: Principal, path: str, bundle: str, topic: str) -> dict[str, Any]:
        principal.require("write", "releasing a quarantined source")
        principal.require_unconfined("the quarantine queue")
        actor = principal.name if principal.authenticated else "web"
        # One release at a time: Memory.quarantine_release checks and moves without a lock,
        # so two at once could both release the source, or fail halfway with a 500.
        with self._release_lock:
            return self.mem.quarantine_release(
                path, bundle=bundle, topic=topic or None, actor=actor
            )

    # -- graph -------------------------------------------------------------------------

    def graph_nodes(self, principal: Principal, bundle: str = "") -> list[str]:
        """The wiki pages (of ``bundle``, or all) the caller sees, in the graph's order."""
        graph = self.graph()
        leaks = self.leaks(principal)
        wiki = "wiki/" + (bundle.strip("/") + "/" if bundle else "")
        return [p for p in graph.titles if p.startswith(wiki) and self.shown(principal, p, leaks)]

    def graph_summary(self, principal: Principal) -> tuple[list[str], int]:
        """The bundles and the count of pages the graph page names (not the graph itself:
        the page's script asks for that)."""
        nodes = self.graph_nodes(principal)
        return sorted({p.split("/")[1] for p in nodes if p.count("/") >= 2}), len(nodes)

    def graph_json(self, principal: Principal, bundle: str = "") -> bytes:
        """Nodes, links and bundles of the graph as JSON, kept while the index generation
        holds (40,000 pages make 4.7 MB: a third of a second to gather and encode)."""

        def build() -> bytes:
            data = self._graph_data(principal, bundle)
            return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()

        found: bytes = self.cached(f"graph:{bundle}", principal, build)
        return found

    def _graph_data(self, principal: Principal, bundle: str) -> dict[str, Any]:
        graph = self.graph()
        nodes = self.graph_nodes(principal, bundle)
        index = {p: i for i, p in enumerate(nodes)}
        bundles = sorted({p.split("/")[1] for p in nodes if p.count("/") >= 2})
        group = {b: i for i, b in enumerate(bundles)}
        edges = [[index[s], index[d]] for s, d, _ in graph.edges if s in index and d in index]
        return {
            "nodes": [
                {"path": p, "title": graph.titles[p], "group": group.get(p.split("/")[1], 0)}
                for p in nodes
            ],
            "edges": edges,
            "bundles": bundles,
        }


def _turn_label(thread: str, created: str, ident: str) -> str:
    when = created[5:16].replace("T", " ") if len(created) >= 16 else ident[:10]
    return f"{thread} · {when}"


def trend(root: Path, verb: str, key: str) -> list[Point]:
    """One point per run of ``verb`` that recorded ``key``; the run's own verdict kept."""
    points = []
    for run in runs.history(root, verb):
        value = run.notes.get(key)
        if value is None:
            continue
        try:
            number = float(value)
        except ValueError:
            continue
        words = run.raw.split("\t")[3].split() if run.raw.count("\t") >= 3 else []
        verdict = next((w for w in words if w in ("advance", "hold", "regress")), "hold")
        points.append(Point(run.timestamp, number, verdict))
    return points
