"""Next-token sampling shared by the engines, and the definition of the behaviour logprob they return.

Behaviour logprob of a sampled token (what `GenerationResult.logprobs` holds):
    temperature T > 0:  log softmax(topp_filter(logits / T, top_p))[token]
                        i.e. the log-probability under the exact distribution the token was drawn from: logits
                        scaled by 1/T, tokens outside the top-p nucleus removed, renormalised.
    temperature 0:      greedy (argmax); the logprob is log softmax(logits)[token] at temperature 1, unfiltered.
`logprob_temperature(params)` says which temperature that was (T, or 1.0 for greedy); with top_p == 1 a trainer that
recomputes log softmax(logits / logprob_temperature) reproduces these logprobs exactly.
vLLM gives the same quantity with `logprobs_mode="processed_logprobs"`.
"""

from __future__ import annotations

import random

import torch

from workers.generation.engine import SamplingParams


def logprob_temperature(params: SamplingParams) -> float:
    return params.temperature if params.temperature > 0 else 1.0


def top_p_mask(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Boolean (B, V): True for tokens inside each row's nucleus (smallest set with mass >= top_p; never empty)."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)  # (B, V)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass of strictly more likely tokens
    keep_sorted = mass_before < top_p[:, None]  # first token always kept (mass_before == 0)
    keep = torch.zeros_like(keep_sorted)
    return keep.scatter(-1, order, keep_sorted)


def sample_tokens(
    logits: torch.Tensor, params: list[SamplingParams], rngs: list[random.Random]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row. logits (B, V) -> tokens (B,), behaviour logprobs (B,) (see module docstring).

    Row i uses its own `rngs[i]` (one uniform draw per token, inverse-CDF sampling), so a seeded request samples the
    same tokens whatever else is in the batch.
    """
    return sample_with_uniforms(logits, params, [rng.random() for rng in rngs])


def sample_with_uniforms(
    logits: torch.Tensor, params: list[SamplingParams], uniforms: list[float]
) -> tuple[torch.Tensor, torch.Tensor]:
    """`sample_tokens` with row i's uniform given (`uniforms[i]`; ignored for greedy rows)."""
    logits = logits.float()
    batch = logits.shape[0]
    temps = torch.tensor([logprob_temperature(p) for p in params], device=logits.device)  # (B,)
    top_ps = torch.tensor([p.top_p for p in params], device=logits.device)  # (B,)
    greedy = torch.tensor([p.temperature <= 0 for p in params], device=logits.device)  # (B,)

    scaled = logits / temps[:, None]  # (B, V)
    if bool((top_ps < 1).any()):
        probs = scaled.softmax(dim=-1)
        nucleus = top_p_mask(probs, torch.where(greedy, torch.ones_like(top_ps), top_ps))
        scaled = scaled.masked_fill(~nucleus, float("-inf"))
    logp = scaled.log_softmax(dim=-1)  # (B, V)

    drawn_u = torch.tensor(uniforms, device=logits.device, dtype=torch.float64)  # (B,)
    cdf = logp.double().exp().cumsum(dim=-1)  # (B, V)
    drawn = torch.searchsorted(cdf, (drawn_u * cdf[:, -1])[:, None], right=True).squeeze(-1)  # (B,)
    drawn = drawn.clamp(max=logits.shape[-1] - 1)
    tokens = torch.where(greedy, logits.argmax(dim=-1), drawn)  # (B,)
    chosen = logp.gather(-1, tokens[:, None]).squeeze(-1)  # (B,)
    assert chosen.shape == (batch,)
    return tokens, chosen


def request_rng(params: SamplingParams, fallback: random.Random) -> random.Random:
    """A request's private generator: from its seed when given, else drawn from the engine's generator."""
    seed = params.seed if params.seed is not None else fallback.getrandbits(63)
    return random.Random(seed)
