"""Chat templates (a model's own Jinja code, uploaded by a tenant) rendered in a child process with bounds.

A sandboxed Jinja environment stops attribute tricks but not work: `{{ ('x' * 1000000000)[:1] }}` allocates 1 GB and
nested `range` loops run for hours, in the API process. So the API renders in a short-lived child
(backend/services/chat_render_child.py: `python -I`, only jinja2 imported) with
- an address space of at most MEMORY_BYTES (an allocation past it is a MemoryError: the gigabyte is refused, never
  touched),
- a wall-clock limit of TIMEOUT_S for the whole batch (then it is killed) and a CPU-time limit as a backstop,
- at most MAX_TEXT_CHARS characters of output per conversation (rendering stops there).
Any of these, or any error in the template, is an `InvalidInput` naming it; the API process is never at risk.
`render_many(template, conversations, special)` renders a batch in one child (a preview's rows), as transformers'
`apply_chat_template(..., add_generation_prompt=True)` does (trim_blocks, lstrip_blocks, `raise_exception`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from backend.services.errors import InvalidInput

TIMEOUT_S = 20.0
MEMORY_BYTES = 512 << 20
MAX_TEXT_CHARS = 1_000_000
LOC = ("query", "model")
CHILD = Path(__file__).with_name("chat_render_child.py")


def _failed(why: str) -> InvalidInput:
    return InvalidInput(f"the chat template failed on a row: {why}", loc=LOC)


def render_many(source: str, conversations: list[Any], special: dict[str, str | None]) -> list[str]:
    """Each conversation rendered with the chat template `source`; InvalidInput (at query.model) naming what went
    wrong: the template's error, or the time, memory or output bound it passed."""
    if not conversations:
        return []
    request = json.dumps({"template": source, "conversations": conversations, "special": special})
    with subprocess.Popen([sys.executable, "-I", str(CHILD), str(MEMORY_BYTES), str(MAX_TEXT_CHARS)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as child:
        try:
            out, _ = child.communicate(request.encode(), timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            raise _failed(f"it took more than {TIMEOUT_S:g} s for {len(conversations)} row(s)") from None
    try:
        answer = json.loads(out)
    except ValueError:  # killed before it answered (the kernel, for memory)
        raise _failed(f"its renderer stopped (exit status {child.returncode})") from None
    if "error" in answer:
        raise _failed(str(answer["error"]))
    return [str(text) for text in answer["ok"]]
