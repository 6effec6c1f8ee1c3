"""The protobuf reader and writer, and the integer rewrite of weight-only int8 products."""

from __future__ import annotations

import numpy as np
import pytest

from memdir.vectors import onnxproto as pb
from memdir.vectors.scan import matmul_integer_model

ort = pytest.importorskip("onnxruntime")


def ops(model: bytes) -> list[str]:
    graph = next(e for e in pb.entries(model) if e.field == 7)
    return [pb._node(bytes(e.value)).op for e in pb.entries(bytes(graph.value)) if e.field == 1]


def weight_only_model(w8: np.ndarray, scale: np.ndarray, *, share: bool = False) -> bytes:
    """``y = x @ (float(w8) * scale)``, the way the packaged MiniLM stores its products;
    with ``share`` the float weights also feed a second output."""
    k, n = w8.shape
    nodes = [
        pb.node("Cast", ["w8"], ["wf"], to=pb.FLOAT),
        pb.node("Mul", ["wf", "scale"], ["w"]),
        pb.node("MatMul", ["x", "w"], ["y"]),
    ]
    outputs = [pb.value_info("y", pb.FLOAT, [2, 3, n])]
    if share:
        nodes.append(pb.node("Identity", ["w"], ["w_out"]))
        outputs.append(pb.value_info("w_out", pb.FLOAT, [k, n]))
    graph = (
        b"".join(pb.bytes_field(1, node) for node in nodes)
        + pb.str_field(2, "test")
        + pb.bytes_field(5, pb.tensor("w8", pb.INT8, [k, n], w8.tobytes()))
        + pb.bytes_field(5, pb.tensor("scale", pb.FLOAT, [1, n], scale.tobytes()))
        + pb.bytes_field(11, pb.value_info("x", pb.FLOAT, [2, 3, k]))
        + b"".join(pb.bytes_field(12, out) for out in outputs)
    )
    return pb.model(graph)


def run(model: bytes, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return np.asarray(session.run(["y"], {"x": x})[0])


def test_entries_read_back_what_was_written() -> None:
    blob = pb.node("Cast", ["a", "b"], ["c"], to=pb.FLOAT)
    parsed = pb._node(blob)
    assert parsed == ("Cast", ["a", "b"], ["c"])
    assert b"".join(e.raw for e in pb.entries(blob)) == blob
    with pytest.raises(ValueError):
        pb.entries(blob[:-1])  # cut inside the last field


def test_weight_only_products_become_integer_products() -> None:
    rng = np.random.default_rng(7)
    w8 = rng.integers(-127, 128, size=(64, 16), dtype=np.int8)
    scale = rng.uniform(0.001, 0.02, size=(1, 16)).astype(np.float32)
    x = rng.normal(size=(2, 3, 64)).astype(np.float32)
    model = weight_only_model(w8, scale)
    rewritten = pb.int8_query_model(model)
    assert rewritten is not None
    assert "MatMul" not in ops(rewritten) and "Cast" in ops(rewritten)
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= set(ops(rewritten))
    exact, fast = run(model, x), run(rewritten, x)
    assert np.allclose(exact, x @ (w8.astype(np.float32) * scale), rtol=1e-4, atol=1e-4)
    # Only the input is rounded (8 bits over the whole call): a small relative error.
    assert np.abs(fast - exact).max() < 0.02 * np.abs(exact).max()


def test_graphs_without_the_pattern_are_left_alone() -> None:
    rng = np.random.default_rng(3)
    w8 = rng.integers(-127, 128, size=(8, 4), dtype=np.int8)
    scale = np.full((1, 4), 0.01, dtype=np.float32)
    assert pb.int8_query_model(weight_only_model(w8, scale, share=True)) is None
    assert pb.int8_query_model(matmul_integer_model(w8)) is None
