"""Training-signal checks: does a job's recorded history say it cannot learn? Computed here only, from the iteration
rows, and shown by the health answer (job page, runs table, `streamrl jobs get`) and as `signal` job events (the
controller's watch, backend/controller/watch.py).

Checks, worst first (`WINDOW` = the newest 3 iterations must all agree, so one odd iteration never fires a check):
- `nan_loss` (error): the loss or gradient norm was NaN/inf (the runtime records them as null).
- `reward_constant` (error): every group's samples got the same reward (`reward_flat_groups` = 1; for algorithms
  without groups, or rows without that metric, `reward_std` = 0): group-normalised advantages are all zero.
- `all_truncated` (warning): every sample was cut at `generation.max_tokens` (`truncated_fraction` = 1).
- `reward_stuck` (warning): after `STUCK_ITERATIONS` iterations the reward never left its first value (+- tolerance).
- `reward_flat` (warning): over the newest `FLAT_ITERATIONS` iterations the mean reward's range (max - min) is within
  the noise of one iteration's mean (`FLAT_NOISE` x the median standard error reward_std / sqrt(samples), at least
  `FLAT_MIN_RANGE`): the job runs but does not learn (e.g. a LoRA job at a full fine-tune's learning rate, or a reward
  every sample gets about the same from). Unlike `reward_stuck` the reward may wander, just not beyond noise.
- `kl_blowup` (warning): KL to the reference above `KL_LIMIT` nats/token: the policy ran away from it.
- `entropy_collapse` (warning): entropy below `ENTROPY_FLOOR` after starting at least 10x higher: the policy is
  (nearly) deterministic and stopped exploring.
- `mismatch_high` (warning): the training-inference mismatch (`mismatch_kl`, k3 KL between the behaviour logprobs
  and the trainer's on the same tokens at the same version) above `MISMATCH_KL_LIMIT`: the engine samples from a
  policy the trainer does not compute (bf16 rounding, a kernel difference); alert rules can subscribe to it alone
  (`training_mismatch`).
Reads are batched over the listed jobs (four queries whatever their number).

Hysteresis of the `training_signal` events (backend/controller/signal_events.py): a check fires once its condition
held on the newest WINDOW iterations, and its event clears only once the condition failed on each of the newest
CLEAR_AFTER iterations (`cleared`), so a series that keeps crossing the line gives one event, not one per crossing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.db.models import Iteration, Job
from backend.schemas.dashboard import JobHealth, TrainingSignal
from contract.events import MISMATCH_CHECK

WINDOW = 3
CLEAR_AFTER = 3  # a fired check's event clears after this many consecutive iterations without its condition
NEWEST = max(WINDOW, CLEAR_AFTER)  # iterations read per job
STUCK_ITERATIONS = 20
STUCK_TOLERANCE = 1e-3
FLAT_ITERATIONS = 20  # the window the flat-reward check reads (and the iterations it needs before it may fire)
FLAT_NOISE = 2.0  # a range within this many standard errors of an iteration's mean reward is noise
FLAT_MIN_RANGE = 0.01
KL_LIMIT = 1.0
ENTROPY_FLOOR = 0.01
# nats/token. float32 engine and trainer: ~1e-7 and below; bf16 generation on a float32 trainer: ~1e-3 (bench/
# mismatch.py); past 1e-2 a sizeable share of tokens is off by more than 15% in probability
MISMATCH_KL_LIMIT = 0.01
GROUPED_ALGORITHMS = ("grpo", "rloo")  # advantages are relative to the group: a flat group teaches nothing
FLAT = 1e-9


@dataclass
class History:
    """What the checks read of one job: its newest iterations (newest first) and a summary of all of them."""

    newest: list[tuple[int, dict[str, Any]]] = field(default_factory=list)  # (iteration, metrics), up to NEWEST
    count: int = 0
    reward_min: float | None = None
    reward_max: float | None = None
    first_reward: float | None = None
    first_entropy: float | None = None
    # (reward_mean, reward_std, samples) of the newest FLAT_ITERATIONS iterations, newest first (the flat check)
    recent_rewards: list[tuple[float | None, float | None, float | None]] = field(default_factory=list)


def _number(metrics: dict[str, Any], key: str) -> float | None:
    value = metrics.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _not_finite(metrics: dict[str, Any], key: str) -> bool:
    """The key was recorded but is NaN/inf (stored as null by the runtime, or a non-finite float)."""
    if key not in metrics:
        return False
    value = _number(metrics, key)
    return value is None or not math.isfinite(value)


def _all(history: History, test: Any) -> bool:
    return len(history.newest) >= WINDOW and all(test(metrics) for _, metrics in history.newest[:WINDOW])


def _flat(metrics: dict[str, Any], grouped: bool) -> bool:
    flat_groups = _number(metrics, "reward_flat_groups")
    if grouped and flat_groups is not None:
        return flat_groups >= 1.0 - FLAT
    spread = _number(metrics, "reward_std")
    return spread is not None and spread <= FLAT


def _conditions(history: History, spec: dict[str, Any]) -> dict[str, Callable[[dict[str, Any]], bool]]:
    """Each per-iteration check's condition on one iteration's metrics (`reward_stuck` reads the whole history)."""
    algorithm = spec.get("algorithm") or {}
    grouped = algorithm.get("name", "grpo") in GROUPED_ALGORITHMS and int(algorithm.get("group_size", 8)) > 1
    start = history.first_entropy

    def collapsed(m: dict[str, Any]) -> bool:
        entropy = _number(m, "entropy")
        return start is not None and start >= 10 * ENTROPY_FLOOR and entropy is not None and entropy < ENTROPY_FLOOR

    return {
        "nan_loss": lambda m: any(_not_finite(m, k) for k in ("loss", "policy_loss", "grad_norm")),
        "reward_constant": lambda m: _flat(m, grouped),
        "all_truncated": lambda m: (_number(m, "truncated_fraction") or 0.0) >= 1.0 - FLAT,
        "kl_blowup": lambda m: (_number(m, "kl") or 0.0) > KL_LIMIT,
        "entropy_collapse": collapsed,
        MISMATCH_CHECK: lambda m: (_number(m, "mismatch_kl") or 0.0) > MISMATCH_KL_LIMIT,
    }


def flat_reward(history: History) -> tuple[float, float] | None:
    """(range, noise) of the mean reward over the newest FLAT_ITERATIONS iterations when the range is within noise;
    None when it is not, or when fewer iterations are recorded."""
    window = history.recent_rewards[:FLAT_ITERATIONS]
    means = [m for m, _, _ in window if m is not None and math.isfinite(m)]
    if len(window) < FLAT_ITERATIONS or len(means) < FLAT_ITERATIONS:
        return None
    errors = sorted(sd / math.sqrt(n) for _, sd, n in window if sd is not None and n and n > 0 and math.isfinite(sd))
    noise = max(FLAT_MIN_RANGE, FLAT_NOISE * errors[len(errors) // 2]) if errors else FLAT_MIN_RANGE
    spread = max(means) - min(means)
    return (spread, noise) if spread <= noise else None


def cleared(history: History, check: str, spec: dict[str, Any]) -> bool:
    """Whether a check that fired may clear: its condition failed on each of the newest CLEAR_AFTER iterations
    (`reward_stuck`, a whole-history check that never comes back once the reward moved: at once)."""
    condition = _conditions(history, spec).get(check)
    if condition is None:
        return True
    newest = history.newest[:CLEAR_AFTER]
    return len(newest) >= CLEAR_AFTER and not any(condition(metrics) for _, metrics in newest)


def check_history(history: History, spec: dict[str, Any]) -> list[TrainingSignal]:
    """The checks that fire on `history` of a job with `spec`, errors first (pure: tests call it directly)."""
    if not history.newest:
        return []
    out: list[TrainingSignal] = []
    since = history.newest[min(WINDOW, len(history.newest)) - 1][0]
    latest = history.newest[0][1]
    algorithm = spec.get("algorithm") or {}
    grouped = algorithm.get("name", "grpo") in GROUPED_ALGORITHMS and int(algorithm.get("group_size", 8)) > 1
    condition = _conditions(history, spec)

    broken = [it for it, m in history.newest[:WINDOW] if condition["nan_loss"](m)]
    if broken:
        out.append(TrainingSignal(check="nan_loss", severity="error", since_iteration=min(broken),
                                  message=f"the loss is NaN/inf (iteration {max(broken)}): the updates are void; "
                                          "lower training.lr"))
    if _all(history, condition["reward_constant"]):
        reward = _number(latest, "reward_mean")
        where = "within every group" if grouped else "for every sample"
        out.append(TrainingSignal(
            check="reward_constant", severity="error", since_iteration=since,
            message=f"reward is constant {where} ({reward if reward is not None else 0:.3f}) for the last {WINDOW} "
                    "iterations: no learning signal; use a reward that tells samples apart or a model that "
                    "sometimes succeeds"))
    if _all(history, condition["all_truncated"]):
        max_tokens = (spec.get("generation") or {}).get("max_tokens", "?")
        out.append(TrainingSignal(
            check="all_truncated", severity="warning", since_iteration=since,
            message=f"every sample was cut at generation.max_tokens ({max_tokens}) for the last {WINDOW} "
                    "iterations: raise max_tokens"))
    if (history.count >= STUCK_ITERATIONS and history.first_reward is not None and history.reward_min is not None
            and history.reward_max is not None
            and max(history.reward_max - history.first_reward, history.first_reward - history.reward_min)
            <= STUCK_TOLERANCE):
        out.append(TrainingSignal(
            check="reward_stuck", severity="warning", since_iteration=1,
            message=f"reward has stayed at its start ({history.first_reward:.3f}) for {history.count} iterations"))
    flat = flat_reward(history) if not any(s.check in ("reward_constant", "reward_stuck") for s in out) else None
    if flat is not None:
        spread, noise = flat
        lora = bool((spec.get("training") or {}).get("lora"))
        hint = ("a LoRA adapter usually needs a higher training.lr than full fine-tuning (e.g. 1e-2 vs 3e-3)" if lora
                else "raise training.lr, shape the reward (e.g. a length term when most samples hit max_tokens)")
        out.append(TrainingSignal(
            check="reward_flat", severity="warning", since_iteration=history.newest[0][0] - FLAT_ITERATIONS + 1,
            message=f"reward is flat: over the last {FLAT_ITERATIONS} iterations it moved {spread:.3f}, within the "
                    f"noise of one iteration ({noise:.3f}): the job is not learning; {hint}"))
    if _all(history, condition["kl_blowup"]):
        out.append(TrainingSignal(
            check="kl_blowup", severity="warning", since_iteration=since,
            message=f"KL to the reference is {_number(latest, 'kl') or 0:.2f} nats/token (above {KL_LIMIT:g}) for "
                    f"the last {WINDOW} iterations: the policy ran away; lower training.lr or raise "
                    "algorithm.kl_coef"))
    start = history.first_entropy
    if start is not None and _all(history, condition["entropy_collapse"]):
        out.append(TrainingSignal(
            check="entropy_collapse", severity="warning", since_iteration=since,
            message=f"entropy fell from {start:.3f} to {_number(latest, 'entropy') or 0:.4f}: the policy stopped "
                    "exploring; lower training.lr or set algorithm.entropy_coef"))
    if _all(history, condition[MISMATCH_CHECK]):
        out.append(TrainingSignal(
            check=MISMATCH_CHECK, severity="warning", since_iteration=since,
            message=f"training-inference mismatch: mismatch_kl {_number(latest, 'mismatch_kl') or 0:.3g} nats/token "
                    f"(above {MISMATCH_KL_LIMIT:g}) for the last {WINDOW} iterations: the engine samples from "
                    "another policy than the trainer computes; generate in float32 (generation.dtype, "
                    "generation.vllm.dtype) or correct with algorithm.is_level: sequence and algorithm.is_mask"))
    return out


def _histories(session: Session, job_ids: list[int]) -> dict[int, History]:
    histories = {job_id: History() for job_id in job_ids}
    newest = func.row_number().over(partition_by=Iteration.job_id, order_by=Iteration.iteration.desc()).label("r")
    ranked = select(Iteration.job_id, Iteration.iteration, Iteration.metrics, newest).where(
        Iteration.job_id.in_(job_ids)).subquery()
    rows = session.execute(select(ranked.c.job_id, ranked.c.iteration, ranked.c.metrics)
                           .where(ranked.c.r <= NEWEST).order_by(ranked.c.job_id, ranked.c.r))
    for job_id, iteration, metrics in rows:
        histories[job_id].newest.append((iteration, metrics or {}))

    reward = Iteration.metrics["reward_mean"].as_float()
    totals = select(Iteration.job_id, func.count(), func.min(reward), func.max(reward)).where(
        Iteration.job_id.in_(job_ids)).group_by(Iteration.job_id)
    for job_id, count, low, high in session.execute(totals):
        history = histories[job_id]
        history.count, history.reward_min, history.reward_max = int(count), low, high

    recent = select(Iteration.job_id, reward.label("mean"), Iteration.metrics["reward_std"].as_float().label("sd"),
                    Iteration.metrics["samples"].as_float().label("n"), newest).where(
        Iteration.job_id.in_(job_ids)).subquery()
    for job_id, mean, sd, n in session.execute(select(recent.c.job_id, recent.c.mean, recent.c.sd, recent.c.n)
                                               .where(recent.c.r <= FLAT_ITERATIONS)
                                               .order_by(recent.c.job_id, recent.c.r)):
        histories[job_id].recent_rewards.append((mean, sd, n))

    oldest = func.row_number().over(partition_by=Iteration.job_id, order_by=Iteration.iteration).label("r")
    first = select(Iteration.job_id, reward.label("reward"), Iteration.metrics["entropy"].as_float().label("entropy"),
                   oldest).where(Iteration.job_id.in_(job_ids)).subquery()
    for job_id, first_reward, first_entropy in session.execute(
            select(first.c.job_id, first.c.reward, first.c.entropy).where(first.c.r == 1)):
        histories[job_id].first_reward, histories[job_id].first_entropy = first_reward, first_entropy
    return histories


def jobs_histories(*, session: Session, jobs: list[Job]) -> dict[int, History]:
    """job id -> what the checks read of its recorded iterations."""
    return _histories(session, [job.id for job in jobs]) if jobs else {}


def jobs_signals(*, session: Session, jobs: list[Job]) -> dict[int, list[TrainingSignal]]:
    """job id -> the checks that fire on its recorded iterations."""
    histories = jobs_histories(session=session, jobs=jobs)
    return {job.id: check_history(histories[job.id], job.spec or {}) for job in jobs}


def with_signals(health: JobHealth, signals: list[TrainingSignal]) -> JobHealth:
    """A job that is otherwise generating fine but fires a check is not healthy: it runs without learning."""
    health.signals = signals
    if signals and health.state == "generating":
        health.state, health.healthy, health.summary = "training_signal", False, signals[0].message
    return health
