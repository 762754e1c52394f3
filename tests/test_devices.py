"""Device sets: parsing (contract/devices.py) and pinning a process to a set (workers/devices.py)."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from contract.devices import DeviceSetError, format_device_set, parse_device_sets
from workers.devices import NoFreeDeviceSet, claim_device_set, pin_process


def test_parse_and_format_round_trip() -> None:
    assert parse_device_sets("0-3;4-7") == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert parse_device_sets(" 0 ; 1,3 ; 5-6,9 ") == [(0,), (1, 3), (5, 6, 9)]
    assert [format_device_set(s) for s in parse_device_sets("0-2,5;7")] == ["0-2,5", "7"]


@pytest.mark.parametrize(("text", "message"), [
    ("", "set 1 of '' is empty"),
    ("0;;1", "set 2"),
    ("a", "'a' is not a device id"),
    ("3-1", "'3-1' is not a valid range"),
    ("0-3;2-5", "device 2 is in sets 1 and 2"),
    ("-1", "is not a"),
])
def test_bad_device_sets_name_the_bad_part(text: str, message: str) -> None:
    with pytest.raises(DeviceSetError, match=message.replace("(", r"\(")):
        parse_device_sets(text)


def _claim(lock_dir: str, sets: list[tuple[int, ...]], out: multiprocessing.Queue, hold: multiprocessing.Event) -> None:
    try:
        out.put(claim_device_set(sets, Path(lock_dir))[0])
    except NoFreeDeviceSet as err:
        out.put(str(err))
    hold.wait(10)


def test_each_process_claims_its_own_set_and_a_dead_ones_set_is_free_again(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    sets, out, hold = [(0,), (1,)], ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_claim, args=(str(tmp_path), sets, out, hold)) for _ in range(3)]
    for proc in procs:
        proc.start()
    got = sorted(str(out.get(timeout=10)) for _ in procs)
    assert got[:2] == ["0", "1"] and "all 2 device sets" in got[2]
    hold.set()
    for proc in procs:
        proc.join(10)
    again = ctx.Process(target=_claim, args=(str(tmp_path), sets, out, ctx.Event()))
    again.start()
    assert out.get(timeout=10) == 0  # the kernel dropped the dead processes' locks
    again.kill()


def _pinned(out: multiprocessing.Queue) -> None:
    import torch

    pin_process("cpu", (0,))
    out.put((sorted(os.sched_getaffinity(0)), torch.get_num_threads(), os.environ["STREAMRL_DEVICE_SET"]))


def test_pin_process_sets_affinity_and_threads() -> None:
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    proc = ctx.Process(target=_pinned, args=(out,))
    proc.start()
    assert out.get(timeout=60) == ([0], 1, "cpu:0")
    proc.join(10)


def test_a_tensor_parallel_instance_needs_a_device_set_that_large(monkeypatch: pytest.MonkeyPatch) -> None:
    from contract.spec import JobSpec
    from workers.runtime.components import make_engine
    from workers.runtime.context import JobSetupError

    spec = JobSpec.model_validate({"model": "m", "dataset": {"builtin": "arithmetic"},
                                   "generation": {"engine": "vllm", "vllm": {"tensor_parallel_size": 2}}})
    monkeypatch.setenv("STREAMRL_DEVICE_SET", "cuda:3")
    with pytest.raises(JobSetupError, match=r"tensor_parallel_size is 2 but this worker process owns 1 GPU\(s\)"):
        make_engine(spec, Path("/nonexistent"))
