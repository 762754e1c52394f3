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

Where it pays (`paced`, the default): the pass computes k_max + 1 positions for EVERY row (drafts are padded to the
longest), so k is one choice per step. `StepCost` fits a forward's seconds as a + b * positions from the steps this
engine has timed (plain and verifying, forgetting old ones); each row's per-token acceptance alpha is estimated from
its own verified drafts (shrunk towards the engine's overall rate). A step verifies k draft tokens when that
maximises the expected tokens per second, (B + sum_r sum_{j<=min(k, len(d_r))} alpha_r^j) / cost(B * (k + 1)),
over plain decoding's B / cost(B); otherwise it is a plain decode step. So a wide batch, where extra positions cost
nearly as much as the row tokens already in the pass, or rows whose drafts keep failing, get plain steps, and a
near-idle device (the long tail: the fixed cost a dominates) verifies long drafts. Drafting runs only while at most
`max_rows` rows decode (the tail). `paced=False` (tests) verifies every row's whole draft (up to k_max) each step.
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

K_MAX = 16  # draft tokens a row proposes at most
ALPHA_PRIOR = 4.0  # a row's acceptance estimate counts the engine's overall rate as this many verified positions
COST_DECAY = 0.97  # StepCost: weight of an earlier step relative to the next
FLAT_POSITIONS = 32.0  # StepCost before it has timed steps of different widths: a / b (cost(32 positions) = 2 a)


@dataclass(frozen=True)
class Speculation:
    """How a batch speculates: `max_rows` (speculate while at most this many rows decode; 0: never)."""

    max_rows: int = 0
    k_max: int = K_MAX
    paced: bool = True  # choose k per step from StepCost and the rows' acceptance (False: always the whole draft)

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
    step_cost: StepCost
    max_positions: int

    def lengths(self) -> torch.Tensor: ...
    def valid_columns(self, width: int) -> torch.Tensor: ...
    def adapter_context(self, names: list[str | None]) -> AbstractContextManager[Any]: ...
    def truncate_cache(self, width: int) -> None: ...
    def add_columns(self, kept: torch.Tensor) -> None: ...
    def emit(self, tokens: list[list[int]], logprobs: list[list[float]], first: int = 0) -> list[int]: ...
    def compact_if_wasteful(self) -> None: ...


class StepCost:
    """Seconds of one decode forward as a + b * positions: least squares over the timed steps, each earlier step
    weighted COST_DECAY times less than the next (batch widths and the machine's load drift)."""

    def __init__(self) -> None:
        self.w = self.n = self.nn = self.t = self.nt = 0.0  # weighted sums of 1, n, n^2, t, n*t
        self.accepted = self.trials = 0.0  # every row's verified draft positions: accepted, and accepted + rejected

    def observe(self, positions: int, seconds: float) -> None:
        d = COST_DECAY
        self.w, self.n, self.nn = d * self.w + 1, d * self.n + positions, d * self.nn + positions * positions
        self.t, self.nt = d * self.t + seconds, d * self.nt + positions * seconds

    def coefficients(self) -> tuple[float, float]:
        """(a, b); before steps of different widths were timed, a = FLAT_POSITIONS * b."""
        if self.w == 0:
            return FLAT_POSITIONS, 1.0
        mean_n, mean_t = self.n / self.w, self.t / self.w
        var = self.nn / self.w - mean_n * mean_n
        if var > 1.0:
            b = (self.nt / self.w - mean_n * mean_t) / var
            a = mean_t - b * mean_n
            if a > 0 and b > 0:
                return a, b
        b = mean_t / (mean_n + FLAT_POSITIONS)
        return FLAT_POSITIONS * b, b

    def alpha(self, accepted: int, trials: int) -> float:
        """A row's per-token acceptance: its own verified positions, shrunk towards the engine's overall rate."""
        overall = (self.accepted + 1) / (self.trials + 2)
        return min(0.98, max(0.02, (accepted + ALPHA_PRIOR * overall) / (trials + ALPHA_PRIOR)))


def best_k(cost: StepCost, alphas: list[float], lengths: list[int]) -> int:
    """The draft length k (0: a plain step) maximising expected tokens per second for rows with acceptance
    `alphas` and drafts of `lengths` tokens (a row emits 1 + its accepted tokens; the pass costs B * (k + 1))."""
    a, b = cost.coefficients()
    rows = len(alphas)
    best, best_rate = 0, rows / (a + b * rows)
    for k in range(1, max(lengths, default=0) + 1):
        tokens = rows + sum((alpha - alpha ** (min(n, k) + 1)) / (1 - alpha) for alpha, n in
                            zip(alphas, lengths, strict=True))
        rate = tokens / (a + b * rows * (k + 1))
        if rate > best_rate:
            best, best_rate = k, rate
    return best


def speculation_for(mode: SpeculativeMode, max_batch_size: int, max_rows: int | None = None,
                    paced: bool = True) -> Speculation:
    """`generation.speculative` for an engine of `max_batch_size` rows (`auto` resolved by the engine first: its
    `speculative_default`); `max_rows` overrides the tail threshold; `paced=False` verifies whole drafts (tests)."""
    if mode != "group":
        return Speculation()
    tail = max(1, max_batch_size // SPECULATIVE_TAIL_DIVISOR)
    return Speculation(max_rows=max_rows if max_rows is not None else tail, paced=paced)


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
        k = min(spec.k_max, max(room, 0))
        drafts.append(batcher.drafter.propose(row.draft, k) if row.draft is not None else [])
    if not any(drafts):
        return None
    if spec.paced:
        cost = batcher.step_cost
        k = best_k(cost, [cost.alpha(row.accepted, row.accepted + row.rejected) for row in batcher.rows],
                   [len(d) for d in drafts])
        if k == 0:
            return None
        drafts = [d[:k] for d in drafts]
    return drafts


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
        rejected = int(accepted < len(draft))
        row.rejected += rejected
        batcher.step_cost.accepted += accepted
        batcher.step_cost.trials += accepted + rejected
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
