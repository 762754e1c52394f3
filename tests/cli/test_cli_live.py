"""The CLI against a real API server (uvicorn subprocess, Postgres): every command group end to end."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from minimal_model import write_minimal_model
from waiting import environ_snapshot

from backend.client import StreamRLClient
from backend.db.session import make_engine, session_scope
from backend.services.job_data import record_iteration
from backend.services.live import publish_live
from streamrl.cli.config import CLIConfig

from .conftest import Invoke, Server

pytestmark = pytest.mark.integration


def _token(server: Server) -> str:
    token = CLIConfig.load().tokens.get(server.url)
    assert token
    return token


def _write_spec(path: Path, model: str, dataset_id: int, **extra: Any) -> Path:
    spec = {"name": "cli-test", "model": model, "dataset": {"id": dataset_id}, "generation": {"instances": 1}, **extra}
    path.write_text(json.dumps(spec))
    return path


def _job_setup(cli: Invoke, api_server: Server, tmp_path: Path) -> int:
    """Register a model, upload a dataset, submit a job; returns the job id."""
    model = f"tiny-{uuid.uuid4().hex[:6]}"
    assert cli("models", "register", model, str(api_server.model_dir(model))).exit_code == 0
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(5)))
    uploaded = cli("--json", "datasets", "upload", str(data), "--name", f"arith-{uuid.uuid4().hex[:6]}")
    assert uploaded.exit_code == 0, uploaded.stderr
    dataset = uploaded.json()
    assert isinstance(dataset, dict) and dataset["row_count"] == 5
    submitted = cli("--json", "jobs", "submit", str(_write_spec(tmp_path / "spec.json", model, dataset["id"])))
    assert submitted.exit_code == 0, submitted.stderr
    job = submitted.json()
    assert isinstance(job, dict) and job["status"] == "queued"
    return int(job["id"])


def test_init_admin_login_whoami_logout(cli: Invoke, owner: str, api_server: Server) -> None:
    who = cli("whoami")
    assert who.exit_code == 0 and owner in who.stdout and "owner" in who.stdout
    assert cli("logout").exit_code == 0
    assert "not logged in" in cli("whoami").stderr
    bad = cli("login", "--email", owner, "--password", "wrong-password")
    assert bad.exit_code == 1 and bad.stderr.startswith("error: 401") and "Traceback" not in bad.stderr
    good = cli("login", "--email", owner, input="pw-12345678\n")  # password prompted
    assert good.exit_code == 0, good.stderr
    assert f"logged in to {api_server.url} as {owner}" in good.stdout
    again = cli("init-admin", "--email", owner, "--password", "pw-12345678")
    assert again.exit_code == 1 and again.stderr.startswith(f"error: could not create {owner}: ")


def test_datasets_and_models(cli: Invoke, owner: str, api_server: Server, tmp_path: Path) -> None:
    good = tmp_path / "good.jsonl"
    good.write_text('{"prompt": "1+1=", "answer": "2"}\n{"prompt": "2+2=", "answer": "4"}\n')
    up = cli("datasets", "upload", str(good), "--name", "tiny-set")
    assert up.exit_code == 0 and "2 rows" in up.stdout
    listed = cli("datasets", "list")
    assert "tiny-set" in listed.stdout
    dataset_id = listed.stdout.splitlines()[1].split()[0]
    rows = cli("datasets", "rows", dataset_id, "--limit", "1")
    assert json.loads(rows.stdout.strip())["prompt"] == "1+1="

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"prompt": "ok"}\nnot json\n')
    refused = cli("datasets", "upload", str(bad))
    assert refused.exit_code == 1 and refused.stderr.startswith("error: 422") and "3" in refused.stderr
    big = tmp_path / "big.jsonl"
    big.write_text(json.dumps({"prompt": "x" * 70_000}) + "\n")
    too_big = cli("datasets", "upload", str(big))
    assert too_big.exit_code == 1 and too_big.stderr.startswith("error: 413")
    assert cli("datasets", "upload", str(tmp_path / "missing.jsonl")).stderr.startswith("error: no such file")

    model_dir = api_server.model_dir("tiny-llama")
    assert cli("models", "register", "tiny-llama", str(model_dir)).exit_code == 0
    assert "tiny-llama" in cli("models", "list").stdout
    outside = cli("models", "register", "evil", "/etc")
    assert outside.exit_code == 1 and "outside the allowed model roots" in outside.stderr
    mini = write_minimal_model(tmp_path / "mini", architecture="Qwen2ForCausalLM")
    uploaded = cli("models", "upload", "mini", str(mini))
    assert uploaded.exit_code == 0 and "'mini' v1: ready - Qwen2ForCausalLM" in uploaded.stdout, uploaded.stderr
    model_id = uploaded.stdout.split()[1]
    assert "chat template no" in cli("models", "get", model_id).stdout
    assert "ready" in cli("models", "list").stdout
    no_tokenizer = write_minimal_model(tmp_path / "broken")
    (no_tokenizer / "tokenizer.json").unlink()
    refused = cli("models", "upload", "broken", str(no_tokenizer))
    assert refused.exit_code == 1 and "no tokenizer" in refused.stderr


def test_job_lifecycle(cli: Invoke, owner: str, api_server: Server, tmp_path: Path) -> None:
    job_id = _job_setup(cli, api_server, tmp_path)
    assert f"{job_id}" in cli("jobs", "list", "--status", "queued").stdout
    got = cli("jobs", "get", str(job_id), "--spec")
    assert got.exit_code == 0 and "status" in got.stdout and "queued" in got.stdout and "spec:" in got.stdout

    paused = cli("jobs", "pause", str(job_id))  # queued -> paused is not a valid transition
    assert paused.exit_code == 1 and paused.stderr.startswith("error: 409")
    scaled = cli("jobs", "scale", str(job_id), "2", "--auto")
    assert scaled.exit_code == 0 and "target 2 instances" in scaled.stdout and "scaling auto" in scaled.stdout
    assert cli("team", "quotas", "--max-generation-instances", "2").exit_code == 0
    over = cli("jobs", "scale", str(job_id), "3")
    assert over.exit_code == 1 and over.stderr.startswith("error: 403") and "max_generation_instances" in over.stderr

    cancelled = cli("jobs", "cancel", str(job_id))
    assert cancelled.exit_code == 0 and "cancelled" in cancelled.stdout
    logs = cli("jobs", "logs", str(job_id))
    assert "[created]" in logs.stdout and "[scale]" in logs.stdout and "queued -> cancelled" in logs.stdout
    follow = cli("jobs", "logs", str(job_id), "--follow")  # already final: prints the log and the outcome
    assert follow.exit_code == 1 and follow.stdout.strip().endswith(f"job {job_id} cancelled")
    assert cli("jobs", "get", "999999").stderr.startswith("error: 404")


def test_logs_follow_streams_until_the_job_ends(cli: Invoke, owner: str, api_server: Server, tmp_path: Path) -> None:
    job_id = _job_setup(cli, api_server, tmp_path)
    env = {**environ_snapshot(), "STREAMRL_TOKEN": _token(api_server)}
    follower = subprocess.Popen([sys.executable, "-m", "streamrl.cli.main", "jobs", "logs", str(job_id), "--follow"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(follower.stdout or []), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 30
        while "status: queued\n" not in lines:  # the stream's first event: it is subscribed now
            assert follower.poll() is None and time.monotonic() < deadline, (lines, follower.stderr)
            time.sleep(0.05)
        live = redis.Redis.from_url(api_server.redis_url)
        publish_live(live, job_id, "metrics", {"iteration": 1, "metrics": {"reward_mean": 0.25, "instances": 1}})
        live.close()
        with StreamRLClient(api_server.url, _token(api_server)) as api:
            api.scale_job(job_id, 1)
            api.cancel_job(job_id)
        follower.wait(timeout=30)
        reader.join(timeout=10)
    finally:
        if follower.poll() is None:
            follower.kill()
    out = "".join(lines)
    assert follower.returncode == 1, (out, follower.stderr.read() if follower.stderr else "")
    assert "status: cancelled" in out
    assert "[scale]" in out and "queued -> cancelled" in out
    assert "iteration 1: reward_mean=0.25 instances=1" in out
    assert out.count("[created]") == 1  # caught up once, never printed twice
    assert out.strip().endswith(f"job {job_id} cancelled")


def test_keys_and_revocation(cli: Invoke, owner: str, api_server: Server) -> None:
    created = cli("--json", "keys", "create", "ci-bot")
    assert created.exit_code == 0, created.stderr
    key = created.json()
    assert isinstance(key, dict) and key["secret"]
    with_key = cli("--token", key["secret"], "jobs", "list")
    assert with_key.exit_code == 0
    listed = cli("keys", "list")
    assert "ci-bot" in listed.stdout and key["secret"] not in listed.stdout
    assert cli("keys", "revoke", str(key["id"])).exit_code == 0
    refused = cli("--token", key["secret"], "jobs", "list")
    assert refused.exit_code == 1 and refused.stderr.startswith("error: 401") and "streamrl login" in refused.stderr


def test_team_members_and_other_teams_objects(cli: Invoke, owner: str, api_server: Server, tmp_path: Path) -> None:
    job_id = _job_setup(cli, api_server, tmp_path)
    team_id = cli("--json", "team", "show").json()["id"]  # type: ignore[index]
    viewer = f"viewer-{uuid.uuid4().hex[:6]}@example.com"
    with_password = cli("team", "add-member", viewer, "--role", "viewer", "--password", "pw-viewer-1")
    assert with_password.exit_code != 0  # no password is set for anyone by an invitation
    invited = cli("--json", "team", "invite", viewer, "--role", "viewer")
    assert invited.exit_code == 0, invited.stderr
    invitation = invited.json()
    assert isinstance(invitation, dict) and invitation["status"] == "pending"
    assert viewer in cli("team", "invitations", "--sent").stdout
    assert viewer not in cli("team", "members").stdout  # not a member until they accept
    assert "max_concurrent_jobs" in cli("team", "show").stdout

    # The invited person registers later with their own password, sees the invitation, accepts, switches.
    assert cli("init-admin", "--email", viewer, "--password", "pw-viewer-1", "--team", f"v-{viewer[7:13]}"
               ).exit_code == 0
    assert str(invitation["id"]) in cli("team", "invitations").stdout
    accepted = cli("team", "accept", str(invitation["id"]))
    assert accepted.exit_code == 0 and f"team switch {team_id}" in accepted.stdout, accepted.stderr
    assert cli("team", "switch", str(team_id)).exit_code == 0
    assert viewer in cli("team", "members").stdout
    assert cli("jobs", "get", str(job_id)).exit_code == 0  # viewers read
    denied = cli("jobs", "cancel", str(job_id))
    assert denied.exit_code == 1 and denied.stderr.startswith("error: 403")

    stranger = f"stranger-{uuid.uuid4().hex[:6]}@example.com"
    assert cli("init-admin", "--email", stranger, "--password", "pw-12345678", "--team", "other").exit_code == 0
    hidden = cli("jobs", "get", str(job_id))
    assert hidden.exit_code == 1 and hidden.stderr.startswith("error: 404")


def test_api_key_login_is_verified_before_saving(cli: Invoke, owner: str, api_server: Server) -> None:
    key = cli("--json", "keys", "create", "laptop").json()
    assert isinstance(key, dict)
    assert cli("logout").exit_code == 0
    assert cli("login", "--api-key", key["secret"]).exit_code == 0
    assert cli("whoami").exit_code == 0
    bogus = cli("login", "--api-key", "srl_nope_nope")
    assert bogus.exit_code == 1 and bogus.stderr.startswith("error: 401")


def test_iterations_and_progress(cli: Invoke, owner: str, api_server: Server, tmp_path: Path) -> None:
    job_id = _job_setup(cli, api_server, tmp_path)
    engine = make_engine(api_server.database_url)
    with session_scope(engine) as session:  # what the training driver writes each iteration
        for it in (1, 2):
            record_iteration(session=session, job_id=job_id, iteration=it,
                             metrics={"reward_mean": 0.1 * it, "samples_per_s": 50.0, "instances": 1})
    engine.dispose()
    table = cli("jobs", "iterations", str(job_id), "--keys", "reward_mean,samples_per_s,kl")
    assert table.exit_code == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["ITERATION", "REWARD_MEAN", "SAMPLES_PER_S", "KL"]
    assert lines[2].split() == ["2", "0.2", "50", "-"]
    raw = cli("--json", "jobs", "iterations", str(job_id)).json()
    assert isinstance(raw, dict) and raw["count"] == 2
    got = cli("jobs", "get", str(job_id))
    assert "progress" in got.stdout and "2/20" in got.stdout


def test_samples_checkpoints_and_team_switch(cli: Invoke, owner: str, api_server: Server, tmp_path: Path) -> None:
    job_id = _job_setup(cli, api_server, tmp_path)
    assert cli("jobs", "samples", str(job_id)).stdout.strip() == "(no samples yet)"
    assert cli("jobs", "checkpoints", str(job_id)).stdout.strip() == "(no checkpoints yet)"
    first_team = cli("--json", "whoami").json()
    assert isinstance(first_team, dict)

    other_owner = f"other-{uuid.uuid4().hex[:6]}@example.com"
    assert cli("init-admin", "--email", other_owner, "--password", "pw-12345678",
               "--team", f"other-{uuid.uuid4().hex[:6]}").exit_code == 0
    invitation = cli("--json", "team", "invite", owner, "--role", "member").json()  # an existing user is invited
    other_team_id = cli("--json", "team", "show").json()["id"]  # type: ignore[index]

    assert cli("login", "--email", owner, "--password", "pw-12345678").exit_code == 0
    assert isinstance(invitation, dict)
    assert cli("team", "accept", str(invitation["id"])).exit_code == 0  # ...and joins by accepting
    switched = cli("team", "switch", str(other_team_id))
    assert switched.exit_code == 0 and f"(id {other_team_id})" in switched.stdout
    me = cli("--json", "whoami").json()
    assert isinstance(me, dict) and me["team"]["id"] == other_team_id and me["role"] == "member"
    assert cli("jobs", "get", str(job_id)).stderr.startswith("error: 404")  # the first team's job is not here
    assert cli("team", "switch", "99999999").stderr.startswith("error: 403")


def test_jobs_get_shows_health_and_training_signals(cli: Invoke, owner: str, api_server: Server,
                                                    tmp_path: Path) -> None:
    job_id = _job_setup(cli, api_server, tmp_path)
    engine = make_engine(api_server.database_url)
    with session_scope(engine) as session:  # three iterations in which every group got the same reward
        for it in (1, 2, 3):
            record_iteration(session=session, job_id=job_id, iteration=it,
                             metrics={"reward_mean": 0.0, "reward_std": 0.0, "reward_flat_groups": 1.0})
    engine.dispose()
    got = cli("jobs", "get", str(job_id))
    assert got.exit_code == 0, got.stderr
    assert "health: queued: queued: waiting for a free job slot" not in got.stdout  # state and summary, not twice
    assert "  error reward_constant: reward is constant within every group (0.000)" in got.stdout
    raw = cli("--json", "jobs", "get", str(job_id)).json()
    assert [s["check"] for s in raw["health"]["signals"]] == ["reward_constant"]


def test_cluster_lists_pools_and_says_when_no_worker_is_registered(cli: Invoke, owner: str, api_server: Server) -> None:
    table = cli("cluster")
    assert table.exit_code == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["POOL", "WORKERS", "SLOTS", "BUSY", "QUEUE_DEPTH"]
    assert [line.split()[0] for line in lines[1:4]] == ["generation", "training", "control"]
    assert "(no worker registered: start one with `streamrl worker --pool generation`)" in table.stdout
    raw = cli("--json", "cluster").json()
    assert isinstance(raw, dict) and raw["workers"] == [] and raw["pending"] == []


def test_lora_jobs_share_generation_and_can_opt_out(cli: Invoke, owner: str, api_server: Server,
                                                     tmp_path: Path) -> None:
    model = f"tiny-{uuid.uuid4().hex[:6]}"
    assert cli("models", "register", model, str(api_server.model_dir(model))).exit_code == 0
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(5)))
    dataset = cli("--json", "datasets", "upload", str(data), "--name", f"arith-{uuid.uuid4().hex[:6]}").json()
    spec = _write_spec(tmp_path / "lora.json", model, dataset["id"], training={"lora": {"rank": 8}})
    shared = cli("--json", "jobs", "submit", str(spec)).json()
    assert shared["shared_generation"] is True
    assert re.search(r"^shared_generation +True$", cli("jobs", "get", str(shared["id"])).stdout, re.M)
    own = cli("--json", "jobs", "submit", str(spec), "--set", "generation.share=false").json()
    assert own["shared_generation"] is False and own["spec"]["generation"]["share"] is False
    plain = _write_spec(tmp_path / "full.json", model, dataset["id"])
    refused = cli("jobs", "submit", str(plain), "--set", "generation.share=true")
    assert refused.exit_code == 1 and "generation.share: the job cannot share" in refused.stderr, refused.stderr
    assert "only LoRA jobs share" in refused.stderr  # checked before sending, as the API would
    # a training process is shared only when asked (its jobs split the slot's cores)
    assert shared["shared_training"] is False
    trainer = cli("--json", "jobs", "submit", str(spec), "--set", "training.share=true").json()
    assert trainer["shared_training"] is True and trainer["spec"]["training"]["share"] is True
    assert re.search(r"^shared_training +True$", cli("jobs", "get", str(trainer["id"])).stdout, re.M)
    refused = cli("jobs", "submit", str(plain), "--set", "training.share=true")
    assert refused.exit_code == 1 and "training.share: the job cannot share a training process" in refused.stderr, \
        refused.stderr
