"""Each extension name is declared once, on its implementation (contract/registry.py), and every other place agrees:
the generated catalog (contract/catalog.py), the spec's choices, the planner's request schema and cost table, the
OpenAPI schema the dashboard reads, the dashboard's generated choice lists, the pages (which spell no name) and
docs/jobspec.md."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, get_args

import pytest

from backend.planner.costmodel import TRAIN_FLOPS_PER_PARAM
from backend.planner.schemas import PlanRequest
from contract import catalog
from contract.dispatch import DISPATCH_POLICIES
from contract.environments import ENVIRONMENTS, GATEWAY, OPENENV, PYTHON, VERIFIERS
from contract.rewards.builtins import COMPOSED_TYPES, REWARDS
from contract.spec import (
    MODES,
    AlgorithmSpec,
    DispatchSpec,
    EnvironmentSpec,
    GenerationSpec,
    JobSpec,
    Mode,
    RewardSpec,
)
from workers.generation.engine import GenerationEngine
from workers.generation.engines import ENGINES
from workers.runtime.job import SOURCES
from workers.training.algorithms import ALGORITHMS, Algorithm

ROOT = Path(__file__).resolve().parents[1]
FRONTEND = ROOT / "frontend"
KINDS = {  # catalog table -> (registry names, spec model and field)
    "ALGORITHMS": (ALGORITHMS.names(), AlgorithmSpec, "name"),
    "ENGINES": (ENGINES.names(), GenerationSpec, "engine"),
    "DISPATCH_POLICIES": (DISPATCH_POLICIES.names(), DispatchSpec, "policy"),
    "REWARD_TYPES": ((*REWARDS.names(), *COMPOSED_TYPES), RewardSpec, "type"),
    "ENVIRONMENTS": ((*ENVIRONMENTS.names(), PYTHON, GATEWAY, OPENENV, VERIFIERS), EnvironmentSpec, "type"),
}


def _script(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_catalog_is_what_the_registries_declare() -> None:
    rendered = _script("export_catalog").render()
    assert (ROOT / "contract" / "catalog.py").read_text() == rendered, "run: python scripts/export_catalog.py"
    for kind, (names, _, _) in KINDS.items():
        assert sorted(getattr(catalog, kind)) == sorted(names), kind


def test_every_registered_implementation_is_what_its_kind_needs() -> None:
    for entry in ALGORITHMS.entries():
        assert issubclass(entry.target, Algorithm), entry.name
        assert entry.meta["train_flops_per_param"] > 0, entry.name
    for entry in ENGINES.entries():
        assert issubclass(entry.target, GenerationEngine), entry.name
        assert "from_spec" in vars(entry.target), f"engine {entry.name!r} builds itself from a spec"
    for entry in [*DISPATCH_POLICIES.entries(), *REWARDS.entries()]:
        assert callable(entry.target) and entry.summary, entry.name
    for entry in [*ALGORITHMS.entries(), *ENGINES.entries()]:
        assert entry.label and entry.summary, entry.name


def test_the_spec_and_the_planner_offer_exactly_the_registered_names() -> None:
    for kind, (names, model, field) in KINDS.items():
        extra = model.model_fields[field].json_schema_extra
        assert isinstance(extra, dict)
        assert [c["value"] for c in extra["x-choices"]] == list(getattr(catalog, kind)), kind  # type: ignore[index, union-attr]
        if kind != "REWARD_TYPES":  # a free string checked by contract/rewards/validate.py
            assert set(get_args(model.model_fields[field].annotation)) == set(names), kind
    plan_fields = {"algorithm": ALGORITHMS.names(), "dispatch": DISPATCH_POLICIES.names(), "mode": get_args(Mode)}
    for field, names in plan_fields.items():
        assert set(get_args(PlanRequest.model_fields[field].annotation)) == set(names), field
    assert set(TRAIN_FLOPS_PER_PARAM) == set(ALGORITHMS.names())
    assert list(MODES) == list(get_args(Mode)) and set(SOURCES) == set(MODES)
    assert [c["value"] for c in JobSpec.model_json_schema()["properties"]["mode"]["x-choices"]] == list(MODES)


def test_the_openapi_schema_and_the_dashboard_agree() -> None:
    schemas = json.loads((FRONTEND / "openapi.json").read_text())["components"]["schemas"]
    for kind, (_, model, field) in KINDS.items():
        published = schemas[model.__name__]["properties"][field]["x-choices"]
        assert [c["value"] for c in published] == list(getattr(catalog, kind)), f"{kind}: run export_openapi.py"
    generated = (FRONTEND / "src" / "api" / "choices.gen.ts").read_text()
    for kind in KINDS:
        for name, facts in getattr(catalog, kind).items():
            assert f"value: {json.dumps(name)}, label: {json.dumps(facts['label'])}" in generated, name
    if shutil.which("node"):
        check = subprocess.run(["node", "scripts/gen-choices.mjs", "--check"], cwd=FRONTEND, capture_output=True,
                               text=True, timeout=60)
        assert check.returncode == 0, check.stderr


@pytest.mark.parametrize("page", ["SubmitJob.tsx", "Planner.tsx"])
def test_the_pages_spell_no_choice(page: str) -> None:
    """Choice lists come from lib/choices.ts; a page may still name one value as a default or to treat it specially
    (python's code box)."""
    source = (FRONTEND / "src" / "pages" / page).read_text()
    names = [*MODES, *(name for kind in KINDS for name in getattr(catalog, kind))]
    options = [name for name in names if f'<option value="{name}"' in source]
    assert not options, f"options come from lib/choices.ts: {options}"
    names_pattern = "|".join(re.escape(name) for name in names)
    assert not re.search(rf'\[\s*"({names_pattern})",\s*"({names_pattern})"', source), "a hard-coded list of names"


def test_the_reference_docs_list_every_name() -> None:
    text = (ROOT / "docs" / "jobspec.md").read_text()
    for kind in KINDS:
        for name in getattr(catalog, kind):
            assert f"| `{name}` |" in text, f"{name}: run python docs/gen_jobspec_reference.py"


def test_a_new_extension_is_one_registration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worked example of docs/architecture.md#adding-an-extension: a module that registers an algorithm is found
    by the package, appears in the catalog the generator writes, and a spec naming it builds it."""
    module = tmp_path / "signed_reward.py"
    module.write_text(
        "from workers.training.algorithms.base import ALGORITHMS, Algorithm\n\n\n"
        "@ALGORITHMS.register('signed_reward', label='Signed reward', train_flops_per_param=6 + 2)\n"
        "class SignedReward(Algorithm):\n"
        "    \"\"\"REINFORCE on the sign of the reward.\"\"\"\n\n"
        "    def advantages(self, group):\n"
        "        return [1.0 if s.reward > 0 else -1.0 for s in group]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(ALGORITHMS, "_entries", dict(ALGORITHMS._entries))  # undone after the test
    __import__("signed_reward")
    monkeypatch.delitem(sys.modules, "signed_reward")
    rendered = _script("export_catalog").render()
    assert '"signed_reward": {' in rendered and '"train_flops_per_param": 8' in rendered
    names = next(line for line in rendered.splitlines() if line.startswith("AlgorithmName = Literal["))
    assert names.endswith('"rloo", "signed_reward"]') and '"grpo", "ppo"' in names  # sorted, the new one included
    from workers.training.algorithms import setup_algorithm

    algorithm = setup_algorithm(AlgorithmSpec.model_construct(name="signed_reward"))
    assert type(algorithm).__name__ == "SignedReward"
