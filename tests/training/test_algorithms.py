"""The algorithms' maths against independent reference computations and hand-computed cases."""

from __future__ import annotations

import math

import pytest
import torch
from training_fixtures import make_group

from contract.spec import AlgorithmSpec
from workers.training.algorithms import LossInputs, setup_algorithm
from workers.training.algorithms.importance import truncated_is_weight
from workers.training.algorithms.ppo import gae

torch.set_num_threads(1)


def trl_grpo_reference(logits, response_ids, mask, old_logps, ref_logps, rewards, group_size, beta, eps):
    """GRPO written the way TRL's GRPOTrainer computes it (loss_type="bnpo": token-level), independently."""
    per_token_logps = torch.log_softmax(logits, dim=-1).gather(-1, response_ids.unsqueeze(-1)).squeeze(-1)
    mean_grouped = rewards.view(-1, group_size).mean(dim=1).repeat_interleave(group_size, dim=0)
    std_grouped = rewards.view(-1, group_size).std(dim=1).repeat_interleave(group_size, dim=0)
    advantages = (rewards - mean_grouped) / (std_grouped + 1e-4)
    per_token_kl = torch.exp(ref_logps - per_token_logps) - (ref_logps - per_token_logps) - 1
    coef_1 = torch.exp(per_token_logps - old_logps)
    coef_2 = torch.clamp(coef_1, 1 - eps, 1 + eps)
    per_token_loss1 = coef_1 * advantages.unsqueeze(1)
    per_token_loss2 = coef_2 * advantages.unsqueeze(1)
    per_token_loss = -torch.min(per_token_loss1, per_token_loss2)
    per_token_loss = per_token_loss + beta * per_token_kl
    return (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)


def test_grpo_loss_and_gradients_match_trl_reference() -> None:
    torch.manual_seed(0)
    groups, group_size, length, vocab = 3, 4, 6, 11
    batch = groups * group_size
    logits = torch.randn(batch, length, vocab, dtype=torch.float64)
    response_ids = torch.randint(0, vocab, (batch, length))
    lengths = torch.randint(1, length + 1, (batch,))
    mask = (torch.arange(length)[None, :] < lengths[:, None]).double()
    base = torch.log_softmax(logits, -1).gather(-1, response_ids.unsqueeze(-1)).squeeze(-1)
    old_logps = (base + 0.3 * torch.randn_like(base)).detach()  # ratios far enough from 1 to clip
    ref_logps = (base + 0.2 * torch.randn_like(base)).detach()
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.2, 0.9, 0.4, 0.4, 1.0, 1.0, 1.0, 0.0], dtype=torch.float64)
    beta, eps = 0.04, 0.2

    ours_logits = logits.clone().requires_grad_(True)
    algorithm = setup_algorithm(AlgorithmSpec(name="grpo", group_size=group_size, clip_eps=eps, kl_coef=beta))
    samples = [s for g in range(groups) for s in make_group(f"g{g}", rewards[g * 4 : g * 4 + 4].tolist(), seed=g)]
    advantages = torch.tensor(algorithm.batch_advantages(samples), dtype=torch.float64)
    logps = torch.log_softmax(ours_logits, -1).gather(-1, response_ids.unsqueeze(-1)).squeeze(-1)
    inputs = LossInputs(logprobs=logps, behaviour_logprobs=old_logps, mask=mask, scores=advantages,
                        ref_logprobs=ref_logps)
    loss, metrics = algorithm.loss(inputs)
    loss.backward()

    ref_logits = logits.clone().requires_grad_(True)
    expected = trl_grpo_reference(ref_logits, response_ids, mask, old_logps, ref_logps, rewards, group_size, beta, eps)
    expected.backward()

    assert abs(loss.item() - expected.item()) < 1e-5
    assert ours_logits.grad is not None and ref_logits.grad is not None
    assert torch.allclose(ours_logits.grad, ref_logits.grad, atol=1e-5, rtol=0)
    assert 0 < metrics["clip_frac"] < 1, "the case must exercise clipping"
    assert metrics["kl"] > 0


def test_grpo_advantages_hand_checked() -> None:
    grpo = setup_algorithm(AlgorithmSpec(name="grpo"))
    group = make_group("g", [1.0, 0.0, 0.0, 1.0], seed=0)
    std = math.sqrt(1 / 3)  # unbiased std of [1, 0, 0, 1]
    values = grpo.advantages(group)
    assert values == pytest.approx([0.5 / (std + 1e-4), -0.5 / (std + 1e-4), -0.5 / (std + 1e-4), 0.5 / (std + 1e-4)])
    assert grpo.advantages(make_group("g", [0.7, 0.7], seed=0)) == [0.0, 0.0]
    assert grpo.advantages(make_group("g", [0.7], seed=0)) == [0.0]


def test_rloo_advantages_hand_checked() -> None:
    rloo = setup_algorithm(AlgorithmSpec(name="rloo"))
    group = make_group("g", [1.0, 0.0, 0.0, 1.0], seed=0)
    assert rloo.advantages(group) == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3])
    assert rloo.advantages(make_group("g", [3.0, 1.0], seed=0)) == pytest.approx([2.0, -2.0])


def test_reinforce_pp_returns_and_whitening_hand_checked() -> None:
    algorithm = setup_algorithm(AlgorithmSpec(name="reinforce_pp", kl_coef=0.5, gamma=1.0))
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    behaviour = torch.tensor([[-1.0, -2.0], [-1.0, 0.0]])
    ref = torch.tensor([[-1.1, -2.2], [-1.0, 0.0]])  # old - ref = [0.1, 0.2], [0, -]
    inputs = LossInputs(logprobs=behaviour.clone(), behaviour_logprobs=behaviour, mask=mask,
                        scores=torch.tensor([1.0, 0.0]), ref_logprobs=ref)
    prepared = algorithm.prepare(inputs)
    assert prepared.returns is not None and prepared.advantages is not None
    # rho = [-0.05, -0.1 + 1], [0]: returns-to-go [0.85, 0.9], [0]
    assert torch.allclose(prepared.returns, torch.tensor([[0.85, 0.9], [0.0, 0.0]]), atol=1e-6)
    tokens = torch.tensor([0.85, 0.9, 0.0])
    whitened = (tokens - tokens.mean()) / tokens.std(unbiased=False)
    assert torch.allclose(prepared.advantages[mask.bool()], whitened, atol=1e-4)
    assert prepared.advantages[1, 1] == 0.0
    assert algorithm.advantages(make_group("g", [0.3, 0.9], seed=0)) == [0.3, 0.9]


def test_gae_hand_computed() -> None:
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
    values = torch.tensor([[0.5, 0.6, 0.7], [1.0, 0.5, 9.9]])  # 9.9 sits on padding and must be ignored
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    advantages, returns = gae(rewards, values, mask, gamma=0.9, lam=0.8)
    # row 0: deltas 0.04, 0.03, 0.3; A2 = 0.3, A1 = 0.03 + 0.72 * 0.3, A0 = 0.04 + 0.72 * A1
    expected = torch.tensor([[0.21712, 0.246, 0.3], [0.53, 1.5, 0.0]])
    assert torch.allclose(advantages, expected, atol=1e-6)
    assert torch.allclose(returns, torch.tensor([[0.71712, 0.846, 1.0], [1.53, 2.0, 0.0]]), atol=1e-6)


def test_ppo_value_loss_is_clipped_around_old_values() -> None:
    ppo = setup_algorithm(AlgorithmSpec(name="ppo", clip_eps=0.2, vf_coef=1.0, gamma=1.0, lam=1.0))
    mask = torch.ones(1, 2)
    logprobs = torch.tensor([[-1.0, -1.0]], requires_grad=True)
    values = torch.tensor([[0.0, 1.0]], requires_grad=True)
    inputs = LossInputs(logprobs=logprobs, behaviour_logprobs=logprobs.detach(), mask=mask,
                        scores=torch.tensor([1.0]), values=values, old_values=torch.tensor([[0.0, 0.5]]))
    loss, metrics = ppo.loss(inputs)
    # returns with gamma = lam = 1: R_t = 1 for both tokens; V1 clipped to 0.7: max((1-1)^2, (0.7-1)^2) = 0.09
    assert metrics["value_loss"] == pytest.approx(0.5 * (1.0 + 0.09) / 2)
    loss.backward()
    assert values.grad is not None and values.grad[0, 1] == 0.0  # the clipped branch carries no gradient


def test_truncated_is_weight_and_decoupled_loss() -> None:
    old = torch.log(torch.tensor([[0.3, 0.1, 0.4]]))
    behaviour = torch.log(torch.tensor([[0.1, 0.2, 0.4]]))
    weights = truncated_is_weight(old, behaviour, is_cap=2.0)
    assert torch.allclose(weights, torch.tensor([[2.0, 0.5, 1.0]]))  # 3 capped at 2, 0.5, 1

    grpo = setup_algorithm(AlgorithmSpec(name="grpo", is_cap=2.0))
    logprobs = old.clone().requires_grad_(True)
    inputs = LossInputs(logprobs=logprobs, behaviour_logprobs=behaviour, old_logprobs=old, mask=torch.ones(1, 3),
                        scores=torch.tensor([1.0]))
    loss, metrics = grpo.loss(inputs)
    loss.backward()
    # ratio pi_theta / pi_old = 1 (no clipping): d loss / d logp_t = -w_t * A / 3
    assert logprobs.grad is not None
    assert torch.allclose(logprobs.grad, -weights / 3)
    assert metrics["is_weight"] == pytest.approx(3.5 / 3)


def test_unknown_algorithm_is_a_clear_error() -> None:
    spec = AlgorithmSpec.model_construct(name="nope")  # bypasses validation the way a stale config could
    with pytest.raises(ValueError, match="unknown algorithm 'nope'"):
        setup_algorithm(spec)
