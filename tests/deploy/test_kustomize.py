"""The kustomizations a platform team applies, rendered by `kubectl kustomize` and every object
checked: built-in kinds against the Kubernetes JSON schemas (kubernetes-validate, strict, at
every Kubernetes minor release we support), CRD kinds against the fields their CRDs require, and
the controller's Deployment for what it asks of a cluster.

The namespaced component is rendered as manifests/overlays/namespaced tells a platform team to
use it: on the base, on the dry-run overlay and on each router's overlay, and with a router's
component. The other components are rendered alone (through their overlays) and combined.

The examples are checked the same way and with `autoscaler validate`."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pydantic
import pytest
import yaml

from autoscaler import settings, validate
from autoscaler.contract import annotations as ann
from autoscaler.core import shards

from .support import (
    COMPONENTS,
    MANIFESTS,
    NAMESPACED,
    composed,
    namespaced_on,
    run_kustomize,
    version,
)

Obj = dict[str, Any]

KUBERNETES_VERSIONS = tuple(f"1.{minor}.0" for minor in range(30, 38))
"""The Kubernetes releases the manifests support, every minor one from the oldest to the newest
the schemas know: docs/operations.md's compatibility table names the same range."""

NAMESPACE = "inference-autoscaler"
NAME = "inference-autoscaler"
IMAGE = "ghcr.io/inference-autoscaler/inference-autoscaler"
COMMON_LABELS = {
    "app.kubernetes.io/name": NAME,
    "app.kubernetes.io/part-of": NAME,
}
NAMESPACED_ON = "namespaced-on:"
"""`namespaced-on:<kustomization>`: the namespaced example with `<kustomization>` in place of
the base, as its comments tell a platform team to do."""
MANAGED_NAMESPACES = ["serving-a", "serving-b"]
"""The namespaces the namespaced example lists."""
NAMESPACED_WITH = "namespaced-with:"
"""`namespaced-with:<component>`: the namespaced example with a component added to its list."""
WITH = "with:"
"""`with:<component>,<component>...`: the base and those components, in a kustomization of a
platform team's own."""
ROUTER_OVERLAYS = ("overlays/istio", "overlays/gateway-api", "overlays/smi")
KUSTOMIZATIONS = (
    "base",
    "overlays/dry-run",
    "overlays/shards",
    "overlays/cache-placement",
    *ROUTER_OVERLAYS,
    NAMESPACED,
    *(NAMESPACED_ON + on for on in ("overlays/dry-run", *ROUTER_OVERLAYS)),
    NAMESPACED_WITH + "istio",
    WITH + "istio,gateway-api",
    WITH + "istio,gateway-api,smi,grafana-dashboards",
    WITH + "smi,dry-run",
)
READ_VERBS = {"get", "list", "watch"}
RBAC_GROUP = "rbac.authorization.k8s.io"
WARM_GATE = "autoscaler.dsec.io/warm"
WARMING_LABEL = "autoscaler.dsec.io/warming"
ROUTER_KEY = ann.PREFIX + "traffic-router"

# -- schemas of the CRD kinds: the fields their CRDs require, and the types of those we use ----

_DURATION = {"type": "string", "pattern": r"^(0|([0-9]+(ms|s|m|h|d|w|y))+)$"}
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_METADATA = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "namespace": {"type": "string", "minLength": 1},
        "labels": _STRING_MAP,
        "annotations": _STRING_MAP,
    },
}
_LABEL_SELECTOR = {
    "type": "object",
    "properties": {
        "matchLabels": _STRING_MAP,
        "matchExpressions": {
            "type": "array",
            "items": {"type": "object", "required": ["key", "operator"]},
        },
    },
    "additionalProperties": False,
}


def _crd(api_version: str, kind: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": api_version},
            "kind": {"const": kind},
            "metadata": _METADATA,
            "spec": spec,
        },
    }


CRD_SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    ("monitoring.coreos.com/v1", "PodMonitor"): _crd(
        "monitoring.coreos.com/v1",
        "PodMonitor",
        {
            "type": "object",
            "required": ["selector"],
            "properties": {
                "selector": _LABEL_SELECTOR,
                "jobLabel": {"type": "string"},
                "podMetricsEndpoints": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "port": {"type": "string", "minLength": 1},
                            "path": {"type": "string", "pattern": "^/"},
                            "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
                            "interval": _DURATION,
                            "scrapeTimeout": _DURATION,
                            "honorLabels": {"type": "boolean"},
                        },
                        "additionalProperties": False,
                    },
                },
            },
            "additionalProperties": False,
        },
    ),
    ("monitoring.coreos.com/v1", "ServiceMonitor"): _crd(
        "monitoring.coreos.com/v1",
        "ServiceMonitor",
        {
            "type": "object",
            "required": ["selector", "endpoints"],
            "properties": {
                "selector": _LABEL_SELECTOR,
                "jobLabel": {"type": "string"},
                "namespaceSelector": {
                    "type": "object",
                    "properties": {
                        "any": {"type": "boolean"},
                        "matchNames": {"type": "array", "items": {"type": "string"}},
                    },
                    "additionalProperties": False,
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "properties": {
                            "port": {"type": "string", "minLength": 1},
                            "path": {"type": "string", "pattern": "^/"},
                            "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
                            "interval": _DURATION,
                            "scrapeTimeout": _DURATION,
                            "honorLabels": {"type": "boolean"},
                        },
                    },
                },
            },
        },
    ),
    ("monitoring.coreos.com/v1", "PrometheusRule"): _crd(
        "monitoring.coreos.com/v1",
        "PrometheusRule",
        {
            "type": "object",
            "properties": {
                "groups": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {
                            "name": {"type": "string", "minLength": 1},
                            "interval": _DURATION,
                            "rules": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["expr"],
                                    "properties": {
                                        "expr": {"type": ["string", "integer"]},
                                        "alert": {"type": "string", "minLength": 1},
                                        "record": {"type": "string", "minLength": 1},
                                        "for": _DURATION,
                                        "keep_firing_for": _DURATION,
                                        "labels": _STRING_MAP,
                                        "annotations": _STRING_MAP,
                                    },
                                    # Exactly one of `alert` and `record`.
                                    "oneOf": [
                                        {"required": ["alert"], "not": {"required": ["record"]}},
                                        {"required": ["record"], "not": {"required": ["alert"]}},
                                    ],
                                },
                            },
                        },
                    },
                }
            },
        },
    ),
}


# -- rendering and validating -------------------------------------------------------------------


@functools.cache
def kustomize(kustomization: str) -> str:
    """`kubectl kustomize manifests/<kustomization>`: the rendered YAML, once per session (a
    `namespaced-on:` name is rendered from a copy of the namespaced example)."""
    if kustomization.startswith(NAMESPACED_ON):
        return namespaced_on(kustomization.removeprefix(NAMESPACED_ON))
    if kustomization.startswith(NAMESPACED_WITH):
        added = kustomization.removeprefix(NAMESPACED_WITH)

        def add_component(text: str) -> str:
            listed = next(line for line in text.splitlines() if "components/namespaced" in line)
            return text.replace(listed, f"{listed}\n{listed.replace('namespaced', added)}")

        return namespaced_on("base", edit=add_component)
    if kustomization.startswith(WITH):
        return composed(*kustomization.removeprefix(WITH).split(","))
    return run_kustomize(MANIFESTS / kustomization)


def rendered(kustomization: str) -> tuple[Obj, ...]:
    """The rendered objects, parsed afresh so that a test may change its copy."""
    return tuple(d for d in yaml.safe_load_all(kustomize(kustomization)) if d is not None)


def examples() -> list[Path]:
    return sorted((MANIFESTS / "examples").glob("*.yaml"))


def example_objects(path: Path) -> list[Obj]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def router_of(deployment: Obj) -> str:
    found = deployment["metadata"].get("annotations", {}).get(ROUTER_KEY, "none")
    assert isinstance(found, str)
    return found


def ramped_examples() -> list[Path]:
    """The examples whose Deployment names a traffic router."""
    return [
        path
        for path in examples()
        if any(o["kind"] == "Deployment" and router_of(o) != "none" for o in example_objects(path))
    ]


def problems(obj: Obj) -> Iterator[str]:
    """What a cluster's schema (built-in kinds) or a CRD's (CRD kinds) would reject in `obj`."""
    key = (str(obj.get("apiVersion")), str(obj.get("kind")))
    if key in CRD_SCHEMAS:
        validator = jsonschema.Draft202012Validator(CRD_SCHEMAS[key])
        for error in validator.iter_errors(obj):
            yield f"{'.'.join(map(str, error.absolute_path))}: {error.message}"
        return
    yield from _schema_problems(json.dumps(obj, sort_keys=True))


@functools.cache
def _schema_problems(text: str) -> tuple[str, ...]:
    """What the Kubernetes schemas reject in one object (as JSON text): once per session for
    the objects that many kustomizations share."""
    obj = json.loads(text)
    key = (str(obj.get("apiVersion")), str(obj.get("kind")))
    found = []
    for release in KUBERNETES_VERSIONS:
        try:
            kubernetes_validate.validate(obj, release, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            found.append(f"no schema for {key} in Kubernetes {release}, nor one of its CRDs here")
        except kubernetes_validate.ValidationError as e:
            found.append(
                f"Kubernetes {release}: {'.'.join(map(str, e.absolute_path))}: {e.message}"
            )
    return tuple(found)


def by_kind(objects: tuple[Obj, ...], kind: str) -> list[Obj]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: tuple[Obj, ...], kind: str, name: str = NAME) -> Obj:
    (found,) = [o for o in by_kind(objects, kind) if o["metadata"]["name"] == name]
    return found


def env_of(container: Obj) -> dict[str, Obj]:
    return {item["name"]: item for item in container.get("env", ())}


def selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return selector.items() <= labels.items()


def set_environment(objects: tuple[Obj, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    """The process environment as the controller's container has it (its AUTOSCALER_ values)."""
    (container,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    for name in [n for n in os.environ if n.startswith("AUTOSCALER_")]:
        monkeypatch.delenv(name)
    for name, item in env_of(container).items():
        if name.startswith("AUTOSCALER_") and "value" in item:
            monkeypatch.setenv(name, item["value"])


def managed_namespace_bindings(objects: tuple[Obj, ...]) -> list[Obj]:
    """The RoleBindings that grant the controller's ClusterRole in one namespace each."""
    return [
        b
        for b in by_kind(objects, "RoleBinding")
        if b["roleRef"] == {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": NAME}
    ]


# -- every kustomization ------------------------------------------------------------------------


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_every_rendered_object_passes_its_schema(kustomization: str) -> None:
    """Each object of the rendered kustomization is valid for every Kubernetes release from 1.30
    to 1.37 (strict: no unknown field) or for the CRD that defines its kind."""
    objects = rendered(kustomization)
    assert objects
    rejected = {f"{o['kind']}/{o['metadata']['name']}": list(problems(o)) for o in objects}
    assert {name: found for name, found in rejected.items() if found} == {}


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_every_object_is_labelled_and_namespaced(kustomization: str) -> None:
    """The common labels are on every object and pod template; namespaced objects live in the
    controller's namespace, but the RoleBindings of a namespaced install in the namespaces it
    manages."""
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
    for obj in rendered(kustomization):
        assert selects(COMMON_LABELS, obj["metadata"]["labels"]), obj["metadata"]["name"]
        if obj in managed_namespace_bindings(rendered(kustomization)):
            assert obj["metadata"]["namespace"] in MANAGED_NAMESPACES
        elif obj["kind"] not in cluster_scoped:
            assert obj["metadata"]["namespace"] == NAMESPACE, obj["metadata"]["name"]
    deployment = one(rendered(kustomization), "Deployment")
    assert selects(COMMON_LABELS, deployment["spec"]["template"]["metadata"]["labels"])
    # Selectors are immutable: the common labels stay out of them.
    assert deployment["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": NAME}


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_the_deployments_environment_is_valid_settings(
    kustomization: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The controller accepts every AUTOSCALER_ variable the Deployment sets, the Lease it
    elects its leader with is the one its Role may renew (a dry run holds none), and a
    namespaced install watches exactly the namespaces it is granted."""
    objects = rendered(kustomization)
    set_environment(objects, monkeypatch)

    config = settings.Settings()

    dry_run = kustomization.endswith("dry-run")
    assert config.kubernetes.dry_run is dry_run
    if dry_run:
        assert by_kind(objects, "Role") == []
    else:
        leader_role = one(objects, "Role", f"{NAME}-leader")
        renewals = [r for r in leader_role["rules"] if "update" in r["verbs"]]
        leases = shards.bucket_names(config.kubernetes.lease_name, config.kubernetes.lease_buckets)
        assert [r["resourceNames"] for r in renewals] == [list(leases)]
    granted_in = [b["metadata"]["namespace"] for b in managed_namespace_bindings(objects)]
    assert list(config.kubernetes.namespaces) == granted_in


# -- the base -------------------------------------------------------------------------------------


def test_the_controller_is_hardened_as_the_restricted_pod_security_level_asks() -> None:
    """Non-root numeric user, RuntimeDefault seccomp, no privilege escalation, no capabilities,
    read-only root with an emptyDir on /tmp, in a namespace that enforces `restricted`."""
    objects = rendered("base")
    namespace = one(objects, "Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    (mount,) = container["volumeMounts"]
    assert mount["mountPath"] == "/tmp"
    (volume,) = pod["volumes"]
    assert volume["name"] == mount["name"]
    assert volume["emptyDir"]["sizeLimit"]


def test_the_controller_runs_two_probed_replicas_with_bounded_resources() -> None:
    """Two replicas spread over nodes, probes on /healthz and /readyz of the metrics port, CPU
    and memory requested, memory limited, the image at the project's version."""
    deployment = one(rendered("base"), "Deployment")
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    (container,) = pod["containers"]
    assert container["image"] == f"{IMAGE}:{version()}"
    (port,) = container["ports"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port["name"]}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port["name"]}
    resources = container["resources"]
    assert resources["requests"].keys() == {"cpu", "memory"}
    assert resources["limits"].keys() == {"memory"}
    env = env_of(container)
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    lease_namespace = env["AUTOSCALER_KUBERNETES__LEASE_NAMESPACE"]["valueFrom"]["fieldRef"]
    assert lease_namespace["fieldPath"] == "metadata.namespace"


def test_a_disruption_budget_keeps_one_replica_through_a_drain() -> None:
    """The PodDisruptionBudget keeps one of the controller's pods available."""
    objects = rendered("base")
    budget = one(objects, "PodDisruptionBudget")
    assert budget["spec"] == {
        "minAvailable": 1,
        "selector": one(objects, "Deployment")["spec"]["selector"],
    }


def test_the_service_monitor_scrapes_the_metrics_port_of_the_controller() -> None:
    """The ServiceMonitor selects the controller's Service in its namespace and scrapes /metrics
    on the port the probes use, keeping the series' own labels."""
    objects = rendered("base")
    deployment = one(objects, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (port,) = container["ports"]
    service = one(objects, "Service")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert [p["targetPort"] for p in service["spec"]["ports"]] == [port["name"]]
    monitor = one(objects, "ServiceMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert [
        s["metadata"]["name"]
        for s in by_kind(objects, "Service")
        if selects(selector, s["metadata"]["labels"])
    ] == [NAME]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["honorLabels"] is True


def test_applying_the_manifests_directory_installs_the_base() -> None:
    """`kubectl apply -k manifests/` renders exactly the base."""
    assert kustomize(".") == kustomize("base")


def test_the_base_ships_the_alert_rules() -> None:
    """The PrometheusRule is part of the base."""
    rules = one(rendered("base"), "PrometheusRule")
    assert rules["spec"]["groups"]


# -- the overlays ---------------------------------------------------------------------------------


def cluster_rules(kustomization: str) -> list[Obj]:
    rules = one(rendered(kustomization), "ClusterRole")["rules"]
    assert isinstance(rules, list)
    return rules


def without(objects: tuple[Obj, ...], *kinds: str) -> list[Obj]:
    return [o for o in objects if o["kind"] not in kinds]


def test_the_dry_run_overlay_runs_one_writeless_replica() -> None:
    """Dry-run sets the controller's dry-run setting, runs one replica (a dry-run instance takes
    no Lease, so two would both act) under a budget that lets a drain evict it, is granted only
    the base's reads and the writes of the gates it opens, and changes nothing else."""
    base, dry = rendered("base"), rendered("overlays/dry-run")
    deployment = one(dry, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert env_of(container)["AUTOSCALER_KUBERNETES__DRY_RUN"]["value"] == "true"
    assert deployment["spec"]["replicas"] == 1
    # The base's budget by the same name, replaced (`kubectl apply` over the base deletes
    # nothing): it allows one disruption, the only replica's.
    assert one(dry, "PodDisruptionBudget")["spec"] == {
        "maxUnavailable": deployment["spec"]["replicas"],
        "selector": deployment["spec"]["selector"],
    }
    reads = [
        {**rule, "verbs": [v for v in rule["verbs"] if v in READ_VERBS]}
        for rule in cluster_rules("base")
    ]
    # The readiness gates no ramp answers for are opened in dry-run too, with an Event.
    gate_writes = [
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
    ]
    assert cluster_rules("overlays/dry-run") == [r for r in reads if r["verbs"]] + gate_writes
    changed = ("Deployment", "PodDisruptionBudget", "ClusterRole", "Role", "RoleBinding")
    assert without(dry, *changed) == without(base, *changed)
    assert by_kind(dry, "Role") == by_kind(dry, "RoleBinding") == []
    assert one(dry, "ClusterRole", f"{NAME}-nodes") == one(base, "ClusterRole", f"{NAME}-nodes")


ADDED_BY_ROUTER: dict[str, list[Obj]] = {
    "istio": [
        {
            "apiGroups": ["networking.istio.io"],
            "resources": ["destinationrules", "virtualservices"],
            "verbs": ["get", "create", "patch"],
        },
    ],
    "gateway-api": [
        {
            "apiGroups": ["gateway.networking.k8s.io"],
            "resources": ["httproutes"],
            "verbs": ["get", "create", "patch"],
        },
        {"apiGroups": [""], "resources": ["services"], "verbs": ["create", "patch"]},
    ],
    "smi": [
        {
            "apiGroups": ["split.smi-spec.io"],
            "resources": ["trafficsplits"],
            "verbs": ["get", "create", "patch"],
        },
        {"apiGroups": [""], "resources": ["services"], "verbs": ["create", "patch"]},
    ],
}
"""The rules each router's component appends to the base ClusterRole."""


@pytest.mark.parametrize("router", ADDED_BY_ROUTER)
def test_a_router_overlay_adds_exactly_its_routers_grants(router: str) -> None:
    """A router's overlay appends its rules to the base ClusterRole and leaves every other
    object of the base as it was (but the Deployment's pod labels)."""
    overlay = f"overlays/{router}"
    assert cluster_rules(overlay) == cluster_rules("base") + ADDED_BY_ROUTER[router]
    assert without(rendered(overlay), "ClusterRole", "Deployment") == without(
        rendered("base"), "ClusterRole", "Deployment"
    )


def test_every_component_is_a_kustomize_component() -> None:
    """Each directory of manifests/components/ is a `kind: Component`, so that a kustomization
    may list several; all but the namespaced one combine over the base as they are."""
    found = {}
    for path in (MANIFESTS / "components").glob("*/kustomization.yaml"):
        found[path.parent.name] = yaml.safe_load(path.read_text())["kind"]
    assert found == dict.fromkeys([*COMPONENTS, "namespaced"], "Component")


@pytest.mark.parametrize(
    "component", ["istio", "gateway-api", "smi", "dry-run", "shards", "cache-placement"]
)
def test_an_overlay_is_the_base_with_its_component(component: str) -> None:
    """manifests/overlays/<name> renders exactly what the base with the component of that name
    renders, so the overlays and a kustomization of one's own that lists components agree."""
    assert kustomize(f"overlays/{component}") == kustomize(WITH + component)


def test_the_cache_placement_overlay_turns_it_on_and_grants_only_the_node_patch() -> None:
    """Cache-aware placement sets its setting and adds `patch` on nodes to the nodes' role; the
    rest of the base is as it was."""
    base, cached = rendered("base"), rendered("overlays/cache-placement")
    (container,) = one(cached, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert env_of(container)["AUTOSCALER_CACHE__ENABLED"]["value"] == "true"
    nodes = f"{NAME}-nodes"
    added = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]}
    assert one(cached, "ClusterRole", nodes)["rules"] == [
        *one(base, "ClusterRole", nodes)["rules"],
        added,
    ]
    changed = ("Deployment", "ClusterRole")
    assert without(cached, *changed) == without(base, *changed)
    assert one(cached, "ClusterRole") == one(base, "ClusterRole")


def test_the_shards_overlay_grants_exactly_the_leases_of_its_buckets() -> None:
    """The shards overlay runs three replicas with six buckets, and its Lease Role lets them
    read and renew exactly the six Leases the controller names for that count; the base keeps
    the single Lease."""
    objects = rendered("overlays/shards")
    deployment = one(objects, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = env_of(container)
    count = int(env["AUTOSCALER_KUBERNETES__LEASE_BUCKETS"]["value"])
    lease = env["AUTOSCALER_KUBERNETES__LEASE_NAME"]["value"]
    role = one(objects, "Role", "inference-autoscaler-leader")
    named = [rule for rule in role["rules"] if "resourceNames" in rule]
    assert deployment["spec"]["replicas"] == 3
    assert [rule["resourceNames"] for rule in named] == [list(shards.bucket_names(lease, count))]
    assert named[0]["verbs"] == ["get", "update"]
    base_role = one(rendered("base"), "Role", "inference-autoscaler-leader")
    assert [r["resourceNames"] for r in base_role["rules"] if "resourceNames" in r] == [
        list(shards.bucket_names(lease, 1))
    ]


def test_two_routers_in_one_install_are_granted_both() -> None:
    """Istio and Gateway API combined: the ClusterRole carries both routers' rules after the
    base's, and the Deployment is the Istio overlay's (out of the mesh)."""
    combined = WITH + "istio,gateway-api"
    assert cluster_rules(combined) == (
        cluster_rules("base") + ADDED_BY_ROUTER["istio"] + ADDED_BY_ROUTER["gateway-api"]
    )
    assert one(rendered(combined), "Deployment") == one(rendered("overlays/istio"), "Deployment")
    assert without(rendered(combined), "ClusterRole") == without(
        rendered("overlays/istio"), "ClusterRole"
    )


def test_dry_run_listed_after_a_router_grants_reads_only() -> None:
    """The dry-run component listed last replaces the rules, a router's writes included, by
    the dry-run overlay's."""
    assert cluster_rules(WITH + "smi,dry-run") == cluster_rules("overlays/dry-run")


def test_the_dashboards_component_ships_each_dashboard_to_grafanas_sidecar() -> None:
    """One ConfigMap per file of dashboards/, labelled `grafana_dashboard: "1"`, under a fixed
    name in the controller's namespace, holding the file as it is; nothing else changes."""
    objects = rendered(WITH + "grafana-dashboards")
    maps = by_kind(objects, "ConfigMap")
    files = sorted((MANIFESTS.parent / "dashboards").glob("*.json"))
    assert [m["metadata"]["name"] for m in maps] == [f"{NAME}-dashboard-{f.stem}" for f in files]
    for config_map, path in zip(maps, files, strict=True):
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert config_map["metadata"]["namespace"] == NAMESPACE
        assert config_map["data"] == {path.name: path.read_text()}
    assert without(objects, "ConfigMap") == list(rendered("base"))


def test_the_istio_overlay_keeps_the_controller_out_of_the_mesh() -> None:
    """The controller's pods opt out of sidecar injection (its restricted namespace refuses the
    sidecar's init container); nothing else of the Deployment changes."""
    base = one(rendered("base"), "Deployment")
    istio = one(rendered("overlays/istio"), "Deployment")
    labels = istio["spec"]["template"]["metadata"]["labels"]
    assert labels.pop("sidecar.istio.io/inject") == "false"
    assert istio == base


# -- the namespaced component ----------------------------------------------------------------------


def role_rules(objects: tuple[Obj, ...], kind: str, name: str) -> list[Obj]:
    rules = one(objects, kind, name)["rules"]
    assert isinstance(rules, list)
    return rules


@pytest.mark.parametrize(
    ("kustomization", "on"),
    [
        (NAMESPACED, "base"),
        *((NAMESPACED_ON + on, on) for on in ("overlays/dry-run", *ROUTER_OVERLAYS)),
        (NAMESPACED_WITH + "istio", "overlays/istio"),
    ],
)
def test_a_namespaced_install_writes_only_in_the_namespaces_it_lists(
    kustomization: str, on: str
) -> None:
    """With the component, the controller's rules (a router's included) are bound in each listed
    namespace only; cluster-wide it may only list and watch nodes, and its Lease stays in its
    own namespace."""
    objects, plain = rendered(kustomization), rendered(on)
    cluster_wide = [
        rule
        for binding in by_kind(objects, "ClusterRoleBinding")
        for rule in role_rules(objects, "ClusterRole", binding["roleRef"]["name"])
    ]
    assert cluster_wide == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]}]
    bindings = managed_namespace_bindings(objects)
    assert [b["metadata"]["namespace"] for b in bindings] == MANAGED_NAMESPACES
    for binding in bindings:
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}
        ]
    assert role_rules(objects, "ClusterRole", NAME) == role_rules(plain, "ClusterRole", NAME)
    assert by_kind(objects, "Role") == by_kind(plain, "Role")
    # Nothing else of the install changes but the namespaces setting.
    deployment = one(objects, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    container["env"] = [
        e for e in container["env"] if e["name"] != "AUTOSCALER_KUBERNETES__NAMESPACES"
    ]
    assert deployment == one(plain, "Deployment")
    changed = ("ClusterRoleBinding", "RoleBinding", "Deployment")
    assert without(objects, *changed) == without(plain, *changed)


def test_the_component_without_a_namespace_list_stops_the_controller_at_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An overlay that uses the component but does not set the namespaces leaves a placeholder
    the controller's settings refuse, naming it."""

    def forget_the_list(text: str) -> str:
        return text[: text.index("patches:")]

    objects = tuple(d for d in yaml.safe_load_all(namespaced_on("base", edit=forget_the_list)) if d)
    set_environment(objects, monkeypatch)
    with pytest.raises(pydantic.ValidationError, match="UNSET-list-the-namespaces"):
        settings.Settings()


# -- the examples ---------------------------------------------------------------------------------


def test_there_is_an_example_per_traffic_router() -> None:
    """Besides the plain vLLM example, one example per router that ramps traffic."""
    routers = {r.value for r in ann.TrafficRouter if r is not ann.TrafficRouter.NONE}
    found = [
        router_of(o)
        for path in ramped_examples()
        for o in example_objects(path)
        if o["kind"] == "Deployment"
    ]
    assert sorted(found) == sorted(routers)
    assert len(examples()) == len(ramped_examples()) + 1


@pytest.mark.parametrize("path", examples(), ids=lambda p: p.name)
def test_an_example_passes_its_schemas_and_autoscaler_validate(path: Path) -> None:
    """Each example is valid Kubernetes and `autoscaler validate` finds no problem in it."""
    objects = example_objects(path)
    rejected = {f"{o['kind']}/{o['metadata']['name']}": list(problems(o)) for o in objects}
    assert {name: found for name, found in rejected.items() if found} == {}
    assert validate.validate_text(path.read_text(), source=path.name) == []


@pytest.mark.parametrize("path", ramped_examples(), ids=lambda p: p.name)
def test_a_ramped_example_gates_warm_up_and_starts_pods_warming(path: Path) -> None:
    """With a traffic router: the readiness gate in the pod template, the warming label on its
    pods but in no selector (the Deployment's or a Service's), and a Service over the pods."""
    objects = example_objects(path)
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    template = deployment["spec"]["template"]
    assert {"conditionType": WARM_GATE} in template["spec"]["readinessGates"]
    assert template["metadata"]["labels"][WARMING_LABEL] == "true"
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert not [k for k in selector if k.startswith(ann.PREFIX)]
    services = [o for o in objects if o["kind"] == "Service"]
    assert services
    for service in services:
        assert not [k for k in service["spec"]["selector"] if k.startswith(ann.PREFIX)]
        assert selects(service["spec"]["selector"], template["metadata"]["labels"])


@pytest.mark.parametrize("path", examples(), ids=lambda p: p.name)
def test_an_example_creates_its_namespace_and_has_its_pods_scraped(path: Path) -> None:
    """Each example creates its namespace before anything in it, and a PodMonitor scrapes its
    Deployment's pods on a named port of the model server at the controller's scrape interval."""
    objects = example_objects(path)
    assert objects[0]["kind"] == "Namespace"
    namespace = objects[0]["metadata"]["name"]
    assert {o["metadata"].get("namespace") for o in objects[1:]} == {namespace}
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (monitor,) = [o for o in objects if o["kind"] == "PodMonitor"]
    template = deployment["spec"]["template"]
    assert selects(monitor["spec"]["selector"]["matchLabels"], template["metadata"]["labels"])
    ports = {p["name"] for c in template["spec"]["containers"] for p in c.get("ports", ())}
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in ports
    assert endpoint["path"] == "/metrics"
    base = one(rendered("base"), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    interval_s = env_of(base)["AUTOSCALER_PROMETHEUS__SCRAPE_INTERVAL_S"]["value"]
    assert endpoint["interval"] == f"{interval_s}s"
