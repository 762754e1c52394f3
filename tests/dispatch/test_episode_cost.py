"""Turn-aware dispatch: what the length ranker learns of an episode is its cost (policy tokens, environment tokens
prefilled, one admission per turn), so a prompt whose episodes take many turns ranks above one whose episodes have
as many tokens in one turn."""

from __future__ import annotations

from contract.reporter import MemoryReporter
from contract.sample import Sample
from contract.spec import JobSpec
from workers.core.prompts import PromptSchedule, TokenCache
from workers.dispatch.cost import PREFILL_WEIGHT, TURN_TOKENS, sample_cost
from workers.runtime.dispatching import PromptDispatcher


def _sample(prompt_id: str, tokens: int, turns: int = 0, environment: int = 0) -> Sample:
    """`tokens` response tokens; an episode of `turns` turns when turns > 0, `environment` of them masked out."""
    mask = None if turns == 0 else [1] * (tokens - environment) + [0] * environment
    return Sample(job_id=1, prompt_id=prompt_id, group_id=f"0:{prompt_id}", sample_id=f"0:{prompt_id}:0",
                  policy_version=0, prompt_ids=[1], response_ids=list(range(tokens)), behaviour_logprobs=[0.0] * tokens,
                  finish_reason="stop", reward=0.0, prompt_text=f"solve {prompt_id}", loss_mask=mask, turns=turns)


def test_a_single_turn_sample_costs_its_length_and_an_episode_its_turns_too() -> None:
    assert sample_cost(_sample("a", 40)) == 40
    assert sample_cost(_sample("b", 40, turns=1)) == 40  # one turn, all the policy's
    assert sample_cost(_sample("c", 40, turns=4, environment=20)) == 20 + round(20 * PREFILL_WEIGHT) + 3 * TURN_TOKENS
    assert sample_cost(_sample("d", 40, turns=4, environment=20)) > sample_cost(_sample("e", 40, turns=2,
                                                                                         environment=20))


def test_the_dispatcher_ranks_many_turn_episodes_above_equally_long_single_turn_ones() -> None:
    spec = JobSpec.model_validate({"model": "m", "dataset": {"builtin": "long_tail"}})
    dispatcher = PromptDispatcher(spec, PromptSchedule([{"prompt_id": "x", "prompt": "x"}], spec),
                                  TokenCache(lambda t: [len(t)]), job_id=1, reporter=MemoryReporter())
    samples = [_sample(f"many{i}", 60, turns=6, environment=30) for i in range(8)]
    samples += [_sample(f"one{i}", 60, turns=1) for i in range(8)]
    for _ in range(3):
        dispatcher.observe(samples)
    rows = [{"prompt_id": s.prompt_id, "prompt": s.prompt_text} for s in samples]
    predicted = dispatcher.policy.predict(rows)
    many, one = predicted[:8], predicted[8:]
    assert min(many) > max(one), (many, one)
    assert max(one) < 61 < min(many)  # costs, in tokens: 60 for one turn; 30 + 8 + 5 * 16 for six
