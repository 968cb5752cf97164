"""Builders, a stepped clock and waiting helpers for the Kubernetes adapter tests."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, Protocol

from kubernetes_asyncio import client

from autoscaler.adapters.kubernetes import _api, cluster, informer, leader

NS = "default"
WALL_S = 1_750_000_000.0
"""The wall clock the tests give the adapter (Unix seconds)."""
PREFIX = "autoscaler.dsec.io/"
LEASE = "autoscaler-leader"


def elector(
    api: client.ApiClient, clock: StepClock, identity: str, **kwargs: Any
) -> leader.LeaderElector:
    """A candidate for the Lease `LEASE` on the stepped clock, its jitter seeded by its name."""
    return leader.LeaderElector(
        api,
        name=LEASE,
        namespace=NS,
        identity=identity,
        clock=clock,
        wall_now=lambda: WALL_S + clock.now(),
        rng=random.Random(identity),
        **kwargs,
    )


def settings(**overrides: str) -> dict[str, str]:
    """Valid autoscaler annotations, with `overrides` (short keys) on top."""
    values = {"enabled": "true", "max-replicas": "10", "target-qps-per-replica": "5"}
    values.update(overrides)
    return {PREFIX + key: value for key, value in values.items()}


def deployment(
    name: str,
    *,
    replicas: int = 2,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Deployment whose selector and pod labels are `labels` (default `app: NAME`)."""
    labels = labels or {"app": name}
    return {
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "server", "image": "vllm:1"}]},
            },
        },
    }


class StepClock:
    """A clock that moves only when a test advances it; `sleep` waits for that."""

    def __init__(self, start_s: float = 0.0) -> None:
        self._now = start_s
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []
        self._slept = asyncio.Event()

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (self._now + max(0.0, seconds), future)
        self._sleepers.append(entry)
        self._slept.set()
        try:
            await future
        finally:
            self._sleepers.remove(entry)

    def advance(self, seconds: float) -> None:
        self._now += seconds
        for deadline, future in self._sleepers:
            if deadline <= self._now and not future.done():
                future.set_result(None)

    def advance_to(self, when_s: float) -> None:
        """Move to `when_s` exactly (a deadline read from `next_wake_s` wakes its sleeper)."""
        self.advance(max(0.0, when_s - self._now))
        self._now = max(self._now, when_s)
        for deadline, future in self._sleepers:
            if deadline <= self._now and not future.done():
                future.set_result(None)

    @property
    def next_wake_s(self) -> float:
        """When the next sleeper wakes; infinity when nobody sleeps."""
        return min(
            (deadline for deadline, future in self._sleepers if not future.done()),
            default=float("inf"),
        )

    @property
    def sleeping(self) -> int:
        return sum(1 for _, future in self._sleepers if not future.done())

    async def wait_sleeping(self, count: int, *, timeout_s: float = 5.0) -> None:
        """Wait until `count` tasks are asleep on this clock, done with what they were doing."""
        async with asyncio.timeout(timeout_s):
            while self.sleeping < count:
                self._slept.clear()
                await self._slept.wait()


@contextlib.asynccontextmanager
async def running(coroutine: Coroutine[Any, Any, None]) -> AsyncIterator[asyncio.Task[None]]:
    """Run `coroutine` as a task for the block; cancel it and surface its errors afterwards."""
    task = asyncio.create_task(coroutine)
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def eventually(
    condition: Callable[[], bool], *caches: informer.Informer, timeout_s: float = 5.0
) -> None:
    """Wait until `condition()` holds, re-checking whenever one of `caches` changes."""
    changed = asyncio.Event()

    def wake(*_: object) -> None:
        changed.set()

    for cache in caches:
        cache.add_handler(wake)
    try:
        async with asyncio.timeout(timeout_s):
            while not condition():
                changed.clear()
                await changed.wait()
    finally:
        for cache in caches:
            cache.remove_handler(wake)


async def events_of(
    api: client.ApiClient, name: str, reason: str | None = None
) -> list[dict[str, Any]]:
    """The Events on the object `name` in `NS` (with `reason`, when given), read through the
    API, in the API server's order (which is not the order they were posted in)."""
    core = client.CoreV1Api(api)
    listed = await _api.call_json(core.list_namespaced_event, NS)
    return [
        event
        for event in listed["items"]
        if event["involvedObject"]["name"] == name and reason in (None, event["reason"])
    ]


class MakeCluster(Protocol):
    """The `make_cluster` fixture: a running, synced `KubeCluster` built with these options."""

    def __call__(self, **kwargs: Any) -> Awaitable[cluster.KubeCluster]: ...
