"""The loaded chunk vectors of one store, changed row by row as the index changes.

:class:`ChunkMatrix` holds every chunk vector in one float32 buffer with spare rows at
the end. A document whose chunks changed has its old rows masked out and its new rows
appended; nothing else is copied, so a write costs a search what the write changed,
not a reload of the whole matrix. When the spare rows run out, or a quarter of the rows
are masked, the live rows are copied into a new buffer (a compaction).

The int8 first pass (:mod:`memdir.vectors.scan`) covers the buffer in sealed ranges, each
with its own scorer: the first covers every row when the matrix reaches
``quantise_from`` rows, and each later one the ``SEAL_ROWS`` rows appended after it.
Rows not yet sealed are scored in float32. Every score comes with a bound on its error
(the int8 bound, or the float32 rounding bound), and the rows a search keeps are scored
again by :func:`exact_scores`, which gives a row the same score wherever it sits in the
buffer: results do not depend on the order in which rows were added.

A :class:`Snapshot` is what one search reads. It never changes: appends write rows
beyond its end, a mask is replaced rather than edited, a compaction makes new buffers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..index.vectorrows import ChunkRow
from ..records import recordclass

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from .scan import Int8Scorer

# Rows appended after the last sealed range that get an int8 scorer of their own.
SEAL_ROWS = 4096
# Spare rows a new buffer gets: a quarter of its rows, and at least this many.
SPARE_ROWS = 1024
# A compaction runs when more than this fraction of the rows are masked out.
DEAD_FRACTION = 0.25


def exact_scores(matrix: Any, query: Any) -> Any:
    """Float32 dot products of some rows with the query, each summed in the same order.

    A BLAS product may round a row differently depending on where it sits in the
    matrix; ``einsum`` sums every row alike, so an incremental matrix and a fresh
    load give the same scores bit for bit.
    """
    import numpy

    return numpy.einsum("ij,j->i", matrix, query)


def float_error(dim: int) -> float:
    """A bound on |BLAS - einsum| per unit of ``|row| * |query|`` in float32.

    Each float32 dot product of ``dim`` terms is within ``gamma(dim) * |x| |q|`` of the
    real one, in any order of summation; two of them are within twice that.
    """
    unit = 2.0**-24
    gamma = dim * unit / (1.0 - dim * unit)
    return 2.0 * gamma * 1.01


@recordclass(frozen=True)
class Snapshot:
    """The rows one search reads (views of the buffers, never changed afterwards)."""

    matrix: Any  # float32 (n, dim)
    docs: Any  # int64 (n,): the document of each row
    chunks: Any  # int64 (n, 3): chunk no, start, end
    norms: Any  # float32 (n,): each row's length
    alive: Any  # bool (n,), or None when no row is masked
    live: int  # rows not masked
    sealed: tuple[tuple[int, int, Int8Scorer], ...]  # (first row, end, scorer), in order

    def scores(self, query: Any) -> tuple[Any, Any]:
        """(score, upper bound) of every row; masked rows get minus infinity in both."""
        import numpy

        q = numpy.asarray(query, dtype=numpy.float32).reshape(-1)
        rows = len(self.docs)
        order = numpy.empty(rows, dtype=numpy.float32)
        upper = numpy.empty(rows, dtype=numpy.float32)
        margin = numpy.float32(float_error(len(q)) * float(numpy.linalg.norm(q)))
        end = 0
        for lo, hi, scorer in self.sealed:
            approx, bound = scorer.scores(q)
            order[lo:hi] = approx
            upper[lo:hi] = approx + bound + margin * self.norms[lo:hi]
            end = hi
        if end < rows:
            tail = self.matrix[end:] @ q
            order[end:] = tail
            upper[end:] = tail + margin * self.norms[end:] + numpy.float32(1e-30)
        if self.alive is not None:
            order[~self.alive] = -numpy.inf
            upper[~self.alive] = -numpy.inf
        return order, upper

    def live_rows(self) -> Any:
        """The indexes of the rows not masked out."""
        import numpy

        if self.alive is None:
            return numpy.arange(len(self.docs))
        return numpy.flatnonzero(self.alive)


class ChunkMatrix:
    """Chunk vectors in a growable buffer, kept in step by document."""

    def __init__(self, dim: int, *, threads: int = 1) -> None:
        import numpy

        self._np = numpy
        self.dim = dim
        self.threads = threads
        self.compactions = 0  # copies of the live rows into new buffers (for tests, benches)
        self.seals = 0  # int8 scorers built
        self._set_buffers(0, SPARE_ROWS)

    def _set_buffers(self, rows: int, capacity: int) -> None:
        numpy = self._np
        self._vecs: npt.NDArray[np.float32] = numpy.empty((capacity, self.dim), dtype=numpy.float32)
        self._docs: npt.NDArray[np.int64] = numpy.empty(capacity, dtype=numpy.int64)
        self._chunks: npt.NDArray[np.int64] = numpy.empty((capacity, 3), dtype=numpy.int64)
        self._norms: npt.NDArray[np.float32] = numpy.empty(capacity, dtype=numpy.float32)
        self._n = rows
        self._alive: npt.NDArray[np.bool_] | None = None
        self._dead = 0
        self._where: dict[int, tuple[int, int]] = {}  # doc id -> its rows [lo, hi)
        self._sealed: tuple[tuple[int, int, Int8Scorer], ...] = ()

    @property
    def rows(self) -> int:
        """Rows in the buffer, masked ones included."""
        return self._n

    def reset(self, found: list[ChunkRow]) -> None:
        """Hold exactly these rows (a full load), in documents' order of appearance."""
        self._set_buffers(0, len(found) + max(SPARE_ROWS, len(found) // 4))
        self._append(found)

    def replace(self, doc_ids: set[int], found: list[ChunkRow]) -> None:
        """Mask the rows of these documents and append their current rows (``found``)."""
        masked = [self._where.pop(d) for d in doc_ids if d in self._where]
        if masked:
            alive = self._np.ones(self._n, dtype=bool) if self._alive is None else self._alive
            alive = alive.copy()  # a snapshot may hold the old mask
            for lo, hi in masked:
                alive[lo:hi] = False
                self._dead += hi - lo
            self._alive = alive
        if self._n + len(found) > len(self._vecs) or self._dead > DEAD_FRACTION * max(self._n, 1):
            self._compact(len(found))
        self._append(found)

    def _compact(self, extra: int) -> None:
        """Copy the live rows into new buffers with room for ``extra`` more."""
        np = self._np
        keep = np.arange(self._n) if self._alive is None else np.flatnonzero(self._alive)
        live = len(keep)
        vecs, docs = self._vecs[keep], self._docs[keep]
        chunks, norms = self._chunks[keep], self._norms[keep]
        self._set_buffers(live, live + extra + max(SPARE_ROWS, (live + extra) // 4))
        self._vecs[:live], self._docs[:live] = vecs, docs
        self._chunks[:live], self._norms[:live] = chunks, norms
        # Each document's rows stay together and in order, so its range is recomputed.
        if live:
            starts = np.flatnonzero(np.r_[True, docs[1:] != docs[:-1]])
            ends = np.r_[starts[1:], live]
            for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True):
                self._where[int(docs[lo])] = (lo, hi)
        self.compactions += 1

    def _append(self, found: list[ChunkRow]) -> None:
        """Write rows after the last one (rows no snapshot reads), grouped by document."""
        np = self._np
        if not found:
            return
        lo, dim = self._n, self.dim
        end = lo + len(found)
        vecs = self._vecs[lo:end]
        for i, row in enumerate(found):
            vecs[i] = np.frombuffer(row[4], dtype=np.float32, count=dim)
        self._docs[lo:end] = [r[0] for r in found]
        self._chunks[lo:end] = [(r[1], r[2], r[3]) for r in found]
        self._norms[lo:end] = np.sqrt(exact_scores(vecs * vecs, np.ones(dim, np.float32)))
        start = lo
        for i in range(1, len(found) + 1):
            if i == len(found) or found[i][0] != found[start - lo][0]:
                self._where[int(found[start - lo][0])] = (start, lo + i)
                start = lo + i
        if self._alive is not None:
            self._alive = np.concatenate([self._alive, np.ones(len(found), dtype=bool)])
        self._n = end

    def snapshot(self, quantise_from: int) -> Snapshot:
        """The current rows; seals ranges with int8 scorers from ``quantise_from`` rows on.

        Raises ImportError when onnxruntime is missing (the caller stops quantising).
        """
        n = self._n
        live = n - self._dead
        if live >= quantise_from and n:
            start = self._sealed[-1][1] if self._sealed else 0
            if n - start >= (SEAL_ROWS if self._sealed else 1):
                from .scan import Int8Scorer

                scorer = Int8Scorer(self._vecs[start:n], threads=self.threads)
                self._sealed = (*self._sealed, (start, n, scorer))
                self.seals += 1
        return Snapshot(
            self._vecs[:n],
            self._docs[:n],
            self._chunks[:n],
            self._norms[:n],
            self._alive if self._dead else None,
            live,
            self._sealed,
        )
