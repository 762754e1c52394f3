"""The child process of backend/services/chat_render.py: renders chat templates, one request per line, until stdin ends.

Run as `python -I chat_render_child.py <memory bytes> <max chars>`; each request is one JSON line ({"template",
"conversations", "special"}), each answer one JSON line: {"ok": [text, ...]} or {"error": message}. It limits its
own address space first, so an allocation past it is a MemoryError here, never memory taken from the API; after one
it exits (the parent starts a fresh child), so no request runs in a process a bomb left half-broken. Compiled
templates are kept by source (a model's template is rendered many times). Imports only the standard library and
jinja2 (it runs isolated from the API's code).
"""

from __future__ import annotations

import json
import resource
import sys
from typing import Any

TEMPLATE_CACHE = 32


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

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    compiled: dict[str, Any] = {}
    for line in sys.stdin:
        fatal = False
        try:
            request = json.loads(line)
            source = request["template"]
            template = compiled.get(source)
            if template is None:
                if len(compiled) >= TEMPLATE_CACHE:
                    compiled.clear()
                template = compiled[source] = env.from_string(source)
            answer: dict[str, Any] = {"ok": [_render(template, messages, request["special"], max_chars)
                                             for messages in request["conversations"]]}
        except MemoryError:
            answer, fatal = {"error": f"it needed more than {memory >> 20} MB of memory"}, True
        except RecursionError:
            answer = {"error": "it recursed too deeply"}
        except TemplateError as exc:  # raise_exception(...) in the template, or the sandbox refusing an access
            answer = {"error": str(exc)[:500]}
        except Exception as exc:  # the template's own error, or any Python error it caused
            answer = {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}
        if fatal:
            answer["exit"] = True
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
        if fatal:
            return


if __name__ == "__main__":
    main()
