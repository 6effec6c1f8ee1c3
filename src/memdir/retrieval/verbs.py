"""Retrieval verbs of :class:`memdir.Memory`: bm25, vector and hybrid search.

Hybrid search fuses the BM25 ranking and the vector ranking with reciprocal
rank fusion, then adds small boosts (neighbouring turns of a thread); every hit
says why it is there (its rank in each signal). Vectors are embedded
incrementally before a vector or hybrid search, only for documents whose
content has no vectors yet. Superseded and forgotten documents are never
returned, whatever the mode, unless ``include_superseded`` is asked for.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol

from ..doc.text import lone_surrogate
from ..errors import (
    InvalidInput,
    InvalidQuery,
    MissingExtra,
    ModelMismatch,
    ProviderError,
)
from ..index import lookups
from ..index.search import Filters, Hit, bm25, fts_query, words
from . import pgranks, pointers, signals
from .fusion import diversify, rrf
from .rerank import finite_score

log = logging.getLogger("memdir.retrieval")

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from ..files.store import Store
    from ..index import Index, SyncStats
    from ..settings import Settings
    from ..vectors.embedder import Embedder
    from ..vectors.index import FirstPass, VectorIndex, VectorSyncStats
    from .rerank import Reranker

MODES = ("auto", "bm25", "vector", "hybrid")
# After the embedder fails (its server is down), `auto` searches keep to keywords this
# long before they try it again, so a long-lived process does not wait on it every time.
RETRY_SECONDS = 30.0
# Hybrid search: a turn by a user the query names gains this (see memdir.retrieval.userhints).
USER_BOOST = 0.05
# `auto` search embeds a backlog inline up to embeddings.inline_limit documents, or this many
# bytes of text per allowed document (one large file can hold thousands of chunks).
INLINE_BYTES_PER_DOC = 1000
# Hybrid search: after this many results, the best hit of each thread not yet shown comes first.
DIVERSIFY_AFTER = 5
Progress = Callable[[int, int], None]


_pool: ThreadPoolExecutor | None = None
# Query embeddings by (model id, text): an agent often asks the same thing again.
QUERY_CACHE = 256
_query_cache: OrderedDict[tuple[str, str], Any] = OrderedDict()
_query_lock = threading.Lock()
_pool_lock = threading.Lock()


def _background() -> ThreadPoolExecutor:
    """One worker thread, shared by the process, for query embedding."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memdir-embed")
        return _pool


class DocumentSide(Protocol):
    """What retrieval asks of the document side of a store.

    :class:`memdir.documents.verbs.Documents` is the one there is.
    """

    def sync(self, *, force: bool = False) -> Any: ...

    def synced(self) -> AbstractContextManager[SyncStats]: ...

    def keyword_search(
        self, query: str, *, limit: int | None = None, filters: Filters | None = None
    ) -> list[Hit]: ...

    def filters(
        self,
        *,
        path_prefix: str | None = None,
        kind: str | None = None,
        type: str | None = None,
        where: Iterable[str] | Mapping[str, Any] | None = None,
        include_superseded: bool = False,
    ) -> Filters: ...

    def limit_of(self, limit: int | None) -> int: ...

    def leading_out(self, flt: Filters) -> Filters: ...

    def leaks(self, rels: list[str], flt: Filters) -> set[str]: ...


class WorklogSearch(Protocol):
    """BM25 over the work logs of turns (:meth:`memdir.turns.verbs.TurnLog.search_worklogs`)."""

    def __call__(
        self, query: str, *, limit: int | None = None, filters: Filters | None = None
    ) -> list[Hit]: ...


class Retrieval:
    """Search of one store: BM25, vectors, hybrid fusion, reranking, and the vector index.

    Built once by :meth:`memdir.Memory.open` with the store, its index and settings, and
    ``docs``, the document side it reads through (sync, filters, BM25), and ``worklogs``,
    the search of the turns' work logs that ``include_worklog`` adds.
    """

    def __init__(
        self,
        store: Store,
        index: Index,
        settings: Settings,
        *,
        docs: DocumentSide,
        worklogs: WorklogSearch,
    ) -> None:
        self.store = store
        self.index = index
        self.settings = settings
        self.docs = docs
        self.worklogs = worklogs
        self._embedder_failed: tuple[float, str] | None = None  # (retry after, why)
        self._vector_index: VectorIndex | None = None
        self._users_cache: tuple[int, list[str]] | None = None
        self.pg = pgranks.engine(settings, store.root)  # [index] engine = "postgres"

    def after_forget(self, *, purge: bool) -> None:
        """After a document is forgotten: a purge also drops its chunks, vectors and passages,
        and scrubs the index files of its bytes (:meth:`memdir.index.Index.scrub`).

        (Superseding hides the document at once; its vectors go at the next vector sync.)
        """
        if purge:
            from ..index.vectorrows import drop_unindexed

            with self.index.transaction() as conn:
                drop_unindexed(conn)
            # No byte of it stays in the index: FTS segments, free pages, the WAL.
            self.index.scrub()

    # -- the vector index --------------------------------------------------------------

    def embedder(self) -> Embedder:
        """The configured embedder (raises MissingExtra when its packages are absent)."""
        from ..vectors.embedder import get_embedder

        return get_embedder(self.settings.embeddings)

    def vector_index(self) -> VectorIndex:
        """The vector index for the configured embedder, kept for the life of this object."""
        cached = self._vector_index
        embedder = self.embedder()
        if cached is None or cached.embedder is not embedder or cached.index is not self.index:
            from ..vectors.index import VectorIndex

            emb = self.settings.embeddings
            cached = VectorIndex(
                self.index,
                embedder,
                chunk_tokens=emb.chunk_tokens,
                chunk_overlap=emb.chunk_overlap,
                batch_size=emb.batch_size,
            )
            self._vector_index = cached
        return cached

    def embed(self, *, progress: Progress | None = None, rebuild: bool = False) -> VectorSyncStats:
        """Embed what has no vectors yet; ``rebuild`` drops all vectors first (model switch)."""
        self.docs.sync()
        vectors = self.vector_index()
        if rebuild:
            vectors.clear()
        return vectors.sync(progress=progress)

    def search_mode(self, mode: str | None = None) -> tuple[str, str | None]:
        """The mode a search will run in and, when it falls back to bm25, why."""
        wanted = (mode or self.settings.search.mode or "auto").strip().lower()
        if wanted not in MODES:
            raise InvalidInput(f"unknown search mode {wanted!r} (use {', '.join(MODES)})")
        if wanted == "bm25":
            return "bm25", None
        if wanted == "auto":
            if not self.settings.embeddings.enabled:
                return "bm25", (
                    "keyword search only: embeddings are disabled ([embeddings] enabled = false)"
                )
            down = self._embedder_down()
            if down is not None:
                return "bm25", down
            try:
                self.vector_index().check_model()
            except (MissingExtra, ModelMismatch) as exc:
                return "bm25", f"keyword search only: {exc}"
            except ProviderError as exc:
                return "bm25", self._note_embedder_down(exc)
            # Embedding a large backlog inline would stall a search for minutes or hours.
            self.docs.sync()
            pending, size = self.vector_index().pending()
            allowed = self.settings.embeddings.inline_limit
            if not self._inline_backlog(pending, size):
                return "bm25", (
                    f"keyword search only: {pending} documents ({size} bytes) are not embedded "
                    f"yet (more than embeddings.inline_limit = {allowed} documents or "
                    f"{allowed * INLINE_BYTES_PER_DOC} bytes); run `memdir reindex --vectors`"
                )
            return "hybrid", None
        if not self.settings.embeddings.enabled:
            raise InvalidInput(
                f"mode {wanted} needs embeddings, which are disabled ([embeddings] enabled = false)"
            )
        self.vector_index().check_model()
        return wanted, None

    def after_turn(self) -> None:
        """Embed a recorded turn now, in a process that already searches by meaning.

        A long-lived process (a server, an agent's session) that loaded the vector index
        embeds the turn it just recorded before ``record_turn`` returns, so the next search
        does not pay for it (a plain write is left to the next search, which batches).
        Nothing happens in a process that never searched by meaning (a CLI write loads no
        model), when embeddings are off or failing, or when more is waiting than a search
        would embed inline; a search embeds what is left.
        """
        cached = self._vector_index
        if cached is None or cached.index is not self.index:
            return
        if not self.settings.embeddings.enabled or self._embedder_down() is not None:
            return
        try:
            pending, size = cached.pending()
            if pending and self._inline_backlog(pending, size):
                cached.sync()
        except ProviderError as exc:
            self._note_embedder_down(exc)
        except Exception as exc:  # the turn is acknowledged: never fail it now
            # A caller told "failed" would record the turn again; the next search embeds it.
            log.warning("the turn was recorded but not embedded yet: %s", exc)

    def _inline_backlog(self, pending: int, size: int) -> bool:
        """Whether ``pending`` documents of ``size`` bytes are few enough to embed inline."""
        allowed = self.settings.embeddings.inline_limit
        return pending <= allowed and size <= allowed * INLINE_BYTES_PER_DOC

    def _note_embedder_down(self, exc: Exception) -> str:
        """Remember that the embedder failed; the note a keyword-only search carries."""
        self._embedder_failed = (time.monotonic() + RETRY_SECONDS, str(exc))
        return f"keyword search only: {exc}"

    def _embedder_down(self) -> str | None:
        """Why `auto` keeps to keywords for now, while a recent embedder failure lasts."""
        failed = self._embedder_failed
        if failed is None:
            return None
        left = failed[0] - time.monotonic()
        if left <= 0:
            self._embedder_failed = None
            return None
        return f"keyword search only: {failed[1]} (the embedder is tried again in {left:.0f} s)"

    # -- search --------------------------------------------------------------------------

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
        flt = self.docs.filters(
            path_prefix=path_prefix,
            kind=kind,
            type=type,
            where=where,
            include_superseded=include_superseded,
        )
        hits = self._search(query, flt, limit, mode, progress)
        if self.docs.leaks([hit.path for hit in hits], flt):
            # A symlink under the prefix shows a file outside it: rank again without every
            # such path, so the limit is still filled (and check again: the index may lag).
            flt = self.docs.leading_out(flt)
            hits = self._search(query, flt, limit, mode, progress)
            leaks = self.docs.leaks([hit.path for hit in hits], flt)
            hits = [hit for hit in hits if hit.path not in leaks]
        if include_worklog:
            # After the documents, by their own BM25 score (the interfaces all list them so).
            logs = self.worklogs(query, limit=self.docs.limit_of(limit), filters=flt)
            leaks = self.docs.leaks([hit.path for hit in logs], flt)
            hits += [hit for hit in logs if hit.path not in leaks]
        return hits

    def _search(
        self,
        query: str,
        flt: Filters,
        limit: int | None,
        mode: str | None,
        progress: Progress | None,
    ) -> list[Hit]:
        """One ranking under ``flt``, in the mode asked for (see :meth:`search`)."""
        size = self.docs.limit_of(limit)
        if not words(query):
            raise InvalidQuery("the query has no searchable words")
        if lone_surrogate(query) is not None:
            raise InvalidQuery("the query is not valid Unicode text (it has a lone surrogate)")
        reranker = self.reranker()
        want = size if reranker is None else max(size, self.settings.rerank.depth)
        auto = (mode or self.settings.search.mode or "auto").strip().lower() == "auto"
        with self.docs.synced():  # one walk of the files for the whole search
            effective, note = self.search_mode(mode)
            fallback = note  # why a search that was asked for `auto` keeps to keywords
            if effective != "bm25":
                try:
                    vectors = self.vector_index()
                    vectors.sync(progress=progress)
                    if effective == "vector":
                        hits = self._vector_hits(query, want, flt)
                    else:
                        hits = self._hybrid_hits(query, want, flt)
                except ProviderError as exc:
                    # An embedder that fails after it was set up (a server that went away)
                    # stops an explicit vector or hybrid search; `auto` keeps to keywords.
                    if not auto:
                        raise
                    effective, fallback = "bm25", self._note_embedder_down(exc)
            if effective == "bm25":
                if self.pg is not None:
                    hits = pgranks.keyword_hits(self.pg, self.index, query, flt, want)
                else:
                    hits = self.docs.keyword_search(query, limit=want, filters=flt)
                for hit in hits:
                    hit.why.setdefault("mode", "bm25")
                    if fallback:
                        hit.why["fallback"] = fallback
            if reranker is not None:
                hits = self._reranked(query, hits, reranker)
        return hits[:size]

    def reranker(self) -> Reranker | None:
        """The configured reranker, or None when ``[rerank] provider`` is empty."""
        from .rerank import get_reranker

        return get_reranker(self.settings.rerank)

    def _reranked(self, query: str, hits: list[Hit], reranker: Reranker) -> list[Hit]:
        """The first ``rerank.depth`` hits in the reranker's order; the rest after them.

        A reranker that fails leaves the order as it was and says why in each hit's
        ``why`` (a search never fails because of an optional second opinion).
        """
        from .rerank import TEXT_CHARS

        depth = min(len(hits), max(self.settings.rerank.depth, 0))
        head, tail = hits[:depth], hits[depth:]
        if not head:
            return hits
        texts = self._texts_for([h.path for h in head])
        try:
            given = list(reranker.score(query, [texts[h.path][:TEXT_CHARS] for h in head]))
            if len(given) != len(head):
                raise ProviderError(f"the reranker gave {len(given)} scores for {len(head)}")
            scores = [finite_score(value) for value in given]
        except ProviderError as exc:
            for hit in head:
                hit.why["rerank_error"] = str(exc)
            return hits
        order = sorted(range(len(head)), key=lambda i: (-scores[i], i))
        out = []
        for rank, i in enumerate(order, start=1):
            hit = head[i]
            hit.why["rank_before_rerank"] = i + 1
            hit.why["rerank_rank"] = rank
            hit.why["rerank_score"] = round(scores[i], 5)
            hit.score = round(scores[i], 5)
            out.append(hit)
        return out + tail

    def _texts_for(self, paths: list[str]) -> dict[str, str]:
        """What each document says, as a reranker reads it: the text that is embedded."""
        from ..index.passages import document_texts

        conn = self.index.conn
        ids = lookups.ids_for(self.index.conn, paths)
        out = {}
        for path in paths:
            found = document_texts(conn, ids[path]) if path in ids else None
            out[path] = found[0] if found else ""
        return out

    def _query_vector(self, query: str) -> Any:
        """The query's embedding; the last ``QUERY_CACHE`` queries per model are kept."""
        embedder = self.embedder()
        key = (embedder.query_model_id, query)
        with _query_lock:
            if key in _query_cache:
                _query_cache.move_to_end(key)
                return _query_cache[key]
        import numpy as np

        vector = np.ascontiguousarray(embedder.embed_query(query), dtype=np.float32).reshape(-1)
        if vector.shape != (embedder.dim,):
            raise ProviderError(
                f"embedder {embedder.query_model_id!r} returned a query vector of "
                f"{vector.size} values; expected {embedder.dim}"
            )
        with _query_lock:
            _query_cache[key] = vector
            while len(_query_cache) > QUERY_CACHE:
                _query_cache.popitem(last=False)
        return vector

    def _vector_hits(self, query: str, size: int, flt: Filters) -> list[Hit]:
        qvec, pg = self._query_vector(query), self.pg
        if pg is not None:
            found = pgranks.vector_hits(pg, self.index, self.vector_index(), qvec, flt, size)
        else:
            found = self.vector_index().search_vector(qvec, limit=size, filters=flt)
        hits = pointers.hits_for(
            self.index.conn, [h.doc_id for h in found], query, {h.doc_id: h for h in found}
        )
        out = []
        for rank, vh in enumerate(found, start=1):
            hit = hits.get(vh.doc_id)
            if hit is None:
                continue
            hit.score = round(vh.score, 4)
            hit.why = {"mode": "vector", "vector_rank": rank, "vector_score": round(vh.score, 4)}
            out.append(hit)
        return out

    def _hybrid_hits(self, query: str, size: int, flt: Filters) -> list[Hit]:
        from .userhints import named_users, without_users

        opts = self.settings.search
        depth = max(opts.candidates, size * 2)
        named = named_users(query, self._users())
        vector_query = without_users(query, named)
        vectors = self.vector_index()
        loaded = vectors.loaded() if self.pg is None else None  # Postgres ranks the vectors

        def first_pass() -> FirstPass | None:
            # Embedding and scoring every row need no SQLite: they run on another thread
            # while SQLite ranks words (onnxruntime, numpy and SQLite release the GIL).
            qvec = self._query_vector(vector_query)
            return None if loaded is None else vectors.score_rows(loaded, qvec)

        pending = _background().submit(first_pass)
        try:
            lexical_ids = self._lexical_ids(query, flt, depth)
            threads = self._thread_ranking(query, depth) if opts.thread_weight > 0 else {}
        finally:
            scan = pending.result()
        found = (
            [] if scan is None else vectors.search_vector(None, limit=depth, filters=flt, scan=scan)
        )
        if self.pg is not None:
            qvec = self._query_vector(vector_query)  # the first pass's, from the cache
            found = pgranks.vector_hits(self.pg, self.index, vectors, qvec, flt, depth)
        fused = rrf(
            {"bm25": lexical_ids, "vector": [h.doc_id for h in found]},
            k=opts.rrf_k,
            weights={"bm25": opts.bm25_weight, "vector": opts.vector_weight},
        )
        if opts.thread_boost > 0:
            fused = signals.thread_boost(self.index.conn, fused, opts.thread_boost)
        thread_ranks: dict[int, int] = {}
        if threads:
            fused, thread_ranks = signals.thread_match(
                self.index.conn, threads, fused, opts.thread_weight, opts.rrf_k
            )
        if opts.date_boost > 0:
            fused = signals.date_boost(
                self.index.conn, query, fused, opts.date_boost, opts.date_scale_days
            )
        if named and USER_BOOST > 0:
            fused = signals.user_boost(self.index.conn, named, fused, USER_BOOST)
        if opts.neighbour_boost > 0:
            fused = signals.neighbour_boost(self.index.conn, fused, opts.neighbour_boost, flt)
        if size > DIVERSIFY_AFTER and fused:
            fused = diversify(
                fused,
                lookups.threads_of(self.index.conn, [f.key for f in fused]),
                keep=DIVERSIFY_AFTER,
            )
        top = fused[:size]
        hits = pointers.hits_for(
            self.index.conn, [f.key for f in top], query, {h.doc_id: h for h in found}
        )
        vscore = {h.doc_id: h.score for h in found}
        out = []
        for item in top:
            hit = hits.get(item.key)
            if hit is None:
                continue
            hit.score = round(item.score, 5)
            # `rrf` is the fusion of the ranks alone; the score adds each boost to it.
            fused_only = item.score - sum(item.boosts.values())
            why: dict[str, Any] = {"mode": "hybrid", "rrf": round(fused_only, 5)}
            for name, rank in item.ranks.items():
                why[f"{name}_rank"] = rank
            if item.key in vscore:
                why["vector_score"] = round(vscore[item.key], 4)
            if item.key in thread_ranks:
                why["thread_rank"] = thread_ranks[item.key]
            for name, value in item.boosts.items():
                why[f"{name}_boost"] = round(value, 5)
            hit.why = why
            out.append(hit)
        return out

    def _lexical_ids(self, query: str, flt: Filters, depth: int) -> list[int]:
        """The BM25 side of hybrid search, best first.

        Over the passages (title x3, what the document says x1, what the previous
        document of its thread says x ``search.previous_weight``): a reply is often
        found by the words of the question it answers. Superseded documents have no
        passage, so ``include_superseded`` falls back to the plain document BM25.
        """
        from ..index import passages, postings
        from ..index.passages import has_passages
        from ..index.search import query_words

        if self.pg is not None:
            return pgranks.lexical_ids(self.pg, self, query, flt, depth)
        conn = self.index.conn
        if flt.include_superseded or not has_passages(conn):
            lexical = bm25(conn, query, flt, depth)
            ids = lookups.ids_for(self.index.conn, [h.path for h in lexical])
            return [ids[h.path] for h in lexical if h.path in ids]
        condition, params = flt.sql("d")
        weight = float(self.settings.search.previous_weight)
        # Common words: the same ranking from cached postings (memdir.index.postings).
        ranked = postings.rank(
            conn,
            query_words(query),
            condition,
            params,
            depth,
            postings.DEFAULT,
            table=postings.PASSAGES,
            weights=(3.0, 1.0, weight),
        )
        if ranked is not None:
            return [int(row["id"]) for row, _score in ranked]
        return passages.ranked(conn, fts_query(query), condition, params, weight, depth)

    def _thread_ranking(self, query: str, depth: int) -> dict[str, int]:
        """Threads ranked by BM25 over the words of all their visible documents (1 = best)."""
        from ..index import passages
        from ..index.passages import has_passages

        conn = self.index.conn
        if not has_passages(conn):
            return {}
        return passages.ranked_threads(conn, fts_query(query), depth)

    def _users(self) -> list[str]:
        """The users of the visible documents (turn speakers), cached per index generation."""
        generation = self.index.generation
        cached = self._users_cache
        if cached is not None and cached[0] == generation:
            return cached[1]
        users = lookups.visible_users(self.index.conn)
        self._users_cache = (generation, users)
        return users
