"""Every user-supplied regular expression (the `regex` and `format` rewards' `pattern`, the judge's `score_regex`)
is compiled here with RE2 (google-re2), whose matching time is linear in the text: no pattern can backtrack for
minutes (`(a+)+$` on "a" * 26 + "!" is microseconds), on the API (POST /graders/run) or in a worker scoring a
shared batch.

RE2 has no backreferences (`\\1`, `(?P=name)`), lookaround (`(?=`, `(?!`, `(?<=`, `(?<!`), atomic groups or
possessive repeats: a pattern using them is a ValueError naming the param and what is unsupported (a 422 at submit
or at /graders/run). Flags `i`, `m`, `s` become RE2's inline flags; `x` (verbose) strips unescaped whitespace and
`#` comments outside character classes first. RE2 differs from Python's `re` in small ways: `\\d`, `\\w`, `\\b`
are ASCII, `$` without `m` matches only at the very end, `\\Z` is spelled `\\z`.
"""

from __future__ import annotations

import re
from typing import Any

import re2

FLAG_LETTERS = "imsx"
MAX_PATTERN_CHARS = 10_000
MAX_PROGRAM_BYTES = 8 << 20  # RE2's memory budget for one compiled pattern
# constructs of Python's `re` that RE2 has not, as written in a pattern (looked for once RE2 refused it)
_UNSUPPORTED = re.compile(r"\\[1-9]|\(\?P=|\(\?<?[=!]|\(\?>|[+*?}]\+")
_NAMES = {"(?=": "lookahead `(?=...)`", "(?!": "negative lookahead `(?!...)`", "(?<=": "lookbehind `(?<=...)`",
          "(?<!": "negative lookbehind `(?<!...)`", "(?>": "atomic groups `(?>...)`",
          "(?P=": "backreferences `(?P=name)`"}


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # errors are raised, not also logged to stderr
    options.max_mem = MAX_PROGRAM_BYTES
    return options


def strip_verbose(pattern: str) -> str:
    """`pattern` with the `x` flag's whitespace and comments removed (escapes and character classes kept)."""
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            in_class = char != "]" or out[-1] in ("[", "[^")
        elif char == "[":
            in_class = True
            if pattern[i + 1:i + 2] == "^":
                out.append("[^")
                i += 2
                continue
        elif char.isspace():
            i += 1
            continue
        elif char == "#":
            end = pattern.find("\n", i)
            i = len(pattern) if end < 0 else end + 1
            continue
        out.append(char)
        i += 1
    return "".join(out)


def _why(exc: Exception) -> str:
    raw = exc.args[0] if exc.args else exc
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    if text.startswith(("b'", 'b"')) and text[-1:] in "'\"":  # the wrapper's repr of RE2's bytes message
        text = text[2:-1].replace("\\\\", "\\")
    return text


def compile_pattern(pattern: Any, flags: str, where: str) -> Any:
    """The RE2 pattern (a `re`-like object: search, fullmatch, groups); ValueError starting with `where` (e.g.
    "reward 'regex': param 'pattern'") for a bad flag, an invalid pattern or one RE2 cannot run."""
    if not isinstance(pattern, str):
        raise ValueError(f"{where} must be a string, got {pattern!r}")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"{where} is {len(pattern)} characters; at most {MAX_PATTERN_CHARS}")
    bad = sorted(set(flags) - set(FLAG_LETTERS))
    if bad:
        raise ValueError(f"{where}: unknown regex flag {bad[0]!r}; use any of {FLAG_LETTERS!r}")
    text = strip_verbose(pattern) if "x" in flags else pattern
    inline = "".join(sorted(set(flags) - {"x"}))
    try:
        return re2.compile(f"(?{inline}){text}" if inline else text, _options())
    except re2.error as exc:
        why = _why(exc)
        found = _UNSUPPORTED.search(text)  # linear: a fixed pattern of literals
        if found is not None:
            token = found.group()
            unsupported = _NAMES.get(token) or (f"backreferences `{token}`" if token[0] == "\\"
                                                else f"possessive repeats `{token}`")
            raise ValueError(f"{where} uses {unsupported}, which the linear-time regex engine (RE2) does not "
                             f"support ({why}); rewrite it without backreferences or lookaround") from None
        if "pattern too large" in why:
            why += f" (its compiled form exceeds {MAX_PROGRAM_BYTES >> 20} MiB)"
        raise ValueError(f"{where} is not a valid regular expression: {why}") from None
