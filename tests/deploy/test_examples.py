"""Every example spec is a valid JobSpec, and its reward builds (and scores) with the real reward factory."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from deploy_support import EXAMPLES

from contract.spec import JobSpec

REQUIRED = {
    "grpo-arithmetic-sync.yaml",
    "long-tail-skew-aware-async.yaml",
    "ppo-colocated.yaml",
    "python-reward.yaml",
}
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))


def load_spec(path: Path) -> JobSpec:
    return JobSpec.model_validate(yaml.safe_load(path.read_text()))


def test_required_examples_exist() -> None:
    assert {p.name for p in EXAMPLE_FILES} >= REQUIRED


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_example_validates_as_jobspec(path: Path) -> None:
    spec = load_spec(path)
    assert spec.name == path.stem, "an example's name should match its file name"
    assert spec.dataset.builtin is not None, "examples use built-in tasks so they run without an upload"


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_example_reward_builds(path: Path) -> None:
    from workers.rewards.factory import build_reward

    build_reward(load_spec(path).reward).close()


def test_examples_show_what_their_names_promise() -> None:
    specs = {p.name: load_spec(p) for p in EXAMPLE_FILES}
    sync = specs["grpo-arithmetic-sync.yaml"]
    assert (sync.algorithm.name, sync.mode, sync.dataset.builtin) == ("grpo", "sync", "arithmetic")
    tail = specs["long-tail-skew-aware-async.yaml"]
    assert (tail.mode, tail.dispatch.policy, tail.dataset.builtin) == ("async", "skew_aware", "long_tail")
    ppo = specs["ppo-colocated.yaml"]
    assert (ppo.algorithm.name, ppo.mode) == ("ppo", "colocated")
    assert specs["python-reward.yaml"].reward.type == "python"


def test_python_reward_example_scores_in_the_sandbox() -> None:
    """The user code really runs: a correct answer beats a wrong one on a real arithmetic row."""
    from workers.datasets.arithmetic import generate_rows
    from workers.rewards.factory import build_reward

    row = generate_rows(1, seed=0)[0]
    reward = build_reward(load_spec(EXAMPLES / "python-reward.yaml").reward)
    try:
        right, wrong = reward.score_many([(row["prompt"], str(row["answer"]), row), (row["prompt"], "no idea", row)])
    finally:
        reward.close()
    assert right.error is None and wrong.error is None, (right.error, wrong.error)
    assert right.value > wrong.value


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_commands_in_example_comments_are_real(path: Path) -> None:
    from test_docs import quoted_streamrl_commands
    from test_manifests import check_streamrl_invocation

    comments = [line.lstrip("#").strip() for line in path.read_text().splitlines() if line.startswith("#")]
    block = "```bash\n" + "\n".join(c for c in comments if "streamrl " in c) + "\n```"
    for args in quoted_streamrl_commands(block):
        check_streamrl_invocation(args)
