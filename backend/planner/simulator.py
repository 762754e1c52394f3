"""Discrete-event simulator of an RL job: generation instances + trainer, in colocated, sync or async mode.

- colocated: all devices generate (instances = devices / tp), switch, train the whole batch, switch back.
- sync (disaggregated + stream generation): the trainer consumes finished prompt groups in micro-batches while
  generation is still running (dynamic-batch pipelining); the next generation waits for weights v+1.
- async: generation of iteration i starts when generation i-1 is done and weights of iteration i-1-max_staleness
  exist; training of i streams its samples as in sync. Weight transfer overlaps training.
- shared generation instances (`shared_jobs` > 1, sync/async): `shared_jobs - 1` other LoRA jobs of the same shape
  decode alongside at the same rate, so this job gets `cap // shared_jobs` of each instance's batch slots and a
  step with b of its rows costs PTL(b * shared_jobs) (`job_generation`).
Times are seconds from job start. Every iteration ends at its optimiser step (`train_end`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from backend.planner.autoscaler import IterationRecord, ScalingBounds, decide
from backend.planner.costmodel import (
    KV_MEMORY_FRACTION,
    TrainCost,
    max_batch_size,
    ptl_profile,
    train_cost,
    weight_sync_seconds,
)
from backend.planner.devices import DeviceSpec, ModelShape
from backend.planner.lengths import GroupLengths, LengthDistribution
from backend.planner.sim_generation import Dispatch, InstanceRun, scaled_profile, simulate_generation
from backend.planner.timeline import Span, TimelineBuilder
from contract.skew import PTLProfile
from contract.spec import Mode

HOST_LOAD_GBPS = 25.0  # host->device copy when an instance loads new weights
COLOCATED_NOT_SHARED = ("shared_jobs: mode 'colocated' generates in the trainer's own process, which no other job "
                        "shares: use shared_jobs 1, or mode sync/async")


@dataclass(frozen=True)
class SimConfig:
    model: ModelShape
    gen_device: DeviceSpec
    gen_devices: int  # colocated: all devices of the job
    lengths: LengthDistribution
    mode: Mode = "sync"
    train_device: DeviceSpec | None = None  # None: same as gen_device
    train_devices: int = 0  # ignored when colocated
    tp: int = 1
    prompts_per_iteration: int = 256
    group_size: int = 8
    prompt_tokens: int = 512
    dispatch: Dispatch = "random"
    alpha: float = 0.2
    max_batch_size: int | None = None  # sequences per instance; None: what KV memory holds
    micro_batch_size: int = 64  # samples per training micro-step
    algorithm: str = "ppo"
    mfu: float = 0.35
    max_staleness: int = 1  # async: policy versions a sample may lag (JobSpec.max_staleness)
    colocated_memory_fraction: float = 0.5  # device memory the generation engine may use while training states live
    iterations: int = 4
    weight_link_gbps: float = 25.0
    elastic: bool = False
    elastic_max_instances: int | None = None
    length_growth: float = 0.0  # responses grow by this fraction per iteration (RL makes answers longer)
    ptl: PTLProfile | None = None  # measured profile replaces the roofline
    train: TrainCost | None = None  # measured training cost replaces the roofline
    shared_jobs: int = 1  # LoRA jobs of this shape sharing the generation instances (this one included)
    tail_tokens_per_forward: float = 1.0  # measured speculative speed-up of the tail (sim_generation.py); 1: none
    seed: int = 0

    def __post_init__(self) -> None:
        if self.tp < 1 or self.gen_devices < self.tp:
            raise ValueError(f"generation needs at least tp={self.tp} devices, got {self.gen_devices}")
        if self.mode != "colocated" and self.train_devices < 1:
            raise ValueError(f"mode {self.mode!r} needs train_devices >= 1")
        if self.iterations < 1 or self.prompts_per_iteration < 1 or self.group_size < 1:
            raise ValueError("iterations, prompts_per_iteration and group_size must be >= 1")
        if self.shared_jobs < 1:
            raise ValueError(f"shared_jobs must be >= 1, got {self.shared_jobs}")
        if self.mode == "colocated" and self.shared_jobs > 1:
            raise ValueError(COLOCATED_NOT_SHARED)

    @property
    def instances(self) -> int:
        return self.gen_devices // self.tp

    @property
    def trainer_devices(self) -> int:
        return self.gen_devices if self.mode == "colocated" else self.train_devices

    @property
    def devices_total(self) -> int:
        return self.gen_devices if self.mode == "colocated" else self.gen_devices + self.train_devices


@dataclass(frozen=True)
class IterationStats:
    iteration: int
    instances: int
    gen_start: float
    gen_end: float
    train_end: float
    gen_seconds: float  # makespan of this iteration's generation
    train_seconds: float  # busy time of the trainer
    iteration_seconds: float  # train_end minus the previous train_end
    samples: int
    tokens: int
    generator_idle_fraction: float  # instance-time spent idle inside [gen_start, gen_end]
    trainer_idle_seconds: float


@dataclass
class SimResult:
    config: SimConfig
    iterations: list[IterationStats]
    spans: list[Span] = field(default_factory=list)

    @property
    def steady(self) -> list[IterationStats]:
        return self.iterations[1:] if len(self.iterations) > 1 else self.iterations

    @property
    def iteration_seconds(self) -> float:
        return float(np.mean([it.iteration_seconds for it in self.steady]))

    @property
    def samples_per_s(self) -> float:
        return float(np.mean([it.samples for it in self.steady])) / self.iteration_seconds

    @property
    def tokens_per_s(self) -> float:
        return float(np.mean([it.tokens for it in self.steady])) / self.iteration_seconds

    @property
    def gen_bubble_fraction(self) -> float:
        return float(np.mean([it.generator_idle_fraction for it in self.steady]))

    @property
    def train_bubble_fraction(self) -> float:
        return float(np.mean([it.trainer_idle_seconds / it.iteration_seconds for it in self.steady]))

    def summary(self) -> dict[str, float]:
        steady = self.steady
        return {
            "iteration_seconds": self.iteration_seconds,
            "gen_seconds": float(np.mean([it.gen_seconds for it in steady])),
            "train_seconds": float(np.mean([it.train_seconds for it in steady])),
            "samples_per_s": self.samples_per_s,
            "tokens_per_s": self.tokens_per_s,
            "gen_bubble_fraction": self.gen_bubble_fraction,
            "train_bubble_fraction": self.train_bubble_fraction,
        }


def mean_context(cfg: SimConfig) -> float:
    """Token-weighted mean KV context of a decode step: prompt + E[L^2] / (2 E[L])."""
    sample = cfg.lengths.sample_group_lengths(2048, 1, np.random.default_rng(cfg.seed + 7)).flat.astype(float)
    return cfg.prompt_tokens + float((sample**2).mean() / (2 * sample.mean()))


def job_generation(cfg: SimConfig, context: float, memory_fraction: float) -> tuple[PTLProfile, int]:
    """(PTL, batch cap in sequences) of this job's share of one generation instance (`simulate`, `build_profiles`).

    An instance holds `cap` sequences (`cfg.max_batch_size`, or what `memory_fraction` of its memory holds in KV).
    Shared by `cfg.shared_jobs` jobs generating alongside at the same rate, each job's rows are 1/shared_jobs of
    the batch: this job gets `cap // shared_jobs` slots (at least 1) and a step with b of its rows is a step of
    b * shared_jobs rows, PTL(b * shared_jobs)."""
    ptl = cfg.ptl or ptl_profile(cfg.model, cfg.gen_device, cfg.tp, context)
    cap = cfg.max_batch_size or max_batch_size(cfg.model, cfg.gen_device, cfg.tp, context, memory_fraction)
    if cfg.shared_jobs == 1:
        return ptl, cap
    return scaled_profile(ptl, cfg.shared_jobs), max(1, cap // cfg.shared_jobs)


class _Trainer:
    """Streams finished groups into micro-batches; a single server with FIFO micro-steps."""

    def __init__(self, cost: TrainCost, devices: int, micro_batch: int, timeline: TimelineBuilder) -> None:
        self.cost, self.devices, self.micro_batch, self.timeline = cost, devices, micro_batch, timeline
        self.free_at = 0.0

    def train(self, ready_times: np.ndarray, tokens: np.ndarray, not_before: float) -> tuple[float, float, float]:
        """Train groups ready at `ready_times` (sorted) with `tokens` each; -> (end, busy, idle inside)."""
        clock = max(self.free_at, not_before)
        self.timeline.add("trainer", "waiting", self.free_at, clock)
        start, busy = clock, 0.0
        per_step = max(1, self.micro_batch)
        for lo in range(0, len(ready_times), per_step):
            ready = float(ready_times[min(lo + per_step, len(ready_times)) - 1])
            if ready > clock:
                self.timeline.add("trainer", "waiting", clock, ready)
                clock = ready
            seconds = self.cost.seconds(float(tokens[lo:lo + per_step].sum()), self.devices)
            self.timeline.add("trainer", "training", clock, clock + seconds)
            clock += seconds
            busy += seconds
        self.free_at = clock
        return clock, busy, (clock - start) - busy


def _group_ready_times(runs: list[InstanceRun], group_size: int, start: float) -> np.ndarray:
    """(P,) absolute time each prompt group's last sample finished."""
    n = sum(len(r.sample_ids) for r in runs)
    finish = np.zeros(n)
    for r in runs:
        finish[r.sample_ids] = start + r.finish_offsets
    return finish.reshape(-1, group_size).max(axis=1)


def simulate(cfg: SimConfig) -> SimResult:
    """Run `cfg.iterations` iterations and return per-iteration stats and the timeline."""
    train_dev = cfg.train_device or cfg.gen_device
    context = mean_context(cfg)
    memory_fraction = cfg.colocated_memory_fraction if cfg.mode == "colocated" else KV_MEMORY_FRACTION
    ptl, cap = job_generation(cfg, context, memory_fraction)
    cost = cfg.train or train_cost(cfg.model, train_dev, algorithm=cfg.algorithm, context=context, mfu=cfg.mfu)
    sync_s = weight_sync_seconds(cfg.model, cfg.weight_link_gbps)
    load_s = cfg.model.weight_bytes / cfg.tp / (HOST_LOAD_GBPS * 1e9)
    rng = np.random.default_rng(cfg.seed)
    timeline = TimelineBuilder()
    trainer = _Trainer(cost, cfg.trainer_devices, max(1, cfg.micro_batch_size // cfg.group_size), timeline)

    instances = cfg.instances
    max_instances = cfg.elastic_max_instances or 2 * instances
    recent = cfg.lengths.sample_group_lengths(cfg.prompts_per_iteration, cfg.group_size, rng).flat
    train_ends: list[float] = []
    gen_end_prev = 0.0
    stats: list[IterationStats] = []
    history: list[IterationRecord] = []
    for it in range(cfg.iterations):
        groups: GroupLengths = cfg.lengths.sample_group_lengths(cfg.prompts_per_iteration, cfg.group_size, rng)
        if cfg.length_growth:
            scale = (1.0 + cfg.length_growth) ** it
            groups = GroupLengths(np.clip(np.rint(groups.lengths * scale), 1, cfg.lengths.max_tokens).astype(np.int64),
                                  groups.predicted * scale)
        # when may generation of iteration `it` start?
        if cfg.mode == "async":
            needed = it - 1 - cfg.max_staleness  # weights of that iteration's optimiser step must exist
            weights_at = train_ends[needed] + sync_s if needed >= 0 else 0.0
            gen_start = max(gen_end_prev, weights_at) + (load_s if it > 0 else 0.0)
        else:
            gen_start = (train_ends[-1] + (load_s if cfg.mode == "colocated" else sync_s + load_s)) if it else 0.0
        if it > 0:
            for k in range(instances):
                timeline.add(f"gen-{k}", "loading_weights", gen_start - load_s, gen_start)
        runs = simulate_generation(groups, instances, ptl, max_batch_size=cap, dispatch=cfg.dispatch,
                                   alpha=cfg.alpha, recent_lengths=recent, seed=cfg.seed + it,
                                   tail_tokens_per_forward=cfg.tail_tokens_per_forward)
        makespan = max(r.busy_seconds for r in runs)
        gen_end = gen_start + makespan
        for r in runs:
            timeline.add(f"gen-{r.instance}", "generating", gen_start, gen_start + r.busy_seconds)
            timeline.add(f"gen-{r.instance}", "idle", gen_start + r.busy_seconds, gen_end)
        idle_fraction = 1.0 - sum(r.busy_seconds for r in runs) / (instances * makespan) if makespan > 0 else 0.0

        tokens = (groups.lengths + cfg.prompt_tokens).sum(axis=1)  # (P,)
        if cfg.mode == "colocated":
            ready = np.full(len(tokens), gen_end + load_s)
            order = np.arange(len(tokens))
            not_before = gen_end + load_s
        else:
            ready_raw = _group_ready_times(runs, cfg.group_size, gen_start)
            order = np.argsort(ready_raw, kind="stable")
            ready = ready_raw[order]
            not_before = train_ends[-1] if train_ends else 0.0
        train_end, busy, _ = trainer.train(ready, tokens[order], not_before)
        if cfg.mode == "colocated":
            for k in range(instances):
                timeline.add(f"gen-{k}", "training", gen_end + load_s, train_end)
        prev_end = train_ends[-1] if train_ends else 0.0
        train_ends.append(train_end)
        gen_end_prev = gen_end
        stats.append(IterationStats(
            iteration=it, instances=instances, gen_start=gen_start, gen_end=gen_end, train_end=train_end,
            gen_seconds=makespan, train_seconds=busy, iteration_seconds=train_end - prev_end,
            samples=groups.lengths.size, tokens=int(tokens.sum()), generator_idle_fraction=idle_fraction,
            trainer_idle_seconds=max(0.0, (train_end - prev_end) - busy),
        ))
        recent = groups.flat
        if cfg.elastic and cfg.mode != "colocated":
            history.append(IterationRecord(gen_seconds=makespan, train_seconds=busy, instances=instances))
            decision = decide(history, current=instances,
                              bounds=ScalingBounds(min_instances=1, max_instances=max_instances),
                              last_change_at=None, cooldown_s=0.0, now=train_end, hysteresis=1)
            instances = decision.target
    return SimResult(config=cfg, iterations=stats, spans=timeline.spans())
