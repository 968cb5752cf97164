"""Warm-up probes beside the tick: the ramp driver with the real HTTP prober against a pod that
accepts connections and never answers (a server on loopback), the other pods on the fake prober.

Time is the rig's injected clock; the probes' real-time bounds are either out of reach (an hour)
or short and waited for (`wait_probes_idle`), so no assertion depends on how fast anything runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator

from e2e.wedged import WedgedEndpoint, wedged
from structlog.testing import capture_logs

from autoscaler import ports, ramp_driver
from autoscaler.adapters import warmup
from autoscaler.contract import annotations as contract
from autoscaler.core import model, ramp

from .test_ramp_driver import OTHER, SERVICE, FakeProber, Rig, ramp_target

__all__ = ["wedged"]  # the fixture

LOOPBACK = "127.0.0.1"
HOUR_S = 3_600.0
"""A real-time bound no test reaches."""


class Probers:
    """`ports.WarmupProber` by address: HTTP to loopback, the rig's fake for every other pod."""

    def __init__(self, fake: FakeProber) -> None:
        self.http = warmup.HttpProber()
        self.fake = fake

    async def probe(
        self, ip: str, port: int, path: str, requests: int, timeout_s: float
    ) -> ports.ProbeResult:
        prober = self.http if ip == LOOPBACK else self.fake
        return await prober.probe(ip, port, path, requests, timeout_s)


@contextlib.asynccontextmanager
async def wired(
    rig: Rig, *, concurrency: int = 16, deadline_s: float = HOUR_S
) -> AsyncIterator[ramp_driver.RampDriver]:
    """The rig's driver on the real prober for loopback pods; closed (probes cancelled) after."""
    probers = Probers(rig.prober)
    rig.driver = ramp_driver.RampDriver(
        cluster=rig.cluster,
        pods=rig.cluster,
        routers={contract.TrafficRouter.ISTIO: rig.router},
        health=rig.health,
        prober=probers,
        observer=rig.observer,
        probe_timeout_s=HOUR_S,  # only the per-pod deadline ends a wedged request
        probe_concurrency=concurrency,
        probe_deadline_s=deadline_s,
    )
    try:
        yield rig.driver
    finally:
        await rig.driver.close()
        await probers.http.close()


def target(service: model.ServiceId, **warmup_fields: object) -> ports.RampTarget:
    """A ramped service whose pods are probed on their own port (the wedged one's, for some)."""
    made = ramp_target(service, port=None)
    warmup = dataclasses.replace(made.warmup, **warmup_fields)  # type: ignore[arg-type]
    config = contract.ramp_config(made.traffic, warmup)
    return dataclasses.replace(made, warmup=warmup, config=config)


def wedge(rig: Rig, endpoint: WedgedEndpoint, service: model.ServiceId = SERVICE) -> str:
    """A new running pod whose warm-up endpoint is the wedged one."""
    name = rig.cluster.add_pod(service)
    rig.cluster.change(service, name, ip=LOOPBACK, port=endpoint.port)
    return name


async def step(rig: Rig) -> None:
    """One tick on the injected clock, without waiting for any probe."""
    rig.now += 1.0
    rig.cluster.start_all()
    await rig.driver.reconcile(rig.now, rig.cluster.workloads())


async def ticks_until_stable(rig: Rig, service: model.ServiceId, pod: str) -> int:
    for ticks in range(1, 31):
        await step(rig)
        if pod in rig.cluster.stable(service):
            return ticks
    raise AssertionError(f"{pod} not stable after 30 ticks")


async def test_a_tick_returns_while_a_wedged_pod_is_probed_and_other_services_go_on(
    wedged: WedgedEndpoint,
) -> None:
    """A tick returns with the wedged pod's probe pending, the neighbour's new pod is promoted at
    the same tick as with no wedged pod, and the wedged pod is never probed twice at once."""
    alone = Rig(target(OTHER), stable=0)
    fine = alone.cluster.add_pod(OTHER)
    async with wired(alone):
        expected = await ticks_until_stable(alone, OTHER, fine)

    rig = Rig(target(SERVICE), target(OTHER), stable=0)
    stuck = wedge(rig, wedged)
    fine = rig.cluster.add_pod(OTHER)
    async with wired(rig) as driver:
        started_s = rig.now
        await step(rig)
        assert driver.probes_in_flight == 1  # the tick is over; the probe is not
        await wedged.wait_requests(1)
        assert driver.probes_in_flight == 1
        took = 1 + await ticks_until_stable(rig, OTHER, fine)
        for _ in range(10):  # past two probe intervals: the core asks again, nothing new starts
            await step(rig)
        assert driver.probes_in_flight == 1
        assert (wedged.requests, wedged.held) == (1, 1)
        assert stuck in rig.state(SERVICE).deadlines  # still warming, awaiting its answer

    assert took == expected
    assert rig.now - started_s == took + 10


async def test_probes_in_flight_are_bounded_across_the_driver(wedged: WedgedEndpoint) -> None:
    """With room for 2 probes, 5 wedged pods over 2 services hold 2 requests at a time; the rest
    wait for a slot and follow once the endpoint answers."""
    rig = Rig(target(SERVICE), target(OTHER), stable=0)
    pods = [wedge(rig, wedged) for _ in range(3)] + [wedge(rig, wedged, OTHER) for _ in range(2)]
    async with wired(rig, concurrency=2) as driver:
        await step(rig)
        await wedged.wait_requests(2)
        for _ in range(3):
            await step(rig)
        assert driver.probes_in_flight == 5
        assert (wedged.requests, wedged.held) == (2, 2)
        wedged.release()
        async with asyncio.timeout(10):
            await driver.wait_probes_idle()
        await step(rig)

    assert wedged.requests == 5 * 3  # every pod's 3 warm-up requests
    assert wedged.max_held == 2
    assert all(
        rig.cluster.pod_sets[SERVICE if p.startswith("llm") else OTHER][p].warm for p in pods
    )


async def test_the_per_pod_deadline_ends_a_probe_and_reprobing_stops_at_the_warmup_deadline(
    wedged: WedgedEndpoint,
) -> None:
    """Each probe of the wedged pod ends at its deadline as failed; the pod is probed again every
    probe interval until its 30 s warm-up deadline reclaims it, and never after."""
    rig = Rig(target(SERVICE, deadline_s=30.0), stable=0)
    stuck = wedge(rig, wedged)
    asked: list[float] = []
    with capture_logs() as logs:
        async with wired(rig, deadline_s=0.05) as driver:
            for _ in range(45):
                before = wedged.requests
                await step(rig)
                async with asyncio.timeout(10):
                    await driver.wait_probes_idle()
                if wedged.requests > before:
                    asked.append(rig.now)
    timed_out = [e for e in logs if e["event"] == "ramp.probe_timed_out"]
    reclaimed_s = 1_000.0 + 1 + 30

    assert [s - asked[0] for s in asked] == [0.0, 5.0, 10.0, 15.0, 20.0, 25.0]
    assert asked[-1] < reclaimed_s
    assert len(timed_out) == len(asked) == wedged.requests
    assert ("reclaim", stuck) in rig.journal
    assert rig.journal.of("event")[0][2] == ramp.WARMUP_TIMED_OUT
    assert stuck not in rig.cluster.pod_sets[SERVICE]


async def test_a_gone_pod_s_probe_is_cancelled_and_close_cancels_the_rest(
    wedged: WedgedEndpoint,
) -> None:
    """Deleting a wedged pod cancels its probe at the next tick; `close` cancels the others and
    returns once they have ended."""
    rig = Rig(target(SERVICE), stable=0)
    gone, other = wedge(rig, wedged), wedge(rig, wedged)
    async with wired(rig) as driver:
        await step(rig)
        await wedged.wait_requests(2)
        del rig.cluster.pod_sets[SERVICE][gone]
        await step(rig)
        async with asyncio.timeout(10):
            # The cancelled probe ends within a few steps of the event loop; it has no event
            # of its own to wait on (the other probe is still in flight).
            while driver.probes_in_flight > 1:  # noqa: ASYNC110
                await asyncio.sleep(0)
        assert driver.probes_in_flight == 1
        await driver.close()
        assert driver.probes_in_flight == 0
        await step(rig)  # a closed driver starts no probe
        assert driver.probes_in_flight == 0
    assert other in rig.cluster.pod_sets[SERVICE]
    assert wedged.requests == 2


async def test_a_new_pod_s_answer_waits_for_the_serving_pods_probed_with_it(
    wedged: WedgedEndpoint,
) -> None:
    """A slow new pod answering at once is judged only once the serving pods probed alongside
    have answered, against their latency: it is not warm."""

    class Slow(FakeProber):
        async def probe(
            self, ip: str, port: int, path: str, requests: int, timeout_s: float
        ) -> ports.ProbeResult:
            return ports.ProbeResult(requests, 0, (30.0,) * requests)

    rig = Rig(target(SERVICE), stable=2)
    for name in rig.cluster.stable():
        rig.cluster.change(SERVICE, name, ip=LOOPBACK, port=wedged.port)
    rig.prober = Slow(rig.journal)
    new = rig.cluster.add_pod()
    async with wired(rig) as driver:
        await step(rig)  # probes the new pod (answered at once) and the two serving pods
        await wedged.wait_requests(2)
        for _ in range(3):
            await step(rig)
        assert not rig.cluster.pod_sets[SERVICE][new].warm
        wedged.release()
        async with asyncio.timeout(10):
            await driver.wait_probes_idle()
        await step(rig)

    assert not rig.cluster.pod_sets[SERVICE][new].warm
    assert new in rig.state().deadlines
