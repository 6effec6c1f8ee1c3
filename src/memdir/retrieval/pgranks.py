"""The rankings a search takes from the Postgres engine (``[index] engine = "postgres"``).

Each returns what the SQLite side of :mod:`memdir.retrieval.verbs` returns, in the local
index's ids, so fusion, boosts, pointers and ``why`` are the same whichever engine ranked.
Paths Postgres holds that the local index does not (a replica that has not synced yet)
are left out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ..index import lookups
from ..index.search import Filters, Hit, hits_for_paths, query_words

if TYPE_CHECKING:
    from ..index import Index
    from ..index.postgres import PgIndex
    from ..settings import Settings
    from ..vectors.embedder import Embedder
    from ..vectors.index import VectorHit, VectorIndex


class Side(Protocol):
    """What these rankings ask of :class:`memdir.retrieval.verbs.Retrieval`."""

    index: Index
    settings: Settings
    pg: PgIndex | None

    def vector_index(self) -> VectorIndex: ...

    def embedder(self) -> Embedder: ...


def engine(settings: Settings, root: Any) -> PgIndex | None:
    """The Postgres engine the settings ask for, or None for the SQLite engine."""
    opts = settings.index
    if opts.engine != "postgres":
        return None
    from ..index.postgres import PgIndex

    store = opts.store or str(getattr(root, "name", "") or "default")
    return PgIndex(
        opts.dsn,
        store,
        timeout=opts.connect_timeout_seconds,
        writer=opts.writer,
        approximate_from=opts.approximate_from,
        approximate_candidates=opts.approximate_candidates,
    )


def keyword_hits(pg: PgIndex, index: Index, query: str, flt: Filters, limit: int) -> list[Hit]:
    """BM25 over the documents, as ``Documents.keyword_search`` gives it (vectors not synced)."""
    pg.sync(index, None)
    ranked = pg.bm25(query_words(query), flt, limit)
    return hits_for_paths(index.conn, query, ranked)


def rebuild(retrieval: Side) -> None:
    """After ``reindex --full``: replace the store's rows in the Postgres index."""
    from ..errors import MissingExtra, ProviderError

    if retrieval.pg is None:
        return
    model = None
    if retrieval.settings.embeddings.enabled:
        try:
            model = retrieval.embedder().model_id
        except (MissingExtra, ProviderError):
            model = None  # no vectors in Postgres until a vector search can embed
    retrieval.pg.rebuild(retrieval.index, model)


def lexical_ids(pg: PgIndex, side: Side, query: str, flt: Filters, depth: int) -> list[int]:
    """The BM25 side of hybrid search: over the passages, or the documents without them.

    The store's rows are brought in step first, vectors of the model in use included.
    """
    from ..index.postgres import PASSAGES

    pg.sync(side.index, side.vector_index().model)
    words = query_words(query)
    if flt.include_superseded or not pg.has_passages():
        ranked = pg.bm25(words, flt, depth)
    else:
        weight = float(side.settings.search.previous_weight)
        ranked = pg.bm25(words, flt, depth, kind=PASSAGES, weights=(3.0, 1.0, weight))
    return _ids(side.index, [p for p, _ in ranked])


def vector_hits(
    pg: PgIndex, index: Index, vectors: VectorIndex, qvec: Any, flt: Filters, limit: int
) -> list[VectorHit]:
    """The nearest documents by their best chunk, as ``VectorIndex.search_vector`` gives them.

    The store's rows are brought in step first, vectors of the model in use included.
    """
    from ..vectors.index import VectorHit

    pg.sync(index, vectors.model)
    found = pg.nearest(qvec, flt, limit)
    ids = lookups.ids_for(index.conn, [p for p, *_ in found])
    return [VectorHit(ids[p], score, c, s, e) for p, score, c, s, e in found if p in ids]


def _ids(index: Index, paths: list[str]) -> list[int]:
    ids = lookups.ids_for(index.conn, paths)
    return [ids[p] for p in paths if p in ids]
