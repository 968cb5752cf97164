"""The API server failing under two controllers, and the leader killed again and again.

`api_faults`: for each way a call can fail (the emulator's seeded chaos: 500/503, 409 on
writes, 410 on watches, dropped connections, hangs past the client's timeout) at 20, 50 and
70 % of the calls, two controllers run a service whose desired size moves while the faults
last. The Lease and both controllers' `is_leader` are sampled at every step: never two
leaders, and a leader is the Lease's holder. After the faults stop the service reaches its
desired size. The client's request timeout is `REQUEST_TIMEOUT_S` here (10 s in production),
so a hang costs the test that much wall time, not 11 s; hung calls end, unapplied, with the
chaos.

`failover`: the leader of three controllers is killed (no release) at seeded random moments,
on every other kill with its scale write held in flight in the API server; it comes back as a
new follower. Takeover comes within `lease_duration_s` plus one jittered retry of the kill, and
the emulator's log of writes shows one writer per Deployment per term of the Lease: the
held write of a deposed leader, released once its successor has written, gets 409.

Time moves only when the test moves it: in 1 s steps under the chaos, and from one sleeper's
deadline to the next around the kills, so a takeover is timed exactly.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import random
import re
from collections.abc import Callable

import pytest
from e2e.support import (
    LEASE_NAMESPACE,
    LEASES,
    Controllers,
    Running,
    Service,
    SteppedClock,
    advance_until,
    managed,
    wait_for,
    wait_for_load,
)
from kube.emulator import CHAOS_KINDS, Hold, Kube, Write
from kube.kubelet import FakeCluster
from prom.fixtures import Stack

from autoscaler.contract.annotations import PREFIX

from .figures import Figures

REQUEST_TIMEOUT_S = 1.5
"""The controllers' API request timeout in these tests (a hung call fails after this)."""
RATES = (0.2, 0.5, 0.7)
WATCH_LIMIT_S = 0.5
"""Wall seconds a watch lasts on the emulator here, so that watches come back under chaos."""
FAULT_S = 15
"""Seconds of controller time each fault rate lasts."""
MIN_FAULTS = 3
"""Faults each rate must have injected before it ends."""
TOTAL_RPS = 25.0
LEASE = "inference-autoscaler"
AGENT = "inference-autoscaler/"
KILLS = 20
SCALE = "deployments/scale"
_TIER = re.compile(r"-(shared|mig-[a-z0-9.-]+)$")
"""The suffix of a placement tier's Deployment: its writes are its service's."""


def leaders(running: list[Running], kube: Kube) -> int:
    """How many controllers lead now; each one that does holds the Lease in the API."""
    leading = [r.controller for r in running if not r.task.done() and r.controller.is_leader()]
    holder = kube.store.get(LEASES, LEASE_NAMESPACE, LEASE)["spec"].get("holderIdentity")
    for controller in leading:
        assert holder == controller.identity, (holder, controller.identity)
    return len(leading)


def crashes(running: list[Running]) -> int:
    return sum(
        1 for r in running if r.task.done() and not r.task.cancelled() and r.task.exception()
    )


@pytest.mark.timeout(170)
@pytest.mark.parametrize("kind", CHAOS_KINDS)
async def test_two_controllers_converge_through_api_faults(
    kind: str,
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
    figures: Figures,
) -> None:
    """Under each kind of API fault at 20, 50 and 70 % of the calls, two controllers never both
    lead, never crash, and bring the service to its desired size once the faults stop."""
    kube.emulator.watch_limit_s = WATCH_LIMIT_S  # watches start again, into the chaos
    kubelet.add_node("gpu-1", gpus=16)
    notes = managed(**{"scale-up-cooldown": "0s", "max-replicas": "12"})
    chat = await Service.create(
        kube, kubelet, stack.upper, f"{unique}-f", "chat", annotations=notes
    )
    chat.serve(rate_per_s=TOTAL_RPS / 2)
    await wait_for_load(stack.prometheus, chat, TOTAL_RPS)
    running = [
        await cluster.start("ctl-a", request_timeout_s=REQUEST_TIMEOUT_S),
        await cluster.start("ctl-b", leader=False, request_timeout_s=REQUEST_TIMEOUT_S),
    ]
    await advance_until(clock, lambda: chat.replicas == 3, limit_s=10, what="first scale-up")

    for seed, (rate, desired) in enumerate(zip(RATES, (5, 8, 11), strict=True)):
        # Above what the load asks (3): the size the faults must not keep it from.
        chat.annotate(**{"min-replicas": str(desired)})
        chaos = kube.chaos(kind, rate, seed=100 * (CHAOS_KINDS.index(kind) + 1) + seed)
        calls = sum(kube.requests.counts.values())
        most = 0
        steps = 0
        # Watches come back in wall time: a 410 may need more steps than the rest to land.
        while steps < FAULT_S or (chaos.hits < MIN_FAULTS and steps < 10 * FAULT_S):
            await clock.advance(1.0)
            most = max(most, leaders(running, kube))
            steps += 1
        kube.calm()
        calm_s = clock.now()
        # The watches come back in wall time, with their backoff: until both caches hear of
        # the new minimum, controller time would run ahead of what they can know.
        for controller in running:
            await wait_for(
                functools.partial(seen, controller, chat, str(desired)),
                what=f"{controller.controller.identity}'s cache after {kind} at {rate:.0%}",
                timeout_s=15,
            )

        def converged(desired: int = desired) -> bool:
            nonlocal most
            most = max(most, leaders(running, kube))
            return chat.replicas == desired

        await advance_until(clock, converged, limit_s=90, what=f"{kind} at {rate:.0%}")
        figures.record(
            "api_faults",
            kind=kind,
            rate=rate,
            calls=sum(kube.requests.counts.values()) - calls,
            faults=chaos.hits,
            converged_s=clock.now() - calm_s,
            crashes=crashes(running),
            max_leaders=most,
        )
        assert crashes(running) == 0
        assert most <= 1
        assert chaos.hits >= MIN_FAULTS


async def advance_to_next_until(
    clock: SteppedClock, condition: Callable[[], bool], *, limit_s: float, what: str
) -> None:
    """Move from one sleeper's deadline to the next until `condition()` holds."""
    started = clock.now()
    while not condition():
        if clock.now() - started > limit_s:
            raise AssertionError(f"{what}: not after {limit_s:g} s of controller time")
        await clock.advance_to_next(1.0)


def reached(clock: SteppedClock, moment_s: float) -> bool:
    return clock.now() >= moment_s


def sized(service: Service, replicas: int) -> bool:
    return service.replicas == replicas


def ticked(running: Running) -> bool:
    return running.controller.ticks > 0


def seen(running: Running, service: Service, min_replicas: str) -> bool:
    """Whether the controller's cache holds the Deployment with this `min-replicas`."""
    cached = running.controller.cluster.caches.deployment(service.namespace, service.name)
    notes = (cached or {}).get("metadata", {}).get("annotations") or {}
    return bool(notes.get(PREFIX + "min-replicas") == min_replicas)


def writers_per_term(writes: list[Write], holder: str) -> tuple[int, int]:
    """From the log of writes, starting with `holder` holding the Lease: the most identities
    that wrote one Deployment within one term, and the Deployment writes that landed from a
    replica other than the term's holder."""
    term = 0
    wrote: dict[tuple[int, str | None, str | None], set[str]] = collections.defaultdict(set)
    stale = 0
    for write in writes:
        who = write.agent.removeprefix(AGENT)
        if write.status >= 300:
            continue
        if write.resource == "leases" and write.verb in ("create", "update"):
            if who != holder:
                holder, term = who, term + 1
            continue
        if write.resource.partition("/")[0] == "deployments":
            service = _TIER.sub("", write.name or "")
            wrote[(term, write.namespace, service)].add(who)
            stale += who != holder
    return max((len(who) for who in wrote.values()), default=0), stale


@pytest.mark.timeout(280)
async def test_killed_leaders_are_replaced_in_time_and_never_write_after_their_successor(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
    figures: Figures,
) -> None:
    """Twenty leaders killed at random moments are each replaced within a lease and a retry,
    and no Deployment is written by two replicas within one term, held writes included."""
    rng = random.Random(20)
    kubelet.add_node("gpu-1", gpus=32)
    notes = managed(**{"max-replicas": "30", "scale-up-cooldown": "0s"})
    chat = await Service.create(
        kube, kubelet, stack.upper, f"{unique}-k", "chat", annotations=notes
    )
    chat.serve(rate_per_s=TOTAL_RPS / 2)
    await wait_for_load(stack.prometheus, chat, TOTAL_RPS)
    alive = [
        await cluster.start("ctl-0"),
        await cluster.start("ctl-1", leader=False),
        await cluster.start("ctl-2", leader=False),
    ]
    config = alive[0].controller.settings.kubernetes
    bound_s = config.lease_duration_s + 1.2 * config.retry_interval_s
    takeovers: list[float] = []
    for kill in range(KILLS):
        (victim,) = [r for r in alive if r.controller.is_leader()]
        window = len(kube.requests.writes)
        moment_s = clock.now() + rng.uniform(0.0, 10.0)
        await advance_to_next_until(
            clock, functools.partial(reached, clock, moment_s), limit_s=11, what="the kill moment"
        )
        wanted = 4 + kill  # above what the load asks (3): every kill comes with a rescale
        chat.annotate(**{"min-replicas": str(wanted)})
        # The leader's cache hears of it over a watch, in wall time; a tick may come first.
        await wait_for(
            functools.partial(seen, victim, chat, str(wanted)), what="the new min-replicas"
        )
        # On every other kill its scale write is in flight, held by the API server.
        held = await kill_replica(kube, clock, victim, holding=chat.name if kill % 2 == 0 else None)
        killed_s = clock.now()
        alive.remove(victim)
        await advance_to_next_until(
            clock, lambda: any(r.controller.leading for r in alive), limit_s=30, what="takeover"
        )
        takeovers.append(clock.now() - killed_s)
        (successor,) = [r for r in alive if r.controller.leading]
        # Its first tick starts when it wins the Lease, not when the clock wakes it.
        await wait_for(functools.partial(ticked, successor), what="the successor's first tick")
        await advance_until(
            clock,
            functools.partial(sized, chat, wanted),
            limit_s=20,
            what="the successor's rescale",
        )
        if held is not None:  # the successor has written: now the deposed leader's write lands
            held.release()
            async with asyncio.timeout(5):
                await held.answered.wait()
        most, stale = writers_per_term(kube.requests.writes[window:], victim.controller.identity)
        figures.record(
            "failover",
            kill=kill + 1,
            takeover_s=takeovers[-1],
            write_in_flight=held is not None,
            writers_per_service_max=most,
            stale_writes=stale,
        )
        assert most <= 1
        assert stale == 0
        assert held is None or held.status == 409
        alive.append(await cluster.start(f"ctl-{3 + kill}", leader=False))
        assert crashes(alive) == 0

    assert max(takeovers) <= bound_s, takeovers


async def kill_replica(
    kube: Kube, clock: SteppedClock, victim: Running, *, holding: str | None
) -> Hold | None:
    """Kill `victim` hard. With `holding`, the Deployment whose scale write it is about to
    send, that write is first held by the API server until it arrives, and its hold returned:
    the write lands when the caller releases it."""
    if holding is None:
        await victim.kill()
        return None
    held = kube.hold("patch", SCALE, name=holding)
    sending = await step_until_held(clock, held.arrived, limit_s=10)
    await victim.kill()
    await sending
    return held


async def step_until_held(
    clock: SteppedClock, arrived: asyncio.Event, *, limit_s: float
) -> asyncio.Task[None]:
    """Advance from deadline to deadline until a held request has arrived; the step that sent
    it cannot finish while the request is held, so it is returned running: the caller kills
    the sender, then awaits it."""
    started = clock.now()
    while True:
        step = asyncio.create_task(clock.advance_to_next(1.0))
        waiting = asyncio.create_task(arrived.wait())
        await asyncio.wait({step, waiting}, return_when=asyncio.FIRST_COMPLETED)
        if arrived.is_set():
            return step
        waiting.cancel()
        await step
        if clock.now() - started > limit_s:
            raise AssertionError(f"no write held after {limit_s:g} s of controller time")
