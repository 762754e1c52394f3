"""The Tinker losses cispo, dro and gspo against a hand computation (loss and gradient per logprob, 1e-5)."""

from __future__ import annotations

import math

import pytest
import torch

from workers.training.tinker_losses import datum_loss

LOGPROBS = [-1.2, -0.3, -2.5, -0.05, -1.7]
SAMPLING = [-1.0, -0.9, -2.4, -0.5, -1.65]  # ratios 0.82, 1.82, 0.90, 1.57, 0.95: some clipped, some not
ADVANTAGES = [1.0, 0.5, -2.0, -1.0, 0.25]
INPUTS = {"target_tokens": [1, 2, 3, 4, 5], "logprobs": SAMPLING, "advantages": ADVANTAGES}


def _loss_and_grad(loss_fn: str, inputs: dict, config: dict) -> tuple[float, list[float]]:
    logprobs = torch.tensor(LOGPROBS, dtype=torch.float64, requires_grad=True)
    loss = datum_loss(loss_fn, logprobs, inputs, config)
    loss.backward()
    assert logprobs.grad is not None
    return float(loss.detach()), logprobs.grad.tolist()


def _clip(value: float, low: float, high: float) -> float:
    return min(max(value, low), high)


def _close(got: list[float] | float, want: list[float] | float) -> None:
    assert got == pytest.approx(want, abs=1e-5)


@pytest.mark.parametrize("low,high", [(0.8, 1.2), (0.5, 1.6)])
def test_cispo_weights_each_logprob_by_its_clipped_ratio(low: float, high: float) -> None:
    weights = [_clip(math.exp(lp - q), low, high) for lp, q in zip(LOGPROBS, SAMPLING, strict=True)]
    want = -sum(w * lp * a for w, lp, a in zip(weights, LOGPROBS, ADVANTAGES, strict=True))
    got, grad = _loss_and_grad("cispo", INPUTS, {"clip_low_threshold": low, "clip_high_threshold": high})
    _close(got, want)
    _close(grad, [-w * a for w, a in zip(weights, ADVANTAGES, strict=True)])  # the weight carries no gradient


@pytest.mark.parametrize("beta", [None, 0.3])
def test_dro_is_the_advantage_term_less_a_quadratic_penalty(beta: float | None) -> None:
    b = 0.05 if beta is None else beta
    want = -sum(lp * a - 0.5 * b * (lp - q) ** 2 for lp, q, a in zip(LOGPROBS, SAMPLING, ADVANTAGES, strict=True))
    got, grad = _loss_and_grad("dro", INPUTS, {} if beta is None else {"beta": beta})
    _close(got, want)
    _close(grad, [-(a - b * (lp - q)) for lp, q, a in zip(LOGPROBS, SAMPLING, ADVANTAGES, strict=True)])


@pytest.mark.parametrize("mask,low,high", [(None, 0.8, 1.2), ([1, 0, 1, 0, 1], 0.8, 1.2), (None, 0.9, 1.05),
                                           ([0, 1, 0, 1, 0], 0.8, 1.2)])
def test_gspo_gives_every_token_the_sequence_ratio(mask: list[int] | None, low: float, high: float) -> None:
    marked = [i for i in range(len(LOGPROBS)) if mask is None or mask[i]]
    s = math.exp(sum(LOGPROBS[i] - SAMPLING[i] for i in marked) / len(marked))
    want = -sum(min(s * a, _clip(s, low, high) * a) for a in ADVANTAGES)
    # d/d logprob_t: the unclipped branch is s * A_t (s's value, the token's own gradient); the clipped one is flat
    want_grad = [-s * a if s * a <= _clip(s, low, high) * a else 0.0 for a in ADVANTAGES]
    inputs = dict(INPUTS) if mask is None else {**INPUTS, "sequence_ratio_mask": mask}
    got, grad = _loss_and_grad("gspo", inputs, {"clip_low_threshold": low, "clip_high_threshold": high})
    _close(got, want)
    _close(grad, want_grad)


def test_gspo_with_no_token_in_the_ratio_is_refused() -> None:
    with pytest.raises(ValueError, match="sequence_ratio_mask marks no token"):
        _loss_and_grad("gspo", {**INPUTS, "sequence_ratio_mask": [0] * 5}, {})


def test_policy_losses_need_the_sampling_logprobs() -> None:
    for loss_fn in ("cispo", "dro", "gspo"):
        with pytest.raises(ValueError, match="loss_fn_inputs.logprobs is required"):
            _loss_and_grad(loss_fn, {"target_tokens": [1] * 5, "advantages": ADVANTAGES}, {})
