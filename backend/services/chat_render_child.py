"""The child process of backend/services/chat_render.py: renders a chat template for a batch of conversations.

Run as `python -I chat_render_child.py <memory bytes> <max chars>` with JSON on stdin ({"template", "conversations",
"special"}); answers one JSON object on stdout: {"ok": [text, ...]} or {"error": message}. It limits its own
address space first, so an allocation past it is a MemoryError here, never memory taken from the API. Imports only
the standard library and jinja2 (it runs isolated from the API's code).
"""

from __future__ import annotations

import json
import resource
import sys
from typing import Any


def _render(template: Any, messages: Any, special: dict[str, Any], max_chars: int) -> str:
    parts, size = [], 0
    for chunk in template.generate(messages=messages, add_generation_prompt=True, **special):
        size += len(chunk)
        if size > max_chars:
            raise OverflowError(f"its output passed {max_chars} characters")
        parts.append(chunk)
    return "".join(parts)


def main() -> None:
    memory, max_chars = int(sys.argv[1]), int(sys.argv[2])
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    try:
        request = json.loads(sys.stdin.read())

        def raise_exception(message: str) -> None:
            raise TemplateError(message)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        template = env.from_string(request["template"])
        answer: dict[str, Any] = {"ok": [_render(template, messages, request["special"], max_chars)
                                         for messages in request["conversations"]]}
    except MemoryError:
        answer = {"error": f"it needed more than {memory >> 20} MB of memory"}
    except RecursionError:
        answer = {"error": "it recursed too deeply"}
    except TemplateError as exc:  # raise_exception(...) in the template, or the sandbox refusing an access
        answer = {"error": str(exc)[:500]}
    except Exception as exc:  # the template's own error, or any Python error it caused
        answer = {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}
    sys.stdout.write(json.dumps(answer))


if __name__ == "__main__":
    main()
