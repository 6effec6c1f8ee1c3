"""A quantised first pass over the vector matrix, with exact bounds.

Scoring 100k float32 vectors of 384 dimensions reads 150 MB per query and takes
about 15 ms on two cores: the product is limited by memory bandwidth. This module
keeps a copy of the matrix as int8 (seven bits and one scale per row: ``x ~ scale
* round(x / scale)``), a quarter of the bytes, and scores a query against it with
onnxruntime's integer matrix product (``MatMulInteger``, whose CPU kernels use
SIMD integer instructions). Each approximate score comes with a bound on its
error (:meth:`Int8Scorer.scores`), so the caller can re-score exactly every row
that could still be among the best: the result is the exact one, not an
approximation. The one-node ONNX graph is written as protobuf bytes with
:mod:`memdir.vectors.onnxproto` (the ``onnx`` package is not needed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .onnxproto import INT8, INT32, UINT8, bytes_field, model, node, str_field, tensor, value_info

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

# Seven bits for the matrix: x86 kernels without VNNI add pairs of u8 x s8 products in
# saturating 16-bit lanes, and 2 x 255 x 63 still fits (2 x 255 x 127 does not).
_LEVELS = 63.0


def matmul_integer_model(weights: npt.NDArray[np.int8]) -> bytes:
    """An ONNX model: ``scores[1, N] = (query[1, K] - 128) @ weights[K, N]`` in int32."""
    k, n = (int(d) for d in weights.shape)
    graph = (
        bytes_field(1, node("MatMulInteger", ["query", "weights", "zero"], ["scores"]))
        + str_field(2, "memdir-scan")
        + bytes_field(5, tensor("weights", INT8, [k, n], weights.tobytes()))
        + bytes_field(5, tensor("zero", UINT8, [], bytes([128])))
        + bytes_field(11, value_info("query", UINT8, [1, k]))
        + bytes_field(12, value_info("scores", INT32, [1, n]))
    )
    return model(graph)


class Int8Scorer:
    """Approximate scores of unit queries against a float32 matrix, with error bounds."""

    def __init__(self, matrix: npt.NDArray[np.float32], *, threads: int = 1) -> None:
        import numpy
        import onnxruntime

        self._np = numpy
        rows, dim = matrix.shape
        peak = numpy.abs(matrix).max(axis=1) if rows else numpy.zeros(0, numpy.float32)
        self.scale = (numpy.where(peak > 0, peak, 1.0) / _LEVELS).astype(numpy.float32)
        quantised = numpy.rint(matrix / self.scale[:, None]).astype(numpy.int8)
        # Per row: half a step of error on each element, and the row's L1 norm in steps.
        self.half_step = (self.scale / 2.0).astype(numpy.float32)
        self.l1 = numpy.abs(quantised.astype(numpy.int32)).sum(axis=1).astype(numpy.float32)
        self.dim = int(dim)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = max(1, threads)
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        model = matmul_integer_model(numpy.ascontiguousarray(quantised.T))
        self._session = onnxruntime.InferenceSession(
            model, options, providers=["CPUExecutionProvider"]
        )

    def scores(self, query: Any) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        """(approximate scores, bound) with ``|exact - approximate| <= bound`` for every row.

        With ``x = s*xq + ex`` (``|ex| <= s/2`` per element) and ``q = t*qq + eq``
        (``|eq| <= t/2``): ``q.x - s*t*(qq.xq) = t*qq.ex + s*xq.eq + eq.ex``, bounded by
        ``s/2*t*|qq|1 + t/2*s*|xq|1 + dim*s*t/4``; a small margin covers float rounding.
        """
        np = self._np
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        peak = float(np.abs(q).max()) if q.size else 0.0
        step = (peak if peak > 0 else 1.0) / 127.0
        qq = np.rint(q / step).astype(np.int32)
        feed = (qq + 128).astype(np.uint8).reshape(1, -1)
        raw = self._session.run(None, {"query": feed})[0].reshape(-1)
        approx = raw.astype(np.float32) * (self.scale * np.float32(step))
        q_l1 = float(np.abs(qq).sum())
        bound = self.half_step * np.float32(step * (q_l1 + self.dim / 2.0))
        bound += self.half_step * np.float32(step) * self.l1
        bound += np.float32(1e-5) + np.float32(1e-6) * np.abs(approx)
        return approx, bound
