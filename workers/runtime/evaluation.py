"""The evaluation runner (`generation.run_evaluation`, a task on the generation pool: it holds one generation slot
while it runs, beside the jobs' instances, so training is never paused by it).

    run_evaluation(evaluation_id, store, device="cpu")   # store: contract.evaluation.EvaluationStore

One suite on one model directory: the suite's prompts (its dataset's eval split) each sampled `samples_per_prompt`
times by the hf engine (seeded per sample, so a rerun gives the same outputs), scored by the suite's reward or
grader, summarised as mean, pass@1 and pass@k (contract/evaluation.py). The store gets the summary (with the
generation's `device_seconds` and `tokens_generated`: the team's usage) and the per-row outputs and scores, or the
error that stopped it.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from contract.evaluation import MAX_STORED_ROWS, EvaluationStore, EvaluationTask, summarize
from contract.spec import EvalSuiteSpec
from workers.core.chat import ChatEncoder
from workers.core.prompts import EVAL_PREFIX, make_requests
from workers.core.rollout import generation_request
from workers.datasets import load_dataset, read_jsonl
from workers.generation.engine import SamplingParams
from workers.generation.engines.hf import HFEngine
from workers.rewards.factory import build_reward

log = logging.getLogger(__name__)
BATCH = 32


def suite_rows(suite: EvalSuiteSpec, dataset_path: str | None, seed: int) -> list[dict[str, Any]]:
    """The suite's prompts: a built-in task's eval split; a file's (uploaded or local) last `eval_prompts` rows."""
    dataset = suite.dataset
    if dataset.builtin is not None:
        return load_dataset(dataset, split="eval", seed=seed)
    path = dataset_path if dataset.id is not None else dataset.path
    if path is None:
        raise ValueError("the suite's dataset file is not available")
    rows = read_jsonl(path)
    return rows[-dataset.eval_prompts:] if dataset.eval_prompts else rows


def evaluate(task: EvaluationTask, device: str) -> tuple[dict[str, float], list[dict[str, Any]]]:
    suite = EvalSuiteSpec.model_validate(task.suite)
    if suite.scorer is None:
        raise ValueError("the suite has neither reward nor grader")
    rows = suite_rows(suite, task.dataset_path, task.seed)
    if not rows:
        raise ValueError("the suite's dataset has no evaluation prompts (dataset.eval_prompts)")
    if not Path(task.model_dir).is_dir():
        raise ValueError(f"the model directory {task.model_dir} is gone (deleted by checkpoint retention?)")
    dtype = str((task.generation or {}).get("dtype") or "float32")
    engine = HFEngine(task.model_dir, max_batch_size=BATCH, device=device, dtype=dtype, seed=task.seed)
    encoder = ChatEncoder(engine.tokenizer, system_prompt=suite.dataset.system_prompt)
    groups = make_requests(rows, 0, group_size=suite.samples_per_prompt, encode=encoder, job_seed=task.seed,
                           min_version=0, group_prefix=EVAL_PREFIX)
    sampling = SamplingParams(temperature=suite.sampling.temperature, top_p=suite.sampling.top_p,
                              max_tokens=suite.sampling.max_tokens)
    requests = {r.sample_id: r for group in groups for r in group}
    texts: dict[str, str] = {}
    started, tokens = time.monotonic(), 0
    for result in engine.generate_stream(generation_request(r, sampling) for r in requests.values()):
        texts[result.request_id] = result.text
        tokens += len(result.response_ids)
    usage = {"device_seconds": time.monotonic() - started, "tokens_generated": float(tokens)}  # metered as usage
    reward = build_reward(suite.scorer)
    try:
        scores: list[list[float]] = []
        stored: list[dict[str, Any]] = []
        for group in groups:
            outcomes = reward.score_many((r.prompt_text, texts[r.sample_id], r.meta) for r in group)
            values = [float(o.value) for o in outcomes]
            scores.append(values)
            if len(stored) < MAX_STORED_ROWS:
                head = group[0]
                stored.append({"prompt_id": head.prompt_id, "prompt": head.prompt_text,
                               "answer": head.meta.get("answer"), "outputs": [texts[r.sample_id] for r in group],
                               "scores": values, "errors": [o.error for o in outcomes if o.error][:3]})
    finally:
        reward.close()
    return {**summarize(scores, k=suite.pass_k, threshold=suite.pass_threshold), **usage}, stored


def run_evaluation(evaluation_id: int, store: EvaluationStore, device: str = "cpu") -> str:
    task = store.claim(evaluation_id)
    if task is None:
        return f"evaluation {evaluation_id}: not queued (gone or already run)"
    try:
        summary, rows = evaluate(task, device)
    except Exception as err:  # the evaluation's outcome: recorded on it, never raised into the worker
        log.exception("evaluation %s failed", evaluation_id)
        store.fail(evaluation_id, f"{type(err).__name__}: {err}")
        return f"evaluation {evaluation_id} failed"
    store.finish(evaluation_id, summary, rows)
    return f"evaluation {evaluation_id}: mean {summary['mean']:.3f}"
