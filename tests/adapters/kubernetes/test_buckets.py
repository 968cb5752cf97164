"""Bucket Leases: replicas split the buckets, the least loaded takes a free one, writes are fenced
per service."""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any

import pytest
from kube.emulator import Kube
from kubernetes_asyncio import client

from autoscaler.adapters.kubernetes import _api, leader
from autoscaler.core import shards

from .support import LEASE, NS, WALL_S, StepClock, elector, running

STEP_S = 2.5
"""Longer than any retry wait (2 s plus 20 % jitter)."""


@pytest.fixture
async def api(kube: Kube) -> client.ApiClient:
    return kube.api_client()


@pytest.fixture
def clock() -> StepClock:
    return StepClock()


def replica(
    api: client.ApiClient, clock: StepClock, identity: str, buckets: shards.Buckets, **kwargs: Any
) -> leader.BucketLeases:
    return leader.BucketLeases(
        api,
        buckets=buckets,
        namespace=NS,
        identity=identity,
        clock=clock,
        wall_now=lambda: WALL_S + clock.now(),
        rng=random.Random(identity),
        **kwargs,
    )


async def steps(clock: StepClock, sleepers: int, *, seconds: float) -> None:
    """Move the clock from one sleeper's deadline to the next for `seconds`, letting each woken
    elector finish its turn."""
    until_s = clock.now() + seconds
    while clock.now() < until_s:
        clock.advance_to(min(clock.next_wake_s, until_s))
        await clock.wait_sleeping(sleepers)


async def test_replicas_started_together_split_the_buckets(
    api: client.ApiClient, clock: StepClock
) -> None:
    """Three replicas started together each lead some of six buckets, and every bucket has
    exactly one leader, so every service has exactly one replica that may write for it."""
    buckets = shards.Buckets.named(LEASE, 6)
    replicas = [replica(api, clock, f"r-{i}", buckets) for i in range(3)]
    async with contextlib.AsyncExitStack() as stack:
        for r in replicas:
            await stack.enter_async_context(running(r.run()))
        await clock.wait_sleeping(18)
        await steps(clock, 18, seconds=10.0)
        shares = [r.led() for r in replicas]
        services = [f"ns-{i % 3}/model-{i}" for i in range(60)]
        writers = [sum(r.leads(s) for r in replicas) for s in services]

    assert all(shares), shares
    assert sorted(b for share in shares for b in share) == list(range(6))
    assert writers == [1] * len(services)


async def test_the_filter_of_a_tick_is_the_same_function_until_a_bucket_moves(
    api: client.ApiClient, clock: StepClock
) -> None:
    """`owned_now` gives the same function while the buckets led stay the same (so the cluster
    adapter can skip the services of other buckets), and a new one once any moved."""
    buckets = shards.Buckets.named(LEASE, 6)
    replicas = [replica(api, clock, f"r-{i}", buckets) for i in range(3)]
    services = [f"ns-{i % 3}/model-{i}" for i in range(60)]
    async with contextlib.AsyncExitStack() as stack:
        for r in replicas:
            await stack.enter_async_context(running(r.run()))
        await clock.wait_sleeping(18)
        await steps(clock, 18, seconds=10.0)
        filters = [r.owned_now() for r in replicas]
        again = [r.owned_now() for r in replicas]
        owners = [sum(f(s) for f in filters) for s in services]
    released = [r.owned_now() for r in replicas]

    assert all(a is b for a, b in zip(filters, again, strict=True))
    assert owners == [1] * len(services)
    assert all(a is not b for a, b in zip(filters, released, strict=True))
    assert not any(f(s) for f in released for s in services)


async def test_a_free_lease_goes_first_to_the_candidate_that_does_not_defer(
    kube: Kube, api: client.ApiClient, clock: StepClock
) -> None:
    """Of two followers of a dead leader, the one that leads fewer buckets (no deferral) takes
    the Lease, though the other polls first."""

    dead = elector(api, clock, "dead", release_on_cancel=False)
    loaded = elector(api, clock, "loaded", defer_s=lambda: 1.5)
    idle = elector(api, clock, "idle", first_delay_s=0.5, defer_s=lambda: 0.0)
    async with contextlib.AsyncExitStack() as alive:
        await alive.enter_async_context(running(dead.run()))
        async with asyncio.timeout(5):
            await dead.wait_leading()
        async with running(loaded.run()), running(idle.run()):
            await clock.wait_sleeping(3)
            await alive.aclose()  # it neither renews nor releases
            while not (loaded.is_leader or idle.is_leader):
                assert clock.now() < 30.0
                clock.advance_to(clock.next_wake_s)
                await clock.wait_sleeping(2)
            assert (idle.is_leader, loaded.is_leader) == (True, False)
            await steps(clock, 2, seconds=3 * STEP_S)
            assert (idle.is_leader, loaded.is_leader) == (True, False)
            spec = _api.spec(kube.store.get("coordination.k8s.io/v1/leases", NS, LEASE))

    assert spec["holderIdentity"] == "idle"


async def test_a_write_is_fenced_by_the_lease_of_its_own_service(
    kube: Kube, api: client.ApiClient
) -> None:
    """A fence that allows one service refuses the write for another before anything is sent."""
    events = client.CoreV1Api(api)

    def body(name: str) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "namespace": NS},
            "involvedObject": {"kind": "Deployment", "name": name, "namespace": NS},
            "reason": "Test",
            "message": "fenced",
        }

    def ours(service: str) -> bool:
        return service == f"{NS}/chat"

    before = len(kube.requests.writes)
    await _api.write_json(ours, f"{NS}/chat", events.create_namespaced_event, NS, body("chat"))
    with pytest.raises(_api.NotLeaderError, match=f"{NS}/embed"):
        await _api.write_json(
            ours, f"{NS}/embed", events.create_namespaced_event, NS, body("embed")
        )

    assert [w.name for w in kube.requests.writes[before:]] == ["chat"]


async def test_a_callers_write_asks_the_fence_about_the_service_it_names(
    kube: Kube, api: client.ApiClient
) -> None:
    """A `Caller` write whose target names another object is fenced by its `service`, and one
    without asks about its target."""
    events = client.CoreV1Api(api)
    asked: list[str] = []

    def fence(service: str) -> bool:
        asked.append(service)
        return service == f"{NS}/chat"

    def body(name: str) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "namespace": NS},
            "involvedObject": {"kind": "Deployment", "name": name, "namespace": NS},
            "reason": "Test",
            "message": "fenced",
        }

    calls = _api.Caller(fence=fence)
    before = len(kube.requests.writes)
    await calls.call(
        "events.create",
        f"{NS}/chat (chat-shared)",
        events.create_namespaced_event,
        NS,
        body("chat"),
        write=True,
        service=f"{NS}/chat",
    )
    with pytest.raises(_api.NotLeaderError, match=f"{NS}/embed"):
        await calls.call(
            "events.create",
            f"{NS}/embed",
            events.create_namespaced_event,
            NS,
            body("embed"),
            write=True,
        )

    assert asked == [f"{NS}/chat", f"{NS}/embed"]
    assert [w.name for w in kube.requests.writes[before:]] == ["chat"]


async def test_a_bucket_handed_over_is_cleared_only_once_the_work_under_it_has_ended(
    kube: Kube, api: client.ApiClient, clock: StepClock
) -> None:
    """A replica over its share stops leading the bucket it gives up, keeps its Lease while the
    work under it ends, and clears it only then, for the replica that asked to take."""
    buckets = shards.Buckets.named(LEASE, 2)
    quiet_s = 7.0
    quieted_from: list[float] = []

    async def wait_quiet() -> None:
        quieted_from.append(clock.now())
        await clock.sleep(quiet_s)

    first = replica(api, clock, "r-a", buckets, wait_quiet=wait_quiet)
    second = replica(api, clock, "r-b", buckets)
    async with running(first.run()):
        await clock.wait_sleeping(2)
        await steps(clock, 2, seconds=2 * STEP_S)
        assert first.led() == {0, 1}
        async with running(second.run()):
            await clock.wait_sleeping(4)
            while not quieted_from:
                assert clock.now() < 60.0, "nothing was handed over"
                clock.advance_to(clock.next_wake_s)
                await clock.wait_sleeping(4)
            (given,) = {0, 1} - first.leading()
            service = next(
                key for key in (f"{NS}/m{i}" for i in range(100)) if buckets.of(key) == given
            )
            lease = kube.store.get("coordination.k8s.io/v1/leases", NS, buckets.names[given])
            during = (
                _api.spec(lease)["holderIdentity"],
                first.leads(service),
                second.leads(service),
            )
            await steps(clock, 4, seconds=quiet_s + 3 * STEP_S)
            after = (first.led(), second.led())

    assert during == ("r-a", False, False)  # held, and nobody writes for its services
    assert after == ({0, 1} - {given}, {given})
