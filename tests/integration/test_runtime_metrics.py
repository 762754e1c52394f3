"""The plain functions behind the stream driver's iteration metrics: T_gen from the samples' own timestamps (never
from when the driver happened to poll) and the number of instances that really produced an iteration."""

from __future__ import annotations

import pytest

from contract.sample import Sample
from workers.runtime.metrics import generation_window, producing_instances


def _sample(sid: str, started: float, finished: float, instance: str = "gen-0") -> Sample:
    return Sample(job_id=1, prompt_id="p", group_id="0:0", sample_id=sid, policy_version=0, prompt_ids=[1],
                  response_ids=[2], behaviour_logprobs=[-0.1], finish_reason="stop", queued_at=started - 1.0,
                  started_at=started, finished_at=finished, instance_id=instance)


def test_window_spans_first_start_to_last_finish_whatever_the_poll_time() -> None:
    # sync, micro_batch < samples: the driver trained for seconds between polls, so the last sample "arrived" at
    # 130 though generation ended at 104: only the engines' timestamps count
    samples = [_sample("a", 100.0, 102.0), _sample("b", 100.5, 104.0), _sample("c", 101.0, 103.0)]
    assert generation_window(samples, fallback_start=99.0) == (100.0, 104.0)


def test_window_starts_no_earlier_than_the_previous_iterations_generation_end() -> None:
    # async: iteration i + 1 was admitted while iteration i still decoded; its T_gen runs from i's end, so an idle
    # generator (training-bound job) shows a short T_gen, not the whole previous iteration
    samples = [_sample("a", 100.0, 112.0), _sample("b", 105.0, 111.0)]
    assert generation_window(samples, fallback_start=90.0, previous_end=110.0) == (110.0, 112.0)
    idle_then_fast = [_sample("a", 150.0, 151.0)]
    start, end = generation_window(idle_then_fast, fallback_start=90.0, previous_end=110.0)
    assert end - start == pytest.approx(1.0)


def test_window_falls_back_to_dispatch_time_without_engine_timestamps() -> None:
    samples = [_sample("a", 0.0, 5.0)]
    assert generation_window(samples, fallback_start=2.0) == (2.0, 5.0)
    assert generation_window([_sample("b", 0.0, 0.0)], fallback_start=2.0) == (2.0, 2.0)


def test_instances_are_those_that_produced_the_samples() -> None:
    samples = [_sample("a", 1, 2, "gen-0"), _sample("b", 1, 2, "gen-0"), _sample("c", 1, 2, "gen-1")]
    assert producing_instances(samples) == 2
    assert producing_instances(samples[:2]) == 1  # gen-1 exists (maybe only starting) but produced nothing
    assert producing_instances([]) == 0


def test_workers_use_the_configured_device_and_auto_picks_what_torch_sees(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from contract.settings import ConfigError, get_settings, load_settings
    from workers.runtime.components import worker_device

    for configured, expected in [("cpu", "cpu"), ("cuda:1", "cuda:1"),
                                 ("auto", "cuda" if torch.cuda.is_available() else "cpu")]:
        monkeypatch.setenv("STREAMRL_DEVICE", configured)
        get_settings.cache_clear()
        assert worker_device() == expected
    get_settings.cache_clear()
    with pytest.raises(ConfigError, match="STREAMRL_DEVICE"):
        load_settings(device="tpu")
