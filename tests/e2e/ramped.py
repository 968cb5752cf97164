"""The ramp's e2e harness: the traffic routers as the test reads them, the warm-up endpoint,
and a Deployment set up for the ramp (`Ramped`), stepped one controller second at a time.

The real controller (`app.wire`) against the API emulator with the fake ReplicaSet controller and
kubelet, a real Prometheus scraping the test exporter, and a real warm-up endpoint on loopback:
every pod's `status.podIP` is 127.0.0.1 and its first container port is the endpoint's. The mesh
resources are served by the emulator as installing Istio, the Gateway API or SMI would; for the
Gateway API the test plays the gateway controller and accepts each generation of the HTTPRoute.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import pytest
from aiohttp import web
from kube.kubelet import POD_IP, FakeCluster
from prom import server
from prom.fixtures import Stack

from autoscaler.contract.annotations import RAMP_KEY

from .support import (
    DEPLOYMENTS,
    PODS,
    Controllers,
    Running,
    Service,
    SteppedClock,
    deployment,
    ensure_namespace,
    managed,
    wait_for,
)

SERVICES = "v1/services"
DESTINATION_RULES = "networking.istio.io/v1/destinationrules"
MOVED_PORT = 8080
WARMING = "autoscaler.dsec.io/warming"
STABLE = "autoscaler.dsec.io/stable"
WARM = "autoscaler.dsec.io/warm"
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
STEP_S = 5
"""The ramp's step interval in these tests (`traffic-step-interval`)."""
LATENCY_S = 0.2
"""Every healthy pod's request latency."""


@dataclasses.dataclass(frozen=True)
class Router:
    """One `traffic-router` value, and where the test reads the weights it writes."""

    name: str
    route: str | None
    """The resource of the object that carries the weights; None for `none`."""
    crds: tuple[tuple[str, str], ...] = ()
    """(resource, kind) the emulator serves, as installing the mesh does."""
    warming_of: Callable[[dict[str, Any]], dict[str, int]] = lambda _: {}
    """Weight by set (`stable`, `warming`) in a stored route object."""


def _istio_split(route: dict[str, Any]) -> dict[str, int]:
    return {d["destination"]["subset"]: d["weight"] for d in route["spec"]["http"][0]["route"]}


def _set_name(name: str) -> str:
    return name.rsplit("-", 1)[-1]


def _gateway_split(route: dict[str, Any]) -> dict[str, int]:
    return {_set_name(b["name"]): b["weight"] for b in route["spec"]["rules"][0]["backendRefs"]}


def _smi_split(split: dict[str, Any]) -> dict[str, int]:
    return {_set_name(b["service"]): b["weight"] for b in split["spec"]["backends"]}


ISTIO = Router(
    "istio",
    "networking.istio.io/v1/virtualservices",
    (
        ("networking.istio.io/v1/destinationrules", "DestinationRule"),
        ("networking.istio.io/v1/virtualservices", "VirtualService"),
    ),
    _istio_split,
)
GATEWAY_API = Router(
    "gateway-api",
    "gateway.networking.k8s.io/v1/httproutes",
    (("gateway.networking.k8s.io/v1/httproutes", "HTTPRoute"),),
    _gateway_split,
)
SMI = Router(
    "smi",
    "split.smi-spec.io/v1alpha2/trafficsplits",
    (("split.smi-spec.io/v1alpha2/trafficsplits", "TrafficSplit"),),
    _smi_split,
)
NONE = Router("none", None)


class WarmupEndpoint:
    """The model servers' warm-up endpoint: every pod's address is this one server's."""

    def __init__(self) -> None:
        self.status = 200
        self.answered = 0
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/warm", self._warm)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _warm(self, _: web.Request) -> web.Response:
        self.answered += 1
        return web.Response(status=self.status, text="warm\n")


@pytest.fixture
async def endpoint() -> AsyncIterator[WarmupEndpoint]:
    served = WarmupEndpoint()
    await served.start()
    try:
        yield served
    finally:
        await served.stop()


class Ramped(Service):
    """A Deployment set up for the ramp, the Service its clients call, and the cluster around it
    stepped one controller second at a time."""

    def __init__(
        self,
        cluster: Controllers,
        kubelet: FakeCluster,
        stack: Stack,
        namespace: str,
        router: Router,
    ) -> None:
        super().__init__(cluster.kube, kubelet, stack.upper, namespace, "chat")
        self.cluster = cluster
        self.clock: SteppedClock = cluster.clock
        self.prometheus = stack.prometheus
        self.router = router
        self.seen: list[dict[str, int]] = []
        """The route's weights after each second the test advanced (deduplicated)."""

    @classmethod
    async def make(
        cls,
        cluster: Controllers,
        kubelet: FakeCluster,
        stack: Stack,
        namespace: str,
        router: Router,
        endpoint: WarmupEndpoint,
        *,
        replicas: int = 2,
        **annotations: str,
    ) -> Ramped:
        kube = cluster.kube
        for resource, kind in router.crds:
            kube.store.register(resource, kind=kind)
        ensure_namespace(kube, namespace)
        notes = managed(
            **{
                "traffic-router": router.name,
                "traffic-step-interval": f"{STEP_S}s",
                "warmup-path": "/warm",
                **annotations,
            }
        )
        body = deployment("chat", replicas=replicas, annotations=notes)
        template = body["spec"]["template"]
        template["metadata"]["labels"][WARMING] = "true"
        template["metadata"]["annotations"] = {POD_IP: "127.0.0.1"}
        template["spec"]["readinessGates"] = [{"conditionType": WARM}]
        template["spec"]["containers"][0]["ports"] = [
            {"name": "http", "containerPort": endpoint.port}
        ]
        kube.store.create(DEPLOYMENTS, body, namespace=namespace)
        owner = {
            "metadata": {"name": "chat"},
            "spec": {
                "selector": {"app": "chat"},
                "ports": [{"name": "http", "port": 80, "targetPort": "http"}],
            },
        }
        kube.store.create(SERVICES, owner, namespace=namespace)
        made = cls(cluster, kubelet, stack, namespace, router)
        await kubelet.settle()
        return made

    # -- reading the cluster ---------------------------------------------------------------------

    def pod(self, name: str) -> dict[str, Any] | None:
        for pod in self.kube.store.list_objects(PODS, self.namespace):
            if pod["metadata"]["name"] == name:
                return pod
        return None

    def labels(self, name: str) -> dict[str, str]:
        pod = self.pod(name)
        return {} if pod is None else dict(pod["metadata"].get("labels") or {})

    def stable(self) -> list[str]:
        """The pods in the stable set and out of the warming one: promoted."""
        return [
            p
            for p in self.pods()
            if self.labels(p).get(STABLE) == "true" and WARMING not in self.labels(p)
        ]

    def warm(self, name: str) -> bool | None:
        pod = self.pod(name)
        for condition in (pod or {}).get("status", {}).get("conditions") or []:
            if condition["type"] == WARM:
                return bool(condition["status"] == "True")
        return None

    def route(self) -> dict[str, Any] | None:
        if self.router.route is None:
            return None
        for found in self.kube.store.list_objects(self.router.route, self.namespace):
            if found["metadata"]["name"] == "chat-autoscaler":
                return found
        return None

    def weights(self) -> dict[str, int] | None:
        route = self.route()
        return None if route is None else self.router.warming_of(route)

    def ramp(self) -> dict[str, Any] | None:
        """The ramp state the controller persisted on the Deployment."""
        text = self.object["metadata"].get("annotations", {}).get(RAMP_KEY)
        return None if text is None else dict(json.loads(text))

    def warming_weights(self) -> list[int]:
        return [w["warming"] for w in self.seen]

    # -- someone else's changes ------------------------------------------------------------------

    def drift(self) -> None:
        """Change what the router keeps: for Istio, a person drops the DestinationRule's
        `warming` subset; for the others, the owner moves its Service to another port."""
        merge = "application/merge-patch+json"
        if self.router is ISTIO:
            rule = self.kube.store.get(DESTINATION_RULES, self.namespace, "chat-autoscaler")
            subsets = [s for s in rule["spec"]["subsets"] if s["name"] != "warming"]
            self.kube.store.patch(
                DESTINATION_RULES,
                self.namespace,
                "chat-autoscaler",
                {"spec": {"subsets": subsets}},
                content_type=merge,
            )
        elif self.router.route is not None:
            ports = [{"name": "http", "port": MOVED_PORT, "targetPort": "http"}]
            self.kube.store.patch(
                SERVICES, self.namespace, "chat", {"spec": {"ports": ports}}, content_type=merge
            )

    def assert_mended(self) -> None:
        """What `drift` changed is as the router needs it again."""
        if self.router is ISTIO:
            rule = self.kube.store.get(DESTINATION_RULES, self.namespace, "chat-autoscaler")
            assert [s["name"] for s in rule["spec"]["subsets"]] == ["stable", "warming"]
        elif self.router.route is not None:
            for which in ("stable", "warming"):
                found = self.kube.store.get(SERVICES, self.namespace, f"chat-{which}")
                assert [p["port"] for p in found["spec"]["ports"]] == [MOVED_PORT]
                assert found["spec"]["selector"] == {
                    "app": "chat",
                    f"autoscaler.dsec.io/{which}": "true",
                }

    # -- moving the cluster ----------------------------------------------------------------------

    async def tick(self, seconds: int = 1, *, settle: bool = True) -> None:
        """Advance the controllers a second at a time; after each, the fake cluster catches up
        (unless told not to) and, for the Gateway API, the gateway controller accepts the
        route."""
        for _ in range(seconds):
            await self.clock.advance(1.0)
            if settle:
                await self.kubelet.settle()
                await self.wait_for_cache()
            if self.router is GATEWAY_API:
                self._accept_route()
            weights = self.weights()
            if weights is not None and (not self.seen or self.seen[-1] != weights):
                assert sum(weights.values()) == 100, weights
                self.seen.append(weights)

    async def wait_for_cache(self) -> None:
        """Until the leading controller's pod cache holds this namespace's pods as they are
        stored, so that its next tick sees every pod the fake cluster started or removed
        together (pods seen a tick apart would warm up, and ramp, apart)."""
        leading = [r.controller for r in self.cluster.running if not r.task.done()]
        if not leading:
            return
        cache = leading[-1].cluster.caches.pods

        def versions(pods: Iterable[dict[str, Any]]) -> dict[str, str]:
            return {
                p["metadata"]["name"]: p["metadata"]["resourceVersion"]
                for p in pods
                if p["metadata"].get("namespace") == self.namespace
            }

        await wait_for(
            lambda: (
                versions(cache.items())
                == versions(self.kube.store.list_objects(PODS, self.namespace))
            ),
            what="the controller's pod cache",
        )

    async def run_until(
        self, condition: Callable[[], bool], *, limit_s: int, what: str, settle: bool = True
    ) -> float:
        """Tick until `condition()`; the controller seconds it took."""
        started = self.clock.now()
        while not condition():
            if self.clock.now() - started >= limit_s:
                raise AssertionError(f"{what}: not after {limit_s} s of controller time")
            await self.tick(settle=settle)
        return self.clock.now() - started

    def _accept_route(self) -> None:
        """The gateway controller: the HTTPRoute's current generation is Accepted."""
        route = self.route()
        if route is None:
            return
        generation = route["metadata"]["generation"]
        parents = (route.get("status") or {}).get("parents") or []
        if parents and parents[0]["conditions"][0]["observedGeneration"] == generation:
            return
        accepted = {
            "parentRef": {"group": "", "kind": "Service", "name": "chat", "sectionName": "http"},
            "controllerName": "example.net/gateway-controller",
            "conditions": [
                {
                    "type": "Accepted",
                    "status": "True",
                    "reason": "Accepted",
                    "observedGeneration": generation,
                    "lastTransitionTime": "2025-06-15T00:00:00Z",
                    "message": "",
                }
            ],
        }
        self.kube.store.patch(
            self.router.route or "",
            self.namespace,
            "chat-autoscaler",
            {"status": {"parents": [accepted]}},
            content_type="application/merge-patch+json",
            subresource="status",
        )

    # -- the pods' traffic -----------------------------------------------------------------------

    def serve_pods(
        self,
        pods: Iterable[str],
        rate_per_s: float,
        *,
        latency_s: float = LATENCY_S,
        error_ratio: float = 0.0,
        running: float | None = None,
    ) -> None:
        """These pods finish `rate_per_s` requests per second each from now, `error_ratio` of
        them aborted, each taking `latency_s`; `running` sets their running gauge."""
        for pod in pods:
            self.metrics.set_traffic(
                self.namespace,
                pod,
                rate_per_s=rate_per_s,
                latency_s=latency_s,
                error_ratio=error_ratio,
            )
            if running is not None:
                self.metrics.set_vllm(self.namespace, pod, running=running)

    async def wait_for_rate(self, pods: Iterable[str], total_rps: float) -> None:
        """Poll Prometheus until these pods' request rate sums to `total_rps` (within 10 %)."""
        promql = (
            f'sum(rate(vllm:request_success_total{{namespace="{self.namespace}",'
            f'pod=~"{"|".join(pods)}"}}[4s]))'
        )

        def close(result: list[dict[str, Any]]) -> bool:
            return bool(result) and math.isclose(
                float(result[0]["value"][1]), total_rps, rel_tol=0.1
            )

        await self.prometheus.wait_for_series(promql, close, timeout_s=server.WAIT_TIMEOUT_S)

    async def wait_for_running(self, pods: Iterable[str], value: float) -> None:
        """Poll Prometheus until each pod's running gauge reads `value`."""
        names = list(pods)
        promql = (
            f'vllm:num_requests_running{{namespace="{self.namespace}",pod=~"{"|".join(names)}"}}'
        )

        def read(result: list[dict[str, Any]]) -> bool:
            return len(result) == len(names) and all(float(r["value"][1]) == value for r in result)

        await self.prometheus.wait_for_series(promql, read, timeout_s=server.WAIT_TIMEOUT_S)

    async def promote_first_pods(self) -> list[str]:
        """Serve load on the first pods and let the controller promote them: with no serving pod
        to compare with, the first warm pods go to the stable set without steps."""
        first = self.pods()
        self.serve_pods(first, rate_per_s=17.5)
        await self.cluster.start()
        await self.run_until(
            lambda: self.stable() == first, limit_s=30, what="the first pods promoted"
        )
        # Before the next tick, when they count as serving, their load must be read in full.
        await self.wait_for_rate(first, 35.0)
        return first


def dedupe(values: Iterable[int]) -> list[int]:
    out: list[int] = []
    for value in values:
        if not out or out[-1] != value:
            out.append(value)
    return out


async def restart(cluster: Controllers, running: Running, identity: str) -> Running:
    """Stop the controller as SIGTERM does and start a new one in its place."""
    await running.stop()
    return await cluster.start(identity)
