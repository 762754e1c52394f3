"""Grouped speculative decoding in the hf engine's batch (`ContinuousBatcher`, hf_batch.py).

Each running row's group (the samples of its prompt, suffix_draft.py) proposes up to `row.draft_k` draft tokens; one
forward pass over [last token, d_1 .. d_k] (k + 1 positions per row, ragged drafts padded and masked) gives the
target's logits at every position; row by row, position j's token is then chosen exactly as a plain decode step
would choose it (`sample_tokens`: greedy argmax, or one uniform from the row's own generator, inverse CDF over the
temperature / top-p distribution), and the draft is accepted while it agrees:

    greedy:   accept d_j iff d_j == argmax                     -> output identical token for token
    sampled:  accept d_j iff inverse_cdf(p_j, u_j) == d_j      -> P(accept) = p_j(d_j); on a rejection the token
              emitted is inverse_cdf(p_j, u_j) != d_j, i.e. drawn from p_j with d_j removed and renormalised

This is the standard rejection rule for a deterministic draft in its coupled form: each emitted token consumes one
uniform of the row's generator, so a seeded request samples the same tokens as without speculation (whatever the
drafts), and the distribution is the target's exactly. The first disagreeing position's token (or, when every draft
token is accepted, the token after them) is emitted too, so a step emits 1 .. k+1 tokens. Behaviour logprobs are the
target's at each emitted token (sampling.py's definition).

KV cache: the pass writes k_max + 1 columns for every row; a row keeps 1 + accepted of them. The cache is cut back to
the widest row's new length (`truncate`) and the columns other rows rejected become holes (`ContinuousBatcher.holes`,
masked out and skipped by position ids) until the batch is compacted (at a retirement, or when holes waste a
quarter of the width).

Adaptive k: a row that accepted its whole draft tries `min(2k, K_MAX)` next; otherwise `accepted + 1`.
Speculation runs only while at most `max_rows` rows decode (the long tail: a forward over k+1 positions costs about
one position's there; in a full batch it costs up to k+1 times as much).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from contract.spec import SPECULATIVE_TAIL_DIVISOR, SpeculativeMode
from workers.generation.engines.kv_columns import SpareColumnsCache
from workers.generation.engines.sampling import sample_with_uniforms
from workers.generation.engines.suffix_draft import SuffixDrafter

K_INIT = 8  # draft tokens a row starts with
K_MAX = 16  # and at most


@dataclass(frozen=True)
class Speculation:
    """How a batch speculates: `max_rows` (speculate while at most this many rows decode; 0: never)."""

    max_rows: int = 0
    k_max: int = K_MAX

    @property
    def enabled(self) -> bool:
        return self.max_rows > 0


class Batch(Protocol):
    """What a verify step uses of `ContinuousBatcher` (hf_batch.py); rows are its `_Row`s."""

    model: Any
    tokenizer: Any
    device: torch.device
    cache: SpareColumnsCache
    rows: list[Any]
    last_tokens: torch.Tensor
    speculation: Speculation
    drafter: SuffixDrafter
    max_positions: int

    def lengths(self) -> torch.Tensor: ...
    def valid_columns(self, width: int) -> torch.Tensor: ...
    def adapter_context(self, names: list[str | None]) -> AbstractContextManager[Any]: ...
    def truncate_cache(self, width: int) -> None: ...
    def add_columns(self, kept: torch.Tensor) -> None: ...
    def emit(self, tokens: list[list[int]], logprobs: list[list[float]], first: int = 0) -> list[int]: ...
    def compact_if_wasteful(self) -> None: ...


def speculation_for(mode: SpeculativeMode, max_batch_size: int, max_rows: int | None = None) -> Speculation:
    """`generation.speculative` for an engine of `max_batch_size` rows (`auto` resolved by the engine first: its
    `speculative_default`); `max_rows` overrides the tail threshold."""
    if mode != "group":
        return Speculation()
    tail = max(1, max_batch_size // SPECULATIVE_TAIL_DIVISOR)
    return Speculation(max_rows=max_rows if max_rows is not None else tail)


def drafts_for(batcher: Batch) -> list[list[int]] | None:
    """Each row's draft (maybe empty), or None when this step should be a plain decode step."""
    spec = batcher.speculation
    if not spec.enabled or len(batcher.rows) > spec.max_rows:
        return None
    drafts = []
    for row in batcher.rows:
        used = len(row.request.prompt_ids) + len(row.response_ids)
        room = min(row.request.sampling.max_tokens - len(row.response_ids),  # the step emits one more than accepted
                   batcher.max_positions - used) - 1  # and the drafts' positions must exist
        k = min(row.draft_k, spec.k_max, max(room, 0))
        drafts.append(batcher.drafter.propose(row.draft, k) if row.draft is not None else [])
    return drafts if any(drafts) else None


@torch.no_grad()
def verify_step(batcher: Batch, drafts: list[list[int]]) -> list[int]:
    """One forward over each row's last token and draft; emit the accepted tokens; return the rows that finished."""
    rows, device = batcher.rows, batcher.device
    width = batcher.cache.get_seq_length()
    k_max = max(len(d) for d in drafts)
    lengths = batcher.lengths()  # (B,) tokens each row has in the cache
    pad = int(batcher.tokenizer.pad_token_id or 0)
    ids = torch.tensor([[pad] * (k_max + 1) for _ in rows], device=device)  # (B, K+1)
    ids[:, 0] = batcher.last_tokens
    for i, draft in enumerate(drafts):
        if draft:
            ids[i, 1:len(draft) + 1] = torch.tensor(draft, device=device)
    counts = torch.tensor([len(d) for d in drafts], device=device)  # (B,)
    offsets = torch.arange(k_max + 1, device=device)  # (K+1,)
    new_valid = offsets[None, :] <= counts[:, None]  # (B, K+1): a row's padding positions are masked out
    mask = torch.cat([batcher.valid_columns(width), new_valid], dim=1)  # (B, W+K+1)
    positions = lengths[:, None] + offsets[None, :]  # (B, K+1)
    with batcher.adapter_context([row.request.adapter for row in rows]):
        out = batcher.model(input_ids=ids, attention_mask=mask.long(), position_ids=positions,
                            past_key_values=batcher.cache, use_cache=True)
    logits = out.logits  # (B, K+1, V)

    emitted = _choose_tokens(logits, rows, drafts)
    kept = [len(e) for e in emitted]  # cache columns a row keeps: its last token and the accepted drafts
    new_width = width + max(kept)
    batcher.truncate_cache(new_width)
    keep_new = offsets[None, : max(kept)] < torch.tensor(kept, device=device)[:, None]  # (B, kept_max)
    batcher.add_columns(keep_new)
    for row, draft, got in zip(rows, drafts, emitted, strict=True):
        accepted = len(got) - 1
        row.proposed += len(draft)
        row.accepted += accepted
        row.speculative_forwards += 1
        if draft:
            row.draft_k = min(2 * row.draft_k, K_MAX) if accepted == len(draft) else accepted + 1
    finished = batcher.emit([[t for t, _ in got] for got in emitted], [[lp for _, lp in got] for got in emitted])
    batcher.compact_if_wasteful()
    return finished


def _choose_tokens(logits: torch.Tensor, rows: list[Any], drafts: list[list[int]]) -> list[list[tuple[int, float]]]:
    """Each row's emitted (token, behaviour logprob): positions 0..len(draft) chosen as a plain decode step would
    (one sampling call for all of them), kept up to and including the first that differs from the draft. Each row
    peeks at the uniforms of all its positions, then its generator is rewound and advanced by the tokens emitted
    only, so it ends exactly where a plain decode of those tokens leaves it."""
    flat_rows, flat_pos, uniforms, states = [], [], [], []
    for i, (row, draft) in enumerate(zip(rows, drafts, strict=True)):
        states.append(row.rng.getstate())
        for j in range(len(draft) + 1):
            flat_rows.append(i)
            flat_pos.append(j)
            uniforms.append(row.rng.random())
    index_rows = torch.tensor(flat_rows, device=logits.device)
    index_pos = torch.tensor(flat_pos, device=logits.device)
    tokens, logprobs = sample_with_uniforms(logits[index_rows, index_pos], [rows[i].request.sampling
                                                                           for i in flat_rows], uniforms)
    chosen = list(zip(tokens.tolist(), logprobs.tolist(), strict=True))
    emitted: list[list[tuple[int, float]]] = []
    at = 0
    for row, draft, state in zip(rows, drafts, states, strict=True):
        got = []
        for j in range(len(draft) + 1):
            got.append(chosen[at + j])
            if j == len(draft) or chosen[at + j][0] != draft[j]:
                break
        at += len(draft) + 1
        row.rng.setstate(state)
        for _ in got:
            row.rng.random()
        emitted.append(got)
    return emitted
