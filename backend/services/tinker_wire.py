"""The Tinker SDK's protobuf payloads, read and written without generated code (docs/tinker.md).

The SDK (0.38) sends `forward_backward` bodies as `tinker_public.ForwardBackwardRequest` protobuf (optionally zstd)
and accepts `ForwardBackwardOutput` and `SampleResponse` futures only as protobuf. This module is the small subset of
the protobuf wire format those three messages use (varints, length-delimited fields, fixed64 doubles, maps as
repeated entries), so the control plane needs neither the SDK nor generated classes. Field numbers are the SDK's
`tinker/proto/tinker_public.proto`. Malformed input raises `WireError` (the route answers 400).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

DTYPE_FLOAT32, DTYPE_INT64, DTYPE_INT32 = 1, 2, 3
_NUMPY = {DTYPE_FLOAT32: np.float32, DTYPE_INT64: np.int64, DTYPE_INT32: np.int32}
MAX_ELEMENTS = 1 << 26
TOPK_EMPTY = -99999.0  # the SDK's sentinel logprob of an empty top-k cell (tinker.types.TopkLogprobs)


class WireError(ValueError):
    """The body is not the protobuf message the route expects."""


@dataclass
class Tensor:
    values: list[float] | list[int]
    shape: list[int]
    dtype: str  # "float32" | "int64"


@dataclass
class Datum:
    tokens: list[int]
    loss_fn_inputs: dict[str, Tensor] = field(default_factory=dict)


@dataclass
class ForwardBackward:
    model_id: str
    seq_id: int
    loss_fn: str
    loss_fn_config: dict[str, float | str]
    forward_only: bool
    data: list[Datum]


# -- reading --------------------------------------------------------------------------------------------------------
def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise WireError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise WireError("varint too long")


def fields(buf: bytes) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value): an int for varints, bytes for length-delimited, float for fixed64."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield number, wire, value
        elif wire == 1:
            if pos + 8 > len(buf):
                raise WireError("truncated fixed64")
            yield number, wire, struct.unpack_from("<d", buf, pos)[0]
            pos += 8
        elif wire == 2:
            length, pos = _varint(buf, pos)
            if pos + length > len(buf):
                raise WireError("truncated length-delimited field")
            yield number, wire, buf[pos:pos + length]
            pos += length
        elif wire == 5:
            if pos + 4 > len(buf):
                raise WireError("truncated fixed32")
            yield number, wire, struct.unpack_from("<f", buf, pos)[0]
            pos += 4
        else:
            raise WireError(f"unsupported wire type {wire}")


def _text(value: Any) -> str:
    if not isinstance(value, bytes):
        raise WireError("expected a string field")
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise WireError("a string field is not UTF-8") from None


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _packed_ints(value: Any) -> list[int]:
    if isinstance(value, int):
        return [_signed(value)]
    out, pos = [], 0
    while pos < len(value):
        item, pos = _varint(value, pos)
        out.append(_signed(item))
    return out


def _array(raw: bytes, dtype: int) -> np.ndarray:
    kind = _NUMPY.get(dtype)
    if kind is None:
        raise WireError(f"unsupported tensor dtype {dtype}")
    if len(raw) % np.dtype(kind).itemsize:
        raise WireError("tensor bytes are not a whole number of elements")
    return np.frombuffer(raw, dtype=kind)


def _tensor(buf: bytes) -> Tensor:
    dense: bytes | None = None
    csr: dict[int, bytes] = {}
    dtype, shape = 0, []
    for number, _, value in fields(buf):
        if number == 1:
            dense = value
        elif number == 2:
            csr = {n: v for n, _, v in fields(value)}
        elif number == 3:
            dtype = value
        elif number == 4:
            shape.extend(_packed_ints(value))
    if dense is not None:
        array = _array(dense, dtype)
    else:  # sparse CSR: values + int64 row pointers and column indices, densified
        values = _array(csr.get(1, b""), dtype)
        crow, col = _array(csr.get(2, b""), DTYPE_INT64), _array(csr.get(3, b""), DTYPE_INT64)
        if len(shape) != 2 or len(crow) != shape[0] + 1 or len(col) != len(values):
            raise WireError("a sparse tensor needs a 2-D shape and matching crow/col indices")
        if shape[0] * shape[1] > MAX_ELEMENTS:
            raise WireError("tensor too large")
        array = np.zeros(shape, dtype=values.dtype)
        for row in range(shape[0]):
            start, end = int(crow[row]), int(crow[row + 1])
            array[row, col[start:end]] = values[start:end]
        array = array.reshape(-1)
    if shape and math.prod(shape) != array.size:
        raise WireError(f"tensor shape {shape} does not hold its {array.size} elements")
    name = "float32" if array.dtype == np.float32 else "int64"
    values_list = array.astype(np.float64 if name == "float32" else np.int64).tolist()
    return Tensor(values=values_list, shape=shape or [array.size], dtype=name)


def _datum(buf: bytes) -> Datum:
    datum = Datum(tokens=[])
    for number, _, value in fields(buf):
        if number == 1:
            for kind, _, chunk in fields(value):
                if kind != 1:
                    raise WireError("only token (encoded_text) chunks are supported by this server; image and audio "
                                    "chunks are not")
                for inner, _, tokens in fields(chunk):
                    if inner == 1:
                        datum.tokens.extend(_array(tokens, DTYPE_INT32).tolist())
        elif number == 2:
            entry = dict((n, v) for n, _, v in fields(value))
            datum.loss_fn_inputs[_text(entry.get(1, b""))] = _tensor(entry.get(2, b""))
    return datum


def read_forward_backward(body: bytes) -> ForwardBackward:
    request = ForwardBackward(model_id="", seq_id=0, loss_fn="", loss_fn_config={}, forward_only=False, data=[])
    v2: dict[str, float | str] = {}
    for number, _, value in fields(body):
        if number == 1:
            request.model_id = _text(value)
        elif number == 2:
            request.seq_id = _signed(value)
        elif number == 3:
            request.data.append(_datum(value))
        elif number == 4:
            request.loss_fn = _text(value)
        elif number == 5:
            entry = dict((n, v) for n, _, v in fields(value))
            request.loss_fn_config[_text(entry.get(1, b""))] = float(entry.get(2, 0.0))
        elif number == 6:
            request.forward_only = bool(value)
        elif number == 7:
            entry = dict((n, v) for n, _, v in fields(value))
            inner = dict((n, v) for n, _, v in fields(entry.get(2, b"")))
            v2[_text(entry.get(1, b""))] = _text(inner[2]) if 2 in inner else float(inner.get(1, 0.0))
    request.loss_fn_config.update(v2)  # the SDK writes both; v2 (with strings) wins
    return request


# -- writing --------------------------------------------------------------------------------------------------------
def _put_varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return _put_varint(number << 3 | wire)


def _bytes_field(number: int, value: bytes) -> bytes:
    return _key(number, 2) + _put_varint(len(value)) + value


def _varint_field(number: int, value: int) -> bytes:
    return _key(number, 0) + _put_varint(value)


def _double_field(number: int, value: float) -> bytes:
    return _key(number, 1) + struct.pack("<d", value)


def write_forward_backward_output(outputs: list[dict[str, list[float]]], metrics: dict[str, float]) -> bytes:
    """`ForwardBackwardOutput` with one `ArrayRecord`: per datum, float32 1-D fields (e.g. `logprobs`)."""
    names = sorted({name for output in outputs for name in output})
    record = _bytes_field(1, b"ArrayRecord") + _varint_field(3, len(outputs))
    for name in names:
        chunks = [np.asarray(output.get(name, []), dtype=np.float32).tobytes() for output in outputs]
        offsets = np.cumsum([0, *[len(chunk) for chunk in chunks]], dtype=np.int64)
        batched = _bytes_field(1, b"".join(chunks)) + _bytes_field(2, offsets.tobytes()) + \
            _varint_field(3, DTYPE_FLOAT32)
        record += _bytes_field(2, _bytes_field(1, name.encode()) + _bytes_field(2, batched))
    body = _bytes_field(1, b"ArrayRecord") + _bytes_field(2, record)
    for name, value in metrics.items():
        body += _bytes_field(3, _bytes_field(1, name.encode()) + _double_field(2, float(value)))
    return body


def _topk_message(entries: list[Any], k: int) -> bytes:
    """`TopkLogprobs`: dense (length, k) int32 ids and float32 logprobs; a None position (or a short row) is filled
    with the SDK's sentinel (id 0, logprob -99999), which it reads back as None."""
    ids = np.zeros((len(entries), k), dtype=np.int32)
    logprobs = np.full((len(entries), k), TOPK_EMPTY, dtype=np.float32)
    for row, entry in enumerate(entries):
        if entry is not None:
            found = min(k, len(entry[0]))
            ids[row, :found] = entry[0][:found]
            logprobs[row, :found] = entry[1][:found]
    return _bytes_field(1, ids.tobytes()) + _bytes_field(2, logprobs.tobytes()) + _varint_field(3, k) + \
        _varint_field(4, len(entries))


def _topk_width(entries: list[Any]) -> int:
    return max((len(entry[0]) for entry in entries if entry is not None), default=0)


def write_sample_response(sequences: list[dict[str, Any]], prompt_logprobs: list[float | None] | None,
                          topk_prompt_logprobs: list[Any] | None = None) -> bytes:
    """`SampleResponse`: each sequence {tokens, logprobs (or None), stop_reason "stop" | "length", topk_logprobs (or
    None)}; prompt logprobs (None entries as NaN, which the SDK reads back as None); top-k entries are
    `[ids, logprobs]` per position, or None."""
    body = b""
    for sequence in sequences:
        inner = _varint_field(1, 1 if sequence["stop_reason"] == "length" else 0)
        inner += _bytes_field(2, np.asarray(sequence["tokens"], dtype=np.int32).tobytes())
        if sequence.get("logprobs") is not None:
            inner += _bytes_field(3, np.asarray(sequence["logprobs"], dtype=np.float32).tobytes())
        topk = sequence.get("topk_logprobs")
        if topk is not None:
            inner += _bytes_field(4, _topk_message(topk, _topk_width(topk)))
        body += _bytes_field(1, inner)
    if prompt_logprobs is not None:
        values = [math.nan if value is None else value for value in prompt_logprobs]
        body += _bytes_field(2, np.asarray(values, dtype=np.float32).tobytes())
    if topk_prompt_logprobs is not None:
        body += _bytes_field(3, _topk_message(topk_prompt_logprobs, _topk_width(topk_prompt_logprobs)))
    return body
