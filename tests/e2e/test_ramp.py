"""The warm-up gate and the traffic ramp end to end (DESIGN §3.4).

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

from autoscaler.annotations import RAMP_KEY

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


async def test_the_controllers_time_warm_up_probes_on_the_stepped_clock(
    cluster: Controllers, endpoint: WarmupEndpoint
) -> None:
    """A probe's latency is controller time, none within a tick, so new pods probed in one tick
    are judged alike against the serving pods however long the machine took to answer."""
    running = await cluster.start()

    result = await running.controller.prober.probe("127.0.0.1", endpoint.port, "/warm", 3, 5.0)

    assert (result.ok, result.failed, result.latencies_s) == (3, 0, (0.0, 0.0, 0.0))


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


# -- the walk --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("router", "restarting"),
    [(ISTIO, True), (GATEWAY_API, True), (SMI, True), (ISTIO, False)],
    ids=[
        "istio-restarted-at-each-step",
        "gateway-api-restarted-at-each-step",
        "smi-restarted-at-each-step",
        "istio",
    ],
)
async def test_a_scale_up_walks_the_steps_and_promotes(
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    unique: str,
    endpoint: WarmupEndpoint,
    router: Router,
    restarting: bool,
) -> None:
    """Two new pods next to two serving ones get 10, 30, 50 and 100 % of their fair share (5, 15,
    25 and 50 % of the traffic), pass each health gate and are promoted; a controller stopped
    and started at each step resumes where the ramp was."""
    kubelet.add_node("gpu-1", gpus=8)
    chat = await Ramped.make(cluster, kubelet, stack, f"{unique}-r", router, endpoint)
    first = await chat.promote_first_pods()
    assert chat.warming_weights() == [0]
    running = cluster.running[-1]
    # What the next ramp needs of the route's companions changes meanwhile; its start mends it.
    chat.drift()

    # 35 req/s on 2 serving replicas, target 10 each: 4 wanted.
    await chat.run_until(lambda: chat.replicas == 4, limit_s=5, what="the scale-up")
    await kubelet.settle()
    new = sorted(set(chat.pods()) - set(first))
    assert len(new) == 2
    assert all(chat.labels(p).get(WARMING) == "true" for p in new)
    chat.serve_pods(new, rate_per_s=10.0)
    await chat.wait_for_rate(new, 20.0)

    restarts = 0
    walked: list[int] = []
    while chat.stable() != sorted(first + new):
        await chat.tick()
        weight = chat.warming_weights()[-1]
        if restarting and weight not in walked and weight:
            walked.append(weight)
            before = chat.weights()
            restarts += 1
            running = await restart(cluster, running, f"ctl-{restarts}")
            await chat.tick()
            assert chat.weights() == before, "a restarted controller moved the weights"
        if len(chat.seen) > 12:
            raise AssertionError(f"the ramp does not end: {chat.seen}")

    assert dedupe(chat.warming_weights()) == [0, 5, 15, 25, 50, 0]
    assert chat.weights() == {"stable": 100, "warming": 0}
    chat.assert_mended()
    if restarting:
        assert restarts == 4
    assert chat.ramp() == {"v": 1, "phase": "idle"}
    assert all(chat.warm(p) for p in chat.pods())
    await running.controller.cluster.events.wait_idle()
    reasons = [e["reason"] for e in chat.events() if e["reason"].startswith("Ramp")]
    assert reasons == [
        "RampPromoted",  # the first pods: no serving pod to compare with,
        "RampPromoted",  # and then serving
        "RampStarted",
        "RampStep",
        "RampStep",
        "RampStep",
        "RampStep",
        "RampPromoted",
    ]
    metrics = running.controller.telemetry.exposition().decode()
    labels = f'namespace="{chat.namespace}",service="chat"'
    assert f"autoscaler_ramp_warming_weight_percent{{{labels}}} 0.0" in metrics
    if not restarting:  # told by the controller that scaled
        assert f'autoscaler_tier_replicas{{{labels},tier="whole"}} 4.0' in metrics


# -- a gate that fails -----------------------------------------------------------------------------


@pytest.mark.parametrize("router", [ISTIO, GATEWAY_API, SMI], ids=["istio", "gateway-api", "smi"])
async def test_new_pods_that_fail_the_health_gate_are_rolled_back_and_replaced(
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    unique: str,
    endpoint: WarmupEndpoint,
    router: Router,
) -> None:
    """New pods aborting half their requests, then new pods too slow, each lose their traffic
    (weight 0 first) and are deleted, and their replacements ramp in turn. A serving pod someone
    took out of the stable set is put back before the ramp starts."""
    kubelet.add_node("gpu-1", gpus=8)
    chat = await Ramped.make(cluster, kubelet, stack, f"{unique}-f", router, endpoint)
    first = await chat.promote_first_pods()
    running = cluster.running[-1]
    # As `kubectl label pod ... autoscaler.dsec.io/stable-` would: a serving pod out of the set.
    chat.kube.store.patch(
        PODS,
        chat.namespace,
        first[0],
        {"metadata": {"labels": {STABLE: None}}},
        content_type="application/merge-patch+json",
    )

    await chat.run_until(lambda: chat.replicas == 4, limit_s=5, what="the scale-up")
    await kubelet.settle()
    # (what fails, the new pods' error ratio and latency)
    failing = [("error rate", 0.5, LATENCY_S), ("P95", 0.0, 2.0)]
    seen_pods: set[str] = set(first)
    for what, error_ratio, latency_s in failing:
        cohort = sorted(set(chat.pods()) - seen_pods)
        assert len(cohort) == 2, cohort
        seen_pods |= set(cohort)
        chat.serve_pods(cohort, rate_per_s=10.0, error_ratio=error_ratio, latency_s=latency_s)
        await chat.wait_for_rate(cohort, 20.0)

        order: list[str] = []

        def replaced(cohort: list[str] = cohort, order: list[str] = order) -> bool:
            """Notes what each second showed: ramped, unweighted with the pods alive, gone."""
            alive = set(cohort) & set(chat.pods())
            warming = (chat.weights() or {}).get("warming")
            seen = "gone" if not alive else ("ramped" if warming else "unweighted")
            if not order or order[-1] != seen:
                order.append(seen)
            return not alive and len(chat.pods()) == 4

        await chat.run_until(replaced, limit_s=40, what=f"the rollback on {what}")
        assert order == ["unweighted", "ramped", "unweighted", "gone"]
        for pod in cohort:
            chat.metrics.drop(chat.namespace, pod)
        rolled_back = chat.events("RampRolledBack")[-1]
        assert rolled_back["type"] == "Warning"
        assert what in rolled_back["message"]
        assert first[0] in chat.stable()

    # Two failures in a row do not hold the ramp: the replacements, once warm, ramp in turn.
    fresh = sorted(set(chat.pods()) - seen_pods)
    await chat.run_until(
        lambda: (chat.ramp() or {}).get("cohort") == fresh and chat.warming_weights()[-1] == 5,
        limit_s=20,
        what="the replacements ramping",
    )

    assert dedupe(chat.warming_weights()) == [0, 5, 0, 5, 0, 5]
    assert len(chat.events("RampRolledBack")) == 2
    assert (chat.ramp() or {})["failures"] == 2
    metrics = running.controller.telemetry.exposition().decode()
    labels = f'namespace="{chat.namespace}",service="chat"'
    assert f"autoscaler_ramp_rollbacks_total{{{labels}}} 2.0" in metrics
    assert f"autoscaler_ramp_held{{{labels}}} 0.0" in metrics


async def test_a_pod_that_never_warms_is_replaced_across_a_restart(
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    unique: str,
    endpoint: WarmupEndpoint,
) -> None:
    """With the gate alone (`none`), new pods whose warm-up endpoint fails stay out of the
    Service (not Ready) until their deadline, which a restarted controller keeps; they are then
    deleted and their replacements, warm, join the stable set."""
    kubelet.add_node("gpu-1", gpus=8)
    chat = await Ramped.make(
        cluster, kubelet, stack, f"{unique}-n", NONE, endpoint, **{"warmup-deadline": "10s"}
    )
    first = await chat.promote_first_pods()
    running = cluster.running[-1]
    endpoint.status = 503

    await chat.run_until(lambda: chat.replicas == 4, limit_s=5, what="the scale-up")
    await kubelet.settle()
    cold = sorted(set(chat.pods()) - set(first))
    started_s = chat.clock.now()
    await chat.tick(5)
    assert [chat.warm(p) for p in cold] == [None, None]
    assert all(chat.labels(p).get(WARMING) == "true" for p in cold)
    deadlines = (chat.ramp() or {}).get("deadlines", {})
    assert sorted(deadlines) == cold
    deadline_s = max(deadlines.values())
    assert deadline_s <= started_s + 10 + 2
    running = await restart(cluster, running, "ctl-b")

    await chat.run_until(lambda: not set(cold) & set(chat.pods()), limit_s=20, what="the reclaim")
    assert 0 <= chat.clock.now() - deadline_s <= 2
    await running.controller.cluster.events.wait_idle()
    timed_out = chat.events("WarmupTimedOut")
    assert len(timed_out) == 2
    assert all(e["type"] == "Warning" for e in timed_out)

    endpoint.status = 200
    fresh = sorted(set(chat.pods()) - set(first) - set(cold))
    assert len(fresh) == 2
    await chat.run_until(
        lambda: chat.stable() == sorted(first + fresh), limit_s=20, what="the fresh pods warm"
    )
    assert all(chat.warm(p) for p in fresh)
    assert chat.route() is None
    assert chat.ramp() == {"v": 1, "phase": "idle"}


# -- scale-down ------------------------------------------------------------------------------------


@pytest.mark.parametrize("router", [NONE, ISTIO], ids=["none", "istio"])
async def test_a_scale_down_drains_its_victim_before_the_replicas_drop(
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    unique: str,
    endpoint: WarmupEndpoint,
    router: Router,
) -> None:
    """The least loaded serving pod leaves the routed set first; the replicas drop once its
    requests have finished (or, across a restart, once the grace period is over), and the
    ReplicaSet removes that pod, marked with the lowest deletion cost. The route's weights stay
    as they were, and `SuccessfulRescale` announces each new size once it is set."""
    kubelet.add_node("gpu-1", gpus=8)
    chat = await Ramped.make(
        cluster,
        kubelet,
        stack,
        f"{unique}-d",
        router,
        endpoint,
        replicas=4,
        **{"scale-down-cooldown": "0s"},
    )
    pods = chat.pods()
    # 6 req/s on 4 replicas, target 10 each: the floor of 2 is wanted, one pod at a time.
    chat.serve_pods(pods, rate_per_s=1.5, running=3.0)
    chat.metrics.set_vllm(chat.namespace, pods[1], running=1.0)
    chat.metrics.set_vllm(chat.namespace, pods[2], running=2.0)
    await cluster.start()
    await chat.run_until(lambda: chat.stable() == pods, limit_s=30, what="the first pods promoted")
    await chat.wait_for_rate(pods, 6.0)
    await chat.wait_for_running(pods[1:2], 1.0)
    weights = chat.weights()

    victim = pods[1]
    await chat.run_until(
        lambda: STABLE not in chat.labels(victim), limit_s=10, what="the drain starts"
    )
    assert chat.warm(victim) is False  # out of the Service's endpoints too
    assert chat.replicas == 4
    await chat.tick(10)
    assert chat.replicas == 4  # a request is still in flight
    assert chat.weights() == weights
    await cluster.running[-1].controller.cluster.events.wait_idle()
    assert not chat.events("SuccessfulRescale")

    chat.metrics.set_vllm(chat.namespace, victim, running=0.0)
    await chat.wait_for_running([victim], 0.0)
    await chat.run_until(lambda: chat.replicas == 3, limit_s=5, what="the drain", settle=False)
    marked = chat.pod(victim)
    assert marked is not None
    assert marked["metadata"]["annotations"][DELETION_COST] == str(-(2**31))
    await kubelet.settle()
    assert victim not in chat.pods()
    assert len(chat.pods()) == 3
    assert chat.weights() == weights
    # The decision was published when the drain started; the new size is announced once set.
    await cluster.running[-1].controller.cluster.events.wait_idle()
    (rescaled,) = chat.events("SuccessfulRescale")
    assert rescaled["message"].startswith("New size: 3; reason: below-target: ")
    if router is not NONE:
        return  # the rest is the router's no more than this was

    # The next victim never goes idle: the grace period ends its drain, a restart included.
    victim = pods[2]
    await chat.run_until(
        lambda: STABLE not in chat.labels(victim), limit_s=10, what="the second drain"
    )
    drain = (chat.ramp() or {})["drain"]
    assert drain["victims"] == [[victim, True, True]]
    await chat.tick(20)
    await restart(cluster, cluster.running[-1], "ctl-b")
    took_s = await chat.run_until(lambda: chat.replicas == 2, limit_s=60, what="the grace period")
    assert chat.clock.now() - drain["started_s"] == pytest.approx(60, abs=3)
    assert took_s > 30
    assert victim not in chat.pods()
    await cluster.running[-1].controller.cluster.events.wait_idle()
    assert [e["reason"] for e in chat.events() if e["reason"].startswith("Drain")] == [
        "DrainStarted",
        "Drained",
        "DrainStarted",
        "Drained",
    ]
    sizes = [e["message"].split(";")[0] for e in chat.events("SuccessfulRescale")]
    assert sizes == ["New size: 3", "New size: 2"]
