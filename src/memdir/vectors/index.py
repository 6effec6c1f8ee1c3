"""The vector index: chunk embeddings derived from the document index.

Each visible document is cut into chunks, and each chunk's text is embedded once per
model, keyed by the sha256 of the text: unchanged text is never embedded twice and
vectors of two models never mix. The index also remembers which content of a document
was chunked for which model, and the meta key ``vectors_model`` names the model the
store's vectors came from. The rows and every query on them live in
:mod:`memdir.index.vectorrows`; this module decides what to embed, batches it, keeps
the loaded matrix and searches it.

The same sync keeps the lexical side of hybrid search in step (:mod:`memdir.index.passages`).

Two change logs, kept by triggers (migration ``vectors_0002_change_logs``), let a sync
and a loaded matrix follow the index without reading it whole. The doc log names each
document deleted or changed in content or visibility, with a sequence number; it
starts when the first sync sets the meta key ``vectors_doc_log``. ``vectors_doc_seq``
says how far the vector sync has read it, and ``vectors_doc_max`` the largest document
id it has seen: a new document gets the largest id + 1, so inserts are not logged (the
id recorded stays below a deleted one, which comes back). The chunk log names each
document whose chunk rows changed, which any process may have written.

Search is exact: a float32 matrix of all chunk vectors, loaded lazily once and then kept
in step from the chunk log (:mod:`memdir.vectors.matrix`); from ``QUANTISE_FROM``
rows on, an int8 copy is scored first and only the rows that can still be among the best
are scored in float32 (``memdir.vectors.scan``).
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ModelMismatch, ProviderError
from ..index import passages, vectorrows
from ..index.passages import document_texts
from ..index.search import Filters
from ..index.vectorrows import drop_docs, drop_unindexed
from ..records import recordclass
from .matrix import ChunkMatrix, Snapshot, exact_scores

if TYPE_CHECKING:
    from ..index import Index
    from .embedder import Embedder

Progress = Callable[[int, int], None]
# From this many chunk vectors on, search scores an int8 copy first, then re-scores exactly.
QUANTISE_FROM = 20_000
# A loaded matrix replays the chunk log for up to this many changed documents (or a quarter
# of its rows, if more); beyond that one query of all the rows is cheaper.
REPLAY_DOCS = 2000


@recordclass
class VectorSyncStats:
    """What one vector sync did."""

    documents: int = 0
    chunks: int = 0
    embedded: int = 0
    cache_hits: int = 0
    removed: int = 0
    seconds: float = 0.0


@recordclass(frozen=True)
class VectorHit:
    doc_id: int
    score: float
    chunk_no: int
    start: int
    end: int


@recordclass
class FirstPass:
    """A loaded matrix and, once scored for a query, every row's score and bound."""

    rows: Snapshot
    query: Any = None
    order_by: Any = None  # approximate scores (int8 or float32); masked rows -inf
    upper: Any = None  # approximation + error bound


def _text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class VectorIndex:
    """Chunk vectors of one store for one embedder."""

    def __init__(
        self,
        index: Index,
        embedder: Embedder,
        *,
        chunk_tokens: int = 200,
        chunk_overlap: int = 40,
        batch_size: int = 32,
        quantise_from: int = QUANTISE_FROM,
    ) -> None:
        import numpy

        self._np = numpy
        self.index = index
        self.embedder = embedder
        self.model = embedder.model_id
        self.chunk_tokens = chunk_tokens
        self.chunk_overlap = chunk_overlap
        self.batch_size = max(1, batch_size)
        self._lock = threading.RLock()  # one vector sync at a time
        self._load_lock = threading.Lock()  # the loaded matrix: a search waits for no sync
        self._matrix: ChunkMatrix | None = None
        self._loaded_at: tuple[str | None, int] | None = None  # (epoch, seq) of the chunk log
        self.quantise_from = quantise_from
        # Two threads halve the int8 pass (11.3 -> 5.8 ms p50 at 200k rows on 2 cores).
        self._threads = min(4, os.cpu_count() or 1)
        self.full_loads = 0  # reads of every chunk row (tests count them)
        self.replayed = 0  # documents brought in step from the chunk log

    # -- state ---------------------------------------------------------------------

    def stored_model(self) -> str | None:
        """The model the store's vectors came from (None before the first embedding)."""
        return self.index.meta("vectors_model")

    def check_model(self) -> None:
        """Raise :class:`ModelMismatch` when the store's vectors came from another model."""
        stored = self.stored_model()
        if stored and stored != self.model:
            raise ModelMismatch(
                f"this store's vectors were made by {stored}, but the configured embedder is "
                f"{self.model}; run `memdir reindex --vectors` to re-embed with it"
            )

    def counts(self) -> dict[str, int]:
        conn = self.index.conn
        return {
            "chunks": vectorrows.chunk_count(conn),
            "vectors": vectorrows.vector_count(conn, self.model),
            "pending": len(self._pending(conn)),
        }

    def pending_count(self) -> int:
        """How many visible documents have no vectors for this model yet (0 when in step)."""
        return self.pending()[0]

    def pending(self) -> tuple[int, int]:
        """(documents, bytes) with no vectors for this model yet; (0, 0) when in step."""
        if self.index.meta("vectors_generation") == f"{self.index.generation}:{self.model}":
            return 0, 0
        conn = self.index.conn
        changed, _seq, _top = self._changed_docs(conn)
        ids = [doc_id for doc_id, _hash in self._pending(conn, changed)]
        return len(ids), vectorrows.docs_size(conn, ids)

    def _pending(
        self, conn: sqlite3.Connection, among: Sequence[int] | None = None
    ) -> list[tuple[int, str]]:
        """Visible documents without vectors of this model for their content (by id).

        ``among``: look at these documents only (those the doc log names); None: all.
        """
        return vectorrows.unembedded(conn, self.model, among)

    def _changed_docs(self, conn: sqlite3.Connection) -> tuple[list[int] | None, int, int]:
        """(documents changed since the last vector sync, log seq and largest id it reads).

        None for the documents when every one must be looked at: the first sync of this
        index (or after the vectors were emptied), or too many changes to list.
        """
        seen, seen_max = self.index.meta("vectors_doc_seq"), self.index.meta("vectors_doc_max")
        if seen is None or seen_max is None:
            seq, top = vectorrows.doc_log_top(conn)
            return None, seq, top
        rows = vectorrows.doc_log_since(conn, int(seen))
        added = vectorrows.docs_above(conn, int(seen_max))
        seq = max((r[1] for r in rows), default=int(seen))
        top = max(added, default=int(seen_max))
        if len(rows) + len(added) > 20_000:
            return None, seq, top
        return sorted({r[0] for r in rows} | set(added)), seq, top

    # -- sync ----------------------------------------------------------------------

    def sync(self, *, progress: Progress | None = None) -> VectorSyncStats:
        """Embed the documents whose content has no vectors for this model yet."""
        import time

        started = time.perf_counter()
        stats = VectorSyncStats()
        self.check_model()
        # The documents changed before this call; one that came later need not wait for it.
        wanted = vectorrows.doc_log_top(self.index.conn)
        with self._lock:
            self._ensure_passages()
            generation = str(self.index.generation)
            if self.index.meta("vectors_generation") == f"{generation}:{self.model}":
                stats.seconds = time.perf_counter() - started
                return stats
            seen = (self.index.meta("vectors_doc_seq"), self.index.meta("vectors_doc_max"))
            if (
                seen[0] is not None
                and seen[1] is not None
                and (int(seen[0]) >= wanted[0] and int(seen[1]) >= wanted[1])
            ):
                # A sync that held the lock meanwhile (under 16 clients, the usual case)
                # embedded everything this one was called for.
                stats.seconds = time.perf_counter() - started
                return stats
            conn = self.index.conn
            if self.index.meta("vectors_doc_log") is None:
                # From now on the triggers log documents; what changed before is in the full
                # check below, which reads the documents after this commits.
                with self.index.transaction() as wconn:
                    self.index.set_meta(wconn, "vectors_doc_log", "1")
            changed, seq, top = self._changed_docs(conn)
            # SQLite gives a new row the largest id + 1, so the id of a deleted newest
            # document comes back: the largest id this sync vouches for stays below it.
            absent = vectorrows.absent_docs(conn, changed or [])
            if absent:
                top = min(top, min(absent) - 1)

            def finish(wconn: sqlite3.Connection) -> None:
                # In the last batch's transaction: a search after a write takes the write
                # lock once (16 writers hold it in turn), not once per step.
                if changed is None:
                    stats.removed = self._drop_stale(wconn)
                else:
                    stats.removed = drop_docs(wconn, changed)
                if not self.stored_model():
                    self.index.set_meta(wconn, "vectors_model", self.model)
                self.index.set_meta(wconn, "vectors_generation", f"{generation}:{self.model}")
                # Another process may have read the log further meanwhile: keep the larger.
                vectorrows.raise_meta(wconn, "vectors_doc_seq", seq)
                # Not above the largest id now: a newest document deleted since this sync
                # read the ids gives its id to the next one (its deletion is in the log).
                now = vectorrows.max_doc_id(wconn)
                self.index.set_meta(wconn, "vectors_doc_max", str(min(top, now)))

            pending = self._pending(conn, changed)
            total = len(pending)
            if progress and total:
                progress(0, total)
            step = max(self.batch_size * 4, 64)
            for lo in range(0, total, step):
                part = pending[lo : lo + step]
                self._embed_docs(part, stats, finish if lo + step >= total else None)
                stats.documents += len(part)
                if progress:
                    progress(min(lo + step, total), total)
            if not total:
                with self.index.transaction() as wconn:
                    finish(wconn)
        stats.seconds = time.perf_counter() - started
        return stats

    def _drop_stale(self, conn: sqlite3.Connection) -> int:
        """Forget chunks of documents that are gone, hidden or out of the searchable zone."""
        return drop_unindexed(conn)

    def _ensure_passages(self) -> None:
        passages.ensure(self.index)

    def _embed_docs(
        self,
        docs: Sequence[tuple[int, str]],
        stats: VectorSyncStats,
        finish: Callable[[sqlite3.Connection], None] | None = None,
    ) -> None:
        """Chunk and embed these documents; ``finish`` runs in the same transaction."""
        conn = self.index.conn
        plan: list[tuple[int, str, list[tuple[int, int, int, str]]]] = []
        texts: dict[str, str] = {}
        lexical: list[tuple[int, str, str, str | None]] = []
        for doc_id, doc_hash in docs:
            found = document_texts(conn, doc_id)
            if found is None:
                continue
            text, title, words, thread = found
            lexical.append((doc_id, title, words, thread))
            pieces = self.embedder.chunks(
                text, max_tokens=self.chunk_tokens, overlap=self.chunk_overlap
            )
            entries = []
            for piece in pieces:
                digest = _text_hash(piece.text)
                texts.setdefault(digest, piece.text)
                entries.append((piece.no, piece.start, piece.end, digest))
            plan.append((doc_id, doc_hash, entries))
        known = vectorrows.known_hashes(conn, self.model, list(texts))
        todo = [h for h in texts if h not in known]
        stats.cache_hits += len(texts) - len(todo)
        vectors = self._embed([texts[h] for h in todo]) if todo else None
        with self.index.transaction() as wconn:
            if vectors is not None:
                rows = [(h, vectors[i].tobytes()) for i, h in enumerate(todo)]
                vectorrows.store_vectors(wconn, self.model, int(vectors.shape[1]), rows)
                stats.embedded += len(todo)
            for doc_id, doc_hash, entries in plan:
                vectorrows.store_chunks(wconn, self.model, doc_id, doc_hash, entries)
                stats.chunks += len(entries)
            self._store_passages(wconn, lexical)
            if finish is not None:
                finish(wconn)

    def write_passages(self, doc_ids: Sequence[int]) -> None:
        """Write the lexical rows of these documents without embedding (benchmarks, repair)."""
        with self._lock:
            self._ensure_passages()
            conn = self.index.conn
            lexical = []
            for doc_id in doc_ids:
                found = document_texts(conn, doc_id)
                if found is not None:
                    lexical.append((doc_id, found[1], found[2], found[3]))
            with self.index.transaction() as wconn:
                self._store_passages(wconn, lexical)

    def _store_passages(
        self, conn: sqlite3.Connection, lexical: list[tuple[int, str, str, str | None]]
    ) -> None:
        passages.store(conn, lexical)

    def clear(self) -> None:
        """Drop every chunk and vector (all models): the next sync re-embeds everything."""
        with self._lock, self._load_lock, self.index.transaction() as conn:
            vectorrows.drop_all(conn)
            # A new epoch: every loaded matrix, in any process, loads afresh.
            self.index.set_meta(conn, "vectors_epoch", os.urandom(8).hex())
            self._matrix = None

    # -- search --------------------------------------------------------------------

    def _load(self) -> ChunkMatrix:
        """The matrix in step with the chunk rows: loaded once, then changed by document.

        Reads where the chunk log stands first, so a change committed while the rows
        are read is replayed again next time (replaying is idempotent).
        """
        conn = self.index.conn
        epoch, top = vectorrows.chunk_log_top(conn)
        matrix, at = self._matrix, self._loaded_at
        if matrix is not None and at is not None and at[0] == epoch:
            if at[1] == top:
                return matrix
            changed = vectorrows.chunk_log_since(conn, at[1])
            if len(changed) <= max(REPLAY_DOCS, matrix.rows // 4):
                ids = {r[0] for r in changed}
                matrix.replace(ids, vectorrows.chunk_rows_of(conn, self.model, sorted(ids)))
                self.replayed += len(ids)
                self._loaded_at = (epoch, max((r[1] for r in changed), default=at[1]))
                return matrix
        matrix = ChunkMatrix(self.embedder.dim, threads=self._threads)
        matrix.reset(vectorrows.chunk_rows(conn, self.model))
        self._matrix, self._loaded_at = matrix, (epoch, top)
        self.full_loads += 1
        return matrix

    def _embed(self, texts: list[str]) -> Any:
        """The embedder's vectors as float32 rows of its dimension (stored as bytes)."""
        np = self._np
        out = np.ascontiguousarray(self.embedder.embed(texts), dtype=np.float32)
        if out.shape != (len(texts), self.embedder.dim):
            raise ProviderError(
                f"embedder {self.model!r} returned an array of shape {out.shape} for "
                f"{len(texts)} texts; expected ({len(texts)}, {self.embedder.dim})"
            )
        return out

    def first_pass(self, qvec: Any) -> FirstPass | None:
        """Load the matrix, then score every row (int8 with bounds, or float32 when small).

        The scoring touches no SQLite, so hybrid search runs it on its worker thread;
        :meth:`search_vector` finishes the ranking. None when there are no vectors.
        """
        scan = self.loaded()
        return None if scan is None else self.score_rows(scan, qvec)

    def score_rows(self, scan: FirstPass, qvec: Any) -> FirstPass:
        """Score every row of a loaded matrix for this query (no SQLite: thread-safe)."""
        np = self._np
        scan.query = np.asarray(qvec, dtype=np.float32).reshape(-1)
        scan.order_by, scan.upper = scan.rows.scores(scan.query)
        return scan

    def loaded(self) -> FirstPass | None:
        """The loaded matrix (brought in step first), ready for :meth:`score_rows`."""
        self.check_model()
        with self._load_lock:
            matrix = self._load()
            try:
                rows = matrix.snapshot(self.quantise_from)
            except ImportError:  # no onnxruntime: float32 only
                self.quantise_from = 1 << 62
                rows = matrix.snapshot(self.quantise_from)
            if not rows.live:
                return None
            return FirstPass(rows)

    def search_vector(
        self,
        qvec: Any,
        *,
        limit: int,
        filters: Filters | None = None,
        scan: FirstPass | None = None,
    ) -> list[VectorHit]:
        """The ``limit`` best visible documents for a unit query vector (best chunk per doc).

        Exact. Every row is first scored approximately (int8 or float32, see
        :mod:`memdir.vectors.matrix`); the candidates, and every row whose error bound
        lets it beat the ``limit``-th exact score, are then scored exactly. ``scan`` is
        a first pass already made for this query (:meth:`first_pass`).
        """
        np = self._np
        if scan is None:
            scan = self.first_pass(qvec)
        if scan is None or limit < 1:
            return []
        rows, query, order_by, upper = scan.rows, scan.query, scan.order_by, scan.upper
        flt = filters or Filters()
        total = rows.live
        want = min(total, limit * 4 + 32)
        while True:
            if want >= total:
                picked = rows.live_rows()
            else:
                picked = np.argpartition(-order_by, want - 1)[:want]
            exact = exact_scores(rows.matrix[picked], query)
            hits = self._best_docs(picked, exact, rows, flt)
            if len(hits) >= limit and want < total:
                # Rows ranked lower whose bound lets them beat the cut; only those whose
                # exact score does can change the result.
                cut = hits[limit - 1].score
                extra = np.setdiff1d(np.flatnonzero(upper >= cut), picked)
                if extra.size:
                    more = exact_scores(rows.matrix[extra], query)
                    beat = more >= cut
                    if beat.any():
                        picked = np.concatenate([picked, extra[beat]])
                        exact = np.concatenate([exact, more[beat]])
                        hits = self._best_docs(picked, exact, rows, flt)
            if len(hits) >= limit or want >= total:
                return hits[:limit]
            want = min(total, want * 4)

    def _best_docs(self, picked: Any, exact: Any, rows: Snapshot, flt: Filters) -> list[VectorHit]:
        """Visible documents among the picked rows, best first, each by its best chunk.

        Equal scores go by document id, then chunk number, wherever the rows sit.
        """
        np = self._np
        docs, chunks = rows.docs[picked], rows.chunks[picked]
        order = np.lexsort((chunks[:, 0], docs, -exact))
        best: dict[int, tuple[int, float]] = {}
        for j in order.tolist():
            best.setdefault(int(docs[j]), (j, float(exact[j])))
        allowed = vectorrows.visible_among(self.index.conn, list(best), flt)
        return [
            VectorHit(doc, score, *(int(x) for x in chunks[j]))
            for doc, (j, score) in best.items()
            if doc in allowed
        ]
