"""deploy/k8s-autoscaling: KEDA ScaledObjects for the worker Deployments on the queue metrics, checked statically
(the targets exist, each scales its own pool on series the API really exports, one replica per slot a pod serves)
and rendered by `kubectl kustomize` on top of the base manifests."""

from __future__ import annotations

import re
import subprocess
from typing import Any

import pytest
import yaml
from deploy_support import DEPLOY, k8s_objects, load_yaml_documents

AUTOSCALING = DEPLOY / "k8s-autoscaling"


def scaled_objects() -> list[dict[str, Any]]:
    return load_yaml_documents(AUTOSCALING / "scaledobjects.yaml")


def deployments() -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in k8s_objects() if o["kind"] == "Deployment"}


def worker_pool_and_slots(deployment: dict[str, Any]) -> tuple[str, int]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    command = container["command"]
    return command[command.index("--pool") + 1], len(command[command.index("--devices") + 1].split(";"))


def test_each_worker_deployment_scales_on_its_own_pool() -> None:
    objects = scaled_objects()
    assert {o["kind"] for o in objects} == {"ScaledObject"} and all(o["apiVersion"] == "keda.sh/v1alpha1"
                                                                     for o in objects)
    targets = {o["spec"]["scaleTargetRef"]["name"]: o for o in objects}
    workers = {name: d for name, d in deployments().items() if name.startswith("streamrl-worker-")}
    assert set(targets) == set(workers) == {"streamrl-worker-training", "streamrl-worker-generation"}
    for name, scaled in targets.items():
        pool, slots = worker_pool_and_slots(workers[name])
        spec = scaled["spec"]
        assert 1 <= spec["minReplicaCount"] < spec["maxReplicaCount"]
        (trigger,) = spec["triggers"]
        assert trigger["type"] == "prometheus"
        query = trigger["metadata"]["query"]
        assert set(re.findall(r'pool="(\w+)"', query)) == {pool}, query
        series = set(re.findall(r"(streamrl_\w+)\{", query))
        assert series == {"streamrl_pool_slots_held", "streamrl_queue_demand_slots"}
        assert float(trigger["metadata"]["threshold"]) == slots  # one replica per `slots` demanded device slots
        assert spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"][
            "stabilizationWindowSeconds"] >= 300  # no flapping: a training pod's jobs restart when it goes


def test_the_queried_series_are_exported(pg_backend: Any) -> None:
    with pg_backend.client(metrics_token="autoscaling-token") as client:
        text = client.get("/metrics", headers={"Authorization": "Bearer autoscaling-token"}).text
    for scaled in scaled_objects():
        query = scaled["spec"]["triggers"][0]["metadata"]["query"]
        for series in re.findall(r'streamrl_\w+\{pool="\w+"\}', query):
            assert re.search(rf"^{re.escape(series)} \d", text, re.M), f"{series} is not in GET /metrics"


def test_overlay_renders_with_kubectl() -> None:
    (kustomization,) = load_yaml_documents(AUTOSCALING / "kustomization.yaml")
    assert kustomization["resources"] == ["../k8s", "scaledobjects.yaml"]
    try:
        rendered = subprocess.run(["kubectl", "kustomize", str(AUTOSCALING)], capture_output=True, text=True,
                                  timeout=60, check=True).stdout
    except FileNotFoundError:
        pytest.skip("kubectl is not installed")
    objects = [doc for doc in yaml.safe_load_all(rendered) if doc]
    scaled = [o for o in objects if o["kind"] == "ScaledObject"]
    assert len(scaled) == 2 and all(o["metadata"]["namespace"] == "streamrl" for o in scaled)
    assert {o["metadata"]["name"] for o in objects if o["kind"] == "Deployment"} >= {
        o["spec"]["scaleTargetRef"]["name"] for o in scaled}
