"""Chat templates (a model's own Jinja code, uploaded by a tenant) rendered in child processes with bounds.

A sandboxed Jinja environment stops attribute tricks but not work: `{{ ('x' * 1000000000)[:1] }}` allocates 1 GB and
nested `range` loops run for hours, in the API process. So the API renders in child processes
(backend/services/chat_render_child.py: `python -I`, only jinja2 imported) with
- an address space of at most MEMORY_BYTES (an allocation past it is a MemoryError: the gigabyte is refused, never
  touched; the child then exits),
- a wall-clock limit of TIMEOUT_S for each batch (then that child is killed),
- at most MAX_TEXT_CHARS characters of output per conversation (rendering stops there).
Any of these, or any error in the template, is an `InvalidInput` naming it; the API process is never at risk.
The children are long-lived (a pool of up to POOL_SIZE per API process, started on demand): a request costs a pipe
round trip, not a Python start (about 0.2 s), which every chat completion would otherwise pay. A child that was
killed or exited is replaced at the next request.
`render_many(template, conversations, special)` renders a batch in one child (a preview's rows), as transformers'
`apply_chat_template(..., add_generation_prompt=True)` does (trim_blocks, lstrip_blocks, `raise_exception`).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import selectors
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from backend.services.errors import InvalidInput

TIMEOUT_S = 20.0
MEMORY_BYTES = 512 << 20
MAX_TEXT_CHARS = 1_000_000
POOL_SIZE = 2
LOC = ("query", "model")
CHILD = Path(__file__).with_name("chat_render_child.py")


def _failed(why: str) -> InvalidInput:
    return InvalidInput(f"the chat template failed on a row: {why}", loc=LOC)


class _Renderer:
    """One child process; used by one thread at a time (the pool hands it out)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-I", str(CHILD), str(MEMORY_BYTES), str(MAX_TEXT_CHARS)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()

    def ask(self, request: bytes, timeout: float, rows: int) -> dict[str, Any]:
        """The child's answer to one request line; raises InvalidInput (and kills the child) on time-out or death."""
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(request + b"\n")
        except BrokenPipeError:
            raise _failed(f"its renderer stopped (exit status {self.process.wait()})") from None
        deadline, line = time.monotonic() + timeout, b""
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            while not line.endswith(b"\n"):
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    self.kill()
                    raise _failed(f"it took more than {timeout:g} s for {rows} row(s)")
                chunk = os.read(self.process.stdout.fileno(), 1 << 20)
                if not chunk:  # the child exited before it answered (the kernel, for memory)
                    raise _failed(f"its renderer stopped (exit status {self.process.wait()})")
                line += chunk
        return json.loads(line)


_idle: queue.LifoQueue[_Renderer] = queue.LifoQueue()
_slots = queue.Queue[None]()
for _ in range(POOL_SIZE):
    _slots.put(None)


def render_many(source: str, conversations: list[Any], special: dict[str, str | None]) -> list[str]:
    """Each conversation rendered with the chat template `source`; InvalidInput (at query.model) naming what went
    wrong: the template's error, or the time, memory or output bound it passed."""
    if not conversations:
        return []
    request = json.dumps({"template": source, "conversations": conversations, "special": special}).encode()
    _slots.get()  # at most POOL_SIZE renders at once per process; others wait their turn
    renderer: _Renderer | None = None
    try:
        with contextlib.suppress(queue.Empty):
            renderer = _idle.get_nowait()
        if renderer is None or not renderer.alive:
            renderer = _Renderer()
        answer = renderer.ask(request, TIMEOUT_S, len(conversations))
        if answer.get("exit"):  # it exits after a memory error: reap it now
            renderer.process.wait()
    finally:
        if renderer is not None and renderer.alive:
            _idle.put(renderer)
        _slots.put(None)
    if "error" in answer:
        raise _failed(str(answer["error"]))
    return [str(text) for text in answer["ok"]]
