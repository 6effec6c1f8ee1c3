"""Just enough of the ONNX protobuf format to write small graphs and rewrite one.

memdir builds a one-node scoring graph (:mod:`memdir.vectors.scan`) and rewrites the
embedding model's weight-only int8 products for queries (:func:`int8_query_model`),
without the ``onnx`` package. Protobuf's wire format is a list of entries, each a field
number, a wire type and a value: varints (type 0) and length-delimited bytes (type 2) are
what ONNX uses; fixed-width values (types 1 and 5) are skipped over intact.
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

INT8, UINT8, INT32, FLOAT = 3, 2, 6, 1  # TensorProto.DataType
_ATTR_INT = 2  # AttributeProto.AttributeType.INT


# -- writing ----------------------------------------------------------------------------


def varint(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def int_field(field: int, value: int) -> bytes:
    return varint(field << 3) + varint(value)


def bytes_field(field: int, value: bytes) -> bytes:
    return varint((field << 3) | 2) + varint(len(value)) + value


def str_field(field: int, value: str) -> bytes:
    return bytes_field(field, value.encode("utf-8"))


def value_info(name: str, elem_type: int, dims: list[int]) -> bytes:
    """A ValueInfoProto: a named tensor type of fixed shape."""
    shape = b"".join(bytes_field(1, int_field(1, d)) for d in dims)  # TensorShapeProto.dim
    tensor = int_field(1, elem_type) + bytes_field(2, shape)  # TypeProto.Tensor
    return str_field(1, name) + bytes_field(2, bytes_field(1, tensor))


def tensor(name: str, elem_type: int, dims: list[int], raw: bytes) -> bytes:
    """A TensorProto: dims (1), data_type (2), name (8), raw_data (9)."""
    head = b"".join(int_field(1, d) for d in dims) + int_field(2, elem_type)
    return head + str_field(8, name) + bytes_field(9, raw)


def model(graph: bytes, opset: int = 13) -> bytes:
    """A ModelProto: IR version 8, the graph, the default domain at ``opset``."""
    return int_field(1, 8) + bytes_field(7, graph) + bytes_field(8, int_field(2, opset))


def node(op_type: str, inputs: list[str], outputs: list[str], **ints: int) -> bytes:
    """A NodeProto: inputs (1), outputs (2), op_type (4), integer attributes (5)."""
    body = b"".join(str_field(1, name) for name in inputs)
    body += b"".join(str_field(2, name) for name in outputs)
    body += str_field(4, op_type)
    for name, value in ints.items():
        body += bytes_field(5, str_field(1, name) + int_field(3, value) + int_field(20, _ATTR_INT))
    return body


# -- reading ----------------------------------------------------------------------------


class Entry(NamedTuple):
    field: int
    wire: int
    value: int | bytes  # a varint's value, or the bytes of a length-delimited field
    raw: bytes  # the whole entry, tag included, to copy it unchanged


def _read_varint(buf: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def entries(buf: bytes) -> list[Entry]:
    """The top-level entries of one message."""
    out: list[Entry] = []
    at, end = 0, len(buf)
    while at < end:
        start = at
        tag, at = _read_varint(buf, at)
        field, wire = tag >> 3, tag & 7
        value: int | bytes
        if wire == 0:
            value, at = _read_varint(buf, at)
        elif wire == 2:
            size, at = _read_varint(buf, at)
            value = buf[at : at + size]
            at += size
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            value = buf[at : at + width]
            at += width
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        out.append(Entry(field, wire, value, buf[start:at]))
    if at != end:
        raise ValueError("truncated protobuf message")
    return out


def _strings(items: list[Entry], field: int) -> list[str]:
    return [bytes(e.value).decode("utf-8") for e in items if e.field == field and e.wire == 2]


def _ints(items: list[Entry], field: int) -> list[int]:
    """A repeated integer field, packed or not."""
    out: list[int] = []
    for e in items:
        if e.field != field:
            continue
        if e.wire == 0:
            out.append(int(e.value))
        elif e.wire == 2:
            blob = bytes(e.value)
            at = 0
            while at < len(blob):
                value, at = _read_varint(blob, at)
                out.append(value)
    return out


class _Node(NamedTuple):
    op: str
    inputs: list[str]
    outputs: list[str]


def _node(blob: bytes) -> _Node:
    items = entries(blob)
    ops = _strings(items, 4)
    return _Node(ops[0] if ops else "", _strings(items, 1), _strings(items, 2))


# -- the query graph --------------------------------------------------------------------


# Bumped whenever int8_query_model writes a different graph: cached graphs carry it.
QUERY_GRAPH_VERSION = 1


def int8_query_model(model: bytes) -> bytes | None:
    """The model with each weight-only int8 product computed in integers.

    The packaged model stores a product's weights as int8 with one scale per output
    column, ``MatMul(x, Mul(Cast(w8), scale))``; onnxruntime folds that to float32 weights
    at load, so a short query streams every weight as float32. Here each such product
    becomes ``Mul(Cast(MatMulInteger(xq, w8, xz)), Mul(xs, scale))`` with ``xq, xs, xz =
    DynamicQuantizeLinear(x)``: the int8 weights rounded to seven bits (a scale twice as
    large), read as integers, with the input quantised to 8 bits per call. The input's
    scale is taken over the whole call, so the result depends on what else is in the
    batch: use it for one text at a time.

    None when the model has no such product.
    """
    top = entries(model)
    graph_at = next((i for i, e in enumerate(top) if e.field == 7 and e.wire == 2), None)
    if graph_at is None:
        return None
    graph = entries(bytes(top[graph_at].value))
    import numpy as np

    tensors: dict[str, tuple[int, list[int], bytes | None]] = {}
    for e in graph:
        if e.field == 5 and e.wire == 2:
            items = entries(bytes(e.value))
            names = _strings(items, 8)
            types = _ints(items, 2)
            raw = [bytes(i.value) for i in items if i.field == 9 and i.wire == 2]
            if names and types:
                tensors[names[0]] = (types[0], _ints(items, 1), raw[0] if raw else None)
    nodes = {i: _node(bytes(e.value)) for i, e in enumerate(graph) if e.field == 1}
    made_by = {out: i for i, n in nodes.items() for out in n.outputs}
    used = Counter(name for n in nodes.values() for name in n.inputs)
    for e in graph:
        if e.field == 12 and e.wire == 2:  # graph outputs count as uses
            used.update(_strings(entries(bytes(e.value)), 1))
    replaced: dict[int, bytes] = {}
    dropped: set[int] = set()
    added: list[bytes] = []
    retired: set[str] = set()
    for i, n in nodes.items():
        if n.op != "MatMul" or len(n.inputs) != 2:
            continue
        mul_at = made_by.get(n.inputs[1])
        mul = nodes.get(mul_at) if mul_at is not None else None
        if mul is None or mul.op != "Mul" or len(mul.inputs) != 2:
            continue
        cast_at = made_by.get(mul.inputs[0])
        cast = nodes.get(cast_at) if cast_at is not None else None
        if cast is None or cast.op != "Cast" or len(cast.inputs) != 1:
            continue
        w_type, w_dims, w_raw = tensors.get(cast.inputs[0], (0, [], None))
        s_type, s_dims, s_raw = tensors.get(mul.inputs[1], (0, [], None))
        if w_type != INT8 or len(w_dims) != 2 or s_type != FLOAT or w_raw is None:
            continue
        if s_dims not in ([w_dims[1]], [1, w_dims[1]]) or s_raw is None:
            continue  # one scale per output column, nothing else
        if used[n.inputs[1]] != 1 or used[mul.inputs[0]] != 1:
            continue  # the float weights feed something else too
        # Seven bits for the weights: x86 kernels without VNNI add pairs of u8 x s8
        # products in saturating 16-bit lanes; 2 x 255 x 63 fits, 2 x 255 x 127 does not.
        w7 = np.clip(np.rint(np.frombuffer(w_raw, dtype=np.int8) / 2.0), -63, 63)
        s2 = np.frombuffer(s_raw, dtype=np.float32) * np.float32(2.0)
        p = f"memdir_q{i}_"
        added.append(bytes_field(5, tensor(p + "w", INT8, w_dims, w7.astype(np.int8).tobytes())))
        added.append(bytes_field(5, tensor(p + "ws", FLOAT, s_dims, s2.tobytes())))
        replaced[i] = b"".join(
            bytes_field(1, part)
            for part in (
                node("DynamicQuantizeLinear", [n.inputs[0]], [p + "x", p + "xs", p + "xz"]),
                node("MatMulInteger", [p + "x", p + "w", p + "xz"], [p + "i"]),
                node("Cast", [p + "i"], [p + "f"], to=FLOAT),
                node("Mul", [p + "xs", p + "ws"], [p + "s"]),
                node("Mul", [p + "f", p + "s"], list(n.outputs)),
            )
        )
        assert mul_at is not None and cast_at is not None
        dropped.update((mul_at, cast_at))
        retired.update(name for name in (cast.inputs[0], mul.inputs[1]) if used[name] == 1)
    if not replaced:
        return None
    kept = []
    for i, e in enumerate(graph):
        if i in replaced:
            kept.append(replaced[i])
        elif i in dropped:
            continue
        elif (
            e.field == 5
            and e.wire == 2
            and _strings(entries(bytes(e.value)), 8)[:1] in ([name] for name in retired)
        ):
            continue  # weights only the replaced products read
        else:
            kept.append(e.raw)
    body = b"".join(kept) + b"".join(added)
    top[graph_at] = top[graph_at]._replace(raw=bytes_field(7, body))
    return b"".join(e.raw for e in top)
