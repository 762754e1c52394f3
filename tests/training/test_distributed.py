"""Multi-rank training: 2 gloo ranks (FSDP2) equal 1 rank on the same spec, seed and samples; sharded checkpoints
resume on a different number of ranks."""

from __future__ import annotations

import os
import signal
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from training_fixtures import make_group, make_spec

from contract.sample import Sample
from workers.training import checkpoint as ckpt
from workers.training.algorithms import setup_algorithm
from workers.training.trainer import Trainer, load_policy

torch.set_num_threads(1)


def rank_processes() -> Any:
    """Rank processes fork from one server that imported torch and the trainer once (a spawned process imports them
    again: ~10 s each on a loaded 2-core host, a dozen times in this file); the server holds no threads or process
    group. The preload list is the process's one forkserver's: set where it is used, not at import (collection)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torch.distributed", "transformers", "workers.training.distributed",
                                "training_fixtures"])
    return ctx


# micro-batches as the stream cuts them: across groups (advantages given), and one sample alone (rank 1's share of
# it is empty: it runs a zero-weight dummy so FSDP's collectives stay in step)
CUTS = [(0, 5), (5, 11), (11, 12)]


def make_spec_kl(name: str = "grpo", lora: dict[str, Any] | None = None) -> Any:
    spec = make_spec(name=name, kl_coef=0.05, entropy_coef=0.01)  # a sharded frozen reference too
    if lora is not None:  # LoRA: the reference is the base model with the adapter disabled
        spec = spec.model_validate({**spec.model_dump(), "training": {**spec.training.model_dump(), "lora": lora}})
    return spec


def scored_samples(name: str = "grpo") -> tuple[list[Sample], list[float]]:
    samples = (
        make_group("g0", [1.0, 0.0, 0.0, 1.0], seed=1)
        + make_group("g1", [0.0, 0.0, 1.0, 0.5], seed=2)
        + make_group("g2", [1.0, 1.0, 1.0, 0.0], seed=3)
    )
    return samples, setup_algorithm(make_spec_kl(name).algorithm).batch_advantages(samples)


def run_iterations(trainer: Trainer, iterations: int) -> list[dict[str, float]]:
    samples, advantages = scored_samples(trainer.spec.algorithm.name)
    steps = []
    for _ in range(iterations):
        for lo, hi in CUTS:
            trainer.micro_step(samples[lo:hi], advantages[lo:hi])
        steps.append(trainer.optimizer_step())
    return steps


def _rank_main(rank: int, world: int, port: int, model_dir: str, plan: dict[str, Any], out: str) -> None:
    """One rank: rank 0 drives `plan` (load?, iterations, save?) and writes what it saw to `out`; the others serve."""
    from workers.training.distributed import DistributedTrainer, RankGroup, serve

    torch.set_num_threads(1)
    try:
        store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=60))
        group = RankGroup(store, rank, world, torch.device("cpu"), timeout_s=60)
        trainer = DistributedTrainer(model_dir, make_spec_kl(plan.get("algorithm", "grpo"), plan.get("lora")), "cpu",
                                     group)
        if rank > 0:
            serve(trainer, alive=lambda: True)
            group.close()
            return
        if plan.get("load"):
            trainer.load_checkpoint(plan["load"])
        steps = run_iterations(trainer, plan["iterations"])
        if plan.get("save"):
            trainer.save_checkpoint(plan["save"])
        if plan.get("export"):
            trainer.export_weights(plan["export"])
        weights = trainer.state_dict_for_sync()
        trainer.close()
        torch.save({"steps": steps, "weights": weights}, out)
    except Exception:
        Path(out + ".error").write_text(traceback.format_exc())
        raise


def run_ranks(world: int, model_dir: Path, plan: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    out = str(tmp_path / f"rank0-{world}-{store.port}.pt")
    rank_processes()
    mp.start_processes(_rank_main, args=(world, store.port, str(model_dir), plan, out), nprocs=world, join=True,
                       start_method="forkserver")
    assert not Path(out + ".error").exists(), Path(out + ".error").read_text()
    result: dict[str, Any] = torch.load(out, weights_only=False)
    return result


def assert_same(steps_a: list[dict[str, float]], steps_b: list[dict[str, float]]) -> None:
    for a, b in zip(steps_a, steps_b, strict=True):
        for name in ("loss", "kl", "entropy", "grad_norm", "tokens", "samples"):
            assert a[name] == pytest.approx(b[name], abs=1e-5, rel=1e-5), name


def assert_weights_close(ours: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> float:
    assert ours.keys() == reference.keys()
    worst = max(float((ours[k] - reference[k]).abs().max()) for k in reference)
    assert worst < 1e-5, worst
    return worst


@pytest.mark.slow  # ~40-80 s each: a two-process run beside a single-rank one
@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])  # ppo: a sharded value head too
def test_two_ranks_equal_one_rank(tiny_model_dir: Path, tmp_path: Path, algorithm: str) -> None:
    single = Trainer(tiny_model_dir, make_spec_kl(algorithm))
    single_steps = run_iterations(single, 3)
    exported = tmp_path / "exported"
    ranks = run_ranks(2, tiny_model_dir, {"iterations": 3, "algorithm": algorithm, "export": str(exported)}, tmp_path)
    assert_same(ranks["steps"], single_steps)
    worst = assert_weights_close(ranks["weights"], single.state_dict_for_sync())
    # the gathered HF directory loads like any model directory (what engines and exports read)
    assert_weights_close(load_policy(exported, torch.device("cpu")).state_dict(), single.state_dict_for_sync())
    initial = Trainer(tiny_model_dir, make_spec_kl(algorithm)).state_dict_for_sync()
    moved = max(float((single.state_dict_for_sync()[k] - initial[k]).abs().max()) for k in initial)
    assert moved > 1e-3  # the steps really changed the weights
    loss_diff = max(abs(a["loss"] - b["loss"]) for a, b in zip(ranks["steps"], single_steps, strict=True))
    print(
        f"RESULT {algorithm} ranks=2 iterations=3 loss_diff={loss_diff:.2e} max_weight_diff={worst:.2e} "
        f"weight_change={moved:.2e}"
    )


@pytest.mark.slow  # ~35 s: three multi-process runs
def test_sharded_checkpoint_resumes_on_one_rank_and_a_single_rank_one_on_two(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    straight = Trainer(tiny_model_dir, make_spec_kl())
    straight_steps = run_iterations(straight, 3)
    # 2 ranks train 2 iterations and checkpoint (DCP shards + HF weights); 1 rank resumes and trains the third
    sharded = tmp_path / "iter_000002"
    run_ranks(2, tiny_model_dir, {"iterations": 2, "save": str(sharded)}, tmp_path)
    assert (sharded / ckpt.SHARDED_DIR / ".metadata").is_file() and (sharded / "model.safetensors").is_file()
    resumed = Trainer(tiny_model_dir, make_spec_kl())
    assert resumed.load_checkpoint(sharded) == 2 and resumed.version == 2
    assert_same(run_iterations(resumed, 1), straight_steps[2:])
    assert_weights_close(resumed.state_dict_for_sync(), straight.state_dict_for_sync())
    # a single-rank checkpoint after 2 iterations resumes on 2 ranks
    first_two = Trainer(tiny_model_dir, make_spec_kl())
    run_iterations(first_two, 2)
    plain = first_two.save_checkpoint(tmp_path / "single" / "iter_000002")
    ranks = run_ranks(2, tiny_model_dir, {"iterations": 1, "load": str(plain)}, tmp_path)
    assert_same(ranks["steps"], straight_steps[2:])
    assert_weights_close(ranks["weights"], straight.state_dict_for_sync())


def _lead(port_file: str, model_dir: str, ready: str, go: str, outcome: str) -> None:
    """Rank 0 that owns the store (as the driver does): one iteration, then (once `go` exists) another one."""
    from workers.training.distributed import DistributedTrainer, RankGroup, RanksLost

    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=60))
    Path(port_file).write_text(str(store.port))
    trainer = DistributedTrainer(model_dir, make_spec_kl(), "cpu", RankGroup(store, 0, 2, torch.device("cpu"), 60))
    run_iterations(trainer, 1)
    Path(ready).write_text("trained")
    while not Path(go).exists():
        time.sleep(0.1)
    try:
        run_iterations(trainer, 1)
        Path(outcome).write_text("trained again")
    except RanksLost as err:
        Path(outcome).write_text(f"RanksLost ({type(err.__cause__).__name__}): {err}")


def _follow(port_file: str, model_dir: str, outcome: str) -> None:
    from workers.training.distributed import DistributedTrainer, RankGroup, RanksLost, serve

    torch.set_num_threads(1)
    while not Path(port_file).exists() or not Path(port_file).read_text():
        time.sleep(0.1)
    store = dist.TCPStore("127.0.0.1", int(Path(port_file).read_text()), is_master=False, timeout=timedelta(seconds=60))
    trainer = DistributedTrainer(model_dir, make_spec_kl(), "cpu", RankGroup(store, 1, 2, torch.device("cpu"), 60))
    try:
        serve(trainer, alive=lambda: True)
        Path(outcome).write_text("stopped")
    except RanksLost as err:
        Path(outcome).write_text(f"RanksLost: {err}")


def start_pair(model_dir: Path, tmp_path: Path) -> tuple[Any, Any, dict[str, Path]]:
    ctx = rank_processes()
    files = {name: tmp_path / name for name in ("port", "ready", "go", "lead", "follower")}
    lead = ctx.Process(
        target=_lead,
        args=tuple(str(files[n]) for n in ("port",))
        + (str(model_dir),)
        + tuple(str(files[n]) for n in ("ready", "go", "lead")),
    )
    follower = ctx.Process(target=_follow, args=(str(files["port"]), str(model_dir), str(files["follower"])))
    lead.start()
    follower.start()
    deadline = time.time() + 120
    while not files["ready"].exists() and time.time() < deadline:
        time.sleep(0.2)
    assert files["ready"].exists(), "rank 0 did not train"
    return lead, follower, files


@pytest.mark.slow  # ~40 s: two rank processes
def test_a_rank_whose_driver_dies_stops_instead_of_waiting_forever(tiny_model_dir: Path, tmp_path: Path) -> None:
    lead, follower, files = start_pair(tiny_model_dir, tmp_path)
    try:
        os.kill(lead.pid, signal.SIGKILL)
        started = time.time()
        follower.join(timeout=30)  # far below the 60 s collective timeout: the lost store is noticed at once
        assert not follower.is_alive(), "rank 1 still waits for a dead rank 0"
        assert files["follower"].read_text().startswith("RanksLost"), files["follower"].read_text()
        print(f"RESULT rank1_stopped_after_rank0_death_s={time.time() - started:.1f}")
    finally:
        for proc in (lead, follower):
            if proc.is_alive():
                proc.kill()


@pytest.mark.slow  # ~40 s: two rank processes
def test_the_driver_fails_with_ranks_lost_when_a_rank_dies(tiny_model_dir: Path, tmp_path: Path) -> None:
    lead, follower, files = start_pair(tiny_model_dir, tmp_path)
    try:
        os.kill(follower.pid, signal.SIGKILL)
        started = time.time()
        files["go"].write_text("go")
        lead.join(timeout=50)  # below the 60 s collective timeout: the dropped connection fails the collective
        assert not lead.is_alive(), "rank 0 hangs on a dead rank"
        assert files["lead"].read_text().startswith("RanksLost"), files["lead"].read_text()
        print(f"RESULT rank0_failed_after_rank1_death_s={time.time() - started:.1f} {files['lead'].read_text()[:160]}")
    finally:
        for proc in (lead, follower):
            if proc.is_alive():
                proc.kill()


def _reused(role: int, ports: list[int], model_dir: str, out: str) -> None:
    """Celery reuses task processes: role 0 is rank 0 of a group whose rank 1 (role 1) dies, then rank 1 of the next
    group, whose rank 0 (role 2) trains and checkpoints."""
    from workers.training.distributed import DistributedTrainer, RankGroup, RanksLost, serve

    torch.set_num_threads(1)

    def join(rank: int, port: int) -> DistributedTrainer:
        store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=60))
        return DistributedTrainer(model_dir, make_spec_kl(), "cpu", RankGroup(store, rank, 2, torch.device("cpu"), 60))

    if role == 0:
        first = join(0, ports[0])
        run_iterations(first, 1)
        with pytest.raises(RanksLost):
            run_iterations(first, 5)
        first.close()
        serve(join(1, ports[1]), alive=lambda: True)
    elif role == 1:
        trainer = join(1, ports[0])
        while True:
            op, arg = trainer.group.receive(lambda: True)
            if op == "optimizer_step" and trainer.iteration == 1:
                os._exit(0)  # dies at the end of the second iteration
            if op == "optimizer_step":
                trainer.optimizer_step()
            else:
                trainer.micro_step([Sample.from_json(x) for x in arg[0]], arg[1])
    else:
        trainer = join(0, ports[1])
        run_iterations(trainer, 2)
        trainer.save_checkpoint(out)
        trainer.close()


@pytest.mark.slow  # ~40 s: two groups of rank processes
def test_a_process_that_served_a_lost_group_serves_the_next_one(tiny_model_dir: Path, tmp_path: Path) -> None:
    stores = [dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False) for _ in range(2)]
    out = tmp_path / "iter_000002"
    rank_processes()
    mp.start_processes(
        _reused,
        args=([s.port for s in stores], str(tiny_model_dir), str(out)),
        nprocs=3,
        join=True,
        start_method="forkserver",
    )
    assert (out / ckpt.SHARDED_DIR / ".metadata").is_file()  # a stale device mesh made this save fail
