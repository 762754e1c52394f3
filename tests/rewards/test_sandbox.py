"""User reward code in the sandbox: hostile and broken code is contained and reported per sample."""

import os
import time

import pytest

from workers.rewards import build_reward
from workers.rewards.sandbox import SandboxWorker, network_namespace_available


def python_reward(body: str, **params):
    return build_reward({"type": "python", "code": body, "params": {"timeout_s": 1.0, **params}})


def score_once(code: str, **params):
    with python_reward(code, **params) as reward:
        return reward.score("prompt", "response", {"answer": "4"})


GOOD = "def reward(prompt, response, meta):\n    return float(response.strip() == meta['answer'])\n"


def test_good_code_scores_and_worker_is_reused():
    with python_reward(GOOD) as reward:
        outs = reward.score_many([("p", str(i), {"answer": "4"}) for i in range(50)])
        assert [o.value for o in outs] == [1.0 if i == 4 else 0.0 for i in range(50)]
        assert all(o.error is None for o in outs)
        assert reward.worker.restarts == 0 and "audit-hook" in reward.worker.protections


def test_dict_result_gives_components():
    out = score_once("def reward(p, r, m):\n    return {'correct': 1, 'style': 0.5}")
    assert out.error is None and out.value == 1.5 and out.components == {"correct": 1.0, "style": 0.5}


@pytest.mark.parametrize(
    ("code", "fragment"),
    [
        ("def reward(p, r, m):\n    while True:\n        pass", "time limit exceeded"),
        ("def reward(p, r, m):\n    x = ' ' * (10 ** 10)\n    return 1.0", "memory limit exceeded"),
        ("def reward(p, r, m):\n    xs = []\n    while True:\n        xs.append(' ' * 10 ** 6)",
         "memory limit exceeded"),
        ("def reward(p, r, m):\n    import os\n    while True:\n        os.fork()", "process creation is not allowed"),
        ("def reward(p, r, m):\n    import os\n    os.system('echo hi')", "process creation is not allowed"),
        ("def reward(p, r, m):\n    import socket\n    socket.create_connection(('127.0.0.1', 5432))",
         "network access is not allowed"),
        ("def reward(p, r, m):\n    open('/tmp/streamrl-evil', 'w').write('x')", "writing outside the scratch dir"),
        ("def reward(p, r, m):\n    import os\n    os.remove('/etc/hostname')", "outside the scratch dir"),
        ("def reward(p, r, m) return 1", "SyntaxError"),
        ("def reward(p, r, m):\n    return 1 / 0", "ZeroDivisionError: division by zero (line 2)"),
        ("def reward(p, r, m):\n    return 'high'", "must return a float or a dict"),
        ("def reward(p, r, m):\n    return {'a': 'b'}", "must map str to float"),
        ("def reward(p, r, m):\n    return float('inf')", "must be finite"),
        ("def score(p, r, m):\n    return 1.0", "must define a function reward"),
        ("while True:\n    pass", "loading reward code failed: time limit exceeded"),
        ("def reward(p, r, m):\n    import os\n    os._exit(3)", "exited with status 3"),
    ],
    ids=["infinite-loop", "memory-hog", "memory-creep", "fork-bomb", "os-system", "network", "write-outside",
         "delete-outside", "syntax-error", "exception", "wrong-type", "wrong-dict", "non-finite", "no-reward-fn",
         "import-time-loop", "hard-exit"],
)
def test_hostile_or_broken_code_is_contained(code, fragment):
    start = time.monotonic()
    out = score_once(code)
    assert out.value == 0.0 and out.error is not None and fragment in out.error, out
    assert time.monotonic() - start < 10
    assert not os.path.exists("/tmp/streamrl-evil")


def test_writes_inside_scratch_are_allowed():
    code = "def reward(p, r, m):\n    open('notes.txt', 'a').write(r)\n    return float(len(open('notes.txt').read()))"
    with python_reward(code) as reward:
        assert [o.value for o in reward.score_many([("p", "ab", {}), ("p", "cd", {})])] == [2.0, 4.0]


def test_worker_restarts_after_a_timeout_and_keeps_scoring():
    code = "def reward(p, r, m):\n    while r == 'hang':\n        pass\n    return 1.0"
    with python_reward(code, timeout_s=0.5) as reward:
        outs = reward.score_many([("p", "ok", {}), ("p", "hang", {}), ("p", "ok", {})])
        assert [o.value for o in outs] == [1.0, 0.0, 1.0]
        assert "time limit" in (outs[1].error or "") and reward.worker.restarts == 1


def test_cpu_rlimit_kills_a_busy_worker_before_the_wall_clock():
    # wall timeout far above the CPU share: RLIMIT_CPU (1 s) must be what stops it
    worker = SandboxWorker("def reward(p, r, m):\n    while True:\n        pass", timeout_s=60.0, cpu_s=1)
    start = time.monotonic()
    try:
        out = worker.call("p", "r", {})
    finally:
        worker.close()
    assert out.error is not None and "CPU time limit exceeded (1s)" in out.error, out
    assert time.monotonic() - start < 30


@pytest.mark.skipif(not network_namespace_available(), reason="needs root and unshare (network namespace)")
def test_network_namespace_has_no_interfaces_but_loopback():
    code = "def reward(p, r, m):\n    rows = open('/proc/net/dev').read().splitlines()[2:]\n" \
           "    return float(len([x for x in rows if not x.strip().startswith('lo:')]))"
    out = score_once(code)
    assert out.error is None and out.value == 0.0
