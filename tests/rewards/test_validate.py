"""Submit-time reward validation (`validate_reward_spec`): pure, no process started; errors name what is wrong."""

import pytest

from contract.rewards.validate import MAX_DEPTH
from workers.rewards import validate_reward_spec

GOOD = "def reward(prompt, response, meta):\n    return 1.0\n"


@pytest.mark.parametrize(
    "spec",
    [
        {"type": "exact_match"},
        {"type": "regex", "params": {"pattern": "^a", "flags": "i"}},
        {"type": "python", "code": GOOD, "params": {"timeout_s": 60, "memory_mb": 4096}},
        {"type": "python", "code": "import math as reward\n"},
        {"type": "python", "code": "try:\n    import json\nexcept ImportError:\n    pass\nelse:\n"
                                   "    def reward(p, r, m):\n        return 0.0\n"},
        {"type": "python", "code": "class reward:\n    def __init__(self, p, r, m):\n        pass\n"},
        {"type": "composite", "components": [{"type": "format"}, {"type": "python", "code": "reward = len\n"}]},
    ],
    ids=["builtin", "regex", "python-bounds", "import-as", "try-else", "class", "composite"],
)
def test_valid_specs_pass(spec):
    assert validate_reward_spec(spec).type == spec["type"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"type": "nope"}, "unknown reward type 'nope'"),
        ({"type": "exact_match", "params": {"answer_kee": "x"}}, "unknown params ['answer_kee']"),
        ({"type": "numeric", "params": {"tol": "small"}}, "param 'tol' must be int"),
        ({"type": "regex"}, "missing required params ['pattern']"),
        ({"type": "regex", "params": {"pattern": "("}}, "not a valid regular expression"),
        ({"type": "python", "code": "def reward(p, r, m)\n    return 1"}, "does not compile (line 1"),
        ({"type": "python", "code": "x = 1\n\ny = (\n"}, "does not compile (line 3"),
        ({"type": "python", "code": "def score(p, r, m):\n    return 1.0\n"}, "defines no function `reward"),
        ({"type": "python", "code": "def f():\n    reward = 1\n"}, "defines no function `reward"),
        ({"type": "python", "code": "a = '\x00'"}, "does not compile"),
        ({"type": "python", "code": GOOD, "params": {"timeout_s": 61}}, "'timeout_s' must be in (0, 60]"),
        ({"type": "python", "code": GOOD, "params": {"timeout_s": 0}}, "'timeout_s' must be in (0, 60]"),
        ({"type": "python", "code": GOOD, "params": {"timeout_s": True}}, "must be a finite number"),
        # NaN/Infinity never get past the spec itself (contract/spec.py refuses them anywhere)
        ({"type": "python", "code": GOOD, "params": {"timeout_s": float("nan")}}, "NaN and Infinity are not allowed"),
        ({"type": "python", "code": GOOD, "params": {"memory_mb": 4097}}, "'memory_mb' must be an integer in"),
        ({"type": "python", "code": GOOD, "params": {"memory_mb": 100.5}}, "'memory_mb' must be an integer in"),
        ({"type": "python", "code": GOOD, "params": {"cpu": 1}}, "unknown params ['cpu']"),
        ({"type": "composite", "params": {"x": 1}, "components": [{"type": "format"}]}, "takes no params"),
        ({"type": "composite", "components": [{"type": "format", "params": {"bad": 1}}]}, "unknown params ['bad']"),
        ({"type": "format", "components": [{"type": "format"}]}, "only 'composite' takes components"),
        ({"type": "format", "weight": float("inf")}, "Input should be a finite number"),
        ({"type": "python"}, "needs `code`"),
    ],
)
def test_invalid_specs_are_refused_with_a_message(spec, message):
    with pytest.raises(ValueError) as info:
        validate_reward_spec(spec)
    assert message in str(info.value)


def test_composites_nest_only_so_deep():
    spec: dict = {"type": "format"}
    for _ in range(MAX_DEPTH + 1):
        spec = {"type": "composite", "components": [spec]}
    with pytest.raises(ValueError, match="nest at most"):
        validate_reward_spec(spec)


def test_absurd_nesting_in_code_is_a_clean_error():
    with pytest.raises(ValueError, match="does not compile"):
        validate_reward_spec({"type": "python", "code": "x = " + "(" * 5000 + ")" * 5000 + "\n" + GOOD})
