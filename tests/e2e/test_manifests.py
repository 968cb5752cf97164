"""The controller's own manifests: a hardened Deployment whose settings the controller accepts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler import settings

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests" / "base"


def objects() -> dict[str, dict[str, Any]]:
    """Every object of `manifests/base/*.yaml`, keyed by `Kind/name`."""
    found = {}
    for path in sorted(MANIFESTS.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if isinstance(document, dict) and "metadata" in document:
                found[f"{document['kind']}/{document['metadata']['name']}"] = document
    return found


def test_the_kustomization_lists_every_manifest() -> None:
    """`kubectl apply -k manifests/base` applies every file of the base."""
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    files = {p.name for p in MANIFESTS.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files


def test_the_deployment_runs_two_hardened_replicas_with_probes() -> None:
    """Two replicas, non-root, read-only root, no capabilities, RuntimeDefault seccomp, probes."""
    found = objects()
    deployment = found["Deployment/inference-autoscaler"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert deployment["spec"]["replicas"] == 2
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["requests"].keys() == {"cpu", "memory"}
    assert container["resources"]["limits"].keys() == {"memory"}
    assert pod["serviceAccountName"] == "inference-autoscaler"
    assert (
        found["ServiceAccount/inference-autoscaler"]["metadata"]["namespace"]
        == (deployment["metadata"]["namespace"])
    )
    service = found["Service/inference-autoscaler"]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


def test_the_deployments_environment_is_valid_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every AUTOSCALER_ variable of the Deployment is a setting the controller accepts, and the
    probes and Service use the port it serves on."""
    deployment = objects()["Deployment/inference-autoscaler"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item for item in container["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    lease_namespace = env["AUTOSCALER_KUBERNETES__LEASE_NAMESPACE"]["valueFrom"]["fieldRef"]
    assert lease_namespace["fieldPath"] == "metadata.namespace"
    for name in [n for n in os.environ if n.startswith("AUTOSCALER_")]:
        monkeypatch.delenv(name)
    for name, item in env.items():
        if name.startswith("AUTOSCALER_") and "value" in item:
            monkeypatch.setenv(name, item["value"])

    config = settings.Settings()

    (port,) = container["ports"]
    assert port["containerPort"] == config.http.port
    assert container["readinessProbe"]["httpGet"]["port"] == port["name"]
    assert config.prometheus.url.startswith("http://")
    assert config.log.json_lines is True
