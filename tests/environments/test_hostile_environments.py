"""Hostile user environments (`type: python`) against the jailed environment worker itself, no model: each misdeed
is that call's `EnvironmentFailure` naming why, and the SAME environment then serves the next episode normally (a
time limit, a crash or a flood restarts the jailed process; the job would go on). Targets outside the jail are
concrete and world-readable on the host (a canary in a data dir like the platform's, the parent's environment), so
only the jail stands between them and the code. The episode-level cases (a sample's `reward_error`) are in
test_episode.py; the job-level ones in tests/integration/test_agentic_jobs.py."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from workers.environments import EnvironmentFailure
from workers.environments.base import SandboxedEnvironment
from workers.rewards.jail import missing_piece

pytestmark = pytest.mark.skipif(missing_piece() is not None, reason=f"reward jail unavailable: {missing_piece()}")

CANARY = "CANARY-" + secrets.token_hex(8)
ENV_SECRET = "STREAMRL_TEST_ENV_SECRET"

# step(messages, row) misbehaves as row["case"] says; any other row is a well-behaved two-turn episode
CODE = '''
import os, socket, sys

def reset(row):
    if row.get("case") == "reset_raises":
        raise KeyError("no such task")
    if row.get("case") == "reset_empty":
        return []
    return [{"role": "user", "content": "go " + str(row["prompt_id"])}]

def step(messages, row):
    case = row.get("case")
    if case == "loops":
        while True:
            pass
    if case == "sleeps":  # blocks forever without using the CPU: the per-step time limit must cut it
        import threading
        threading.Event().wait()
    if case == "crashes":
        os._exit(3)
    if case == "segfaults":
        import ctypes
        ctypes.string_at(0)
    if case == "raises":
        raise RuntimeError("boom")
    if case == "not_a_dict":
        return ["messages"]
    if case == "unknown_key":
        return {"messages": [], "done": True, "score": 1}
    if case == "bad_role":
        return {"messages": [{"role": "root", "content": "x"}], "done": False}
    if case == "nan_reward":
        return {"messages": [], "reward": float("nan"), "done": True}
    if case == "huge_reward":
        return {"messages": [], "reward": 10 ** 400, "done": True}
    if case == "too_many_messages":
        return {"messages": [{"role": "user", "content": "x"}] * 100, "done": False}
    if case == "huge_message":
        return {"messages": [{"role": "user", "content": "x" * 100000}], "done": False}
    if case == "not_json":
        return {"messages": [], "reward": None, "done": True, "extra": object()}
    if case == "stuck":
        return {"messages": [], "done": False}
    if case == "floods":
        print("x" * 300000)
    if case == "floods_stderr":
        sys.stderr.write("y" * 300000)
    if case == "hogs_memory":
        blob = bytearray(4 << 30)
    if case == "forks":
        os.fork()
    if case == "reads_shadow":
        return {"messages": [{"role": "user", "content": open("/etc/shadow").read()}], "done": False}
    if case == "reads_data_dir":
        return {"messages": [{"role": "user", "content": open(row["target"]).read()}], "done": False}
    if case == "lists_data_dir":
        return {"messages": [{"role": "user", "content": str(os.listdir(row["target_dir"]))}], "done": False}
    if case == "reads_environ":
        return {"messages": [{"role": "user", "content": os.environ["''' + ENV_SECRET + '''"]}], "done": False}
    if case == "writes_data_dir":
        open(row["target_dir"] + "/planted", "w").write("x")
    if case == "writes_runtime":
        open(sys.base_prefix + "/planted", "w").write("x")
    if case == "connects":
        socket.create_connection(("127.0.0.1", 6379), timeout=1)
    turns = sum(1 for m in messages if m["role"] == "assistant")
    return {"messages": [{"role": "user", "content": "again"}], "reward": 0.5, "done": turns >= 2}
'''

# case -> what the failure names
CASES = {
    "loops": "time limit exceeded",
    "sleeps": "time limit exceeded",
    "crashes": "exited with status 3",
    "segfaults": "SIGSEGV",
    "raises": "RuntimeError: boom",
    "not_a_dict": "must return a dict",
    "unknown_key": "unknown keys ['score']",
    "bad_role": "role must be one of",
    "nan_reward": "not JSON compliant",
    "huge_reward": "must be finite",
    "too_many_messages": "at most 16",
    "huge_message": "at most 20000",
    "not_json": "",  # the reply cannot be encoded: whatever the channel says, it is an error
    "stuck": "no messages and done false",
    "floods": "printed",
    "floods_stderr": "printed",
    "hogs_memory": "memory limit exceeded",
    "forks": "",  # RLIMIT_NPROC 0 / seccomp: an error whichever refuses it
    "reads_shadow": "No such file or directory",
    "reads_data_dir": "No such file or directory",
    "lists_data_dir": "No such file or directory",
    "reads_environ": f"KeyError: '{ENV_SECRET}'",
    "writes_data_dir": "No such file or directory",
    "writes_runtime": "Read-only file system",
    "connects": "",  # no network namespace route: refused or unreachable, an error either way
}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A world-readable platform-like data dir with a canary, and a secret in the parent's environment."""
    root = tmp_path_factory.mktemp("platform-data")
    (root / "datasets").mkdir()
    (root / "datasets" / "1.jsonl").write_text(CANARY + "\n")
    for path in (*root.parents, root, root / "datasets"):
        if str(path).startswith(str(tmp_path_factory.getbasetemp())):
            path.chmod(0o755)
    (root / "datasets" / "1.jsonl").chmod(0o644)
    os.environ[ENV_SECRET] = CANARY
    try:
        yield root
    finally:
        os.environ.pop(ENV_SECRET, None)


@pytest.fixture(scope="module")
def env() -> Iterator[SandboxedEnvironment]:
    environment = SandboxedEnvironment(CODE, timeout_s=1.5, memory_mb=512)
    yield environment
    environment.close()


def _episode(env: SandboxedEnvironment, row: dict) -> float:
    """A whole well-behaved episode: two steps, reward 0.5 each."""
    messages = env.reset(row)
    total = 0.0
    for turn in range(2):
        messages.append({"role": "assistant", "content": f"turn {turn}"})
        new, reward, done = env.step(messages, row)
        total += reward or 0.0
        messages += new
    assert done
    return total


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_hostile_step_fails_its_call_with_the_reason_and_the_environment_goes_on(
    env: SandboxedEnvironment, data_dir: Path, case: str
) -> None:
    row = {"prompt": "p", "prompt_id": case, "case": case, "target": str(data_dir / "datasets" / "1.jsonl"),
           "target_dir": str(data_dir / "datasets")}
    messages = [*env.reset(row), {"role": "assistant", "content": "hello"}]
    with pytest.raises(EnvironmentFailure) as info:
        env.step(messages, row)
    reason = str(info.value)
    assert reason and CASES[case] in reason, reason
    assert CANARY not in reason
    assert not (data_dir / "datasets" / "planted").exists()
    assert _episode(env, {"prompt": "p", "prompt_id": f"after-{case}"}) == pytest.approx(1.0)


@pytest.mark.parametrize(("case", "reason"), [("reset_raises", "KeyError: 'no such task'"),
                                              ("reset_empty", "reset() returned no messages")])
def test_a_hostile_reset_fails_its_episode(env: SandboxedEnvironment, case: str, reason: str) -> None:
    with pytest.raises(EnvironmentFailure, match=reason.replace("(", r"\(").replace(")", r"\)")):
        env.reset({"prompt": "p", "prompt_id": case, "case": case})
    assert _episode(env, {"prompt": "p", "prompt_id": f"after-{case}"}) == pytest.approx(1.0)


def test_code_that_fails_to_load_fails_every_episode_naming_why() -> None:
    broken = SandboxedEnvironment("import os\nos._exit(1)\n", timeout_s=1.0, memory_mb=256)
    try:
        assert broken.tools == []  # asked once; a load failure means no tools, and the episodes fail at reset
        for _ in range(2):
            with pytest.raises(EnvironmentFailure, match="exited|failed"):
                broken.reset({"prompt": "p", "prompt_id": "0"})
    finally:
        broken.close()
