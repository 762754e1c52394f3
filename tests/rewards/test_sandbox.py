"""User reward code in the sandbox: scoring, limits, restarts, the protocol, and the choice of mode.
The hostile programs are in test_hostile.py."""

import time

import pytest

from workers.rewards import SandboxUnavailable, build_reward
from workers.rewards import jail as jail_module
from workers.rewards.sandbox import SandboxWorker, network_namespace_available

JAIL_MISSING = jail_module.missing_piece()
needs_jail = pytest.mark.skipif(JAIL_MISSING is not None, reason=f"reward jail unavailable: {JAIL_MISSING}")


def python_reward(body: str, **params):
    return build_reward({"type": "python", "code": body, "params": {"timeout_s": 1.0, **params}})


def score_once(code: str, **params):
    with python_reward(code, **params) as reward:
        return reward.score("prompt", "response", {"answer": "4"})


GOOD = "def reward(prompt, response, meta):\n    return float(response.strip() == meta['answer'])\n"


@needs_jail
def test_good_code_scores_in_the_jail_and_worker_is_reused():
    with python_reward(GOOD) as reward:
        assert reward.sandbox_mode == "jail"
        outs = reward.score_many([("p", str(i), {"answer": "4"}) for i in range(50)])
        assert [o.value for o in outs] == [1.0 if i == 4 else 0.0 for i in range(50)]
        assert all(o.error is None for o in outs)
        assert reward.worker.restarts == 0 and "seccomp" in reward.worker.protections


@needs_jail
def test_composite_reports_the_mode_of_its_python_part():
    spec = {"type": "composite", "components": [{"type": "exact_match"}, {"type": "python", "code": GOOD}]}
    with build_reward(spec) as reward:
        assert reward.sandbox_mode == "jail"
        out = reward.score("p", "4", {"answer": "4"})
        assert out.value == 2.0 and out.components == {"exact_match": 1.0, "python": 1.0}
    assert build_reward({"type": "exact_match"}).sandbox_mode is None


@needs_jail
def test_dict_result_gives_components():
    out = score_once("def reward(p, r, m):\n    return {'correct': 1, 'style': 0.5}")
    assert out.error is None and out.value == 1.5 and out.components == {"correct": 1.0, "style": 0.5}


@needs_jail
@pytest.mark.parametrize(
    ("code", "fragment"),
    [
        ("def reward(p, r, m):\n    return 1 / 0", "ZeroDivisionError: division by zero (line 2)"),
        ("def reward(p, r, m):\n    return 'high'", "must return a float or a dict"),
        ("def reward(p, r, m):\n    return {'a': 'b'}", "must be a float"),
        ("def reward(p, r, m):\n    return float('inf')", "must be finite"),
        ("def reward(p, r, m):\n    return -10 ** 400", "too large to be a float"),
        ("reward = 3", "must define a function reward"),
        ("while True:\n    pass\ndef reward(p, r, m):\n    return 1.0", "loading reward code failed: time limit"),
        ("def reward(p, r, m):\n    import os\n    os._exit(3)", "exited with status 3"),
        ("def reward(p, r, m):\n    raise SystemExit(0)", "SystemExit"),
    ],
    ids=["exception", "wrong-type", "wrong-dict", "non-finite", "huge-int", "reward-not-callable", "import-time-loop",
         "hard-exit", "system-exit"],
)
def test_broken_code_is_a_per_sample_error(code, fragment):
    start = time.monotonic()
    out = score_once(code)
    assert out.value == 0.0 and out.error is not None and fragment in out.error, out
    assert time.monotonic() - start < 10


@needs_jail
def test_scratch_is_writable_and_private_to_the_worker():
    code = "def reward(p, r, m):\n    open('notes.txt', 'a').write(r)\n    return float(len(open('notes.txt').read()))"
    with python_reward(code) as reward:
        # one worker's calls share its scratch (a batch's lanes each have their own: workers/rewards/lanes.py)
        assert [reward.score("p", "ab", {}).value, reward.score("p", "cd", {}).value] == [2.0, 4.0]
    with python_reward(code) as other:  # a new jail starts with an empty scratch
        assert other.score("p", "xyz", {}).value == 3.0


@needs_jail
def test_worker_restarts_after_a_timeout_and_keeps_scoring():
    code = "def reward(p, r, m):\n    while r == 'hang':\n        pass\n    return 1.0"
    with python_reward(code, timeout_s=0.5) as reward:
        outs = reward.score_many([("p", "ok", {}), ("p", "hang", {}), ("p", "ok", {})])
        assert [o.value for o in outs] == [1.0, 0.0, 1.0]
        assert "time limit" in (outs[1].error or "") and reward.restarts == 1


@needs_jail
def test_cpu_rlimit_kills_a_busy_worker_before_the_wall_clock():
    # wall timeout far above the CPU share: RLIMIT_CPU (1 s) must be what stops it
    worker = SandboxWorker("def reward(p, r, m):\n    while True:\n        pass", timeout_s=30.0, cpu_s=1)
    start = time.monotonic()
    try:
        out = worker.call("p", "r", {})
    finally:
        worker.close()
    assert out.error is not None and "CPU time limit exceeded (1s)" in out.error, out
    assert time.monotonic() - start < 20


@needs_jail
def test_user_output_is_captured_separately_and_bounded():
    code = "import sys\ndef reward(p, r, m):\n    print('{\"ok\": true, \"result\": 99}')\n" \
           "    sys.stderr.write('note ' * 5000)\n    return 0.25"
    with python_reward(code) as reward:
        out = reward.score("p", "r", {})
        reward.close()
        assert out.value == 0.25 and out.error is None
        assert 0 < len(reward.worker.last_output) <= 1000 and "note" in reward.worker.last_output


def test_refused_without_the_jail_unless_weak_is_allowed(monkeypatch):
    monkeypatch.setattr(jail_module, "bwrap_binary", lambda: None)
    jail_module.missing_piece.cache_clear()
    try:
        assert "bubblewrap is not installed" in (jail_module.missing_piece() or "")
        monkeypatch.delenv(jail_module.SETTING, raising=False)
        with pytest.raises(SandboxUnavailable, match="bubblewrap is not installed.*STREAMRL_REWARD_SANDBOX=weak"):
            build_reward({"type": "python", "code": GOOD})
        monkeypatch.setenv(jail_module.SETTING, "nonsense")
        with pytest.raises(SandboxUnavailable, match="is not one of"):
            jail_module.choose_mode()
        monkeypatch.setenv(jail_module.SETTING, "weak")
        with build_reward({"type": "python", "code": GOOD}) as reward:
            assert reward.sandbox_mode == "weak"
            out = reward.score("p", "4", {"answer": "4"})
            assert out.value == 1.0 and "audit-hook" in reward.worker.protections
    finally:
        jail_module.missing_piece.cache_clear()


@pytest.mark.parametrize(
    ("code", "fragment"),
    [
        ("def reward(p, r, m):\n    while True:\n        pass", "time limit exceeded"),
        ("def reward(p, r, m):\n    x = ' ' * (10 ** 10)\n    return 1.0", "memory limit exceeded"),
        ("def reward(p, r, m):\n    import os\n    os.fork()", "not allowed"),
        ("def reward(p, r, m):\n    import socket\n    socket.create_connection(('127.0.0.1', 5432))", "not allowed"),
        ("def reward(p, r, m):\n    open('/tmp/streamrl-evil', 'w').write('x')", "outside the scratch dir"),
        ("def reward(p, r, m):\n    import os\n    os.rename('a', 'b', src_dir_fd=os.open('/', 0))", "dir_fd"),
        ("def reward(p, r, m):\n    import gc\n    return 1.0", "import gc is not allowed"),
    ],
    ids=["loop", "memory", "fork", "network", "write-outside", "rename-dir-fd", "gc"],
)
def test_weak_mode_still_applies_its_limits(code, fragment):
    worker = SandboxWorker(code, timeout_s=1.0, mode="weak")
    try:
        out = worker.call("p", "r", {})
    finally:
        worker.close()
    assert out.error is not None and fragment in out.error, out
    if network_namespace_available():
        assert "net-ns" in worker.protections


@needs_jail
def test_seccomp_filter_is_applied_in_the_jail():
    # an AF_UNIX socket needs no network, so only the seccomp deny list can refuse it (EPERM)
    code = ("import socket\ndef reward(p, r, m):\n    try:\n        socket.socket(socket.AF_UNIX).close()\n"
            "    except PermissionError as exc:\n        return float(exc.errno)\n    return -1.0")
    assert score_once(code).value == 1.0  # errno 1 = EPERM


FORGED_REPLIES = """import gc, json, os

def reward(prompt, response, meta):
    if response != "attack":
        return 1.0
    wire = [o for o in gc.get_objects() if type(o).__name__ == "Wire"][0]  # the harness's own reply pipe
    frame = json.dumps({"ok": True, "result": 1.0, "nonce": "forged"}).encode()
    os.write(wire.reply_fd, len(frame).to_bytes(4, "big") + frame)
    return 0.0
"""


@needs_jail
def test_a_forged_reply_frame_fails_its_sample_within_the_time_limit():
    """A protocol violation by a live worker kills it at once: the sample is not held for a fixed 5 s exit wait."""
    with python_reward(FORGED_REPLIES, timeout_s=0.5) as reward:
        assert reward.score("p", "warm-up", {}).value == 1.0  # the worker is up: only the attack call is timed
        started = time.monotonic()
        attacked = reward.score("p", "attack", {})
        elapsed = time.monotonic() - started
        assert attacked.value == 0.0 and "protocol violation" in (attacked.error or ""), attacked
        assert elapsed < 3.0, f"the sample was held {elapsed:.1f}s; its timeout_s is 0.5"
        assert reward.score("p", "after", {}).value == 1.0  # a fresh worker scores the next sample
