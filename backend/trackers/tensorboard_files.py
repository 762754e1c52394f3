"""TensorBoard event files written directly: TFRecord framing (length, masked CRC32C) around `Event` protobufs
holding scalar summaries, so the control plane needs neither TensorFlow nor the tensorboard package. Files land in
`<artifact_dir>/jobs/<id>/trackers/tensorboard/` (`tensorboard --logdir` reads them; tests read them with
tensorboard's own event reader)."""

from __future__ import annotations

import os
import socket
import struct
import time
from pathlib import Path

from backend.trackers.base import JobInfo, Row, TrackerSink


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked(data: bytes) -> bytes:
    crc = crc32c(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def record(data: bytes) -> bytes:
    """One TFRecord: uint64 length, its masked CRC, the data, its masked CRC."""
    length = struct.pack("<Q", len(data))
    return length + _masked(length) + data + _masked(data)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        bits, value = value & 0x7F, value >> 7
        out.append(bits | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:  # a length-delimited protobuf field
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def event(wall_time: float, step: int = 0, *, version: str | None = None, scalars: dict[str, float] | None = None
          ) -> bytes:
    """An `Event` {wall_time=1 double, step=2 int64, file_version=3, summary=5 {value=1 {tag=1, simple_value=2}}}."""
    out = b"\x09" + struct.pack("<d", wall_time) + b"\x10" + _varint(step)
    if version is not None:
        out += _field(3, version.encode())
    if scalars:
        values = b"".join(_field(1, _field(1, tag.encode()) + b"\x15" + struct.pack("<f", value))
                          for tag, value in scalars.items())
        out += _field(5, values)
    return out


class TensorBoardSink(TrackerSink):
    def __init__(self, job: JobInfo) -> None:
        self.dir = job.artifacts / "trackers" / "tensorboard"
        self.path: Path | None = None

    def start(self, run_ref: str | None) -> str:
        self.dir.mkdir(parents=True, exist_ok=True)
        # a file per process: one writer appends to it; TensorBoard reads every events file of the directory
        self.path = self.dir / f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}.streamrl"
        with self.path.open("ab") as out:
            out.write(record(event(time.time(), version="brain.Event:2")))
        return run_ref or str(self.dir)

    def log_rows(self, rows: list[Row]) -> None:
        assert self.path is not None, "start() first"
        with self.path.open("ab") as out:
            for row in rows:
                out.write(record(event(row.at.timestamp(), row.iteration, scalars=row.metrics)))
            out.flush()
            os.fsync(out.fileno())

    def finish(self, status: str, checkpoint: Path | None) -> None:
        self.path = None
