"""Issue 36, finding 3: one team cannot crash an inference instance another team is using. Two teams sample the same
base model, so one on-demand instance (workers/runtime/inference.py, on a real Celery generation worker) serves
both; a request with a token id outside the vocabulary (2^31 - 1: an IndexError in the embedding, which used to kill
the instance) is refused alone, while the other team's long completion, in flight on that instance, keeps going and
finishes; the instance is the same process before and after."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backend.services import inference
from backend.services.inference import InferenceError, SampleRequest
from contract import keys

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def platform(pg_backend: Any, redis_url: str, tiny_model_dir: Path) -> Iterator[Any]:
    from runtime_platform import Platform

    with Platform.start(pg_backend, redis_url, tiny_model_dir, start_workers=False,
                        extra_env={"STREAMRL_INFERENCE_IDLE_S": "30"}) as running:
        running.start_worker("generation", concurrency=1)
        running.wait_registered("generation")
        yield running


def instance_pid(platform: Any, model_dir: str) -> int | None:
    raw = platform.client.get(keys.inference_state(inference.inference_key(model_dir, None)))
    return json.loads(raw).get("pid") if raw else None


def test_a_bad_token_id_fails_only_its_own_request(platform: Any, tiny_model_dir: Path) -> None:
    model_dir, client = str(tiny_model_dir), platform.client
    team_a, team_b = platform.team.id, platform.backend.make_team().id
    warm = inference.sample(client, team_id=team_a, model_dir=model_dir, adapter_dir=None, timeout_s=300,
                            requests=[SampleRequest(prompt_ids=[1, 2, 3], max_tokens=2, temperature=0.0)])
    assert len(warm[0][0].token_ids) >= 1
    pid = instance_pid(platform, model_dir)
    assert pid is not None

    arrivals: list[tuple[float, int, str | None]] = []
    failure: list[BaseException] = []

    def long_completion() -> None:  # team A: 16 samples of up to 900 tokens, streamed as they are generated
        try:
            for _, sample, _, finish in inference.sample_stream(
                    client, team_id=team_a, model_dir=model_dir, adapter_dir=None, timeout_s=300,
                    requests=[SampleRequest(prompt_ids=[5, 6, 7], max_tokens=900, temperature=1.0, seed=3, n=16)]):
                arrivals.append((time.monotonic(), sample, finish))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertions below
            failure.append(exc)

    thread = threading.Thread(target=long_completion)
    thread.start()
    deadline = time.monotonic() + 120
    while not arrivals and not failure and time.monotonic() < deadline:
        time.sleep(0.01)
    assert arrivals, f"team A's completion never started: {failure}"

    with pytest.raises(InferenceError) as refused:  # team B, on the same instance, with an id past the vocabulary
        inference.sample(client, team_id=team_b, model_dir=model_dir, adapter_dir=None, timeout_s=120,
                         requests=[SampleRequest(prompt_ids=[1, 2**31 - 1], max_tokens=4)])
    refused_at = time.monotonic()
    assert refused.value.code == "invalid_request", refused.value.message
    assert "prompt token 1 is 2147483647, outside the model's vocabulary" in refused.value.message

    thread.join(timeout=300)
    assert not failure, f"team A's in-flight completion failed: {failure[0]!r}"
    finished = {sample: finish for _, sample, finish in arrivals if finish is not None}
    assert sorted(finished) == list(range(16)) and set(finished.values()) <= {"stop", "length"}, finished
    assert arrivals[-1][0] > refused_at, "A's completion was still in flight when B was refused"
    assert instance_pid(platform, model_dir) == pid  # the same instance served both, and still does
    after = inference.sample(client, team_id=team_b, model_dir=model_dir, adapter_dir=None, timeout_s=120,
                             requests=[SampleRequest(prompt_ids=[1, 2], max_tokens=2, temperature=0.0)])
    assert len(after[0][0].token_ids) >= 1
