"""Fixtures for the trainer tests: one tiny-1m model built once per session, and synthetic scored samples."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from training_fixtures import make_group

from contract.sample import Sample
from workers.models import build_tiny_model

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model("tiny-1m", tmp_path_factory.mktemp("tiny") / "model", seed=0)


@pytest.fixture
def samples() -> list[Sample]:
    return (
        make_group("g0", [1.0, 0.0, 0.0, 1.0], seed=1)
        + make_group("g1", [0.0, 0.0, 1.0, 0.5], seed=2)
        + make_group("g2", [1.0, 1.0, 1.0, 0.0], seed=3)
    )
