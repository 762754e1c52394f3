"""In-flight weight updates on the real HF engine: a sequence whose tokens span two weights versions records both
(version marks), its sample's policy_version is the oldest, the trainer's per-token importance weights for it match a
hand computation, and the token-level staleness metric counts each token at its own version."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from contract import version_marks
from contract.sample import PromptRequest, Sample
from contract.spec import JobSpec
from workers.core import to_sample
from workers.generation.engine import GenerationRequest, GenerationResult, SamplingParams
from workers.generation.engines.hf import HFEngine
from workers.rewards import RewardOutcome
from workers.runtime.inflight import EpisodeVersions
from workers.runtime.metrics import sample_metrics
from workers.training.trainer import Trainer

SHORT, LONG = 5, 24  # response tokens of the two requests (the fixture model never emits EOS)


def forward_logprobs(model_dir: Path, prompt_ids: list[int], response_ids: list[int]) -> torch.Tensor:
    """log p(response token t | prompt, earlier response tokens) under the weights in `model_dir`, one full forward."""
    engine = HFEngine(model_dir)
    assert engine.model is not None
    with torch.no_grad():
        logits = engine.model(torch.tensor([prompt_ids + response_ids])).logits[0, len(prompt_ids) - 1 : -1]
    return logits.log_softmax(-1).gather(-1, torch.tensor(response_ids)[:, None]).squeeze(-1)  # (T,)


def run_with_update(model_dir: Path, new_weights: Path | None) -> dict[str, GenerationResult]:
    """A short and a long request decode together; when the short one finishes, weights v1 are loaded (unless
    `new_weights` is None) while the long one is still in flight."""
    engine = HFEngine(model_dir, max_batch_size=4)
    requests = [GenerationRequest("short", engine.encode("abc"), SamplingParams(temperature=0, max_tokens=SHORT)),
                GenerationRequest("long", engine.encode("hello world"), SamplingParams(temperature=0, max_tokens=LONG))]
    results = {}
    for result in engine.generate_stream(iter(requests)):
        results[result.request_id] = result
        if result.request_id == "short" and new_weights is not None:
            engine.update_weights(1, new_weights)
    return results


@pytest.fixture(scope="module")
def spanning(model_dir: Path, other_weights_dir: Path) -> GenerationResult:
    return run_with_update(model_dir, other_weights_dir)["long"]


def sample_of(result: GenerationResult, admitted: int = 0):  # type: ignore[no-untyped-def]
    request = PromptRequest(sample_id="3:0:0", group_id="3:0", prompt_id="p0", iteration=3,
                            prompt_ids=list(result.prompt_ids))
    return to_sample(request, result, RewardOutcome(1.0), job_id=1, version=admitted, instance_id="gen-0")


def test_a_sequence_spanning_two_versions_records_both(spanning: GenerationResult, model_dir: Path,
                                                       other_weights_dir: Path) -> None:
    # both rows took one token per step, so the long one had SHORT tokens when the weights changed
    assert spanning.version_marks == [[0, 0], [SHORT, 1]]
    behaviour = torch.tensor(spanning.logprobs)
    old = forward_logprobs(model_dir, spanning.prompt_ids, spanning.response_ids)
    new = forward_logprobs(other_weights_dir, spanning.prompt_ids, spanning.response_ids)
    # tokens before the mark were sampled by v0 exactly; after it, by v1 (on a KV cache v0 wrote: close to a
    # full v1 forward, far from v0)
    assert torch.allclose(behaviour[:SHORT], old[:SHORT], atol=1e-4)
    assert ((behaviour[SHORT:] - old[SHORT:]).abs() > 0.1).all()
    assert (behaviour[SHORT:] - new[SHORT:]).abs().mean() < (behaviour[SHORT:] - old[SHORT:]).abs().mean()
    sample = sample_of(spanning)
    assert sample.policy_version == 0 and sample.version_marks == [[0, 0], [SHORT, 1]]
    assert version_marks.token_versions(sample.version_marks, LONG, 0) == [0] * SHORT + [1] * (LONG - SHORT)


def test_without_an_update_every_token_has_the_admission_version(model_dir: Path) -> None:
    results = run_with_update(model_dir, None)
    assert results["long"].version_marks == [[0, 0]] and results["short"].version_marks == [[0, 0]]
    sample = sample_of(results["long"])
    assert sample.policy_version == 0 and sample.version_marks is None  # single-version samples carry no marks


def test_policy_version_is_the_oldest_token_not_the_admission(spanning: GenerationResult) -> None:
    """A request admitted under v0 whose tokens all came from v1 (the weights changed before its prefill)."""
    assert sample_of(GenerationResult(**{**spanning.__dict__, "version_marks": [[0, 1]]})).policy_version == 1


def test_importance_weights_of_a_two_version_sample_match_a_hand_computation(
        spanning: GenerationResult, other_weights_dir: Path) -> None:
    """Trainer at v1 (the new weights). Ratio pi_theta / pi_behaviour and the truncated IS weight
    min(pi_old / pi_behaviour, is_cap) are per token, from each token's own behaviour logprob (v0's for the tokens
    before the mark, v1's after)."""
    sample = sample_of(spanning)
    spec = JobSpec.model_validate({"model": "tiny", "dataset": {"builtin": "arithmetic"},
                                   "algorithm": {"name": "grpo", "group_size": 1, "is_cap": 2.0},
                                   "generation": {"temperature": 1.0}})
    hand = forward_logprobs(other_weights_dir, sample.prompt_ids, sample.response_ids)  # log pi_theta = log pi_old
    ratio = torch.exp(hand - torch.tensor(sample.behaviour_logprobs))
    for use_old, metric, expected in ((False, "ratio", ratio), (True, "is_weight", ratio.clamp(max=2.0))):
        trainer = Trainer(other_weights_dir, spec, use_trainer_old_logprobs=use_old)
        metrics = trainer.micro_step([sample], advantages=[1.0])
        assert metrics[metric] == pytest.approx(float(expected.mean()), rel=1e-4)
    # the check discriminates: one behaviour figure per sample (its mean logprob) would give another weight
    flat = torch.exp(hand - torch.tensor(sample.behaviour_logprobs).mean())
    assert abs(float(flat.mean()) - float(ratio.mean())) > 0.1 * float(ratio.mean())


def test_token_staleness_counts_each_token_at_its_version(spanning: GenerationResult) -> None:
    sample = sample_of(spanning)
    metrics = sample_metrics([sample, sample_of(GenerationResult(**{**spanning.__dict__, "version_marks": [[0, 1]]}))],
                             train_version=1)
    assert metrics["staleness_mean"] == pytest.approx(0.5)  # per sample: its oldest token
    assert metrics["token_staleness_mean"] == pytest.approx(SHORT / (2 * LONG))
    assert metrics["token_staleness_max"] == 1.0 and metrics["multi_version_fraction"] == 0.5


def test_episode_marks_are_the_turns_marks_at_their_spans() -> None:
    # turn 1 (tokens 0-9) on v2, environment tokens 10-13, turn 2 (14-) switched to v3 after two tokens
    assert version_marks.concat([(0, [[0, 2]]), (14, [[0, 2], [2, 3]])]) == [[0, 2], [16, 3]]
    assert version_marks.concat([(0, [[0, 2]]), (14, [[0, 3]])]) == [[0, 2], [14, 3]]
    assert version_marks.for_sample([[0, 4], [3, 4]], admitted=4) == (4, None)


def test_an_episode_sample_gets_its_turns_marks() -> None:
    """Two policy turns (tokens 0-3 on v2, 6-8 switched to v3 after one token) around environment tokens 4-5."""
    episode = Sample(job_id=1, prompt_id="p", group_id="3:0", sample_id="3:0:0", policy_version=2, prompt_ids=[1],
                     response_ids=list(range(9)), behaviour_logprobs=[-0.1] * 9, finish_reason="stop",
                     loss_mask=[1, 1, 1, 1, 0, 0, 1, 1, 1], turns=2, turn_spans=[[0, 4], [6, 9]])
    versions = EpisodeVersions()
    versions.turn("3:0:0", 0, [[0, 2]])
    versions.turn("3:0:0", 6, [[0, 2], [1, 3]])
    stamped = versions.stamp("3:0:0", episode)
    assert stamped.policy_version == 2 and stamped.version_marks == [[0, 2], [7, 3]]
    assert sample_metrics([stamped], train_version=3)["token_staleness_mean"] == pytest.approx(5 / 7)  # trained only
    assert versions.stamp("3:0:0", episode) is episode  # marks are used once; none recorded: unchanged
