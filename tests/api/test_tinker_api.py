"""The Tinker API's wire format and validation (docs/tinker.md), fast: the real `tinker` SDK (0.38) against a live
API server with no workers, plus the protobuf codec against the SDK's own generated classes. The training itself runs
on real workers in tests/integration/test_tinker_sdk.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import tinker
from sqlalchemy import select
from tinker import types
from tinker.proto.request_conv import forward_backward_request_to_proto
from tinker.proto.response_conv import deserialize_forward_backward_output, deserialize_sample_response
from waiting import api_in_thread

from backend.db.enums import JobStatus
from backend.db.models import Job, JobEvent, Team, User
from backend.services import tinker as svc
from backend.services import tinker_futures
from backend.services import tinker_wire as wire
from backend.services.auth import new_api_key
from backend.services.jobs import transition_job
from contract import keys


@pytest.fixture(scope="module")
def base_url(pg_backend: Any) -> Iterator[str]:
    with api_in_thread(pg_backend.settings) as url:
        yield f"{url}/tinker"


def api_key(backend: Any, team: Team, user: User, scopes: list[str] | None = None) -> str:
    with backend.session() as session:
        return new_api_key(session=session, team=session.get(Team, team.id), creator=session.get(User, user.id),
                           name="tinker-sdk", scopes=scopes or ["read", "write"])[1]


def datum(tokens: list[int], **inputs: Any) -> types.Datum:
    return types.Datum(model_input=types.ModelInput.from_ints(tokens), loss_fn_inputs=inputs or
                       {"target_tokens": tokens[1:] + [0], "weights": [1.0] * len(tokens)})


def test_new_keys_carry_the_tml_prefix_and_the_sdk_accepts_them(pg_backend: Any, world: Any, base_url: str) -> None:
    key = api_key(pg_backend, world.team, world.users["member"])
    assert key.startswith("tml-")
    caps = tinker.ServiceClient(base_url=base_url, api_key=key).create_rest_client().get_server_capabilities()
    assert [m.model_name for m in caps.result().supported_models] == ["tiny"]
    assert httpx.get(f"{base_url}/api/v1/healthz").json() == {"status": "ok"}
    refused = httpx.get(f"{base_url}/api/v1/get_server_capabilities", headers={"X-API-Key": "tml-0000_nope"})
    assert refused.status_code == 401 and refused.headers["x-should-retry"] == "false"


def test_create_model_validates_and_queues_a_tinker_job(pg_backend: Any, world: Any, base_url: str) -> None:
    service = tinker.ServiceClient(base_url=base_url, api_key=api_key(pg_backend, world.team, world.users["member"]))
    with pytest.raises(tinker.BadRequestError, match="is not a ready model of this team; supported: \\['tiny'\\]"):
        service.create_lora_training_client(base_model="nope", rank=4).result(timeout=30)
    session_id = service.holder.get_session_id()
    key = api_key(pg_backend, world.team, world.users["member"])
    created = httpx.post(f"{base_url}/api/v1/create_model", headers={"X-API-Key": key}, json={
        "session_id": session_id, "model_seq_id": 7, "base_model": "tiny", "lora_config": {"rank": 4}}).json()
    model_id = f"{session_id}:train:7"
    assert created["model_id"] == model_id
    with pg_backend.session() as session:  # a platform job, queued for the controller like any other
        job = session.scalar(select(Job).where(Job.name == model_id))
        assert job is not None and job.tags == ["tinker"] and job.status == JobStatus.queued
        assert job.spec["training"]["lora"]["rank"] == 4 and job.target_instances == 0
    pending = httpx.post(f"{base_url}/api/v1/retrieve_future", headers={"X-API-Key": key},
                         json={"request_id": created["request_id"]}, timeout=30).json()
    assert pending == {"type": "try_again", "request_id": created["request_id"], "queue_state": "paused_capacity"}
    info = httpx.post(f"{base_url}/api/v1/get_info", headers={"X-API-Key": key}, json={"model_id": model_id}).json()
    assert info["model_data"]["model_name"] == "tiny" and info["lora_rank"] == 4

    bad = httpx.post(f"{base_url}/api/v1/create_model", headers={"X-API-Key": key}, json={
        "session_id": session_id, "model_seq_id": 8, "base_model": "tiny", "lora_config": {"rank": 0}})
    assert bad.status_code == 400 and "rank must be between 1 and 1024" in bad.json()["detail"]
    full = httpx.post(f"{base_url}/api/v1/create_model", headers={"X-API-Key": key}, json={
        "session_id": session_id, "model_seq_id": 9, "base_model": "tiny"})
    assert full.status_code == 400 and full.json()["detail"].startswith("not supported by this server: full")

    # the worker died before answering: the pending future fails with a retryable (server) error naming the resume
    with pg_backend.session() as session:
        job = session.scalar(select(Job).where(Job.name == model_id))
        transition_job(session=session, job=job, to=JobStatus.failed, error="the training session's worker died")
    failed = httpx.post(f"{base_url}/api/v1/retrieve_future", headers={"X-API-Key": key},
                        json={"request_id": created["request_id"]}).json()
    assert failed["category"] == "server" and "create_training_client_from_state_with_optimizer" in failed["error"]
    service.close("success").result()


def test_another_teams_objects_are_404(pg_backend: Any, world: Any, other_world: Any, base_url: str) -> None:
    mine = api_key(pg_backend, world.team, world.users["member"])
    theirs = {"X-API-Key": api_key(pg_backend, other_world.team, other_world.users["member"])}
    service = tinker.ServiceClient(base_url=base_url, api_key=mine)
    session_id = service.holder.get_session_id()
    created = httpx.post(f"{base_url}/api/v1/create_model", headers={"X-API-Key": mine}, json={
        "session_id": session_id, "model_seq_id": 0, "base_model": "tiny", "lora_config": {"rank": 2}}).json()
    for path, body in [("session_heartbeat", {"session_id": session_id}),
                       ("get_info", {"model_id": created["model_id"]}),
                       ("retrieve_future", {"request_id": created["request_id"]}),
                       ("optim_step", {"model_id": created["model_id"], "seq_id": 1, "adam_params": {}}),
                       ("load_weights", {"model_id": created["model_id"], "seq_id": 1, "optimizer": True,
                                         "path": f"tinker://{created['model_id']}/weights/x"})]:
        answer = httpx.post(f"{base_url}/api/v1/{path}", headers=theirs, json=body)
        assert answer.status_code == 404, (path, answer.text)
    answer = httpx.get(f"{base_url}/api/v1/training_runs/{created['model_id']}", headers=theirs)
    assert answer.status_code == 404
    listed = httpx.get(f"{base_url}/api/v1/training_runs", headers=theirs).json()
    assert listed["training_runs"] == []
    with pg_backend.session() as session:
        job = session.scalar(select(Job).where(Job.name == created["model_id"]))
        transition_job(session=session, job=job, to=JobStatus.cancelled)
    service.close("success").result()


def test_unsupported_calls_and_bad_bodies_are_clear_400s(pg_backend: Any, world: Any, base_url: str) -> None:
    headers = {"X-API-Key": api_key(pg_backend, world.team, world.users["member"])}
    for path in ("copy_weights", "save_weights_external", "create_custom_loss", "checkpoints"):
        answer = httpx.post(f"{base_url}/api/v1/{path}", headers=headers, json={})
        assert answer.status_code == 400 and answer.json()["detail"].startswith(
            f"not supported by this server: {path}"), answer.text
    garbage = httpx.post(f"{base_url}/api/v1/forward_backward", content=b"\xff\xff\xff",
                         headers={**headers, "Content-Type": "application/x-protobuf"})
    assert garbage.status_code == 400 and "malformed protobuf body" in garbage.json()["detail"]
    request = types.ForwardBackwardRequest(forward_backward_input=types.ForwardBackwardInput(
        data=[datum([1, 2, 3])], loss_fn="stable_reinforce"), model_id="x:train:0", seq_id=1)
    body = forward_backward_request_to_proto(request).SerializeToString()
    answer = httpx.post(f"{base_url}/api/v1/forward_backward", content=body,
                        headers={**headers, "Content-Type": "application/x-protobuf"})
    assert answer.status_code == 400 and "not supported by this server: loss_fn 'stable_reinforce'" in \
        answer.json()["detail"]
    request = types.ForwardBackwardRequest(forward_backward_input=types.ForwardBackwardInput(
        data=[datum([1, 2, 3], target_tokens=[2, 3, 4])], loss_fn="ppo"), model_id="x:train:0", seq_id=1)
    answer = httpx.post(f"{base_url}/api/v1/forward_backward", headers={
        **headers, "Content-Type": "application/x-protobuf"},
        content=forward_backward_request_to_proto(request).SerializeToString())
    assert answer.status_code == 400 and "needs loss_fn_inputs ['logprobs', 'advantages']" in answer.json()["detail"]
    missing = httpx.post(f"{base_url}/api/v1/optim_step", headers=headers, json={"seq_id": 1})
    assert missing.status_code == 400 and "model_id" in missing.json()["detail"]


def test_the_protobuf_codec_matches_the_sdk() -> None:
    request = types.ForwardBackwardRequest(forward_backward_input=types.ForwardBackwardInput(
        data=[datum([1, 2, 3], target_tokens=[2, 3, 4], logprobs=[-1.0, -2.0, -0.5], advantages=[1.0, 0.0, -1.0])],
        loss_fn="ppo", loss_fn_config={"clip_low_threshold": 0.7, "clip_high_threshold": 1.3}),
        model_id="s:train:0", seq_id=4)
    message = forward_backward_request_to_proto(request)
    message.forward_only = True
    parsed = wire.read_forward_backward(message.SerializeToString())
    assert (parsed.model_id, parsed.seq_id, parsed.loss_fn, parsed.forward_only) == ("s:train:0", 4, "ppo", True)
    assert parsed.loss_fn_config == {"clip_low_threshold": 0.7, "clip_high_threshold": 1.3}
    only = parsed.data[0]
    assert only.tokens == [1, 2, 3] and only.loss_fn_inputs["target_tokens"].values == [2, 3, 4]
    assert only.loss_fn_inputs["advantages"].values == [1.0, 0.0, -1.0]
    sparse = types.TensorData(data=[0.5, 2.0], dtype="float32", shape=[2, 3], sparse_crow_indices=[0, 1, 2],
                              sparse_col_indices=[2, 0])
    sparse_request = types.ForwardBackwardRequest(forward_backward_input=types.ForwardBackwardInput(
        data=[types.Datum(model_input=types.ModelInput.from_ints([1]), loss_fn_inputs={"w": sparse})],
        loss_fn="cross_entropy"), model_id="m", seq_id=1)
    dense = wire.read_forward_backward(forward_backward_request_to_proto(sparse_request).SerializeToString())
    assert dense.data[0].loss_fn_inputs["w"].values == [0.0, 0.0, 0.5, 2.0, 0.0, 0.0]

    output = deserialize_forward_backward_output(wire.write_forward_backward_output(
        [{"logprobs": [-1.0, -2.5]}, {"logprobs": [-0.25]}], {"loss:sum": 3.75}))
    assert output.metrics == {"loss:sum": 3.75}
    assert [out["logprobs"].tolist() for out in output.loss_fn_outputs] == [[-1.0, -2.5], [-0.25]]
    sample = deserialize_sample_response(wire.write_sample_response(
        [{"tokens": [5, 6], "logprobs": [-0.5, -0.25], "stop_reason": "length"},
         {"tokens": [7], "logprobs": None, "stop_reason": "stop"}], [None, -1.5]))
    assert sample.sequences[0].tokens == [5, 6] and sample.sequences[0].logprobs == [-0.5, -0.25]
    assert sample.sequences[0].stop_reason == "length" and sample.sequences[1].stop_reason == "stop"
    assert sample.prompt_logprobs == [None, -1.5]


def test_request_ids_name_their_job_and_results_expire(pg_backend: Any, world: Any, redis_url: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    svc.store_result(client, "12.abc", {"metrics": {}})
    assert 0 < client.ttl(keys.tinker_result("12.abc")) <= svc.RESULT_TTL_S
    with pg_backend.session() as session, pytest.raises(svc.TinkerError, match="not found"):
        svc.job_of_request(session, session.get(Team, world.team.id), "not-a-job.abc")


def _sample_body(sampler: str, **overrides: Any) -> dict[str, Any]:
    request = types.SampleRequest(sampling_session_id=sampler, seq_id=0, num_samples=2,
                                  prompt=types.ModelInput.from_ints([1, 2, 3]),
                                  sampling_params=types.SamplingParams(max_tokens=4, temperature=1.0, seed=3))
    body = request.model_dump(exclude_unset=False, exclude_none=True, mode="json")  # as the SDK sends it
    for name, value in overrides.items():
        if name in types.SamplingParams.model_fields:
            body["sampling_params"][name] = value
        else:
            body[name] = value
    return body


def test_bad_sample_requests_are_400s_and_other_teams_samplers_404(pg_backend: Any, world: Any, other_world: Any,
                                                                    base_url: str) -> None:
    mine = {"X-API-Key": api_key(pg_backend, world.team, world.users["member"])}
    theirs = {"X-API-Key": api_key(pg_backend, other_world.team, other_world.users["member"])}
    service = tinker.ServiceClient(base_url=base_url, api_key=mine["X-API-Key"])
    sampler = httpx.post(f"{base_url}/api/v1/create_sampling_session", headers=mine, json={
        "session_id": service.holder.get_session_id(), "base_model": "tiny"}).json()["sampling_session_id"]
    assert httpx.get(f"{base_url}/api/v1/samplers/{sampler}", headers=mine).json()["base_model"] == "tiny"

    for headers, sampler_id in ((theirs, sampler), (mine, f"{world.team.id}-0000")):
        answer = httpx.post(f"{base_url}/api/v1/asample", headers=headers, json=_sample_body(sampler_id))
        assert answer.status_code == 404 and "sampler" in answer.json()["detail"], answer.text
    assert httpx.get(f"{base_url}/api/v1/samplers/{sampler}", headers=theirs).status_code == 404

    bad: list[tuple[dict[str, Any], str]] = [({"num_samples": 0}, "num_samples must be between 1 and 128"),
           ({"max_tokens": 0}, "max_tokens must be 1 or more"),
           ({"temperature": -1.0}, "temperature >= 0"),
           ({"seed": -1}, "seed must be a non-negative integer"),
           ({"stop": ["a", 5]}, "not a mix"),
           ({"prompt": {"chunks": []}}, "prompt.chunks must be a non-empty list"),
           ({"prompt": {"chunks": [{"type": "encoded_text", "tokens": [1, -2]}]}}, "token ids"),
           ({"prompt_logprobs_last_n": 1}, "prompt_logprobs_last_n needs prompt_logprobs"),
           ({"prompt_logprobs": True, "prompt_logprobs_last_n": 3}, "between 1 and 2"),
           ({"sampling_params": None}, "sampling_params is required"),
           ({"top_k": 5}, "not supported by this server: sampling_params.top_k"),
           ({"stop": []}, "not supported by this server: sampling_params.stop=[]"),
           ({"topk_prompt_logprobs": -1}, "topk_prompt_logprobs must be an integer from 0 to 64"),
           ({"topk_sample_logprobs": 65}, "topk_sample_logprobs must be an integer from 0 to 64"),
           ({"topk_sample_logprobs": True}, "topk_sample_logprobs must be an integer"),
           ({"prompt_alt_tokens_k": 2}, "not supported by this server: prompt_alt_tokens_k"),
           ({"prompt": {"chunks": [{"type": "image", "data": "", "format": "png"}]}},
            "not supported by this server: image prompt chunks")]
    for overrides, message in bad:
        answer = httpx.post(f"{base_url}/api/v1/asample", headers=mine, json=_sample_body(sampler, **overrides))
        assert answer.status_code == 400 and message in answer.json()["detail"], (overrides, answer.text)
    not_json = httpx.post(f"{base_url}/api/v1/asample", headers=mine, content=b"{nope")
    assert not_json.status_code == 422 and "not valid JSON" in not_json.text  # the app's JSON check, before ours
    neither = httpx.post(f"{base_url}/api/v1/asample", headers=mine,
                         json={k: v for k, v in _sample_body(sampler).items() if k != "sampling_session_id"})
    assert neither.status_code == 400 and "needs sampling_session_id" in neither.json()["detail"]

    # a started sample's future is the caller's team's only; one whose runner is gone fails retryably
    started = httpx.post(f"{base_url}/api/v1/asample", headers=mine, json=_sample_body(sampler)).json()
    assert started["request_id"].startswith(f"sample.{world.team.id}.") and len(started["sample_sequence_ids"]) == 2
    stranger = httpx.post(f"{base_url}/api/v1/retrieve_future", headers=theirs,
                          json={"request_id": started["request_id"]})
    assert stranger.status_code == 404
    lost = httpx.post(f"{base_url}/api/v1/retrieve_future", headers=mine,
                      json={"request_id": f"sample.{world.team.id}.0000"}).json()
    assert lost["category"] == "server" and "was lost" in lost["error"]
    service.close("success").result()


def test_a_call_to_a_parked_session_queues_it_and_close_ends_it(pg_backend: Any, world: Any, base_url: str,
                                                                 redis_url: str) -> None:
    """The request path of a parked session (no workers): its call waits (`paused_capacity`) and queues the job
    again once; the session's GET says parked; ServiceClient.close() ends a parked session where it is."""
    import redis

    client = redis.Redis.from_url(redis_url)
    key = api_key(pg_backend, world.team, world.users["member"])
    headers = {"X-API-Key": key}
    session_id = httpx.post(f"{base_url}/api/v1/create_session", headers=headers, json={}).json()["session_id"]
    created = httpx.post(f"{base_url}/api/v1/create_model", headers=headers, json={
        "session_id": session_id, "model_seq_id": 0, "base_model": "tiny", "lora_config": {"rank": 4}}).json()
    model_id = created["model_id"]
    with pg_backend.session() as session:  # served, then idle: parked by its worker (the reporter's transitions)
        job = session.scalar(select(Job).where(Job.name == model_id))
        for status in (JobStatus.starting, JobStatus.running, JobStatus.parked):
            transition_job(session=session, job=job, to=status)
        job_id = job.id
    run = httpx.get(f"{base_url}/api/v1/training_runs/{model_id}", headers=headers).json()
    assert (run["status"], run["parked"], run["restores"], run["last_restore_s"]) == ("parked", True, 0, None)
    health = httpx.get(f"{base_url.removesuffix('/tinker')}/api/v1/jobs/{job_id}/health",
                       headers={"Authorization": f"Bearer {key}"}).json()  # the platform API: the same key
    assert health["state"] == "paused" and health["summary"].startswith("parked"), health

    step = httpx.post(f"{base_url}/api/v1/optim_step", headers=headers,
                      json={"model_id": model_id, "seq_id": 1, "adam_params": {}}).json()
    with pg_backend.session() as session:
        woken = session.get(Job, job_id)
        assert woken is not None and woken.status == JobStatus.queued  # the controller admits it like any job
        events = [e.message for e in session.scalars(select(JobEvent).where(JobEvent.job_id == job_id))]
    assert "woken by a call: queued for a training slot" in events
    assert client.exists(keys.tinker_woken(job_id))  # the restore latency is measured from here
    pending = httpx.post(f"{base_url}/api/v1/retrieve_future", headers=headers,
                         json={"request_id": step["request_id"]}, timeout=30).json()
    assert pending["type"] == "try_again" and pending["queue_state"] == "paused_capacity"
    httpx.post(f"{base_url}/api/v1/optim_step", headers=headers,
               json={"model_id": model_id, "seq_id": 2, "adam_params": {}})  # queued already: no second wake
    with pg_backend.session() as session:
        events = [e.message for e in session.scalars(select(JobEvent).where(JobEvent.job_id == job_id))]
        assert events.count("woken by a call: queued for a training slot") == 1
        job = session.get(Job, job_id)
        for status in (JobStatus.starting, JobStatus.running, JobStatus.parked):  # restored, idle, parked again
            transition_job(session=session, job=job, to=status)

    finished = httpx.post(f"{base_url}/api/v1/sessions/{session_id}/finish", headers=headers)  # close()
    assert finished.status_code == 200, finished.text
    with pg_backend.session() as session:
        ended = session.get(Job, job_id)
        assert ended is not None and ended.status == JobStatus.succeeded
    client.close()


def test_parked_sessions_of_a_gone_sdk_session_end(pg_backend: Any, world: Any, base_url: str,
                                                   redis_url: str) -> None:
    """The controller's sweep: a parked session whose SDK session expired (the script exited without close()) ends
    and its park state goes; one whose SDK session still beats (an open notebook) stays parked."""
    import redis

    from backend.services.tinker_parking import end_abandoned, park_file

    client = redis.Redis.from_url(redis_url)
    headers = {"X-API-Key": api_key(pg_backend, world.team, world.users["member"])}
    jobs = {}
    for name in ("gone", "open"):
        session_id = httpx.post(f"{base_url}/api/v1/create_session", headers=headers, json={}).json()["session_id"]
        created = httpx.post(f"{base_url}/api/v1/create_model", headers=headers, json={
            "session_id": session_id, "model_seq_id": 0, "base_model": "tiny", "lora_config": {"rank": 4}}).json()
        with pg_backend.session() as session:
            job = session.scalar(select(Job).where(Job.name == created["model_id"]))
            for status in (JobStatus.starting, JobStatus.running, JobStatus.parked):
                transition_job(session=session, job=job, to=status)
            jobs[name] = (job.id, session_id)
            state = park_file(pg_backend.settings.artifacts, job)
            state.parent.mkdir(parents=True, exist_ok=True)
            state.write_bytes(b"park state")
    client.delete(keys.tinker_session(jobs["gone"][1]))  # its heartbeats stopped SESSION_TTL_S ago
    with pg_backend.session() as session:
        ended = end_abandoned(session, client, pg_backend.settings.artifacts)
    assert jobs["gone"][0] in ended and jobs["open"][0] not in ended
    with pg_backend.session() as session:
        gone, still = session.get(Job, jobs["gone"][0]), session.get(Job, jobs["open"][0])
        assert gone is not None and gone.status == JobStatus.succeeded
        assert still is not None and still.status == JobStatus.parked
        assert not park_file(pg_backend.settings.artifacts, gone).exists()
        assert park_file(pg_backend.settings.artifacts, still).exists()
        transition_job(session=session, job=still, to=JobStatus.cancelled)
    client.close()


def test_retrieve_futures_and_join_sampling_session(pg_backend: Any, world: Any, other_world: Any, base_url: str,
                                                    redis_url: str) -> None:
    """The SDK's session poller and clone ids (no workers): the server turns both on; a sample's completion is
    queued under its sampling session and clone (seq_id // 1e9), answered once after the caller's cursor; a pending
    sample whose runner is gone is reported failed; the official SDK's unpickled clone joins (a new clone id), and
    its poller hands it its sample's failure; another team's session is a 404 on both routes."""
    import pickle

    import redis

    client = redis.Redis.from_url(redis_url)
    key = api_key(pg_backend, world.team, world.users["member"])
    mine, theirs = {"X-API-Key": key}, {"X-API-Key": api_key(pg_backend, other_world.team,
                                                              other_world.users["member"])}
    config = httpx.post(f"{base_url}/api/v1/client/config", headers=mine, json={}).json()
    assert config["sample_use_retrieve_futures"] is True and config["sample_join_sampling_session"] is True
    service = tinker.ServiceClient(base_url=base_url, api_key=key)
    sampling_client = service.create_sampling_client(base_model="tiny").result(timeout=30)
    sampler = sampling_client._sampling_session_id

    def join(headers: dict[str, str], sampler_id: str = sampler) -> httpx.Response:
        return httpx.post(f"{base_url}/api/v1/join_sampling_session", headers=headers,
                          json={"sampling_session_id": sampler_id})

    def futures(headers: dict[str, str], clone: int, cursor: int = 0, **extra: Any) -> httpx.Response:
        return httpx.post(f"{base_url}/api/v1/retrieve_futures", headers=headers, timeout=60, json={
            "target": {"type": "sampling_session", "sampling_session_id": sampler, "cloned_sampler_id": clone},
            "prev_cursor": cursor, **extra})

    assert [join(mine).json()["client_counter"] for _ in range(2)] == [1, 2]
    assert join(theirs).status_code == 404 and futures(theirs, 0, timeout=0).status_code == 404
    assert join(mine, f"{world.team.id}-0000").status_code == 404
    bad = httpx.post(f"{base_url}/api/v1/retrieve_futures", headers=mine, json={"target": {"type": "model"}})
    assert bad.status_code == 400 and "target must be" in bad.json()["detail"]

    started = httpx.post(f"{base_url}/api/v1/asample", headers=mine,
                         json={**_sample_body(sampler), "seq_id": 2 * 1_000_000_000 + 5}).json()
    request_id = started["request_id"]  # no generation worker: the sample fails at once, its completion queued
    done = futures(mine, 2).json()
    assert done == {"completions": [{"state": "failed", "request_id": request_id}], "cursor": 1}
    assert futures(mine, 2, cursor=1, timeout=0).json() == {"completions": [], "cursor": 1}  # answered once
    assert futures(mine, 0, timeout=0).json() == {"completions": [], "cursor": 0}  # the original client's queue
    failure = httpx.post(f"{base_url}/api/v1/retrieve_future", headers=mine, json={"request_id": request_id}).json()
    assert "no worker of the generation pool" in failure["error"]
    gone = f"sample.{world.team.id}.00ff"  # pending, but no runner and no result (the API process died)
    tinker_futures.track(client, tinker_futures.Target(sampler, 2), gone)
    lost = futures(mine, 2, cursor=1).json()  # the long poll's lost check reports it
    assert lost == {"completions": [{"state": "failed", "request_id": gone}], "cursor": 2}
    assert "was lost" in httpx.post(f"{base_url}/api/v1/retrieve_future", headers=mine,
                                    json={"request_id": gone}).json()["error"]

    clone = pickle.loads(pickle.dumps(sampling_client))  # a worker process's copy: it joins, then samples
    with pytest.raises(Exception, match="no worker of the generation pool"):  # told by its session poller
        clone.sample(types.ModelInput.from_ints([1, 2, 3]), 1, types.SamplingParams(max_tokens=2)).result(timeout=60)
    assert client.get(f"streamrl:tinker:futures:{sampler}:3:cursor") == b"1"  # clone id 3: after the two joins
    service.close("success").result()
    client.close()
