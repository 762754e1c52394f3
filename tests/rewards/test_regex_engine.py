"""User patterns run on RE2 (contract/rewards/safe_regex.py): a catastrophic-backtracking pattern scores a shared
batch at once in a worker process, patterns RE2 cannot run are refused naming the param, and flags keep working."""

from __future__ import annotations

import subprocess
import sys

import pytest

from contract.rewards import validate_reward_spec
from contract.rewards.safe_regex import strip_verbose
from workers.rewards import build_reward

EVIL = "a" * 30 + "!"  # (a+)+$ backtracks ~2^30 steps with a backtracking engine: minutes


def test_a_backtracking_pattern_scores_a_batch_in_a_worker_process_at_once() -> None:
    """As a generation instance scores a shared batch: build_reward + score_many, in a fresh process. Python's `re`
    would not finish within the bound below; RE2 takes microseconds per sample."""
    script = (
        "from workers.rewards import build_reward\n"
        "reward = build_reward({'type': 'regex', 'params': {'pattern': '(a+)+$', 'score_miss': -1.0}})\n"
        f"outcomes = reward.score_many([('', {EVIL!r}, None)] * 25 + [('', 'aaa', None)])\n"
        "print([o.value for o in outcomes][-2:])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[-1.0, 1.0]", done.stderr


@pytest.mark.parametrize(("pattern", "named"), [
    (r"(a)\1", "backreferences"),
    (r"(?P<x>a)(?P=x)", "backreferences"),
    (r"foo(?=bar)", "lookahead"),
    (r"foo(?!bar)", "negative lookahead"),
    (r"(?<=x)y", "lookbehind"),
    (r"(?<!x)y", "negative lookbehind"),
    (r"(?>ab)", "atomic groups"),
    (r"a++", "possessive repeats"),
])
def test_patterns_re2_cannot_run_are_refused_naming_the_param(pattern: str, named: str) -> None:
    for spec, param in [({"type": "regex", "params": {"pattern": pattern}}, "param 'pattern'"),
                        ({"type": "format", "params": {"pattern": pattern}}, "param 'pattern'"),
                        ({"type": "judge", "params": {"model": "m", "input": [{"role": "user", "content": "x"}],
                                                      "score_regex": pattern}}, "param 'score_regex'")]:
        with pytest.raises(ValueError) as info:
            validate_reward_spec(spec)
        message = str(info.value)
        assert param in message and named in message and "RE2" in message, message


def test_flags_and_verbose_patterns() -> None:
    def score(params: dict, response: str) -> float:
        return build_reward({"type": "regex", "params": {"score_miss": -1.0, **params}}).score("", response).value

    assert score({"pattern": "^answer", "flags": "i"}, "ANSWER: 4") == 1.0
    assert score({"pattern": "^b", "flags": "m"}, "a\nb") == 1.0 and score({"pattern": "^b"}, "a\nb") == -1.0
    assert score({"pattern": "a.b", "flags": "s"}, "a\nb") == 1.0 and score({"pattern": "a.b"}, "a\nb") == -1.0
    verbose = r"""\d+   # digits
                  [ ]x  # a space in a class is kept"""
    assert score({"pattern": verbose, "flags": "x"}, "12 x") == 1.0 and score({"pattern": verbose, "flags": "x"},
                                                                               "12x") == -1.0
    assert strip_verbose(r"a\ b [#] # note") == r"a\ b[#]"
    assert strip_verbose("[]a ] b") == "[]a ]b"
