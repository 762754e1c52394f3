"""A LoRA job submitted from the form with its defaults learns (issue 39): the body the form posts
(form_lora_spec.json, written from frontend/src/lib/jobForm.ts by frontend/src/lib/formLoraSpec.test.ts, so it is the
registry's LoRA defaults of contract/form_defaults.py plus the form's task, reward and sampling) trained on the
demo's freshly built tiny model with train-local (the platform's driver in one process, no services). Only the model
(the form's pick) and the iteration count (60 in the form) differ. The runner is bench/form_defaults.py's, which also
runs the flat control (no output head)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.form_defaults import form_lora_spec, reward_rise  # noqa: E402

pytestmark = pytest.mark.slow  # ~1 min of CPU training
torch.set_num_threads(1)

ITERATIONS, WINDOW = 6, 2  # measured: reward 0.17 0.14 0.20 0.27 0.34 0.37, a rise of ~0.2 (bench/form_defaults.py)


def test_a_lora_job_with_the_form_defaults_raises_the_reward_window(tiny_model_dir: Path, tmp_path: Path) -> None:
    spec = form_lora_spec(tiny_model_dir, ITERATIONS)
    assert spec.training.lora is not None and "lm_head" in spec.training.lora.target_modules
    run = reward_rise(spec, tmp_path / "job", WINDOW)
    assert run.rise >= 0.1, f"reward per iteration {[round(r, 3) for r in run.rewards]}: the window rose {run.rise:.3f}"
