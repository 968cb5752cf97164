"""Leader election on a Lease: one leader, takeover on expiry or release, followers never write."""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any

import pytest
from kube.emulator import Kube
from kubernetes_asyncio import client

from autoscaler.adapters.kubernetes import _api, leader

from .support import LEASE, NS, WALL_S, StepClock, elector, running

LEASES = "coordination.k8s.io/v1/leases"
STEP_S = 2.5
"""Longer than any retry wait (2 s plus 20 % jitter): every follower tries once per step."""


@pytest.fixture
def clock() -> StepClock:
    return StepClock()


def lease_spec(kube: Kube) -> dict[str, Any]:
    return _api.spec(kube.store.get(LEASES, NS, LEASE))


async def step(clock: StepClock, candidates: int, *, times: int = 1) -> None:
    """Advance the clock `times` steps, letting every candidate finish its turn each time."""
    for _ in range(times):
        clock.advance(STEP_S)
        await clock.wait_sleeping(candidates)


async def test_two_candidates_elect_one_leader(
    kube: Kube, api: client.ApiClient, clock: StepClock
) -> None:
    """Of two candidates started together, exactly one leads, and it keeps the Lease renewed."""
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    async with running(a.run()), running(b.run()):
        await clock.wait_sleeping(2)
        (first,) = [c for c in (a, b) if c.is_leader]
        for _ in range(8):
            await step(clock, 2)
            assert [c for c in (a, b) if c.is_leader] == [first]
        spec = lease_spec(kube)

    assert spec["holderIdentity"] == first.identity
    assert spec["leaseDurationSeconds"] == 15
    assert spec["renewTime"] == _api.format_micro_time(WALL_S + 20.0)
    assert spec["leaseTransitions"] == 0
    assert kube.requests.count("create", "leases") >= 1


async def test_a_dead_leader_is_replaced_once_its_lease_expires(
    kube: Kube, api: client.ApiClient, clock: StepClock
) -> None:
    """When the leader stops renewing without releasing, the follower takes over after expiry."""
    a = elector(api, clock, "a", release_on_cancel=False)
    b = elector(api, clock, "b")
    async with contextlib.AsyncExitStack() as alive:
        await alive.enter_async_context(running(a.run()))
        async with asyncio.timeout(5):
            await a.wait_leading()
        async with running(b.run()):
            await clock.wait_sleeping(2)
            assert not b.is_leader
            await alive.aclose()  # `a` dies: it neither renews nor releases
            assert lease_spec(kube)["holderIdentity"] == "a"
            await step(clock, 1, times=5)  # 12.5 s: the lease (15 s) has not expired yet
            assert not b.is_leader
            assert b.holder == "a"
            await step(clock, 1, times=2)
            async with asyncio.timeout(5):
                await b.wait_leading()
            spec = lease_spec(kube)

    assert a.lost.is_set()
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] == 1


async def test_a_killed_leader_is_replaced_within_a_lease_and_a_retry_of_its_death(
    kube: Kube, api: client.ApiClient, clock: StepClock
) -> None:
    """Killed at seeded random moments, a leader is replaced within `lease_duration_s` plus one
    jittered retry of its last renewal (so of its death), wherever the follower's polls fall."""
    rng = random.Random(11)
    bound_s = 15.0 + (1 + leader.JITTER_RATIO) * 2.0
    takeovers: list[float] = []
    for kill in range(12):
        a = elector(api, clock, f"a{kill}", release_on_cancel=False)
        b = elector(api, clock, f"b{kill}")
        async with contextlib.AsyncExitStack() as alive:
            await alive.enter_async_context(running(a.run()))
            async with asyncio.timeout(5):
                await a.wait_leading()
            async with running(b.run()):
                await clock.wait_sleeping(2)
                await wake_in_turn(clock, until_s=clock.now() + rng.uniform(0.0, 10.0), tasks=2)
                await alive.aclose()  # `a` dies: it neither renews nor releases
                renewed = _api.parse_time(lease_spec(kube)["renewTime"])
                assert renewed is not None
                renewed_s = renewed - WALL_S  # the last renewal, on the test's clock
                while not b.is_leader:
                    assert clock.now() - renewed_s < 30.0
                    await wake_in_turn(clock, until_s=clock.next_wake_s, tasks=1)
                takeovers.append(clock.now() - renewed_s)
                await b.release()
        await alive.aclose()

    assert max(takeovers) <= bound_s, takeovers


async def wake_in_turn(clock: StepClock, *, until_s: float, tasks: int) -> None:
    """Move the clock from one sleeper's deadline to the next up to `until_s`, letting each
    woken task finish its turn: time moves exactly as far as each sleep asked."""
    while clock.now() < until_s:
        clock.advance_to(min(clock.next_wake_s, until_s))
        await clock.wait_sleeping(tasks)


async def test_a_released_lease_is_taken_at_once(
    kube: Kube, api: client.ApiClient, clock: StepClock
) -> None:
    """A leader that shuts down clears the holder; the follower takes over at its next retry."""
    started: list[str] = []
    stopped: list[str] = []
    a = elector(
        api,
        clock,
        "a",
        on_started_leading=lambda: started.append("a"),
        on_stopped_leading=lambda: stopped.append("a"),
    )
    b = elector(api, clock, "b", on_started_leading=lambda: started.append("b"))
    async with contextlib.AsyncExitStack() as alive:
        await alive.enter_async_context(running(a.run()))
        async with asyncio.timeout(5):
            await a.wait_leading()
        async with running(b.run()):
            await clock.wait_sleeping(2)
            await alive.aclose()  # `a` shuts down and releases
            assert lease_spec(kube).get("holderIdentity") is None
            await step(clock, 1)
            async with asyncio.timeout(5):
                await b.wait_leading()
            assert clock.now() < 15

    assert started == ["a", "b"]
    assert stopped == ["a"]
    assert a.lost.is_set()
    assert not a.is_leader


async def test_a_leader_that_cannot_renew_steps_down_before_its_lease_expires(
    kube: Kube, api: client.ApiClient, clock: StepClock
) -> None:
    """Failed renewals end leadership at the renew deadline, before the lease could expire."""
    errors: list[str] = []
    a = elector(api, clock, "a", on_api_error=errors.append)
    async with running(a.run()):
        async with asyncio.timeout(5):
            await a.wait_leading()
        kube.fail("update", "leases", status=500, times=100)
        await clock.wait_sleeping(1)
        await step(clock, 1, times=3)  # 7.5 s: the renewal at 5 s failed, retries go on
        assert a.is_leader
        await step(clock, 1, times=2)  # 12.5 s: past the 10 s deadline
        async with asyncio.timeout(5):
            await a.wait_lost()

    assert not a.is_leader
    assert clock.now() < 15
    assert "leases.update" in errors


async def test_a_leader_whose_lease_is_taken_steps_down_at_its_next_renewal(
    kube: Kube, api: client.ApiClient, clock: StepClock
) -> None:
    """A leader that finds another holder on its Lease stops leading at once, without retrying."""
    a = elector(api, clock, "a")
    async with running(a.run()):
        async with asyncio.timeout(5):
            await a.wait_leading()
        await clock.wait_sleeping(1)
        kube.store.patch(LEASES, NS, LEASE, {"spec": {"holderIdentity": "intruder"}})
        await step(clock, 1, times=2)  # 5 s: the first renewal finds the intruder
        async with asyncio.timeout(5):
            await a.wait_lost()
        assert clock.now() == 5.0

    assert lease_spec(kube)["holderIdentity"] == "intruder"


async def test_a_follower_never_writes_the_lease(
    kube: Kube, api: client.ApiClient, clock: StepClock
) -> None:
    """A candidate facing a Lease that another holder keeps renewing only ever reads it."""
    body = {
        "metadata": {"name": LEASE},
        "spec": {
            "holderIdentity": "elsewhere",
            "leaseDurationSeconds": 15,
            "renewTime": _api.format_micro_time(WALL_S),
        },
    }
    kube.store.create(LEASES, body, namespace=NS)
    b = elector(api, clock, "b")
    async with running(b.run()):
        await clock.wait_sleeping(1)
        for n in range(12):  # 30 s, twice the lease: renewed by its holder all along
            renewed = {"spec": {"renewTime": _api.format_micro_time(WALL_S + n * STEP_S)}}
            kube.store.patch(LEASES, NS, LEASE, renewed)
            await step(clock, 1)
            assert not b.is_leader

    assert kube.requests.count("get", "leases") >= 12
    assert kube.requests.count("update", "leases") == 0
    assert kube.requests.count("create", "leases") == 0
    assert lease_spec(kube)["holderIdentity"] == "elsewhere"


async def test_timings_that_could_elect_two_leaders_are_refused(api: client.ApiClient) -> None:
    """A renew deadline not shorter than the lease is a configuration error."""
    with pytest.raises(ValueError, match="renew_deadline_s < lease_duration_s"):
        elector(api, StepClock(), "a", renew_deadline_s=15.0)


def test_identity_is_the_pod_name_and_a_random_suffix() -> None:
    """The holder identity starts with the pod name and differs between two processes."""
    first = leader.default_identity({"POD_NAME": "autoscaler-7d9f"})
    second = leader.default_identity({"POD_NAME": "autoscaler-7d9f"})
    assert first.startswith("autoscaler-7d9f-")
    assert first != second
