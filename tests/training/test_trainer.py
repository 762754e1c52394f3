"""The trainer on a real tiny model: gradients vs an independent computation, accumulation, steps, checkpoints."""

from __future__ import annotations

from pathlib import Path

import torch
from training_fixtures import make_group, make_spec
from transformers import AutoModelForCausalLM

from contract.sample import Sample
from workers.training.batch import collate, policy_forward
from workers.training.trainer import Trainer

torch.set_num_threads(1)


def reference_grpo_grads(model: torch.nn.Module, samples: list[Sample], clip_eps: float) -> dict[str, torch.Tensor]:
    """Per-sample forward (no padding), TRL-style token-level GRPO loss, gradients of the model parameters."""
    model.zero_grad(set_to_none=True)
    rewards = torch.tensor([s.reward for s in samples]).view(-1, 4)
    advantages = ((rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)).flatten()
    total_tokens = sum(len(s.response_ids) for s in samples)
    for sample, advantage in zip(samples, advantages, strict=True):
        ids = torch.tensor([sample.prompt_ids + sample.response_ids])
        logits = model(input_ids=ids).logits[0, len(sample.prompt_ids) - 1 : -1]  # (T, V)
        logps = torch.log_softmax(logits, -1).gather(-1, torch.tensor(sample.response_ids)[:, None]).squeeze(-1)
        ratio = torch.exp(logps - torch.tensor(sample.behaviour_logprobs))
        per_token = -torch.min(ratio * advantage, torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * advantage)
        (per_token.sum() / total_tokens).backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def test_micro_steps_give_the_reference_gradient(tiny_model_dir: Path, samples: list[Sample]) -> None:
    trainer = Trainer(tiny_model_dir, make_spec(name="grpo"))
    for start in range(0, len(samples), 4):  # micro-steps of whole groups, as the streaming runtime sends them
        trainer.micro_step(samples[start : start + 4])
    tokens = sum(len(s.response_ids) for s in samples)
    ours = {name: p.grad / tokens for name, p in trainer.model.named_parameters() if p.grad is not None}
    reference = reference_grpo_grads(AutoModelForCausalLM.from_pretrained(tiny_model_dir), samples, 0.2)
    assert ours.keys() == reference.keys()
    for name, grad in reference.items():
        assert torch.allclose(ours[name], grad, atol=1e-5, rtol=1e-4), name


def test_accumulation_is_independent_of_the_micro_batch_split(tiny_model_dir: Path, samples: list[Sample]) -> None:
    whole = Trainer(tiny_model_dir, make_spec(name="grpo", kl_coef=0.1))
    whole.micro_step(samples)
    split = Trainer(tiny_model_dir, make_spec(name="grpo", kl_coef=0.1))
    advantages = split.algorithm.batch_advantages(samples)
    for start in range(0, len(samples), 5):  # cuts across groups: advantages passed explicitly
        split.micro_step(samples[start : start + 5], advantages[start : start + 5])
    for (name, a), (_, b) in zip(whole.model.named_parameters(), split.model.named_parameters(), strict=True):
        assert a.grad is not None and b.grad is not None
        assert torch.allclose(a.grad, b.grad, atol=1e-5, rtol=1e-4), name


def test_step_changes_parameters_and_reports_metrics(tiny_model_dir: Path, samples: list[Sample]) -> None:
    for algorithm in ("grpo", "ppo", "rloo", "reinforce_pp"):
        trainer = Trainer(tiny_model_dir, make_spec(name=algorithm, kl_coef=0.05, entropy_coef=0.01))
        before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
        metrics = trainer.train_iteration(samples)
        changed = sum(not torch.equal(before[name], p) for name, p in trainer.model.named_parameters())
        assert changed == len(before), algorithm
        for key in ("loss", "entropy", "kl", "clip_frac", "grad_norm", "lr"):
            assert key in metrics, (algorithm, key)
        assert metrics["grad_norm"] > 0 and metrics["lr"] == 1e-3 and trainer.version == 1
        if algorithm == "ppo":
            assert trainer.value_head is not None and trainer.value_head.weight.abs().sum() > 0


def test_trainer_old_logprobs_mode_applies_truncated_is(tiny_model_dir: Path, samples: list[Sample]) -> None:
    trainer = Trainer(tiny_model_dir, make_spec(name="grpo", is_cap=1.5), use_trainer_old_logprobs=True)
    metrics = trainer.micro_step(samples[:4])
    assert metrics["clip_frac"] == 0.0 and metrics["ratio"] == 1.0  # ratio against the trainer's own logprobs
    assert 0 < metrics["is_weight"] <= 1.5


def test_checkpoint_loads_in_transformers_and_resume_is_exact(tiny_model_dir: Path, tmp_path: Path) -> None:
    batch_a = make_group("a", [1.0, 0.0, 0.0, 1.0], seed=5) + make_group("b", [0.0, 1.0, 1.0, 1.0], seed=6)
    batch_b = make_group("c", [0.0, 0.0, 1.0, 0.0], seed=7) + make_group("d", [1.0, 0.5, 0.0, 0.2], seed=8)
    spec = make_spec(name="ppo", kl_coef=0.05)
    trainer = Trainer(tiny_model_dir, spec)
    trainer.train_iteration(batch_a)
    checkpoint = trainer.save_checkpoint(tmp_path / "iter_000001")

    loaded = AutoModelForCausalLM.from_pretrained(checkpoint)
    for (name, a), (_, b) in zip(loaded.named_parameters(), trainer.model.named_parameters(), strict=True):
        assert torch.equal(a, b), name

    trainer.train_iteration(batch_b)
    resumed = Trainer(tiny_model_dir, spec)
    assert resumed.load_checkpoint(checkpoint) == 1 and resumed.version == 1
    resumed.train_iteration(batch_b)
    for (name, a), (_, b) in zip(trainer.model.named_parameters(), resumed.model.named_parameters(), strict=True):
        assert torch.equal(a, b), name
    assert trainer.value_head is not None and resumed.value_head is not None
    assert torch.equal(trainer.value_head.weight, resumed.value_head.weight)


def test_export_and_sync_state_dict(tiny_model_dir: Path, tmp_path: Path) -> None:
    trainer = Trainer(tiny_model_dir, make_spec(name="grpo"))
    state = trainer.state_dict_for_sync()
    exported = trainer.export_weights(tmp_path / "v1")
    reloaded = AutoModelForCausalLM.from_pretrained(exported).state_dict()
    assert set(state) == set(reloaded)
    assert all(torch.equal(state[name], reloaded[name]) for name in state)
    assert (exported / "tokenizer.json").exists()


def test_a_step_raises_rewarded_and_lowers_unrewarded_logprobs(tiny_model_dir: Path) -> None:
    group = make_group("g", [1.0, 0.0, 0.0, 0.0], seed=11)
    trainer = Trainer(tiny_model_dir, make_spec(name="grpo"))

    def sequence_logprobs() -> list[float]:
        with torch.no_grad():
            out = policy_forward(trainer.model, collate(group, trainer.pad_id), temperature=1.0)
        return out.logprobs.sum(1).tolist()

    before = sequence_logprobs()
    trainer.train_iteration(group)
    after = sequence_logprobs()
    assert after[0] > before[0]
    assert sum(after[1:]) < sum(before[1:])
