"""Memory: the one object every adapter calls, a facade over the store's concerns.

Each concern is built once here and handed what it needs: the document verbs
(:mod:`memdir.documents.verbs`), the turns (:mod:`memdir.turns.verbs`), retrieval
(:mod:`memdir.retrieval.verbs`) and the knowledge engine (:mod:`memdir.engine.verbs`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import lazy
from .errors import InvalidInput
from .files.layout import find_root
from .files.store import Store
from .index import Index
from .settings import Settings
from .settings import load as load_settings

if TYPE_CHECKING:
    from contextlib import AbstractContextManager
    from datetime import datetime

    from .doc.turnrecord import TurnRecord
    from .documents.reportcache import ReportText
    from .documents.verbs import DoctorReport, Documents, GrepHit, ReadResult
    from .engine import remote as remote_sync
    from .engine.program import Program
    from .engine.verbs import KnowledgeEngine
    from .files.store import WriteResult
    from .index import SyncStats
    from .index.dag import DagNode
    from .index.search import Filters, Hit
    from .kiwi import report as coverage
    from .retrieval.rerank import Reranker
    from .retrieval.verbs import Progress, Retrieval
    from .turns.pack import ContextPack
    from .turns.verbs import TurnLog
    from .vectors.embedder import Embedder
    from .vectors.index import VectorIndex, VectorSyncStats
else:  # loaded by the first sync (memdir.lazy)
    remote_sync = lazy.module("memdir.engine.remote")


class Memory:
    """A memdir store opened for use. Create with :meth:`Memory.open`.

    >>> mem = Memory.open("/path/to/store")          # doctest: +SKIP
    >>> mem.write("notes/a.md", "# A\\n", provenance="run:1", actor="agent")  # doctest: +SKIP
    >>> [h.path for h in mem.search("A")]              # doctest: +SKIP
    """

    def __init__(self, store: Store, index: Index, settings: Settings) -> None:
        self.store = store
        self.index = index
        self.settings = settings
        self._sync_held = False
        # The collaborators are built (and their modules imported) on first use: a hook
        # that only builds a context pack needs the documents and the turns, not the engine.
        if store.crashed:  # a writer died: what it renamed into place may be unindexed
            index.sync()
        elif store.put_back:  # files of a run that died before its commit (memdir.files.undo)
            index.sync_paths([p for p in store.put_back if not p.startswith(".memdir/")])

    @cached_property
    def documents(self) -> Documents:
        from .documents.verbs import Documents

        made = Documents(self.store, self.index, self.settings)
        if self._sync_held:
            made.hold()
        return made

    @cached_property
    def retrieval(self) -> Retrieval:
        from .retrieval.verbs import Retrieval

        return Retrieval(
            self.store,
            self.index,
            self.settings,
            docs=self.documents,
            worklogs=self.search_worklogs,
        )

    @cached_property
    def turns(self) -> TurnLog:
        from .turns.verbs import TurnLog

        return TurnLog(
            self.store, self.index, self.settings, sync=self.sync, after_record=self._after_turn
        )

    @cached_property
    def engine(self) -> KnowledgeEngine:
        from .engine.verbs import KnowledgeEngine

        return KnowledgeEngine(
            self.store,
            self.index,
            self.settings,
            sync=self.sync,
            synced=self.synced,
            keyword_search=self.keyword_search,
            search=self.search,
            memory_report=self.memory_report,
        )

    def _after_turn(self) -> None:
        # Only a process that searched by meaning embeds the turn it records; one that never
        # built its retrieval side has no vector index loaded, so there is nothing to do.
        if "retrieval" in self.__dict__:
            self.retrieval.after_turn()

    @classmethod
    def open(
        cls,
        root: str | Path | None = None,
        *,
        settings: Settings | None = None,
        overrides: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> Memory:
        """Open the store at ``root`` (or found from ``MEMDIR_ROOT`` / the current folder).

        ``settings`` is used as given; ``overrides`` are applied over the store's config and
        the environment. Not both: the overrides would have nothing to apply to.
        """
        if settings is not None and overrides:
            raise InvalidInput("Memory.open takes settings or overrides, not both")
        found = find_root(explicit=root)
        resolved = settings or load_settings(found, overrides)
        return cls(Store(found, resolved), Index(found), resolved)

    @classmethod
    def init(cls, directory: str | Path, *, force: bool = False) -> Memory:
        """Create a store in ``directory`` and open it."""
        root = Store.init(Path(directory), force=force)
        return cls.open(root)

    @property
    def root(self) -> Path:
        return self.store.root

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- documents (memdir.documents.verbs.Documents) ----------------------------

    def sync(self, *, force: bool = False) -> SyncStats:
        """Bring the index in step with the files (cheap when nothing changed)."""
        if self._sync_held and not force and "documents" not in self.__dict__:
            from .index import SyncStats

            return SyncStats()  # held, and no document verb ran: nothing to ask them
        return self.documents.sync(force=force)

    def hold_sync(self) -> None:
        """Let the verbs answer from the index as it stands, without the walk that brings it
        in step first; writes made through memdir still index their own paths. For a caller
        that walks later itself (``memdir hook``, :mod:`memdir.agents.hooks`): a context
        pack then never builds the document verbs (nor imports their modules)."""
        self._sync_held = True
        if "documents" in self.__dict__:
            self.documents.hold()

    def sync_once(self) -> SyncStats:
        """Sync now, then make later ``sync()`` calls no-ops (one command = one sync)."""
        return self.documents.sync_once()

    def synced(self) -> AbstractContextManager[SyncStats]:
        """Sync once, then let the verbs called inside the block skip their own sync."""
        return self.documents.synced()

    def start_watcher(self) -> bool:
        """Keep the index in step from change events (servers; see :mod:`memdir.index.watch`)."""
        return self.documents.start_watcher()

    def close(self) -> None:
        """Stop a watcher this process runs, commit pending git work and close the index."""
        if "documents" in self.__dict__:
            self.documents.close()
        else:  # no document verb ran, so no watcher either
            self.store.close()
            self.index.close()

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
        return self.documents.write(
            path, content, provenance=provenance, actor=actor, message=message, if_match=if_match
        )

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
        return self.documents.merge(
            page, episode=episode, type=type, path=path, note=note, actor=actor
        )

    def read(self, path: str, *, section: str | None = None) -> ReadResult:
        """A file's content, or one section of it (by heading)."""
        return self.documents.read(path, section=section)

    def filters(
        self,
        *,
        path_prefix: str | None = None,
        kind: str | None = None,
        type: str | None = None,
        where: Iterable[str] | Mapping[str, Any] | None = None,
        include_superseded: bool = False,
    ) -> Filters:
        return self.documents.filters(
            path_prefix=path_prefix,
            kind=kind,
            type=type,
            where=where,
            include_superseded=include_superseded,
        )

    def keyword_search(
        self, query: str, *, limit: int | None = None, filters: Filters | None = None
    ) -> list[Hit]:
        """BM25 over titles and bodies; any string is a valid query."""
        return self.documents.keyword_search(query, limit=limit, filters=filters)

    def grep(
        self,
        pattern: str,
        *,
        path_prefix: str | None = None,
        ignore_case: bool = False,
        limit: int = 200,
        include_superseded: bool = False,
    ) -> list[GrepHit]:
        """Regular-expression search over the visible files, in walk order."""
        return self.documents.grep(
            pattern,
            path_prefix=path_prefix,
            ignore_case=ignore_case,
            limit=limit,
            include_superseded=include_superseded,
        )

    def ls(
        self, prefix: str | None = None, *, include_superseded: bool = False
    ) -> list[dict[str, Any]]:
        """The visible documents under ``prefix``, in walk order."""
        return self.documents.ls(prefix, include_superseded=include_superseded)

    def episodes_prefix(self, override: str | None = None) -> str:
        return self.documents.episodes_prefix(override)

    def memory_report(
        self, *, episodes_prefix: str | None = None, now: datetime | None = None
    ) -> coverage.Report:
        """The KiwiFS-compatible coverage report, computed from the index."""
        return self.documents.memory_report(episodes_prefix=episodes_prefix, now=now)

    def memory_report_text(
        self, *, episodes_prefix: str | None = None, now: datetime | None = None
    ) -> ReportText:
        """The report as the exact JSON text KiwiFS prints, with what a caller checks."""
        return self.documents.memory_report_text(episodes_prefix=episodes_prefix, now=now)

    def reindex(self, *, full: bool = False) -> SyncStats:
        """Sync the index, or rebuild it from the files with ``full``."""
        stats = self.documents.reindex(full=full)
        if full and self.settings.index.engine == "postgres":
            from .retrieval import pgranks

            pgranks.rebuild(self.retrieval)  # and the store's rows in the Postgres index
        return stats

    def doctor(self) -> DoctorReport:
        """Compare the index with the files (nothing is changed)."""
        return self.documents.doctor()

    # -- turns (memdir.turns.verbs.TurnLog) --------------------------------------

    def record_turn(
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
        actor: str | None = None,
        id: str | None = None,
    ) -> TurnRecord:
        """Store a turn record and its raw work log; compact the work log.

        Every argument is validated before anything is written: parents must be
        existing turns, input and output cannot both be empty, thread and user
        ids cannot hold path separators or control characters.
        """
        ready = self.turns.prepare_turn(
            thread=thread,
            input=input,
            output=output,
            worklog=worklog,
            user=user,
            channel=channel,
            parents=parents,
            keywords=keywords,
            provenance=provenance,
            id=id,
        )
        self.turns.write_turns([ready], actor=actor)
        return ready.record

    def turn_show(self, turn_id: str) -> TurnRecord:
        """The record of a turn."""
        return self.turns.turn_show(turn_id)

    def turn_worklog(self, turn_id: str) -> bytes:
        """The raw work log of a turn, byte for byte as recorded (b"" when it had none)."""
        return self.turns.turn_worklog(turn_id)

    def ancestors(self, turn_id: str, depth: int = 10, limit: int = 1000) -> list[DagNode]:
        """Turns this turn descends from, nearest first (breadth-first over ``parents``)."""
        return self.turns.ancestors(turn_id, depth, limit)

    def descendants(self, turn_id: str, depth: int = 10, limit: int = 1000) -> list[DagNode]:
        """Turns that name this turn as a parent, directly or through others, nearest first."""
        return self.turns.descendants(turn_id, depth, limit)

    def thread(self, thread: str, last: int = 20) -> list[DagNode]:
        """The latest ``last`` turns of a thread, newest first."""
        return self.turns.thread(thread, last)

    def sync_worklogs(self) -> int:
        """Bring the work-log full-text table in step with the turn rows; returns rows added.

        Runs only on demand (``search_worklogs``): work logs are never searched by default.
        """
        return self.turns.sync_worklogs()

    def search_worklogs(
        self, query: str, *, limit: int | None = None, filters: Filters | None = None
    ) -> list[Hit]:
        """BM25 over the raw work logs of turns (mode two, on demand); pointers to sidecars.

        ``filters`` (as for search: path prefix, kind, type, where, include_superseded)
        apply to the turn each work log belongs to.
        """
        return self.turns.search_worklogs(query, limit=limit, filters=filters)

    def context(
        self,
        thread: str,
        user: str = "",
        keywords: Sequence[str] | str = (),
        budget: int | None = None,
    ) -> ContextPack:
        """Mode one: the context pack for the start of a turn (see :mod:`memdir.turns.pack`)."""
        return self.turns.context(thread, user, keywords, budget)

    # -- the knowledge engine (memdir.engine.verbs.KnowledgeEngine) --------------

    def program(self) -> Program:
        """PROGRAM.md parsed, with the ``[engine]`` settings applied."""
        return self.engine.program()

    def harness_accept(self) -> dict[str, Any]:
        """Record the current HARNESS.md hash as the pinned one (logged as its own run)."""
        return self.engine.harness_accept()

    def bundle_add(self, name: str, scope: str) -> dict[str, Any]:
        """Add (or rescope) a bundle in PROGRAM.md and create its OKF folder."""
        return self.engine.bundle_add(name, scope)

    def bundle_list(self) -> list[dict[str, Any]]:
        return self.engine.bundle_list()

    def bundle_remove(self, name: str) -> dict[str, Any]:
        """Remove a bundle from PROGRAM.md (its articles stay on disk)."""
        return self.engine.bundle_remove(name)

    def bundle_publish(self, name: str, to: str) -> dict[str, Any]:
        """Publish a bundle as a standalone OKF v0.2 git repository (a folder or a remote)."""
        return self.engine.bundle_publish(name, to)

    @staticmethod
    def bundle_audit(folder: str | Path) -> list[str]:
        """The OKF v0.2 verdict of a published bundle folder on its own ([] is conformant)."""
        from .engine.publish import audit_folder

        return audit_folder(Path(folder).expanduser())

    def ingest(
        self,
        items: Sequence[tuple[str, bytes | str]],
        *,
        actor: str | None = None,
        provenance: str | None = None,
    ) -> list[dict[str, Any]]:
        """Place raw sources in ``inbox/`` as episodic ``type: ingest`` documents."""
        return self.engine.ingest(items, actor=actor, provenance=provenance)

    def consolidate(
        self,
        *,
        plan: bool = False,
        apply: str | dict[str, Any] | None = None,
        limit: int | None = None,
        actor: str | None = None,
        turns: bool | None = None,
    ) -> dict[str, Any]:
        """Inbox sources -> cited articles (or quarantine); then refine, reflect, reindex and
        one git commit. ``plan`` returns the work packet; ``apply`` files returned articles;
        ``turns`` also folds unmerged turns into thread pages (default: the setting)."""
        return self.engine.consolidate(
            plan=plan, apply=apply, limit=limit, actor=actor, turns=turns
        )

    def quarantine_list(self) -> list[dict[str, Any]]:
        """The quarantined sources, oldest first, with the reason and the routing scores."""
        return self.engine.quarantine_list()

    def quarantine_release(
        self, path: str, *, bundle: str, topic: str | None = None, actor: str | None = None
    ) -> dict[str, Any]:
        """Move a quarantined source back to the inbox naming ``bundle`` (and ``topic``), so
        the next consolidate files it there."""
        return self.engine.quarantine_release(path, bundle=bundle, topic=topic, actor=actor)

    # -- sync over git (memdir.engine.remote, docs/sync.md) -----------------------------

    def git_sync(self, *, remote: str = "", branch: str = "") -> dict[str, Any]:
        """Commit what is pending, fetch, integrate, push; then the index (touched paths
        only) and the generated files in step. ``remote``/``branch`` default to ``[sync]``."""
        return remote_sync.run(self.engine, remote=remote, branch=branch)

    def sync_conflicts(self) -> list[dict[str, str]]:
        """Files changed on two machines that nobody resolved yet (``conflicts/``)."""
        return remote_sync.conflicts(self.engine)

    def resolve_conflict(self, path: str, *, keep: str, actor: str = "") -> dict[str, Any]:
        """Keep the ``current`` version of ``path`` or the ``other`` side's; one commit."""
        return remote_sync.resolve(self.engine, path, keep=keep, actor=actor)

    def refine(self, *, label: str | None = None) -> dict[str, Any]:
        """The drift audit, compared with the previous refine run (written to runs.tsv)."""
        return self.engine.refine(label=label)

    def query(self, question: str) -> dict[str, Any]:
        """Tiered recall: snapshot, index walk, then search; pointers with citations."""
        return self.engine.query(question)

    def evaluate(self) -> dict[str, Any]:
        """Run evals/questions.yaml through query; compare MRR with the previous run."""
        return self.engine.evaluate()

    def episode_add(
        self,
        *,
        kind: str,
        situation: str,
        actions: Sequence[str] = (),
        outcome: str = "success",
        insights: Sequence[str] = (),
        tags: Sequence[str] = (),
        intent: str = "",
        slug: str | None = None,
    ) -> dict[str, Any]:
        """Record a life or signal episode (operational ones are written by the verbs)."""
        return self.engine.experience.episode_add(
            kind=kind,
            situation=situation,
            actions=actions,
            outcome=outcome,
            insights=insights,
            tags=tags,
            intent=intent,
            slug=slug,
        )

    def reflect(self, *, now: datetime | None = None) -> dict[str, Any]:
        """Merge insights into LESSONS.md, distil, regenerate SNAPSHOT.md."""
        return self.engine.experience.reflect(now=now)

    def forget(
        self,
        path: str,
        *,
        reason: str | None = None,
        purge: bool = False,
        actor: str | None = None,
    ) -> dict[str, Any]:
        """Supersede a document (kept, hidden from retrieval) or purge it entirely; a purge
        also drops its chunks, vectors and passages and scrubs the index files of its bytes."""
        result = self.documents.forget(path, reason=reason, purge=purge, actor=actor)
        self.retrieval.after_forget(purge=purge)
        return result

    # -- retrieval (memdir.retrieval.verbs.Retrieval) ------------------------------

    def embedder(self) -> Embedder:
        """The configured embedder (raises MissingExtra when its packages are absent)."""
        return self.retrieval.embedder()

    def vector_index(self) -> VectorIndex:
        """The vector index for the configured embedder, kept for the life of this object."""
        return self.retrieval.vector_index()

    def embed(self, *, progress: Progress | None = None, rebuild: bool = False) -> VectorSyncStats:
        """Embed what has no vectors yet; ``rebuild`` drops all vectors first (model switch)."""
        return self.retrieval.embed(progress=progress, rebuild=rebuild)

    def search_mode(self, mode: str | None = None) -> tuple[str, str | None]:
        """The mode a search will run in and, when it falls back to bm25, why."""
        return self.retrieval.search_mode(mode)

    def search(
        self,
        query: str,
        *,
        limit: int | None = None,
        path_prefix: str | None = None,
        kind: str | None = None,
        type: str | None = None,
        where: Iterable[str] | Mapping[str, Any] | None = None,
        include_superseded: bool = False,
        mode: str | None = None,
        progress: Progress | None = None,
        include_worklog: bool = False,
    ) -> list[Hit]:
        """Search the store; returns pointers with ``why`` (rank per signal), never bodies.

        ``mode`` is ``bm25``, ``vector``, ``hybrid`` or ``auto`` (hybrid when the
        embedding extra is installed and the store's vectors match the configured
        model, bm25 otherwise; see :meth:`search_mode` for the reason).
        """
        return self.retrieval.search(
            query,
            limit=limit,
            path_prefix=path_prefix,
            kind=kind,
            type=type,
            where=where,
            include_superseded=include_superseded,
            mode=mode,
            progress=progress,
            include_worklog=include_worklog,
        )

    def reranker(self) -> Reranker | None:
        """The configured reranker, or None when ``[rerank] provider`` is empty."""
        return self.retrieval.reranker()
