"""The parent's end of the harness protocol (workers/rewards/sandbox_child.py): framed JSON over private pipes.

Invariants: a reply is accepted only if it carries the nonce of the request just sent and nothing follows it on the
pipe; reply frames are at most MAX_FRAME bytes; user output (the child's stdout/stderr pipe) is drained while
waiting and only its last OUTPUT_TAIL bytes are kept. The parent reads pipes only, never a path the child controls.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import select
import time
from typing import Any

MAX_FRAME = 1 << 20
OUTPUT_TAIL = 4096


class ChannelError(Exception):
    """The child died, closed its pipe or broke the protocol; the worker must be restarted."""


class ProtocolViolation(ChannelError):
    """The child is alive but wrote a frame that is not the answer (forged, oversized, malformed, extra): it is
    killed at once, never waited on."""


class StaleReply(ProtocolViolation):
    """A reply to an earlier request (user code wrote extra frames): the current sample is innocent of it."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name} in a reply")


class Channel:
    def __init__(self, request_fd: int, reply_fd: int, output_fd: int):
        self.request_fd, self.reply_fd, self.output_fd = request_fd, reply_fd, output_fd
        self.nonce = self.previous_nonce = ""
        self.output = b""
        self.output_bytes = 0  # everything the child printed so far (only the tail is kept)
        self._buffer = b""

    def close(self) -> None:
        for fd in (self.request_fd, self.reply_fd, self.output_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.request_fd = self.reply_fd = self.output_fd = -1

    def send(self, message: dict[str, Any]) -> None:
        """Send one request under a fresh nonce (the reply must echo it)."""
        if self._buffer or select.select([self.reply_fd], [], [], 0)[0]:
            raise StaleReply("the sandbox worker wrote replies nobody asked for (protocol violation)")
        self.previous_nonce, self.nonce = self.nonce, secrets.token_hex(16)
        payload = json.dumps({**message, "nonce": self.nonce}, default=str).encode()
        data = len(payload).to_bytes(4, "big") + payload
        try:
            while data:
                data = data[os.write(self.request_fd, data):]
        except OSError as exc:
            raise ChannelError("the sandbox worker exited") from exc

    def _drain_output(self) -> bool:
        try:
            chunk = os.read(self.output_fd, 65536)
        except OSError:  # BlockingIOError: nothing more for now (the fd is non-blocking)
            chunk = b""
        if chunk:
            self.output = (self.output + chunk)[-OUTPUT_TAIL:]
            self.output_bytes += len(chunk)
        return bool(chunk)

    def drain_output(self, limit: int = 1 << 20) -> None:
        """Read what the child printed and is still in the pipe (at most `limit` bytes, never blocking)."""
        for _ in range(limit >> 16):
            if not self._drain_output():
                return

    def receive(self, timeout_s: float, *, last: bool = True) -> dict[str, Any]:
        """A reply to the last request (`last`: and nothing may follow it); TimeoutError past `timeout_s`,
        ChannelError on EOF or a bad frame."""
        deadline = time.monotonic() + timeout_s
        while True:
            frame = self._frame()
            if frame is not None:
                return self._check(frame, last)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([self.reply_fd, self.output_fd], [], [], left)
            if self.output_fd in ready:
                self._drain_output()
            if self.reply_fd in ready:
                chunk = os.read(self.reply_fd, 65536)
                if not chunk:
                    raise ChannelError("the sandbox worker closed its reply pipe")
                self._buffer += chunk

    def _frame(self) -> bytes | None:
        if len(self._buffer) < 4:
            return None
        size = int.from_bytes(self._buffer[:4], "big")
        if size > MAX_FRAME:
            raise ProtocolViolation(f"the sandbox worker sent a reply over {MAX_FRAME} bytes")
        if len(self._buffer) < 4 + size:
            return None
        frame, self._buffer = self._buffer[4:4 + size], self._buffer[4 + size:]
        return frame

    def _check(self, frame: bytes, last: bool) -> dict[str, Any]:
        try:
            reply = json.loads(frame, parse_int=float, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as exc:
            raise ProtocolViolation("the sandbox worker sent a malformed reply (protocol violation)") from exc
        if isinstance(reply, dict) and reply.get("nonce") == self.previous_nonce:
            raise StaleReply("the sandbox worker sent a second reply to an earlier request (protocol violation)")
        if not isinstance(reply, dict) or reply.get("nonce") != self.nonce:
            raise ProtocolViolation("the sandbox worker sent a reply that does not answer this request "
                               "(protocol violation: output written to the harness's pipe)")
        if last and (self._buffer or (select.select([self.reply_fd], [], [], 0)[0] and os.read(self.reply_fd, 1))):
            raise ProtocolViolation("the sandbox worker sent more than one reply (protocol violation)")
        return reply

    def output_tail(self, limit: int = 200) -> str:
        return self.output[-limit:].decode(errors="replace").strip()
