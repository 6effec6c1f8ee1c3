"""The turn verbs: record a turn, show it, walk its DAG, read its thread.

The record's format (render, parse, field checks) is :mod:`memdir.doc.turnrecord`.
One :class:`TurnLog` per open store does this work; :class:`memdir.Memory` calls it.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..doc import paths
from ..doc.ids import new_id
from ..doc.turnrecord import (
    TURN_TYPE,
    WORKLOG_SUFFIX,
    TurnRecord,
    check_text,
    created_of,
    in_range,
    is_turn_id,
    not_a_turn_id,
    parse_turn,
    render_turn,
    split_frontmatter,
    turn_path,
    validate_keywords,
    validate_name,
    validate_parent_ids,
    worklog_from,
    worklog_path,
)
from ..errors import InvalidDocument, InvalidInput, NotFound
from ..index import dag, turnrows, worklogs
from ..index.dag import DagNode
from ..records import recordclass

if TYPE_CHECKING:
    from ..files.store import Store
    from ..index import Index
    from ..index.search import Filters, Hit
    from ..settings import Settings
    from .pack import ContextPack


@recordclass(frozen=True, eq=False)
class PreparedTurn:
    """A turn validated and rendered by :meth:`TurnLog.prepare_turn`, not written yet."""

    record: TurnRecord
    path: str
    files: list[tuple[str, str | bytes]]
    provenance: tuple[str, str] | None


MAX_WALK_DEPTH = 1000
MAX_WALK_LIMIT = 100_000
MAX_THREAD_LAST = 10_000


# -- the service mixin ---------------------------------------------------------


class TurnLog:
    """The turns of one store: record, show, walk, thread, work logs, the context pack.

    Built once by :meth:`memdir.Memory.open` and handed what it needs: the store, its
    index and settings, ``sync`` (brings the index in step before a read) and
    ``after_record`` (called once a turn is durable; the retrieval side embeds it).
    """

    def __init__(
        self,
        store: Store,
        index: Index,
        settings: Settings,
        *,
        sync: Callable[[], object],
        after_record: Callable[[], None],
    ) -> None:
        self.store = store
        self.index = index
        self.settings = settings
        self._sync = sync
        self._after_record = after_record

    # -- writing -------------------------------------------------------------

    def prepare_turn(
        self,
        *,
        thread: str,
        input: str = "",
        output: str = "",
        worklog: Sequence[Mapping[str, Any]] | bytes | str | None = None,
        user: str = "",
        channel: str = "",
        parents: Sequence[str] = (),
        keywords: Sequence[str] | str = (),
        provenance: str | None = None,
        id: str | None = None,
        batch: Sequence[PreparedTurn] = (),
    ) -> PreparedTurn:
        """Validate a turn and render its files, writing nothing: every argument is checked
        (parents must be existing turns or documents, input and output cannot both be empty,
        thread and user ids cannot hold path separators or control characters). ``batch``:
        turns prepared before it and written with it, which its parents may name and its id
        may not repeat. :meth:`write_turns` writes it."""
        from ..doc import provenance as prov
        from .compaction import compact_worklog

        thread = validate_name("thread", thread, required=True)
        user = validate_name("user", user, required=False)
        channel = validate_name("channel", channel, required=False)
        input = check_text("input", input)
        output = check_text("output", output)
        if not input.strip() and not output.strip():
            raise InvalidInput("a turn needs an input or an output (both are empty)")
        if id is not None and not is_turn_id(id):
            raise InvalidInput(not_a_turn_id(id))
        ident = id or new_id()
        parent_ids = validate_parent_ids(parents, ident)
        kws = validate_keywords(keywords)
        prov_value = prov.parse(provenance) if provenance is not None else None
        raw_log, entries = worklog_from(worklog)
        ahead = {t.record.id for t in batch}
        self._check_parents([p for p in parent_ids if p not in ahead])
        rel = turn_path(ident)
        if ident in ahead or (self.store.root / rel).exists():
            from ..errors import Conflict

            raise Conflict(f"turn {ident} already exists")
        compaction = compact_worklog(entries, input=input, output=output, settings=self.settings)
        extra: dict[str, Any] = {"compactor": compaction.compactor}
        if compaction.error:
            extra["compact_error"] = compaction.error
        if raw_log:
            extra["worklog"] = ident + WORKLOG_SUFFIX
            extra["tool_calls"] = len(entries)
        record = TurnRecord(
            id=ident,
            thread=thread,
            user=user,
            channel=channel,
            parents=parent_ids,
            keywords=kws,
            created=created_of(ident),
            input=input,
            compact=compaction.text,
            output=output,
            extra=extra,
        )
        files: list[tuple[str, str | bytes]] = [(rel, render_turn(record))]
        if raw_log:
            files.insert(0, (worklog_path(ident), raw_log))
        return PreparedTurn(record, rel, files, prov_value)

    def write_turns(self, turns: Sequence[PreparedTurn], *, actor: str | None = None) -> None:
        """Write turns :meth:`prepare_turn` made, together: the files of each run of turns
        with the same provenance in one store write (one journal sync, one index update,
        one commit), so recording many turns (an import) costs one sync per batch."""
        for provenance, grouped in itertools.groupby(turns, key=lambda t: t.provenance):
            run = list(grouped)
            first = run[0].record
            threads = ", ".join(sorted({t.record.thread for t in run}))
            self.store.write_files(
                [f for t in run for f in t.files],
                actor=actor,
                message=f"turn {first.id} ({first.thread})"
                if len(run) == 1
                else f"{len(run)} turns ({threads})",
                provenance_value=provenance,
                after_rename=functools.partial(self._index_turns, [t.path for t in run]),
            )
        if turns:
            self._after_record()

    def _index_turns(self, rels: list[str], _written: object) -> None:
        self.index.sync_paths(rels)

    def _check_parents(self, parents: Sequence[str]) -> None:
        """Every parent must be an existing turn or document of the store."""
        parent_ids = [p for p in parents if is_turn_id(p)]
        self._check_documents([p for p in parents if not is_turn_id(p)])
        if not parent_ids:
            return
        known: dict[str, tuple[str, str]] = {}
        for row in turnrows.by_episode(self.index.conn, parent_ids):
            if row["type"] == TURN_TYPE or row["episode_id"] not in known:
                known[row["episode_id"]] = (row["path"], row["type"] or "")
        for pid in parent_ids:
            path, kind = known.get(pid, ("", ""))
            if kind == TURN_TYPE:
                continue
            # Not in the index (yet): another process may have just written it.
            if is_turn_id(pid) and (self.store.root / turn_path(pid)).is_file():
                try:
                    fm, _ = split_frontmatter(self.store.read_text(turn_path(pid)))
                except InvalidDocument:
                    fm = {}
                if str(fm.get("type", "")).lower() == TURN_TYPE and fm.get("episode_id") == pid:
                    continue
                raise InvalidInput(f"parent {pid} is not a turn ({turn_path(pid)})")
            if path:
                raise InvalidInput(
                    f"parent {pid} is not a turn: {path} has type {kind!r}; name it by its path"
                )
            raise InvalidInput(f"unknown parent turn: {pid}")

    def _check_documents(self, rels: Sequence[str]) -> None:
        """Parents that are document paths: each an existing markdown file of the store, in
        its own name (a symlink would make the DAG name another file)."""
        for rel in rels:
            if not self.store.exists(rel):
                raise InvalidInput(f"unknown parent document: {rel}")
            if self.store.resolve(rel)[0] != rel:
                raise InvalidInput(f"parent {rel} is a symlink to another file")

    # -- reading -------------------------------------------------------------

    def turn_show(self, turn_id: str) -> TurnRecord:
        """The record of a turn."""
        rel = self._turn_file(turn_id)
        return parse_turn(self.store.read_text(rel))

    def turn_worklog(self, turn_id: str) -> bytes:
        """The raw work log of a turn, byte for byte as recorded (b"" when it had none)."""
        self._turn_file(turn_id)
        side = worklog_path(turn_id)
        if not self.store.exists(side):
            return b""
        if self.store.resolve(side)[0] != side:
            raise NotFound(f"the work log of turn {turn_id} is a symlink to another file")
        return self.store.read_bytes(side)

    def _turn_file(self, turn_id: str) -> str:
        """The record's path, when a file is there in its own name.

        A caller is allowed a turn by its path (a token's prefix); a symlink there would
        show another file, which may lie outside that prefix, so it is no turn record.
        """
        rel = turn_path(turn_id)
        if not self.store.exists(rel):
            raise NotFound(f"no such turn: {turn_id}")
        if self.store.resolve(rel)[0] != rel:
            raise NotFound(f"no such turn: {turn_id} (its path is a symlink to another file)")
        return rel

    def _walk(self, start: str, depth: int, limit: int, up: bool) -> list[DagNode]:
        """The turns ``depth`` steps around ``start``, nearest first (:func:`dag.walk`)."""
        return dag.walk(self.index.conn, start, depth, limit, up)

    def ancestors(self, turn_id: str, depth: int = 10, limit: int = 1000) -> list[DagNode]:
        """Turns this turn descends from, nearest first (breadth-first over ``parents``)."""
        in_range("depth", depth, MAX_WALK_DEPTH)
        in_range("limit", limit, MAX_WALK_LIMIT)
        self._sync()
        return self._own_files(self._walk(turn_id, depth, limit, up=True))

    def descendants(self, turn_id: str, depth: int = 10, limit: int = 1000) -> list[DagNode]:
        """Turns that name this turn as a parent, directly or through others, nearest first."""
        in_range("depth", depth, MAX_WALK_DEPTH)
        in_range("limit", limit, MAX_WALK_LIMIT)
        self._sync()
        return self._own_files(self._walk(turn_id, depth, limit, up=False))

    def thread(self, thread: str, last: int = 20) -> list[DagNode]:
        """The latest ``last`` turns of a thread, newest first."""
        thread = validate_name("thread", thread, required=True)
        in_range("last", last, MAX_THREAD_LAST)
        self._sync()
        return self._own_files(dag.thread_turns(self.index.conn, thread, last))

    def _own_files(self, nodes: list[DagNode]) -> list[DagNode]:
        """``nodes`` without the turns whose path is a symlink: as for ``turn_show``, what
        a caller is allowed by path must not show another file's thread, user or time."""
        linked = paths.through_symlinks(self.store.root, [n.path for n in nodes])
        return [n for n in nodes if n.path not in linked] if linked else nodes

    def sync_worklogs(self) -> int:
        """Bring the work-log full-text table in step with the turn rows; returns rows added.

        Runs only on demand (``search_worklogs``): work logs are never searched by default.
        """
        todo, stale = worklogs.pending(self.index.conn)
        if not todo and not stale:
            return 0
        with self.index.transaction() as tx:
            for doc_id in stale:
                worklogs.drop(tx, doc_id)
            for doc_id, path in todo:
                side = self.store.root / (path[: -len(".md")] + WORKLOG_SUFFIX)
                try:
                    data = side.read_bytes()
                    st = side.stat()
                    size, mtime = st.st_size, st.st_mtime_ns
                except OSError:
                    data, size, mtime = b"", 0, 0
                text = data.decode("utf-8", errors="replace")
                worklogs.put(tx, doc_id, path, text, size, mtime)
        return len(todo)

    def search_worklogs(
        self, query: str, *, limit: int | None = None, filters: Filters | None = None
    ) -> list[Hit]:
        """BM25 over the raw work logs of turns (mode two, on demand); pointers to sidecars.

        ``filters`` (as for search: path prefix, kind, type, where, include_superseded)
        apply to the turn each work log belongs to.
        """
        from ..index.search import Filters, Hit, fts_query

        if limit is None:
            limit = self.settings.search.default_limit  # as search
        if limit < 1 or limit > 1000:
            raise InvalidInput(f"limit must be between 1 and 1000, got {limit}")
        match = fts_query(query)
        self._sync()
        self.sync_worklogs()
        rows = worklogs.search(self.index.conn, match, filters or Filters(), limit)
        return [
            Hit(
                path=row["path"][: -len(".md")] + WORKLOG_SUFFIX,
                title=f"work log of turn {row['episode_id']}",
                snippet=" ".join(str(row["snip"] or "").split()),
                score=round(-float(row["score"]), 4),
                type="worklog",
                memory_kind="episodic",
                why={"bm25_rank": rank, "source": "worklog", "turn": row["path"]},
            )
            for rank, row in enumerate(rows, start=1)
        ]

    def context(
        self,
        thread: str,
        user: str = "",
        keywords: Sequence[str] | str = (),
        budget: int | None = None,
    ) -> ContextPack:
        """Mode one: the context pack for the start of a turn (see :mod:`memdir.turns.pack`)."""
        from .pack import build_pack

        self._sync()
        return build_pack(self, thread=thread, user=user, keywords=keywords, budget=budget)
