"""Per-token policy versions of a response, stored compactly as version marks.

`marks = [[token_index, version], ...]`: the first mark is at index 0 and there is one more wherever the version
changes; response token i was sampled by the version of the last mark at or before i. A generation engine that swaps
weights between decode steps (in-flight updates, `generation.partial_rollouts`) records them per request; a `Sample`
keeps them only when its tokens span more than one version (`Sample.version_marks`, None otherwise), and its
`policy_version` is then the OLDEST of them, so the staleness bound (`max_staleness`) holds for every token.
"""

from __future__ import annotations

from collections.abc import Sequence

Marks = list[list[int]]


def runs(marks: Sequence[Sequence[int]], length: int) -> list[tuple[int, int, int]]:
    """(start, end, version) of each run of `length` tokens, in order."""
    out = []
    for k, (start, version) in enumerate(marks):
        end = marks[k + 1][0] if k + 1 < len(marks) else length
        if end > start:
            out.append((int(start), int(end), int(version)))
    return out


def token_versions(marks: Sequence[Sequence[int]] | None, length: int, default: int) -> list[int]:
    """The version of each of `length` tokens (`default` for every token when there are no marks)."""
    if not marks:
        return [default] * length
    versions = [default] * length
    for start, end, version in runs(marks, length):
        versions[start:end] = [version] * (end - start)
    return versions


def compact(marks: Sequence[Sequence[int]]) -> Marks:
    """Drop marks that repeat the previous version (and all but the last of marks at one index)."""
    out: Marks = []
    for start, version in sorted(((int(s), int(v)) for s, v in marks), key=lambda m: m[0]):
        if out and out[-1][0] == start:
            out[-1][1] = version
        elif not out or out[-1][1] != version:
            out.append([start, version])
        if len(out) > 1 and out[-1][1] == out[-2][1]:
            out.pop()
    return out


def concat(parts: Sequence[tuple[int, Sequence[Sequence[int]]]]) -> Marks:
    """One response's marks from its parts' marks, each given with the part's offset in the response (multi-turn
    episodes: each policy turn at its span's start; tokens between turns carry the previous turn's version, tokens
    before the first part the first part's)."""
    out = compact([[offset + start, version] for offset, marks in parts for start, version in marks])
    if out:
        out[0][0] = 0
    return out


def oldest(marks: Sequence[Sequence[int]]) -> int:
    return min(int(version) for _, version in marks)


def for_sample(marks: Sequence[Sequence[int]] | None, admitted: int) -> tuple[int, Marks | None]:
    """(policy_version, version_marks) of a sample: the oldest version that produced a token and the marks when they
    span more than one version; (`admitted`, None) when the engine recorded none."""
    if not marks:
        return admitted, None
    kept = compact(marks)
    return oldest(kept), (kept if len(kept) > 1 else None)
