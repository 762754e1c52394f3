"""Agentic episodes on a locally built BPE chat model (chat-qwen2-1m): learning with a tool, and skew-aware dispatch
of episodes whose number of turns has a heavy tail.

    python bench/agentic.py [--iterations 10 --rounds 5 --episodes 96]
    python bench/agentic.py --skip-learn        (part b only)

(a) Learning: the `calculator` environment (its smallest problems: 2 + 2, 2 - 2, 2 * 2; the policy calls
`calculate`, then answers). A random model never writes a well-formed `<tool_call>`, so it gets a short SFT warm
start on tool-use demonstrations (workers/environments/demos.py) to "right format, often wrong", then GRPO with
`train_local` (the colocated driver: the same episode loop as the platform). Prints each iteration and
`reward_start` / `reward_end`, the mean training reward of the first and last `--window` iterations (target: +0.2
within `--iterations`). Read `turns` beside it: on these three problems the reward rises by the policy answering
directly, while its tool calls (~70 tokens of JSON on this tokenizer, most of them failed episodes in the first
groups) fade after the first updates; teaching tool use itself needs problems a tiny model cannot answer without the
tool and a longer warm start.

(b) Dispatch: a `relay` environment whose episodes last as many turns as their prompt asks for (most 1, a heavy tail
up to 16; every turn is `--turn-tokens` tokens of the random model, which rarely stops early), on `--instances` hf
engines (continuous batching, one thread). Epoch 0 (random dispatch) teaches the length ranker each episode's cost
(workers/dispatch/cost.py: tokens and turns); then `--rounds` interleaved rounds run the same seeded episodes under
random dispatch (FIFO) and skew-aware dispatch (Algorithm 2 + longest first). The instances run one after another,
each timed by the CPU time it takes (one core per instance; CPU time is what other load on a shared machine does not
inflate); a run's makespan is the max over its instances, episodes/s = episodes / makespan, and each policy reports
its median over the rounds.

Ends with `RESULT episodes_per_s_random=... episodes_per_s_skew=... ratio=... reward_start=... reward_end=...`.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer
from transformers.utils import logging as hf_logging

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from contract.environments import BuiltinEnvironment, Message  # noqa: E402
from contract.sample import PromptRequest  # noqa: E402
from contract.spec import EnvironmentSpec, JobSpec  # noqa: E402
from workers.core.episode import EpisodeRunner, run_episodes  # noqa: E402
from workers.core.rollout import sampling_params  # noqa: E402
from workers.dispatch.cost import sample_cost  # noqa: E402
from workers.dispatch.policies import setup_dispatch  # noqa: E402
from workers.dispatch.ptl import measure_ptl  # noqa: E402
from workers.environments import build_environment  # noqa: E402
from workers.environments.base import InProcessEnvironment  # noqa: E402
from workers.environments.demos import calculator_demonstrations  # noqa: E402
from workers.generation.engines import setup_engine  # noqa: E402
from workers.local import IterationRecord, train_local  # noqa: E402
from workers.models import build_tiny_model  # noqa: E402
from workers.runtime.dispatching import per_prompt  # noqa: E402
from workers.training.sft import sft_warm_start  # noqa: E402

PRESET = "chat-qwen2-1m"
CALCULATOR = {"operands": 2, "max_operand": 2}


# -- (a) learning with the calculator tool ----------------------------------------------------------------------------
def calculator_spec(model: Path, args: argparse.Namespace) -> JobSpec:
    return JobSpec.model_validate({
        "name": "bench-agentic", "model": str(model), "seed": args.seed,
        "dataset": {"builtin": "arithmetic", "num_prompts": 1024, "eval_prompts": 0},
        "environment": {"type": "calculator", "params": CALCULATOR, "max_turns": 3, "max_episode_tokens": 200},
        "algorithm": {"name": "grpo", "group_size": args.group},
        "generation": {"max_tokens": 80, "temperature": 1.0, "batch_size": args.prompts * args.group},
        "training": {"iterations": args.iterations, "prompts_per_iteration": args.prompts,
                     "micro_batch_size": args.prompts * args.group, "lr": args.lr},
        "checkpoint": {"interval": args.iterations, "keep": 1},
    })


def warm_start(base: Path, out: Path, args: argparse.Namespace) -> Path:
    """SFT on calculator tool-use demonstrations rendered exactly as the episode loop opens its episodes."""
    spec = calculator_spec(base, args)
    assert spec.environment is not None
    runner = EpisodeRunner(build_environment(spec.environment), AutoTokenizer.from_pretrained(base), spec.environment,
                           sampling_params(spec.generation))
    rows: list[Mapping[str, Any]] = [{"prompt": f"sft {i}", "prompt_id": f"sft-{i}"} for i in range(2000)]
    demos = calculator_demonstrations(rows, runner.opening, CALCULATOR)
    sft = sft_warm_start(base, out, demos, steps=args.sft_steps, batch_size=12, lr=3e-3, seed=args.seed,
                         target_loss=args.sft_target_loss, time_budget_s=args.sft_seconds)
    print(f"sft: {sft.steps} steps, final loss {sft.final_loss:.3f}, {sft.seconds:.1f}s", flush=True)
    return sft.model_dir


def learn(work: Path, args: argparse.Namespace) -> tuple[float, float]:
    base = build_tiny_model(PRESET, work / "base", seed=args.seed)
    model = warm_start(base, work / "sft", args)
    rewards: list[float] = []

    def show(record: IterationRecord) -> None:
        rewards.append(record.reward)
        m = record.metrics
        print(f"iter {record.iteration:3d} reward={record.reward:.3f} turns={m.get('turns_mean', 0.0):.2f} "
              f"policy_tokens={m.get('policy_token_fraction', 0.0):.2f} errors={m.get('episode_errors', 0)} "
              + " ".join(f"{k}={v:.1f}s" for k, v in record.seconds.items()), flush=True)

    train_local(calculator_spec(model, args), work / "rl", eval_every=0, on_iteration=show)
    w = min(args.window, len(rewards) // 2)
    return statistics.fmean(rewards[:w]), statistics.fmean(rewards[-w:])


# -- (b) skew-aware vs random dispatch of heavy-tailed episodes --------------------------------------------------------
class Relay(BuiltinEnvironment):
    """Pass a note on `relays` times (the row's): one policy turn per relay, reward 1.0 at the end."""

    def reset(self, row: Mapping[str, Any]) -> list[Message]:
        return [{"role": "user", "content": f"Relay the note {row['relays']} times."}]

    def step(self, messages: list[Message], row: Mapping[str, Any]) -> dict[str, Any]:
        turns = sum(1 for m in messages if m["role"] == "assistant")
        if turns >= int(row["relays"]):
            return {"messages": [], "reward": 1.0, "done": True}
        return {"messages": [{"role": "user", "content": f"{int(row['relays']) - turns} to go."}], "reward": None,
                "done": False}


def relay_rows(n: int, seed: int) -> list[dict[str, Any]]:
    """Heavy-tailed relays: ~60 % one turn, the rest 2..16 (a Pareto tail)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        relays = 1 if rng.random() < 0.6 else min(16, 1 + int(rng.paretovariate(1.0)))
        rows.append({"prompt_id": f"relay-{i}", "prompt": f"relay {relays}", "relays": relays})
    return rows


def run_split(engine: Any, runner: EpisodeRunner, rows: list[dict[str, Any]], split: list[list[int]], *, epoch: int,
              group: int) -> tuple[list[float], list[Any]]:
    """Each instance's episodes in the split's order through the engine, one instance after another: (CPU seconds
    per instance, samples). Requests are seeded from (prompt, epoch, k), so every policy runs identical episodes."""
    seconds, samples = [], []
    for indices in split:
        requests = [PromptRequest(sample_id=f"{rows[i]['prompt_id']}:{k}", group_id=str(rows[i]["prompt_id"]),
                                  prompt_id=str(rows[i]["prompt_id"]), iteration=epoch, prompt_ids=[0],
                                  prompt_text=rows[i]["prompt"], meta=dict(rows[i]),
                                  seed=zlib.crc32(f"{rows[i]['prompt_id']}:{epoch}:{k}".encode()))
                    for i in indices for k in range(group)]
        start = time.process_time()
        samples += run_episodes(engine, runner, requests, job_id=0, instance_id="bench")
        seconds.append(time.process_time() - start)
    return seconds, samples


def dispatch(work: Path, args: argparse.Namespace) -> tuple[float, float]:
    model = build_tiny_model(PRESET, work / "relay-model", seed=args.seed)
    env_spec = EnvironmentSpec(type="calculator", max_turns=16, max_episode_tokens=4096)  # the runner reads its limits
    spec = JobSpec.model_validate({"model": str(model), "dataset": {"builtin": "arithmetic"},
                                   "generation": {"max_tokens": args.turn_tokens, "temperature": 1.0}})
    runner = EpisodeRunner(InProcessEnvironment("relay", Relay()), AutoTokenizer.from_pretrained(model), env_spec,
                           sampling_params(spec.generation))
    engine = setup_engine("hf", model_dir=model, max_batch_size=args.batch)
    group = args.relay_group
    ptl = measure_ptl(engine, sorted({1, group, args.batch}), tokens=16, repeats=2)
    ptl_prompts = per_prompt(ptl, group)
    rows = relay_rows(args.episodes, args.seed)
    prompts_per_batch = max(1, args.batch // group)
    policies = {name: setup_dispatch(name, n_instances=args.instances, max_batch_size=prompts_per_batch,
                                     ptl=ptl_prompts, seed=args.seed) for name in ("random", "skew_aware")}
    # epoch 0 (random dispatch): what the ranker learns from, as a job's previous iteration
    _, first = run_split(engine, runner, rows, _indices(policies["random"], rows, 0), epoch=0, group=group)
    by_id = {str(r["prompt_id"]): r for r in rows}
    skew = policies["skew_aware"]
    skew.observe([by_id[s.prompt_id] for s in first], [sample_cost(s) for s in first])
    skew.end_iteration()
    turns = [s.turns for s in first]
    print(f"{len(rows)} prompts x {group} episodes: turns mean {statistics.fmean(turns):.2f}, max {max(turns)}; "
          f"{args.instances} instances x batch {args.batch}, {args.turn_tokens} tokens per turn", flush=True)
    rates: dict[str, list[float]] = {name: [] for name in policies}
    for round_ in range(1, args.rounds + 1):
        for name, policy in policies.items():  # interleaved: the same load drifts over both
            seconds, _ = run_split(engine, runner, rows, _indices(policy, rows, round_), epoch=1, group=group)
            rates[name].append(len(rows) * group / max(seconds))
            print(f"round {round_} {name:10s} makespan {max(seconds):6.2f}s cpu  instances "
                  + " ".join(f"{s:6.2f}" for s in seconds), flush=True)
    return statistics.median(rates["random"]), statistics.median(rates["skew_aware"])


def _indices(policy: Any, rows: list[dict[str, Any]], iteration: int) -> list[list[int]]:
    return [list(a.prompt_indices) for a in policy.split(rows, iteration=iteration).assignments]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=10, help="GRPO iterations of part (a)")
    parser.add_argument("--prompts", type=int, default=4, help="prompts per iteration (a)")
    parser.add_argument("--group", type=int, default=8, help="episodes per prompt (a)")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--window", type=int, default=3, help="iterations averaged for reward_start / reward_end")
    parser.add_argument("--sft-steps", type=int, default=150)
    parser.add_argument("--sft-target-loss", type=float, default=0.3)
    parser.add_argument("--sft-seconds", type=float, default=600.0)
    parser.add_argument("--skip-learn", action="store_true")
    parser.add_argument("--episodes", type=int, default=96, help="prompts of part (b)")
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--relay-group", type=int, default=2, help="episodes per prompt (b)")
    parser.add_argument("--batch", type=int, default=8, help="concurrent sequences per instance (b)")
    parser.add_argument("--turn-tokens", type=int, default=6, help="max tokens of one turn (b)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.rounds < 5 or args.instances < 2:
        parser.error("--rounds must be >= 5 and --instances >= 2")
    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    with tempfile.TemporaryDirectory(prefix="streamrl-agentic-") as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        random_rate, skew_rate = dispatch(work, args)
        print(f"dispatch: random {random_rate:.2f} episodes/s, skew_aware {skew_rate:.2f} episodes/s (median of "
              f"{args.rounds} rounds), {time.perf_counter() - started:.0f}s", flush=True)
        start_reward = end_reward = float("nan")
        if not args.skip_learn:
            start_reward, end_reward = learn(work, args)
            print(f"learning: reward {start_reward:.3f} -> {end_reward:.3f} (first/last {args.window} iterations)")
    print(f"RESULT episodes_per_s_random={random_rate:.3f} episodes_per_s_skew={skew_rate:.3f} "
          f"ratio={skew_rate / random_rate:.3f} reward_start={start_reward:.3f} reward_end={end_reward:.3f}")


if __name__ == "__main__":
    main()
