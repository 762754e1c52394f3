"""Draft tokens for grouped speculative decoding: a suffix index per prompt group (Seer, arXiv 2511.14617;
SuffixDecoding).

The samples of one GRPO group answer the same prompt, so the text one of them has written is a good guess of what
another will write next. A `GroupIndex` holds the group's token sequences (the prompt, and every finished and
in-progress response, each prefixed by the prompt's last tokens) and, for every position, the n-grams (n in
`MATCH_LENGTHS`) that end there. `propose(seq, k)` takes the longest suffix of sequence `seq` that occurs elsewhere
in the group (or earlier in `seq` itself) and walks the continuations of its occurrences, one token at a time,
choosing the token most of them agree on (a suffix tree's most frequent path); at most k tokens.

    drafter = SuffixDrafter()
    seq = drafter.open(("adapter", prompt_ids), prompt_ids)    # one per row, the group keyed by prompt (and adapter)
    drafter.extend(seq, [token, ...])                           # every token the row emits
    drafter.propose(seq, k) -> [token, ...]                     # up to k draft tokens (maybe none)

Drafts only cost a verification; a bad draft is rejected by the target model, so nothing here affects correctness.
Groups are kept in LRU order, at most `max_groups` (the prompts of the last few iterations).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

MAX_MATCH = 8  # longest suffix looked up (n-gram length)
MIN_MATCH = 2  # shorter matches propose nothing: a single shared token predicts little
# the n-gram lengths indexed and looked up (longest first): every token of every running row is indexed once per
# length (the index's cost per decode step, profiled in jobs), so not all of 2..8
MATCH_LENGTHS = (MAX_MATCH, 6, 4, 3, MIN_MATCH)
MAX_OCCURRENCES = 32  # occurrences of an n-gram kept (the most recent): bounds the index and a proposal's work
PROMPT_CONTEXT = MAX_MATCH  # a response sequence starts with this many prompt tokens (matches across the boundary)


@dataclass
class GroupIndex:
    sequences: list[list[int]] = field(default_factory=list)
    # n-gram -> [(sequence, end)]: the n-gram is sequences[s][end - n:end]; its continuation starts at `end`
    ngrams: dict[tuple[int, ...], list[tuple[int, int]]] = field(default_factory=dict)

    def add_sequence(self, tokens: Sequence[int]) -> int:
        self.sequences.append([])
        seq = len(self.sequences) - 1
        self.extend(seq, tokens)
        return seq

    def extend(self, seq: int, tokens: Sequence[int]) -> None:
        own = self.sequences[seq]
        for token in tokens:
            own.append(token)
            end = len(own)
            for n in MATCH_LENGTHS:
                if n > end:
                    continue
                found = self.ngrams.setdefault(tuple(own[end - n:end]), [])
                found.append((seq, end))
                if len(found) > 2 * MAX_OCCURRENCES:
                    del found[:MAX_OCCURRENCES]

    def propose(self, seq: int, k: int) -> list[int]:
        own = self.sequences[seq]
        for n in MATCH_LENGTHS:
            if n > len(own):
                continue
            found = self.ngrams.get(tuple(own[len(own) - n:]))
            if not found:
                continue
            starts = [(s, end) for s, end in found[-MAX_OCCURRENCES:] if end < len(self.sequences[s])]
            if starts:
                return self._walk(starts, k)
        return []

    def _walk(self, starts: list[tuple[int, int]], k: int) -> list[int]:
        """The continuation most occurrences share, token by token (ties: the most recent occurrence's)."""
        draft: list[int] = []
        alive = starts
        while alive and len(draft) < k:
            votes = Counter(self.sequences[s][end] for s, end in alive)
            token = max(votes, key=lambda t: (votes[t], -_last_index(alive, self.sequences, t)))
            draft.append(token)
            alive = [(s, end + 1) for s, end in alive
                     if self.sequences[s][end] == token and end + 1 < len(self.sequences[s])]
        return draft


def _last_index(alive: list[tuple[int, int]], sequences: list[list[int]], token: int) -> int:
    """How far from the end of `alive` the last occurrence continuing with `token` is (0: the most recent)."""
    for back, (s, end) in enumerate(reversed(alive)):
        if sequences[s][end] == token:
            return back
    return len(alive)


@dataclass(frozen=True)
class DraftSequence:
    group: GroupIndex
    seq: int


class SuffixDrafter:
    """The group indexes of one engine, keyed by whatever identifies a group (prompt ids and adapter)."""

    def __init__(self, max_groups: int = 256) -> None:
        self.max_groups = max_groups
        self.groups: OrderedDict[Hashable, GroupIndex] = OrderedDict()

    def open(self, key: Hashable, prompt_ids: Sequence[int]) -> DraftSequence:
        """A new response sequence in group `key` (created with the prompt as its first sequence)."""
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = GroupIndex()
            group.add_sequence(prompt_ids)
            while len(self.groups) > self.max_groups:
                self.groups.popitem(last=False)
        self.groups.move_to_end(key)
        return DraftSequence(group, group.add_sequence(prompt_ids[-PROMPT_CONTEXT:]))

    @staticmethod
    def extend(handle: DraftSequence, tokens: Sequence[int]) -> None:
        handle.group.extend(handle.seq, tokens)

    @staticmethod
    def propose(handle: DraftSequence, k: int) -> list[int]:
        return handle.group.propose(handle.seq, k) if k > 0 else []
