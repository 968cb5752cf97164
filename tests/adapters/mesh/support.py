"""Builders for the mesh router tests: the owner's Deployment and Service, the target, and one
`Kit` per router that says where its route lives and how to read its weights."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from kube.emulator import Kube
from kubernetes_asyncio import client

from autoscaler import ports
from autoscaler.adapters.mesh import gateway, istio, smi
from autoscaler.core import model

NS = "default"
DEPLOYMENTS = "apps/v1/deployments"
SERVICES = "v1/services"
DESTINATION_RULES = "networking.istio.io/v1/destinationrules"
VIRTUAL_SERVICES = "networking.istio.io/v1/virtualservices"
HTTP_ROUTES = "gateway.networking.k8s.io/v1/httproutes"
TRAFFIC_SPLITS = "split.smi-spec.io/v1alpha2/trafficsplits"
MANAGED = {"app.kubernetes.io/managed-by": "inference-autoscaler"}


def install_crds(kube: Kube) -> None:
    """Serve the mesh resources, as installing Istio, the Gateway API and SMI would."""
    for ref, kind in (
        (DESTINATION_RULES, "DestinationRule"),
        (VIRTUAL_SERVICES, "VirtualService"),
        (HTTP_ROUTES, "HTTPRoute"),
        (TRAFFIC_SPLITS, "TrafficSplit"),
    ):
        kube.store.register(ref, kind=kind)


def deployment(name: str = "web", labels: dict[str, str] | None = None) -> dict[str, Any]:
    labels = labels or {"app": name, "model": "llama"}
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "server", "image": "vllm:1"}]},
            },
        },
    }


def service(
    name: str = "web", selector: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    """A Service with an HTTP port and a metrics port (override with `ports=`)."""
    body: dict[str, Any] = {
        "selector": {"app": "web"} if selector is None else selector,
        "ports": [
            {"name": "metrics", "port": 9090, "targetPort": 9090, "protocol": "TCP"},
            {"name": "http", "port": 80, "targetPort": 8000, "protocol": "TCP"},
        ],
    }
    body.update(spec)
    return {"metadata": {"name": name}, "spec": body}


def target(name: str = "web", labels: dict[str, str] | None = None) -> ports.RouteTarget:
    return ports.RouteTarget(
        service=model.ServiceId(f"{NS}/{name}"),
        namespace=NS,
        deployment=name,
        pod_labels=labels or {"app": name, "model": "llama"},
    )


@dataclasses.dataclass(frozen=True)
class Kit:
    """One router, and how a test reads what it wrote."""

    name: str
    make: Callable[..., ports.TrafficRouter]
    route: str
    """The resource of the object that carries the weights."""
    companions: tuple[tuple[str, str], ...]
    """The other objects it creates for `web`, as (resource, name)."""
    split_of: Callable[[dict[str, Any]], dict[str, int]]
    """Weight by stable/warming backend, read from the stored route."""
    root_of: Callable[[dict[str, Any]], str]
    """The owner's Service the route splits."""

    def router(self, api: client.ApiClient, **kwargs: Any) -> ports.TrafficRouter:
        return self.make(api, **kwargs)


def _istio_split(obj: dict[str, Any]) -> dict[str, int]:
    return {d["destination"]["subset"]: d["weight"] for d in obj["spec"]["http"][0]["route"]}


def _backend_split(obj: dict[str, Any]) -> dict[str, int]:
    names = {"web-stable": "stable", "web-warming": "warming"}
    return {
        names.get(b["name"], b["name"]): b["weight"] for b in obj["spec"]["rules"][0]["backendRefs"]
    }


def _smi_split(obj: dict[str, Any]) -> dict[str, int]:
    names = {"web-stable": "stable", "web-warming": "warming"}
    return {names.get(b["service"], b["service"]): b["weight"] for b in obj["spec"]["backends"]}


ISTIO = Kit(
    "istio",
    istio.IstioRouter,
    VIRTUAL_SERVICES,
    ((DESTINATION_RULES, "web-autoscaler"),),
    _istio_split,
    lambda obj: obj["spec"]["hosts"][0].split(".")[0],
)
GATEWAY = Kit(
    "gateway-api",
    gateway.GatewayRouter,
    HTTP_ROUTES,
    ((SERVICES, "web-stable"), (SERVICES, "web-warming")),
    _backend_split,
    lambda obj: obj["spec"]["parentRefs"][0]["name"],
)
SMI = Kit(
    "smi",
    smi.SmiRouter,
    TRAFFIC_SPLITS,
    ((SERVICES, "web-stable"), (SERVICES, "web-warming")),
    _smi_split,
    lambda obj: obj["spec"]["service"],
)
KITS = (ISTIO, GATEWAY, SMI)
