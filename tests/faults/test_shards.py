"""Bucket Leases under kills: three replicas share six buckets; replicas are killed at seeded
moments, half of them with a scale write held in flight by the API server.

Before each kill the replicas even their split out (a replica started after a kill leads none
and is handed its share). Each kill's buckets must move to the living replicas within a lease
duration and two retries,
every successful write for a service must come from the replica holding its bucket at that
moment (replayed from the API server's write log), and a held write of a dead replica must be
refused (409) once the new holder has written.
"""

from __future__ import annotations

import asyncio
import functools
import random

import pytest
from e2e.support import (
    Controllers,
    Running,
    Service,
    SteppedClock,
    advance_until,
    wait_for,
)
from e2e.test_shards import audit, holders, led, spread_names
from kube.emulator import Kube
from kube.kubelet import FakeCluster
from prom.fixtures import Stack

from autoscaler.core import shards

from .figures import Figures
from .test_api_faults import advance_to_next_until, crashes, kill_replica, reached, seen

BUCKETS = 6
KILLS = 6


@pytest.mark.timeout(280)
async def test_killed_shards_hand_their_buckets_over_in_time_and_never_share_a_service(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
    figures: Figures,
) -> None:
    """Six replicas killed at random moments, each after the split has evened out, lose their
    buckets to the living within a lease and two retries, to the least loaded first, and no
    service is ever written by a replica that does not hold its bucket, held writes included."""
    rng = random.Random(14)
    for node in range(2):
        kubelet.add_node(f"gpu-{node}", gpus=32)
    namespace = f"{unique}-shk"
    buckets = shards.Buckets.named("inference-autoscaler", BUCKETS)
    names = spread_names(buckets, namespace, per_bucket=1)
    services = {
        name: await Service.create(kube, kubelet, stack.upper, namespace, name) for name in names
    }
    window = len(kube.requests.writes)
    alive = [
        await cluster.start(identity, lease_buckets=BUCKETS)
        for identity in ("shard-a", "shard-b", "shard-c")
    ]
    await advance_until(
        clock,
        lambda: sum(len(led(r)) for r in alive) == BUCKETS,
        limit_s=10,
        what="every bucket led",
    )
    config = alive[0].controller.settings.kubernetes
    bound_s = config.lease_duration_s + 3.4 * config.retry_interval_s
    takeovers: list[float] = []
    for kill in range(KILLS):
        evened_s = await advance_until(
            clock,
            lambda: even(alive),
            limit_s=6 * config.lease_duration_s,
            what="an even split",
        )
        victim = rng.choice([r for r in alive if led(r)])
        moved = led(victim)
        others = [r for r in alive if r is not victim]
        least = min(len(led(r)) for r in others)
        moment_s = clock.now() + rng.uniform(0.0, 10.0)
        await advance_to_next_until(
            clock, functools.partial(reached, clock, moment_s), limit_s=11, what="the kill moment"
        )
        wanted = 3 + kill  # every kill comes with a rescale of every service
        for service in services.values():
            service.annotate(**{"min-replicas": str(wanted)})
        target = next(n for n in names if buckets.of(f"{namespace}/{n}") in moved)
        await wait_for(
            functools.partial(seen, victim, services[target], str(wanted)),
            what="the new min-replicas in the victim's cache",
        )
        # On every other kill its scale write is in flight, held by the API server.
        held = await kill_replica(kube, clock, victim, holding=target if kill % 2 == 0 else None)
        killed_s = clock.now()
        alive.remove(victim)
        await advance_to_next_until(
            clock,
            lambda moved=moved: all(any(b in led(r) for r in alive) for b in moved),
            limit_s=bound_s + 1,
            what="the dead replica's buckets taken",
        )
        takeovers.append(clock.now() - killed_s)
        took_least = [r for r in alive if len(led(r) & moved) and len(led(r) - moved) == least]
        await advance_until(
            clock,
            lambda wanted=wanted: all(s.replicas == wanted for s in services.values()),
            limit_s=30,
            what="every service rescaled",
        )
        if held is not None:  # the new holder has written: now the dead one's write lands
            held.release()
            async with asyncio.timeout(5):
                await held.answered.wait()
        found = audit(kube.requests.writes[window:], buckets, namespace, names)
        seen_holders = holders(kube, buckets)
        figures.record(
            "shards",
            kill=kill + 1,
            evened_s=evened_s,
            buckets_moved=len(moved),
            takeover_s=takeovers[-1],
            to_least_loaded=bool(took_least),
            write_in_flight=held is not None,
            stale_writes=len(found.stale),
            held_write_status=None if held is None else held.status,
            split="/".join(str(len(led(r))) for r in alive),
        )
        assert found.stale == []
        assert held is None or held.status == 409
        assert victim.controller.identity not in seen_holders.values()
        assert sorted(b for r in alive for b in led(r)) == list(range(BUCKETS))
        assert took_least, "no moved bucket went to a least loaded replica"
        assert crashes(alive) == 0
        alive.append(await cluster.start(f"shard-{3 + kill}", leader=False, lease_buckets=BUCKETS))

    assert max(takeovers) <= bound_s, takeovers


def even(alive: list[Running]) -> bool:
    """Whether every bucket is led by one replica and the replicas lead within one of each
    other (the floor or the ceiling of their share)."""
    counts = [len(led(r)) for r in alive]
    return sum(counts) == BUCKETS and max(counts) - min(counts) <= 1
