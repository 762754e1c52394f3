"""The RL core: the verbs of one iteration that every loop uses (train-local, colocated, sync, async).

    schedule = PromptSchedule(rows, spec)                 # which prompts iteration j uses (seeded, epoch shuffles)
    groups = make_requests(schedule, j, encode, ...)      # group_size PromptRequests per prompt, deterministic ids
    samples = rollout(engine, reward, requests, ...)      # (colocated/local) generate + score -> Samples
    sample = to_sample(request, result, outcome, ...)     # (instances) the one place a Sample is built
    metrics = train_batch(trainer, samples)               # micro-steps + one optimizer step
    micro_step(trainer, held_groups); trainer.optimizer_step()   # (streaming) the same maths, chunk by chunk

Because every loop calls these, "train-local and the platform agree" holds by construction: the same spec and seed
give the same requests (ids, seeds, prompts), the same samples and the same loss (tests/training/test_parity.py).
"""

from workers.core.learn import group_advantages, micro_step, train_batch
from workers.core.prompts import PromptSchedule, iteration_of, make_requests, request_seed
from workers.core.rollout import generation_request, rollout, sampling_params, to_sample

__all__ = [
    "PromptSchedule", "generation_request", "group_advantages", "iteration_of", "make_requests", "micro_step",
    "request_seed", "rollout", "sampling_params", "to_sample", "train_batch",
]
