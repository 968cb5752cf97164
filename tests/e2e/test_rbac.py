"""The manifests' RBAC grants exactly the API calls the controllers made in the e2e tests.

The base grants what every controller needs (its ClusterRoles bound cluster-wide, the Lease's
Role in the controller's namespace); each router's overlay of `manifests/overlays/` adds the
rules of one traffic router, and the dry-run and namespaced overlays add none. The e2e tests run
every router, so together they must use exactly the base's rules and every overlay's additions.
test_namespaced.py holds the calls of namespaced and dry-run controllers against their own
installs' grants.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy.support import tool

from .support import LEASE_NAMESPACE, CallLog

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests" / "base"
OVERLAYS = MANIFESTS.parent / "overlays"
SERVICE_ACCOUNT = ("inference-autoscaler", "inference-autoscaler")

Rule = tuple[str, str, str]
"""(verb, API group, resource[/subresource]), as RBAC names what it grants."""


def documents() -> list[dict[str, Any]]:
    found = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        found += [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    return found


def granted(role: dict[str, Any]) -> Iterator[Rule]:
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    yield verb, group, resource


def bound(kind: str) -> list[dict[str, Any]]:
    """The roles of `kind` bound to the controller's ServiceAccount (by bindings of their own
    scope: ClusterRoleBindings for ClusterRoles, RoleBindings for Roles)."""
    binding_kind = "ClusterRoleBinding" if kind == "ClusterRole" else "RoleBinding"
    names = {
        d["roleRef"]["name"]
        for d in documents()
        if d.get("kind") == binding_kind
        and d["roleRef"]["kind"] == kind
        and any(
            (s["kind"], s.get("namespace"), s["name"])
            == ("ServiceAccount", SERVICE_ACCOUNT[0], SERVICE_ACCOUNT[1])
            for s in d["subjects"]
        )
    }
    roles = [d for d in documents() if d.get("kind") == kind and d["metadata"]["name"] in names]
    assert roles, f"no {kind} bound to the controller"
    return roles


def rendered(overlay: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize` of an overlay: the objects it installs."""
    done = subprocess.run(
        [tool("kubectl"), "kustomize", str(overlay)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={**os.environ, "KUBECONFIG": os.devnull},
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if isinstance(d, dict)]


def overlay_rules(base: set[Rule]) -> dict[str, set[Rule]]:
    """The ClusterRole rules each overlay adds to the base's, by overlay name (an overlay that
    binds them only in some namespaces, or removes some, adds none)."""
    names = {role["metadata"]["name"] for role in bound("ClusterRole")}
    added = {}
    for overlay in sorted(p for p in OVERLAYS.iterdir() if (p / "kustomization.yaml").exists()):
        roles = [
            d
            for d in rendered(overlay)
            if d.get("kind") == "ClusterRole" and d["metadata"]["name"] in names
        ]
        added[overlay.name] = {rule for role in roles for rule in granted(role)} - base
    return added


@pytest.mark.after_e2e
def test_roles_grant_exactly_what_the_controllers_used(
    api_calls: CallLog, scenarios: set[str]
) -> None:
    """Every call is granted by the base or an overlay (lease calls in the Role's namespace),
    every grant of the base was used, and so was every rule an overlay adds."""
    if not api_calls.tests:
        pytest.skip("no controller ran in this session: run the e2e tests together")
    base = {rule for role in bound("ClusterRole") for rule in granted(role)}
    added = overlay_rules(base)
    cluster_role = base.union(*added.values())
    (role,) = bound("Role")
    namespaced = set(granted(role))
    assert role["metadata"]["namespace"] == LEASE_NAMESPACE

    used: set[Rule] = set()
    refused = []
    for call in api_calls.calls:
        resource = f"{call.resource}/{call.subresource}" if call.subresource else call.resource
        rule = (call.verb, call.group, resource)
        used.add(rule)
        in_role = rule in namespaced and call.namespace == role["metadata"]["namespace"]
        if rule not in cluster_role and not in_role:
            refused.append(call)
    assert not refused, f"calls the manifests' RBAC does not grant: {refused}"

    missing = scenarios - api_calls.tests
    if missing:
        pytest.skip(f"unused grants are judged only after every e2e test ran; missing {missing}")
    for overlay, rules in added.items():
        assert rules - used == set(), f"overlay {overlay} grants what was never used"
    assert (cluster_role | namespaced) - used == set(), "granted but never used"
    assert cluster_role & namespaced == set()
