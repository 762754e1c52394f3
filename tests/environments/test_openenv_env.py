"""`environment.type: openenv` against a real OpenEnv server (openenv-core 0.3,
tests/integration/openenv_guess_server.py, started here in its own venv `.venv-openenv`, scripts/setup.sh): "guess
the number" written to the built-in `guess_number`'s rules, its tool served MCP style.

- The same job (train-local, the colocated driver) on the OpenEnv server and on the built-in trains to the same
  reward, iteration by iteration: the same tools reach the chat template, the same messages come back, the same
  rewards end the same episodes (a server that answered anything else would change the sampled tokens or rewards).
- A server that dies mid-run (it exits at its N-th step, sessions open) and is restarted: the episodes it held are
  retried from their reset, the job's events say so, no episode fails, and the job succeeds.
- The same server module as `code` with `requirements` (openenv-core): the platform serves it in the jail, and
  starts it again when it dies mid-run (its episodes retried).
- The spec: `url` or `code` (defining `app`), `url` http(s), `requirements` only with `code`, params by name.
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest
from package_cache import CACHE, built

from contract.spec import EnvironmentSpec, JobSpec
from workers.local.run import train_local
from workers.models import build_tiny_model
from workers.rewards.jail import missing_piece

pytestmark = [pytest.mark.integration]
ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "tests" / "integration" / "openenv_guess_server.py"
OPENENV_PYTHON = ROOT / ".venv-openenv" / "bin" / "python"
ITERATIONS = 2
START_S = 300.0  # the server's start (importing openenv-core takes ~2 s idle, minutes on a loaded CI host)
SERVER_REQUIREMENTS = ["openenv-core==0.3.0"]
HIGH = 1  # guess_number's range 1..1: a reply whose first number is 1 wins (the random policy's, now and then)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """The OpenEnv server as a subprocess on a fixed port (restartable on the same one)."""

    def __init__(self, port: int):
        self.port, self.url = port, f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *extra: str) -> Server:
        assert OPENENV_PYTHON.exists(), "the OpenEnv server's venv is missing: run scripts/setup.sh"
        self.proc = subprocess.Popen([str(OPENENV_PYTHON), str(SERVER), "--port", str(self.port), *extra])
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "the OpenEnv server exited at start"
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"the OpenEnv server did not listen within {START_S:.0f}s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model("chat-qwen2-1m", tmp_path_factory.mktemp("openenv") / "model")


@pytest.fixture
def server() -> Iterator[Server]:
    running = Server(_free_port())
    yield running
    running.stop()


def _spec(model: Path, environment: dict[str, Any]) -> JobSpec:
    return JobSpec.model_validate({
        "model": str(model), "dataset": {"builtin": "arithmetic", "num_prompts": 64, "eval_prompts": 0},
        "environment": {"max_turns": 3, "max_episode_tokens": 240, "step_timeout_s": 60, **environment},
        "algorithm": {"name": "grpo", "group_size": 4},
        "generation": {"max_tokens": 48, "temperature": 1.0},
        "training": {"iterations": ITERATIONS, "prompts_per_iteration": 2, "micro_batch_size": 8, "lr": 1e-3},
    })


COMPARED = ("reward_mean", "loss", "len_p50", "len_max", "tokens_trained")  # what the episodes were and taught


def _run(model: Path, environment: dict[str, Any], out: Path) -> tuple[list[dict[str, float]], list[dict[str, Any]]]:
    result = train_local(_spec(model, environment), out, eval_every=0)
    return [{k: float(r.metrics[k]) for k in COMPARED} for r in result.records], result.events


def test_an_openenv_server_trains_like_the_builtin(chat_model: Path, server: Server, tmp_path: Path) -> None:
    """Same seeds, same model: the runs agree iteration by iteration in reward, loss and episode lengths (a server
    that answered differently, ended episodes elsewhere or rewarded otherwise would change them)."""
    server.start("--high", str(HIGH))
    builtin, _ = _run(chat_model, {"type": "guess_number", "params": {"high": HIGH}}, tmp_path / "builtin")
    remote, events = _run(chat_model, {"type": "openenv", "url": server.url}, tmp_path / "openenv")
    assert sum(row["reward_mean"] for row in builtin) > 0, builtin  # not a comparison of zeros
    for ours, theirs in zip(remote, builtin, strict=True):
        assert ours == pytest.approx(theirs, rel=1e-6, abs=1e-9), (remote, builtin)
    assert not [e for e in events if e["kind"] == "reward_error"], events


def test_a_server_dying_mid_run_gets_its_episodes_retried(chat_model: Path, server: Server, tmp_path: Path) -> None:
    """The server exits at its 6th step (the first iteration's 8 episodes run together, up to 3 steps each: some are
    mid-episode); a watcher restarts it on the same port, and the job finishes with every episode whole."""
    server.start("--high", str(HIGH), "--die-after-steps", "6")
    restarted = threading.Event()

    def restart_when_dead() -> None:
        assert server.proc is not None
        server.proc.wait()
        server.start("--high", str(HIGH))
        restarted.set()

    watcher = threading.Thread(target=restart_when_dead, daemon=True)
    watcher.start()
    rows, events = _run(chat_model, {"type": "openenv", "url": server.url}, tmp_path / "run")
    watcher.join(timeout=START_S)
    assert restarted.is_set(), "the server never died: the test did not exercise a restart"
    assert len(rows) == ITERATIONS
    lost = [e for e in events if e["kind"] == "environment"]
    assert lost and "retried" in lost[0]["message"], events
    assert not [e for e in events if e["kind"] == "reward_error"], events


JAILED_TAIL = """
import os as _os, socket as _socket

for _port in (5432, 6379):  # the jail's network has nothing to reach: a server that could would not start
    try:
        _socket.create_connection(("127.0.0.1", _port), timeout=1).close()
        raise RuntimeError(f"the jailed server reached port {_port}")
    except OSError:
        pass
RANGE["high"] = HIGH_VALUE
if _os.environ["STREAMRL_ENV_SERVER_START"] == "1":  # its first life ends at its 6th step, sessions open
    STEPS["die_after"] = 6
app = create_fastapi_app(GuessEnvironment, GuessAction, GuessObservation, max_concurrent_envs=256)
""".replace("HIGH_VALUE", str(HIGH))


@pytest.mark.skipif(missing_piece() is not None, reason=f"no jail here: {missing_piece()}")
def test_an_openenv_package_served_in_the_jail_is_restarted_when_it_dies(chat_model: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """`code` + `requirements` instead of `url`: the platform builds the server's packages (openenv-core, from the
    package index, cached per requirements hash), serves the same guess-the-number module in the jail on a unix
    socket only the worker holds, and, when the server exits at its 6th step (sessions open), starts it again: the
    lost episodes are retried from their reset and the job finishes whole."""
    monkeypatch.setenv("STREAMRL_AGENT_PACKAGES_DIR", str(CACHE))
    built(*SERVER_REQUIREMENTS)  # the workers' package cache (tests/package_cache.py)
    environment = {"type": "openenv", "code": SERVER.read_text() + JAILED_TAIL, "requirements": SERVER_REQUIREMENTS}
    rows, events = _run(chat_model, environment, tmp_path / "run")
    assert len(rows) == ITERATIONS and sum(row["reward_mean"] for row in rows) > 0, rows
    lost = [e for e in events if e["kind"] == "environment"]
    assert lost and "retried" in lost[0]["message"] and "(served in the jail)" in lost[0]["message"], events
    assert not [e for e in events if e["kind"] == "reward_error"], events


@pytest.mark.parametrize(("environment", "field"), [
    ({"type": "openenv"}, "needs `url`"),
    ({"type": "openenv", "url": "ftp://example.com"}, "not an http(s) URL"),
    ({"type": "openenv", "url": "http://u:p@example.com"}, "not an http(s) URL"),
    ({"type": "openenv", "url": "http://example.com", "params": {"actions": "x"}}, "has no param 'actions'"),
    ({"type": "guess_number", "url": "http://example.com"}, "only used with type 'openenv'"),
    ({"type": "openenv", "url": "http://example.com", "code": "app = 1"}, "one of them"),
    ({"type": "openenv", "code": "x = 1"}, "must define `app`"),
    ({"type": "openenv", "url": "http://example.com", "requirements": ["openenv-core"]}, "brings its own"),
    ({"type": "guess_number", "requirements": ["openenv-core"]}, "only used with type 'openenv'"),
    ({"type": "openenv", "code": "app = 1", "requirements": ["x @ https://e.com/x.whl"]}, "no options, URLs"),
])
def test_the_spec_checks_an_openenv_environment(environment: dict[str, Any], field: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=field.replace("(", r"\(").replace(")", r"\)")):
        EnvironmentSpec.model_validate(environment)
