"""Bounded decompression of a zstd request body (the Tinker SDK's `forward_backward` may send one).

A few KB of zstd can declare or inflate to hundreds of MB, whose protobuf parse then takes minutes of CPU. The body
is stream-decompressed in chunks and refused (`BodyTooLarge`, a 413) as soon as the output passes `limit`: the same
cap a plain body has (STREAMRL_MAX_REQUEST_BYTES), so compression saves bandwidth but never buys a larger request.
Memory is at most `limit` + one chunk, whatever the frame header claims. Call it off the event loop (a threadpool).
"""

from __future__ import annotations

import io

import zstandard

CHUNK = 256 * 1024


class BodyTooLarge(ValueError):
    """The decompressed body passes the cap."""


class BodyCorrupt(ValueError):
    """Not a zstd stream."""


def decompress_capped(body: bytes, limit: int) -> bytes:
    """The decompressed body; BodyTooLarge past `limit` bytes, BodyCorrupt when it is not zstd."""
    out = bytearray()
    try:
        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body), read_across_frames=True) as reader:
            while chunk := reader.read(CHUNK):
                out += chunk
                if len(out) > limit:
                    raise BodyTooLarge(f"the zstd body decompresses to more than {limit} bytes, the limit of a "
                                       "request body (STREAMRL_MAX_REQUEST_BYTES); send smaller chunks")
    except zstandard.ZstdError as exc:
        raise BodyCorrupt(f"the zstd body cannot be decompressed: {exc}") from exc
    return bytes(out)
