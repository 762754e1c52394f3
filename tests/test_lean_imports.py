"""A worker's task process loads models without scikit-learn (workers/lean_imports.py)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LOAD_MODEL_CLASSES = ("from transformers import AutoModelForCausalLM; "
                      "import workers.generation.engines.hf, workers.training.trainer; import sys; "
                      "print('sklearn' in sys.modules)")

pytestmark = pytest.mark.skipif(importlib.util.find_spec("sklearn") is None,
                                reason="scikit-learn is not installed: transformers cannot import it anyway")


def _imports_sklearn(prelude: str) -> bool:
    out = subprocess.run([sys.executable, "-c", prelude + LOAD_MODEL_CLASSES], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, check=True)
    return out.stdout.strip().splitlines()[-1] == "True"


def test_a_task_process_loads_model_classes_without_sklearn() -> None:
    assert not _imports_sklearn("from streamrl.worker import _before_forking; _before_forking(); ")


def test_without_the_hook_transformers_imports_sklearn() -> None:  # what the hook is for, on this install
    assert _imports_sklearn("")


def test_the_hook_leaves_an_already_imported_transformers_alone() -> None:
    assert _imports_sklearn("import transformers.generation.utils; from workers.lean_imports import "
                            "skip_sklearn_in_transformers as skip; assert skip() is False; ")
