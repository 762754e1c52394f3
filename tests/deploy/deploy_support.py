"""Helpers for checking the deploy files, examples and env.example against the code they describe."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
EXAMPLES = REPO / "examples"


def load_yaml_documents(path: Path) -> list[Any]:
    """Every non-empty document of a (possibly multi-document) YAML file."""
    with path.open() as handle:
        return [doc for doc in yaml.safe_load_all(handle) if doc is not None]


def k8s_files() -> list[Path]:
    return sorted((DEPLOY / "k8s").glob("*.yaml"))


def k8s_objects() -> list[dict[str, Any]]:
    return [doc for path in k8s_files() for doc in load_yaml_documents(path)]


def pod_specs(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(object name, pod spec) of every Deployment / Job / StatefulSet / DaemonSet."""
    for obj in objects:
        if obj.get("kind") in ("Deployment", "Job", "StatefulSet", "DaemonSet"):
            yield obj["metadata"]["name"], obj["spec"]["template"]["spec"]


ENV_EXAMPLE = DEPLOY / "env.example"
PROCESS_SECTION_MARKER = "==== Process variables"


def env_example_variables() -> tuple[dict[str, str], dict[str, str]]:
    """(settings, process variables) of env.example: `NAME=value` lines, commented out or not, by section."""
    settings: dict[str, str] = {}
    process: dict[str, str] = {}
    section = settings
    for raw in ENV_EXAMPLE.read_text().splitlines():
        if PROCESS_SECTION_MARKER in raw:
            section = process
            continue
        line = raw.lstrip("#").strip()
        name, sep, value = line.partition("=")
        if sep and name.startswith("STREAMRL_") and name.replace("_", "").isalnum() and name.isupper():
            assert name not in settings and name not in process, f"{name} is listed twice in env.example"
            section[name] = value
    return settings, process


def settings_env_names() -> set[str]:
    from contract.settings import Settings

    prefix = Settings.model_config.get("env_prefix", "")
    return {f"{prefix}{name}".upper() for name in Settings.model_fields}
