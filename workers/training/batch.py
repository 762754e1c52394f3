"""From `Sample`s to padded tensors, and from a causal-LM forward pass to response-aligned logprobs/entropy/values.

Layout: every sequence is [prompt, response] right-padded to L (B, L). Response token t of row b sits at
position p = prompt_len_b + t and is predicted by the logits at p - 1; `gather_positions` (B, T) holds those p - 1,
so every per-token tensor the losses see is response-aligned (B, T), left-aligned, padded with mask 0. A multi-turn
episode's environment tokens (its `loss_mask` 0) are in the sequence as context but have mask 0 like padding: every
loss, entropy, KL and token count skips them.

A forward pass costs (B x L) padded tokens, so `token_budget_batches` cuts a batch into length-sorted micro-batches
whose padded size stays within a token budget, choosing the cuts that pad least. (Packing several
sequences into one row with restarting `position_ids` is what transformers' masks support too, but on CPU its
sdpa/eager attention builds a dense mask over the packed row, so attention cost grows with the square of the packed
length; sorted budget batches remove most padding without that.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from contract.sample import Sample

# what one more forward/backward pass costs, in padded-token equivalents, when cutting by a token budget: a small
# constant so near-equal lengths share a pass instead of each running alone
PASS_COST_TOKENS = 32


@dataclass
class TokenBatch:
    input_ids: Tensor  # (B, L) prompt + response, right-padded with pad_id
    attention_mask: Tensor  # (B, L) 1 on real tokens
    gather_positions: Tensor  # (B, T) position of the logits predicting response token t
    response_ids: Tensor  # (B, T) response tokens, padded with 0
    mask: Tensor  # (B, T) float, 1.0 on the response tokens the loss trains (a sample's loss_mask), 0.0 elsewhere
    behaviour_logprobs: Tensor  # (B, T)

    @property
    def num_tokens(self) -> int:
        return int(self.mask.sum())

    def to(self, device: torch.device | str) -> TokenBatch:
        return TokenBatch(*(getattr(self, name).to(device) for name in self.__dataclass_fields__))


def sequence_length(sample: Sample) -> int:
    return len(sample.prompt_ids) + len(sample.response_ids)


def length_sorted_chunks(lengths: Sequence[int], size: int) -> list[list[int]]:
    """Indices of a whole batch, sorted by sequence length and cut into chunks of `size` (less padding per chunk)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    return [order[start : start + size] for start in range(0, len(order), size)]


def token_budget_batches(
    lengths: list[int], max_tokens: int, max_rows: int | None = None, pass_cost: int = PASS_COST_TOKENS
) -> list[list[int]]:
    """Indices into `lengths` cut into micro-batches of consecutive sequences in ascending length order, each within
    the budget (rows x longest <= `max_tokens`; a single longer sequence runs alone) and `max_rows`. Among those
    splits, the one with the least padded tokens + `pass_cost` per micro-batch (what one more forward/backward pass
    costs, in tokens): an exact dynamic programme over the sorted lengths, O(n x rows) in vectorised steps."""
    assert max_tokens >= 1 and (max_rows is None or max_rows >= 1)
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    ordered = np.array([lengths[i] for i in order], dtype=np.int64)
    n = len(order)
    best = np.zeros(n + 1, dtype=np.int64)  # best[k]: cheapest cost of the k shortest sequences
    start_of = np.zeros(n + 1, dtype=np.int64)  # where the last micro-batch of that split starts
    for end in range(1, n + 1):
        longest = int(ordered[end - 1])
        rows = max(1, max_tokens // max(longest, 1))
        if max_rows is not None:
            rows = min(rows, max_rows)
        starts = np.arange(max(0, end - rows), end)
        costs = best[starts] + (end - starts) * longest + pass_cost
        pick = int(np.argmin(costs))
        best[end], start_of[end] = costs[pick], starts[pick]
    batches: list[list[int]] = []
    end = n
    while end > 0:
        start = int(start_of[end])
        batches.append(order[start:end])
        end = start
    return batches[::-1]


def padded_tokens(lengths: list[int]) -> int:
    """What one padded micro-batch of these sequence lengths costs: rows x longest."""
    return len(lengths) * max(lengths, default=0)


def collate(samples: list[Sample], pad_id: int) -> TokenBatch:
    assert samples, "collate needs at least one sample"
    seq_len = max(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    resp_len = max(max(len(s.response_ids) for s in samples), 1)
    batch = len(samples)
    input_ids = torch.full((batch, seq_len), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((batch, seq_len), dtype=torch.long)
    gather_positions = torch.zeros((batch, resp_len), dtype=torch.long)
    response_ids = torch.zeros((batch, resp_len), dtype=torch.long)
    mask = torch.zeros((batch, resp_len))
    behaviour = torch.zeros((batch, resp_len))
    for row, sample in enumerate(samples):
        assert sample.prompt_ids, f"sample {sample.sample_id} has an empty prompt"
        tokens = sample.prompt_ids + sample.response_ids
        n_prompt, n_resp = len(sample.prompt_ids), len(sample.response_ids)
        input_ids[row, : len(tokens)] = torch.tensor(tokens)
        attention_mask[row, : len(tokens)] = 1
        gather_positions[row, :n_resp] = torch.arange(n_prompt - 1, n_prompt - 1 + n_resp)
        response_ids[row, :n_resp] = torch.tensor(sample.response_ids, dtype=torch.long)
        mask[row, :n_resp] = 1.0 if sample.loss_mask is None else torch.tensor(sample.loss_mask, dtype=torch.float32)
        behaviour[row, :n_resp] = torch.tensor(sample.behaviour_logprobs, dtype=torch.float32)
    return TokenBatch(input_ids, attention_mask, gather_positions, response_ids, mask, behaviour)


@dataclass
class PolicyOutputs:
    logprobs: Tensor  # (B, T)
    entropy: Tensor  # (B, T)
    values: Tensor | None  # (B, T) when a value head is given
    topk_ids: Tensor | None = None  # (B, T, k) the k most likely ids at each response position, when `topk` > 0
    topk_logprobs: Tensor | None = None  # (B, T, k) their logprobs (descending)
    at_ids: Tensor | None = None  # (B, T, K) the logprobs of `at_ids`' ids at each position, when given


def gather_rows(hidden: Tensor, positions: Tensor) -> Tensor:
    """hidden (B, L, D), positions (B, T) -> (B, T, D)."""
    return hidden.gather(1, positions[:, :, None].expand(-1, -1, hidden.shape[-1]))


def policy_forward(
    model: nn.Module, batch: TokenBatch, temperature: float, value_head: nn.Module | None = None, topk: int = 0,
    at_ids: Tensor | None = None,
) -> PolicyOutputs:
    """Logprobs of the response tokens under softmax(logits / temperature) -- the distribution the engine sampled
    from (temperature 0 means greedy; scored at temperature 1) -- plus entropy and, optionally, values; with `topk`
    the k most likely ids and their logprobs at each response position (on-policy distillation's teacher), with
    `at_ids` (B, T, K) the logprobs of those ids at each position (its student)."""
    out = model(
        input_ids=batch.input_ids, attention_mask=batch.attention_mask, output_hidden_states=value_head is not None
    )
    logits = gather_rows(out.logits, batch.gather_positions).float()  # (B, T, V)
    if temperature > 0:
        logits = logits / temperature
    log_probs = F.log_softmax(logits, dim=-1)  # (B, T, V)
    logprobs = log_probs.gather(-1, batch.response_ids[:, :, None]).squeeze(-1) * batch.mask  # (B, T)
    entropy = -(log_probs.exp() * log_probs).sum(-1) * batch.mask  # (B, T)
    values = None
    if value_head is not None:
        hidden = gather_rows(out.hidden_states[-1], batch.gather_positions)  # (B, T, D)
        values = value_head(hidden.float()).squeeze(-1) * batch.mask  # (B, T)
    outputs = PolicyOutputs(logprobs, entropy, values)
    if topk > 0:
        top = log_probs.topk(min(topk, log_probs.shape[-1]), dim=-1)
        outputs.topk_ids, outputs.topk_logprobs = top.indices, top.values  # (B, T, k)
    if at_ids is not None:
        outputs.at_ids = log_probs.gather(-1, at_ids)  # (B, T, K)
    return outputs
