"""deploy/k8s-objectstore: the base manifests with no shared volume (docs/operator.md, "Scale out without a shared
volume"), checked statically and rendered by `kubectl kustomize`: no ReadWriteMany claim is created, every StreamRL
pod's /data is its own emptyDir, every StreamRL container reads STREAMRL_ARTIFACTS=s3://... and the store's
credentials from the config it already mounts, and the in-cluster S3 server's endpoint is the one they use."""

from __future__ import annotations

import subprocess
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml
from deploy_support import DEPLOY, env_example_variables, load_yaml_documents

from contract.artifact_store.config import CACHE_BYTES_ENV

OVERLAY = DEPLOY / "k8s-objectstore"
WORKLOADS = ("Deployment", "Job", "StatefulSet")


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    try:
        out = subprocess.run(["kubectl", "kustomize", str(OVERLAY)], capture_output=True, text=True, timeout=60,
                             check=True).stdout
    except FileNotFoundError:
        pytest.skip("kubectl is not installed")
    return [doc for doc in yaml.safe_load_all(out) if doc]


def _named(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def test_no_pod_shares_a_volume(rendered: list[dict[str, Any]]) -> None:
    assert all(o["metadata"].get("namespace") in ("streamrl", None) for o in rendered)
    claims = [o for o in rendered if o["kind"] == "PersistentVolumeClaim"]
    assert claims == []  # the base's ReadWriteMany claim is gone
    streamrl = [o for o in rendered if o["kind"] in WORKLOADS and o["metadata"]["name"].startswith("streamrl-")]
    assert {o["metadata"]["name"] for o in streamrl} == {
        "streamrl-api", "streamrl-controller", "streamrl-worker-generation", "streamrl-worker-training",
        "streamrl-migrate"}
    for workload in streamrl:
        volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
        assert set(volumes["data"]) == {"name", "emptyDir"}, workload["metadata"]["name"]
        for volume in volumes.values():
            assert "persistentVolumeClaim" not in volume, workload["metadata"]["name"]
    seaweed = _named(rendered, "StatefulSet", "seaweedfs")  # the store's own disk: one writer, ReadWriteOnce
    (template,) = seaweed["spec"]["volumeClaimTemplates"]
    assert template["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_every_streamrl_container_uses_the_object_store(rendered: list[dict[str, Any]]) -> None:
    config = _named(rendered, "ConfigMap", "streamrl-config")["data"]
    secret = _named(rendered, "Secret", "streamrl-secrets")["stringData"]
    assert urlparse(config["STREAMRL_ARTIFACTS"]).scheme == "s3" and urlparse(config["STREAMRL_ARTIFACTS"]).netloc
    assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= set(secret)
    assert "STREAMRL_DATABASE_URL" in secret and "STREAMRL_REDIS_URL" in config  # the base's values are kept
    assert int(config[CACHE_BYTES_ENV]) > 0
    documented, process = env_example_variables()
    assert {"STREAMRL_ARTIFACTS", CACHE_BYTES_ENV} <= set(documented) | set(process)
    for workload in (o for o in rendered if o["kind"] in WORKLOADS and o["metadata"]["name"].startswith("streamrl-")):
        for container in workload["spec"]["template"]["spec"]["containers"]:
            refs = {next(iter(r.values()))["name"] for r in container.get("envFrom", [])}
            assert {"streamrl-config", "streamrl-secrets"} <= refs, workload["metadata"]["name"]
    service = _named(rendered, "Service", "seaweedfs")
    endpoint = urlparse(config["AWS_ENDPOINT_URL"])
    assert endpoint.hostname == f"seaweedfs.{service['metadata']['namespace']}.svc.cluster.local"
    assert endpoint.port in {p["port"] for p in service["spec"]["ports"]}
    args = _named(rendered, "StatefulSet", "seaweedfs")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"-s3.port={endpoint.port}" in args


def test_overlay_files_parse() -> None:
    (kustomization,) = load_yaml_documents(OVERLAY / "kustomization.yaml")
    assert kustomization["resources"][0] == "../k8s"
    for path in OVERLAY.glob("*.yaml"):
        assert load_yaml_documents(path), path
