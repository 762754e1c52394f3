"""compose.yaml and the k8s manifests parse, wire the processes the design names, and invoke real CLI commands."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_support import (
    DEPLOY,
    env_example_variables,
    k8s_files,
    k8s_objects,
    load_yaml_documents,
    pod_specs,
    settings_env_names,
)
from typer.testing import CliRunner

from contract.settings import Settings

COMPOSE = DEPLOY / "compose.yaml"
STREAMRL_SERVICES = ("api", "controller", "worker-generation", "worker-training")


def compose() -> dict[str, Any]:
    (doc,) = load_yaml_documents(COMPOSE)
    return doc


def argv(command: str | list[str] | None) -> list[str]:
    if command is None:
        return []
    return shlex.split(command) if isinstance(command, str) else [str(part) for part in command]


def compose_commands() -> list[tuple[str, list[str]]]:
    return [(name, argv(svc.get("command"))) for name, svc in compose()["services"].items() if svc.get("command")]


def k8s_commands() -> list[tuple[str, list[str]]]:
    found = []
    for name, spec in pod_specs(k8s_objects()):
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            found.append((f"{name}/{container['name']}", argv(container.get("command")) + argv(container.get("args"))))
    return found


def check_streamrl_invocation(args: list[str]) -> None:
    """Parse `args` (after `streamrl`) with the real CLI, stopping at `--help` so nothing runs.

    Click parses every option before it acts on `--help`, so an unknown command or option fails (exit 2).
    """
    from streamrl.cli.main import app

    result = CliRunner().invoke(app, [*args, "--help"])
    assert result.exit_code == 0, f"`streamrl {' '.join(args)}` is not a valid invocation:\n{result.output}"


ALL_COMMANDS = compose_commands() + k8s_commands()
STREAMRL_INVOCATIONS = [(where, cmd[1:]) for where, cmd in ALL_COMMANDS if cmd and cmd[0] == "streamrl"]


def test_there_are_streamrl_invocations_to_check() -> None:
    subcommands = {args[0] for _, args in STREAMRL_INVOCATIONS}
    assert {"migrate", "controller", "worker"} <= subcommands


@pytest.mark.parametrize(("where", "args"), STREAMRL_INVOCATIONS, ids=[w for w, _ in STREAMRL_INVOCATIONS])
def test_streamrl_invocation_exists_in_the_cli(where: str, args: list[str]) -> None:
    check_streamrl_invocation(args)


def test_unknown_commands_and_options_are_caught() -> None:
    with pytest.raises(AssertionError, match="not a valid invocation"):
        check_streamrl_invocation(["no-such-command"])
    with pytest.raises(AssertionError, match="not a valid invocation"):
        check_streamrl_invocation(["migrate", "--no-such-option"])


def test_worker_pools_cover_generation_and_training() -> None:
    pools = set()
    for _, args in STREAMRL_INVOCATIONS:
        if args[0] == "worker":
            pools.add(args[args.index("--pool") + 1])
    assert pools == {"generation", "training"}


def test_compose_services_and_shared_artifact_volume() -> None:
    services = compose()["services"]
    assert {"postgres", "redis", *STREAMRL_SERVICES} <= set(services)
    assert argv(services["worker-generation"]["command"])[1:4] == ["worker", "--pool", "generation"]
    assert argv(services["worker-training"]["command"])[1:4] == ["worker", "--pool", "training"]
    mounts = set()
    for name in STREAMRL_SERVICES:
        env = services[name]["environment"]
        artifact_dir = Path(env["STREAMRL_ARTIFACT_DIR"])
        volumes = [v.split(":") for v in services[name]["volumes"]]
        holding = [(src, dst) for src, dst, *_ in volumes if artifact_dir.is_relative_to(dst)]
        assert holding, f"{name}: no volume holds STREAMRL_ARTIFACT_DIR={artifact_dir}"
        mounts.add(holding[0])
    assert len(mounts) == 1, f"every process must mount the same artifact volume, got {mounts}"
    ((volume, _),) = mounts
    assert volume in compose()["volumes"]


def test_compose_environment_is_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    documented, process = env_example_variables()
    env = compose()["services"]["api"]["environment"]
    names = {k for k in env if k.startswith("STREAMRL_")}
    assert not names - settings_env_names() - set(process), f"unknown variables: {names - settings_env_names()}"
    concrete = {k: str(v) for k, v in env.items() if k in settings_env_names() and "${" not in str(v)}
    assert_valid_settings(monkeypatch, concrete)


def assert_valid_settings(monkeypatch: pytest.MonkeyPatch, values: dict[str, str]) -> None:
    for name in settings_env_names():
        monkeypatch.delenv(name, raising=False)
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    Settings(_env_file=None, secret_key="x" * 32)


def test_k8s_manifests_parse_and_are_all_in_the_kustomization() -> None:
    files = {p.name for p in k8s_files()}
    (kustomization,) = load_yaml_documents(DEPLOY / "k8s" / "kustomization.yaml")
    assert set(kustomization["resources"]) == files - {"kustomization.yaml"}
    for obj in k8s_objects():
        if obj.get("kind") != "Kustomization":
            assert obj.get("apiVersion") and obj["metadata"].get("name"), obj


def by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {obj["metadata"]["name"]: obj for obj in k8s_objects() if obj.get("kind") == kind}


def test_k8s_references_resolve() -> None:
    configmaps, secrets, claims = by_kind("ConfigMap"), by_kind("Secret"), by_kind("PersistentVolumeClaim")
    for name, spec in pod_specs(k8s_objects()):
        claim_names = {
            v["persistentVolumeClaim"]["claimName"] for v in spec.get("volumes", []) if "persistentVolumeClaim" in v
        }
        assert claim_names and claim_names <= set(claims), f"{name}: needs the shared artifact PVC"
        for container in spec["containers"]:
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    assert source["configMapRef"]["name"] in configmaps, name
                if "secretRef" in source:
                    assert source["secretRef"]["name"] in secrets, name
            assert any(m["mountPath"] == "/data" for m in container.get("volumeMounts", [])), name
    assert all("ReadWriteMany" in pvc["spec"]["accessModes"] for pvc in claims.values())


def test_k8s_roles() -> None:
    deployments = by_kind("Deployment")
    assert deployments["streamrl-controller"]["spec"]["replicas"] == 1
    assert deployments["streamrl-controller"]["spec"]["strategy"]["type"] == "Recreate"
    assert {s["kind"] for s in k8s_objects()} >= {"Service", "ConfigMap", "Secret", "PersistentVolumeClaim", "Job"}
    gen = deployments["streamrl-worker-generation"]["spec"]["template"]["spec"]["containers"][0]
    assert gen["resources"]["limits"]["nvidia.com/gpu"] == 1, "one accelerator per generation worker"
    assert argv(gen["command"])[-2:] == ["--devices", "0"], "one process, pinned to the pod's one accelerator"
    service = {s["metadata"]["name"]: s for s in k8s_objects() if s["kind"] == "Service"}["streamrl-training"]
    assert service["spec"]["clusterIP"] == "None"  # headless: the rendezvous goes to the pod IPs the drivers advertise


def test_k8s_settings_are_real_and_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    _, process = env_example_variables()
    values: dict[str, str] = {}
    for obj in [*by_kind("ConfigMap").values(), *by_kind("Secret").values()]:
        values |= {k: str(v) for k, v in {**obj.get("data", {}), **obj.get("stringData", {})}.items()}
    unknown = set(values) - settings_env_names() - set(process)
    assert not unknown, f"ConfigMap/Secret set variables nothing reads: {sorted(unknown)}"
    assert_valid_settings(monkeypatch, {k: v for k, v in values.items() if k in settings_env_names()})


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
def test_kustomization_renders_with_kubectl() -> None:
    """`kubectl kustomize` (offline) accepts the kustomization and sets the namespace and image everywhere."""
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(DEPLOY / "k8s")], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    objects = [doc for doc in yaml.safe_load_all(rendered) if doc]
    assert {o["kind"] for o in objects} >= {"Namespace", "Deployment", "Service", "Job", "PersistentVolumeClaim"}
    assert all(o["metadata"].get("namespace") == "streamrl" for o in objects if o["kind"] != "Namespace")
    images = {c["image"] for _, spec in pod_specs(objects) for c in spec["containers"]}
    assert images == {"streamrl:latest"}


def test_compose_interpolates_only_real_settings_or_compose_variables() -> None:
    """`${VAR}` in compose.yaml: STREAMRL_* names must be settings; the others are documented in env.example."""
    names = set(re.findall(r"\$\{(\w+)", COMPOSE.read_text()))
    streamrl = {n for n in names if n.startswith("STREAMRL_")}
    assert streamrl <= settings_env_names(), f"not settings: {sorted(streamrl - settings_env_names())}"
    env_example = (DEPLOY / "env.example").read_text()
    undocumented = [n for n in names - streamrl if not re.search(rf"^# {n}=", env_example, re.M)]
    assert not undocumented, f"compose variables missing from env.example: {undocumented}"
