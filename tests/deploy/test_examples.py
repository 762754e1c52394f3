"""Every example spec is a valid JobSpec that round-trips through YAML, names a model its own comments build and
register and a built-in dataset that exists, and has a reward that scores its dataset's right answers higher."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from deploy_support import EXAMPLES

from contract.settings import Settings
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
def test_example_round_trips_through_yaml(path: Path) -> None:
    """Nothing in the file is dropped or coerced, and a dumped spec loads back equal."""
    raw = yaml.safe_load(path.read_text())
    spec = JobSpec.model_validate(raw)
    assert spec.model_dump(mode="json", exclude_unset=True) == raw
    assert JobSpec.model_validate(yaml.safe_load(yaml.safe_dump(spec.model_dump(mode="json")))) == spec


def example_commands(path: Path) -> list[list[str]]:
    """The `streamrl ...` commands in an example's comments."""
    from test_docs import quoted_streamrl_commands

    comments = [line.lstrip("#").strip() for line in path.read_text().splitlines() if line.startswith("#")]
    return quoted_streamrl_commands("```bash\n" + "\n".join(c for c in comments if "streamrl " in c) + "\n```")


def _option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_example_model_is_built_and_registered_by_its_comments(path: Path) -> None:
    """Following the comments (this file's, or those of the example it points to) yields the model it names."""
    from workers.models.tiny import PRESETS

    text = path.read_text()
    sources = [path, *(other for other in EXAMPLE_FILES if other != path and other.name in text)]
    commands = [command for source in sources for command in example_commands(source)]
    assert ["jobs", "submit", f"examples/{path.name}"] in example_commands(path)
    registered = {c[2]: c[3] for c in commands if c[:2] == ["models", "register"]}
    model = load_spec(path).model
    assert model in registered, f"{path.name}: no `streamrl models register {model} ...` in its comments"
    built = {_option(c, "--out"): c for c in commands if c[0] in ("make-model", "sft")}
    artifacts = Settings.model_fields["data_dir"].default / "artifacts"  # the default artifact dir
    producer = built.get(str(artifacts / registered[model]))
    assert producer is not None, f"{path.name}: nothing builds {artifacts / registered[model]}"
    while producer[0] == "sft":  # an SFT run starts from a model an earlier command made
        producer = built[_option(producer, "--model")]
    assert _option(producer, "--preset") in PRESETS


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_example_dataset_and_reward_work_together(path: Path) -> None:
    """The built-in task exists and gives the stated prompt counts; the reward (user code really runs in the sandbox
    for `python-reward.yaml`) scores a right answer of that task above a wrong one, without errors."""
    from workers.datasets import BUILTIN_TASKS, load_dataset
    from workers.rewards.factory import build_reward

    spec = load_spec(path)
    assert spec.dataset.builtin in BUILTIN_TASKS
    train = load_dataset(spec.dataset, seed=spec.seed)
    held_out = load_dataset(spec.dataset, split="eval", seed=spec.seed)
    assert (len(train), len(held_out)) == (spec.dataset.num_prompts, spec.dataset.eval_prompts)
    assert len({row["prompt_id"] for row in train + held_out}) == len(train) + len(held_out)
    row = train[0]
    reward = build_reward(spec.reward)
    try:
        right, wrong = reward.score_many([(row["prompt"], str(row["answer"]), row), (row["prompt"], "no idea", row)])
    finally:
        reward.close()
    assert right.error is None and wrong.error is None, (right.error, wrong.error)
    assert right.value > wrong.value


def test_examples_show_what_their_names_promise() -> None:
    specs = {p.name: load_spec(p) for p in EXAMPLE_FILES}
    sync = specs["grpo-arithmetic-sync.yaml"]
    assert (sync.algorithm.name, sync.mode, sync.dataset.builtin) == ("grpo", "sync", "arithmetic")
    tail = specs["long-tail-skew-aware-async.yaml"]
    assert (tail.mode, tail.dispatch.policy, tail.dataset.builtin) == ("async", "skew_aware", "long_tail")
    ppo = specs["ppo-colocated.yaml"]
    assert (ppo.algorithm.name, ppo.mode) == ("ppo", "colocated")
    assert specs["python-reward.yaml"].reward.type == "python"


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_commands_in_example_comments_are_real(path: Path) -> None:
    from test_manifests import check_streamrl_invocation

    for args in example_commands(path):
        check_streamrl_invocation(args)
