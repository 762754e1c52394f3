"""The RL core: the verbs of one iteration that every mode uses (train-local, colocated, sync, async).

    schedule = PromptSchedule(rows, spec)                 # which prompts iteration j uses (seeded, epoch shuffles)
    groups = make_requests(schedule, j, encode, ...)      # group_size PromptRequests per prompt, deterministic ids
    samples = rollout(engine, reward, requests, ...)      # (colocated/local) generate + score -> Samples
    sample = to_sample(request, result, outcome, ...)     # (instances) a completion; episodes: episode_sample
                                                          # both through build_sample, the one Sample constructor
    batcher = MicroBatcher(algorithm, spec.training)      # complete groups in -> scored micro-batches out
    trainer.micro_step(...) per micro-batch; trainer.optimizer_step()   # workers/runtime/driver.py, every mode

Because every mode calls these, "train-local and the platform agree" holds by construction: the same spec and seed
give the same requests (ids, seeds, prompts), the same samples and the same loss
(tests/integration/test_runtime_parity.py).
"""

from workers.core.learn import MicroBatcher, Scored, unzip
from workers.core.prompts import PromptSchedule, iteration_of, make_requests, request_seed
from workers.core.rollout import generation_request, rollout, sampling_params, to_sample
from workers.core.sample import build_sample

__all__ = [
    "MicroBatcher", "PromptSchedule", "Scored", "build_sample", "generation_request", "iteration_of", "make_requests",
    "request_seed", "rollout", "sampling_params", "to_sample", "unzip",
]
