"""The e2e harness: a stepped clock, controllers run through `app`'s wiring, and the cluster side.

Time: the controllers' loop and Lease clocks are one `SteppedClock` that only the test moves;
`advance` returns once every task it woke is asleep on it again, so a test reads the cluster
after whole ticks. Before each step it also waits until the controllers' warm-up probes, which
run beside the ticks, are over, so that the tick at which a pod turns warm never depends on
scheduling. Prometheus and the Kubernetes API emulator are real servers on loopback:
waiting for them is polling with a bound, never a fixed sleep.

The test side touches the cluster only through the emulator's store, in-process, so the API
request log holds the controllers' own calls (the RBAC test reads it).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import json
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any

from kube.emulator import ApiCall, Kube
from kube.kubelet import FakeCluster
from prom import exporter, server

from autoscaler import app, settings
from autoscaler.contract.annotations import PREFIX, STATE_KEY, STATUS_KEY

WALL_S = 1_750_000_000.0
"""Where the stepped clock starts: Unix seconds, as the production loop clock."""
LEASE_NAMESPACE = "inference-autoscaler"
DEPLOYMENTS = "apps/v1/deployments"
PODS = "v1/pods"
EVENTS = "v1/events"
NAMESPACES = "v1/namespaces"
LEASES = "coordination.k8s.io/v1/leases"
SETTLE_TIMEOUT_S = 10.0
PARKED_CHECK_S = 0.01
"""How often a step looks again at woken tasks that may have parked on an Event."""
SCALE_UP_COOLDOWN_S = 60.0
"""The annotation contract's default scale-up cooldown, which the e2e services keep."""
SCALE_DOWN_COOLDOWN_S = 300.0
"""The default scale-down cooldown."""


class SteppedClock:
    """A clock that moves only when the test advances it; `advance` waits for what it woke."""

    def __init__(self, start_s: float = WALL_S) -> None:
        self._now = start_s
        self._sleepers: list[tuple[float, asyncio.Future[None], asyncio.Task[Any] | None]] = []
        self._changed = asyncio.Event()
        self.before_step: list[Callable[[], Awaitable[None]]] = []
        """Awaited before each step: work begun beside the ticks that the next one reads."""
        self.followed: list[Callable[[], asyncio.Task[Any] | None]] = []
        """Tasks each step waits for as for the ones it woke, whatever woke them: a ticker
        that an Event set (a Lease won) starts its term with requests, not with a sleep."""

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        deadline = self._now + max(0.0, seconds)
        if deadline <= self._now:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (deadline, future, asyncio.current_task())
        self._sleepers.append(entry)
        self._changed.set()
        try:
            await future
        finally:
            self._sleepers.remove(entry)
            self._changed.set()

    async def advance(self, seconds: float, *, step_s: float = 1.0) -> None:
        """Move time by `seconds` in steps, letting every woken task finish its work each step."""
        steps = max(1, round(seconds / step_s))
        for _ in range(steps):
            await self._move_to(self._now + seconds / steps)

    async def advance_to_next(self, limit_s: float) -> None:
        """Move to the next sleeper's deadline (at most `limit_s` ahead) and let what it woke
        finish: time then moves exactly as far as each sleep asked, not on a grid."""
        deadlines = [deadline for deadline, future, _ in self._sleepers if not future.done()]
        await self._move_to(min([*deadlines, self._now + limit_s]))

    async def _move_to(self, when_s: float) -> None:
        async with asyncio.timeout(SETTLE_TIMEOUT_S):
            for wait in self.before_step:
                await wait()
        self._now = max(self._now, when_s)
        woken: list[asyncio.Task[Any]] = []
        for deadline, future, task in list(self._sleepers):
            if deadline <= self._now and not future.done():
                future.set_result(None)
                if task is not None:
                    woken.append(task)
                    task.add_done_callback(lambda _: self._changed.set())
        await asyncio.sleep(0)
        for follow in self.followed:
            if (task := follow()) is not None and task not in woken:
                woken.append(task)  # `_settle` looks again within `PARKED_CHECK_S`
        await self._settle(woken)

    async def _settle(self, woken: list[asyncio.Task[Any]]) -> None:
        async with asyncio.timeout(SETTLE_TIMEOUT_S):
            while True:
                asleep = {task for _, future, task in self._sleepers if not future.done()}
                if all(task.done() or task in asleep or _parked(task) for task in woken):
                    return
                self._changed.clear()
                # Parking on an Event (a ticker whose replica lost the Lease) tells nobody.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(PARKED_CHECK_S):
                        await self._changed.wait()


def _parked(task: asyncio.Task[Any]) -> bool:
    """Whether the task waits for an `asyncio.Event`: it has nothing to finish until someone
    sets it (a follower's ticker waiting to lead)."""
    awaiting: Any = task.get_coro()
    while inspect.iscoroutine(getattr(awaiting, "cr_await", None)):
        awaiting = awaiting.cr_await
    return inspect.iscoroutine(awaiting) and awaiting.cr_code is asyncio.Event.wait.__code__


@dataclasses.dataclass
class Running:
    """A controller serving in a task of the test, and how to stop it."""

    controller: app.Controller
    stop_event: asyncio.Event
    task: asyncio.Task[None]
    on_stopped: Callable[[], None]

    async def stop(self) -> None:
        """Stop it as SIGTERM does; it must return cleanly (it releases the Lease on the way)."""
        if not self.task.done():
            self.stop_event.set()
            async with asyncio.timeout(10):
                await self.task
            self.on_stopped()
        if not self.task.cancelled():  # `kill` cancels it
            self.task.result()  # a controller that crashed fails the test here

    async def kill(self) -> None:
        """Stop it as a crash or SIGKILL does: no Lease release, no Event flush, nothing more
        written. Its clients close with the test; its Leases expire on their own."""
        if self.task.done():
            return
        if self.controller.leases is not None:
            self.controller.leases.release_on_cancel = False
        self.task.cancel()
        await asyncio.wait([self.task])
        self.on_stopped()


class Controllers:
    """Starts controllers on the emulator through `app.wire`; stops them at the end of a test."""

    def __init__(
        self,
        *,
        kube: Kube,
        clock: SteppedClock,
        prometheus_url: str,
        calls: CallLog,
        test_id: str,
        stack: contextlib.AsyncExitStack,
    ) -> None:
        self.kube = kube
        self.clock = clock
        self.prometheus_url = prometheus_url
        self.calls = calls
        self.test_id = test_id
        self._stack = stack
        self.running: list[Running] = []

    def config(
        self,
        *,
        identity: str,
        prometheus_url: str | None = None,
        warmup: Mapping[str, Any] | None = None,
        prometheus: Mapping[str, Any] | None = None,
        cache: Mapping[str, Any] | None = None,
        **kubernetes: Any,
    ) -> settings.Settings:
        """The settings of a controller under test: the emulator, a 1 s scrape interval;
        `prometheus` adds settings of that group (credentials, headers), `cache` those of
        cache-aware placement."""
        assert self.kube.kubeconfig is not None
        return settings.Settings(
            kubernetes={
                "kubeconfig": str(self.kube.kubeconfig),
                "identity": identity,
                "lease_namespace": LEASE_NAMESPACE,
                **kubernetes,
            },
            prometheus={
                "url": prometheus_url or self.prometheus_url,
                "scrape_interval_s": server.SCRAPE_INTERVAL_S,
                **(prometheus or {}),
            },
            http={"host": "127.0.0.1", "port": 0},
            warmup=dict(warmup or {}),
            cache=dict(cache or {}),
        )

    async def start(
        self,
        identity: str = "ctl-a",
        *,
        leader: bool = True,
        prometheus_url: str | None = None,
        wait_probes: bool = True,
        warmup: Mapping[str, Any] | None = None,
        prometheus: Mapping[str, Any] | None = None,
        cache: Mapping[str, Any] | None = None,
        **kubernetes: Any,
    ) -> Running:
        """A serving controller with synced caches that leads and has ticked, or that follows
        (`leader=False`) and has seen a Lease held by another. `kubernetes` overrides
        settings of that group (`dry_run`, `namespaces`, ...), `warmup` and `prometheus` those
        of theirs.
        The clock waits for its warm-up probes before each step unless `wait_probes` is
        false (for a pod that never answers)."""
        config = self.config(
            identity=identity,
            prometheus_url=prometheus_url,
            warmup=warmup,
            prometheus=prometheus,
            cache=cache,
            **kubernetes,
        )
        ensure_namespace(self.kube, LEASE_NAMESPACE)
        controller = await self._stack.enter_async_context(
            app.wire(
                config,
                clock=self.clock,
                lease_clock=self.clock,
                wall_now=self.clock.now,
                # Probe latencies in controller time: none passes within a tick, so pods probed
                # together pass or fail the latency check together, however busy the machine.
                probe_timer=self.clock.now,
            )
        )
        stop = asyncio.Event()
        task = asyncio.create_task(controller.serve(stop), name=f"controller {identity}")
        running = Running(controller, stop, task, self.record_calls)
        self.running.append(running)
        if wait_probes:
            self.clock.before_step.append(controller.wait_probes_idle)
        self.clock.followed.append(lambda: controller.ticker)
        self._stack.push_async_callback(running.stop)
        async with asyncio.timeout(10):
            await controller.cluster.wait_synced()
            await controller.serving.wait()
            if leader:
                await _wait_until(lambda: controller.ticks > 0, task)
            else:
                leases = controller.leases
                assert leases is not None
                await _wait_until(
                    lambda: any(h not in (None, identity) for h in leases.holders()), task
                )
        return running

    def record_calls(self) -> None:
        """Add the API calls made so far in this test to the session's log (the RBAC test
        reads it); `Running` does it when its controller stops."""
        self.calls.add(self.test_id, self.kube.requests.counts)


class CallLog:
    """Every API call the controllers made across the e2e tests of this session."""

    def __init__(self) -> None:
        self.calls: set[ApiCall] = set()
        self.tests: set[str] = set()

    def add(self, test_id: str, calls: Iterable[ApiCall]) -> None:
        self.calls.update(calls)
        self.tests.add(test_id)


async def _wait_until(condition: Callable[[], bool], task: asyncio.Task[None]) -> None:
    while not condition():
        if task.done():
            task.result()
            raise AssertionError("the controller stopped before it was ready")
        await asyncio.sleep(0.01)


# -- the cluster side ------------------------------------------------------------------------


def ensure_namespace(kube: Kube, name: str) -> None:
    """Create the namespace unless it exists (the emulator refuses objects in missing ones)."""
    if not any(ns["metadata"]["name"] == name for ns in kube.store.list_objects(NAMESPACES)):
        kube.store.create(NAMESPACES, {"metadata": {"name": name}})


def deployment(
    name: str, *, replicas: int = 2, annotations: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """An apps/v1 Deployment of a vLLM server, labelled `app: NAME`."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "annotations": dict(annotations or {})},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "vllm",
                            "image": "vllm/vllm-openai:v0.10.1",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ]
                },
            },
        },
    }


def managed(**overrides: str) -> dict[str, str]:
    """Valid annotations for the plain (`seed`) policy with a load target of 10 req/s."""
    values = {
        "enabled": "true",
        "policy": "seed",
        "min-replicas": "2",
        "max-replicas": "10",
        "target-qps-per-replica": "10",
    }
    values.update(overrides)
    return {PREFIX + key: value for key, value in values.items()}


class Service:
    """One annotated Deployment on the emulator, its pods and the series its pods export."""

    def __init__(
        self,
        kube: Kube,
        kubelet: FakeCluster,
        metrics: exporter.Exporter,
        namespace: str,
        name: str,
    ) -> None:
        self.kube = kube
        self.kubelet = kubelet
        self.metrics = metrics
        self.namespace = namespace
        self.name = name
        self._exported: set[str] = set()

    @classmethod
    async def create(
        cls,
        kube: Kube,
        kubelet: FakeCluster,
        metrics: exporter.Exporter,
        namespace: str,
        name: str,
        *,
        replicas: int = 2,
        annotations: Mapping[str, str] | None = None,
    ) -> Service:
        ensure_namespace(kube, namespace)
        notes = managed() if annotations is None else annotations
        body = deployment(name, replicas=replicas, annotations=notes)
        kube.store.create(DEPLOYMENTS, body, namespace=namespace)
        service = cls(kube, kubelet, metrics, namespace, name)
        await kubelet.settle()
        return service

    @property
    def object(self) -> dict[str, Any]:
        return self.kube.store.get(DEPLOYMENTS, self.namespace, self.name)

    @property
    def replicas(self) -> int:
        return int(self.object["spec"]["replicas"])

    def status(self) -> dict[str, Any] | None:
        """The controller's `status` annotation (its last decision), parsed."""
        text = self.object["metadata"].get("annotations", {}).get(STATUS_KEY)
        return None if text is None else json.loads(text)

    def state(self) -> dict[str, Any] | None:
        text = self.object["metadata"].get("annotations", {}).get(STATE_KEY)
        return None if text is None else json.loads(text)

    def annotate(self, **values: str) -> None:
        """Change the service owner's annotations (short keys), as `kubectl annotate` does."""
        notes = {PREFIX + key: value for key, value in values.items()}
        self.kube.store.patch(
            DEPLOYMENTS,
            self.namespace,
            self.name,
            {"metadata": {"annotations": notes}},
            content_type="application/merge-patch+json",
        )

    def pods(self) -> list[str]:
        """Names of this Deployment's live pods, as the fake kubelet created them."""
        prefix = f"{self.name}-"
        return sorted(
            pod["metadata"]["name"]
            for pod in self.kube.store.list_objects(PODS, self.namespace)
            if pod["metadata"]["name"].startswith(prefix)
            and not pod["metadata"].get("deletionTimestamp")
        )

    def events(self, reason: str | None = None) -> list[dict[str, Any]]:
        """The Events on this Deployment (with `reason`), oldest first."""
        found = [
            event
            for event in self.kube.store.list_objects(EVENTS, self.namespace)
            if event["involvedObject"]["name"] == self.name and reason in (None, event["reason"])
        ]
        return sorted(found, key=self.kube.store.creation_order)

    async def sync_pods(self) -> list[str]:
        """Let the fake cluster turn `replicas` into Ready pods (or remove the surplus)."""
        await self.kubelet.settle()
        pods = self.pods()
        assert len(pods) == self.replicas, pods
        return pods

    def serve(self, rate_per_s: float, *, waiting: float = 0.0, gpu_pct: float = 50.0) -> None:
        """Every pod completes `rate_per_s` requests per second from now; others are dropped."""
        pods = self.pods()
        for pod in pods:
            self.metrics.set_vllm(self.namespace, pod, rate_per_s=rate_per_s, waiting=waiting)
            self.metrics.set_gpu(self.namespace, pod, gpu_pct)
        for gone in self._exported - set(pods):
            self.metrics.drop(self.namespace, gone)
        self._exported = set(pods)


async def wait_for_load(
    prometheus: server.Prometheus, service: Service, total_rps: float, *, timeout_s: float = 20.0
) -> None:
    """Poll Prometheus until the service's pods' request rate sums to `total_rps` (within 10 %)."""
    pods = "|".join(service.pods())
    promql = (
        f'sum(rate(vllm:request_success_total{{namespace="{service.namespace}",'
        f'pod=~"{pods}"}}[4s]))'
    )

    def close(result: list[dict[str, Any]]) -> bool:
        if not result:
            return total_rps == 0
        value = float(result[0]["value"][1])
        return math.isclose(value, total_rps, rel_tol=0.1, abs_tol=0.2)

    await prometheus.wait_for_series(promql, close, timeout_s=timeout_s)


async def advance_until(
    clock: SteppedClock, condition: Callable[[], bool], *, limit_s: float, what: str
) -> float:
    """Advance one second at a time until `condition()`; the seconds it took."""
    started = clock.now()
    while not condition():
        if clock.now() - started >= limit_s:
            raise AssertionError(f"{what}: not after {limit_s:g} s of controller time")
        await clock.advance(1.0)
    return clock.now() - started


async def wait_for(condition: Callable[[], bool], *, what: str, timeout_s: float = 5.0) -> None:
    """Poll `condition` with short pauses until it holds: for work that takes no clock time."""
    try:
        async with asyncio.timeout(timeout_s):
            # Conditions on other servers' state (the emulator's log, the caches) have no
            # event of their own to wait on.
            while not condition():  # noqa: ASYNC110
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"{what}: not within {timeout_s:g} s") from None


@contextlib.asynccontextmanager
async def controllers(
    kube: Kube, clock: SteppedClock, *, prometheus_url: str, calls: CallLog, test_id: str
) -> AsyncIterator[Controllers]:
    """A `Controllers` whose controllers all stop (and their clients close) on exit."""
    async with contextlib.AsyncExitStack() as stack:
        yield Controllers(
            kube=kube,
            clock=clock,
            prometheus_url=prometheus_url,
            calls=calls,
            test_id=test_id,
            stack=stack,
        )
