"""deploy/env.example lists exactly the real settings, and every other variable it names is read by the code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from deploy_support import REPO, env_example_variables, settings_env_names

from contract.settings import Settings


def source_text() -> str:
    packages = ("contract", "backend", "workers", "streamrl")
    files = [*(path for tree in packages for path in REPO.glob(f"{tree}/**/*.py")), *REPO.glob("scripts/*.sh")]
    return "\n".join(path.read_text() for path in files)


def test_every_setting_is_documented_and_nothing_else_in_the_settings_section() -> None:
    documented, _ = env_example_variables()
    real = settings_env_names()
    assert not real - set(documented), f"settings missing from env.example: {sorted(real - set(documented))}"
    assert not set(documented) - real, f"env.example lists non-settings: {sorted(set(documented) - real)}"


def test_process_variables_are_read_by_the_code() -> None:
    _, process = env_example_variables()
    assert process, "the process-variable section is empty"
    code = source_text()
    unused = [name for name in process if not re.search(rf"\b{name}\b", code)]
    assert not unused, f"env.example documents variables no code reads: {unused}"
    real = settings_env_names()
    assert not set(process) & real, "a Settings field belongs in the settings section"


def test_every_streamrl_variable_the_code_reads_is_documented() -> None:
    documented, process = env_example_variables()
    known = set(documented) | set(process)
    read = set(re.findall(r"\bSTREAMRL_[A-Z0-9_]*[A-Z0-9]\b", source_text()))
    test_only = {name for name in read if name.startswith("STREAMRL_TEST_")}
    assert not read - known - test_only, f"undocumented variables: {sorted(read - known - test_only)}"


def test_example_values_are_valid_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Uncommenting every line of env.example gives a configuration the app accepts."""
    documented, _ = env_example_variables()
    for name in settings_env_names():
        monkeypatch.delenv(name, raising=False)
    for name, value in documented.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("STREAMRL_DATA_DIR", str(tmp_path))  # ./data would resolve against the test's cwd
    settings = Settings(_env_file=None)
    assert settings.database_url.startswith("postgresql")
    assert settings.redis_url and settings.redis_url.startswith("redis://")
    assert settings.allowed_model_roots and settings.cors_origins
