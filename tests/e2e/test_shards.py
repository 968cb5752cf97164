"""Three controller replicas split the services into bucket Leases; a dead one's buckets move."""

from __future__ import annotations

import collections
import dataclasses

import aiohttp
from kube.emulator import Kube, Write
from kube.kubelet import FakeCluster
from prom.fixtures import Stack

from autoscaler.core import shards

from .support import (
    LEASE_NAMESPACE,
    LEASES,
    Controllers,
    Running,
    Service,
    SteppedClock,
    advance_until,
    wait_for,
)

AGENT = "inference-autoscaler/"
"""How each replica's requests name it (its User-Agent)."""
BUCKETS = 6
PER_BUCKET = 2


@dataclasses.dataclass
class Audit:
    """Who wrote what, replayed from the API server's log of writes in the order it answered."""

    stale: list[Write]
    """Writes for a service by a replica that did not hold the service's bucket Lease then."""
    writers: dict[str, list[str]]
    """Each service's writers, in the order they first wrote."""


def audit(
    writes: list[Write],
    buckets: shards.Buckets,
    namespace: str,
    names: list[str],
    *,
    since: int = 0,
) -> Audit:
    """Replay `writes`: Lease writes move a bucket's holder; every other write in `namespace`
    is charged to the service whose name starts its object's name (a Deployment, a placement
    tier, a pod, a patched Event). Writers are those from the write at `since` on."""
    holders: dict[str, str] = {}
    stale: list[Write] = []
    writers: dict[str, list[str]] = collections.defaultdict(list)
    by_length = sorted(names, key=len, reverse=True)
    for at, write in enumerate(writes):
        who = write.agent.removeprefix(AGENT)
        if write.status >= 300:
            continue
        if write.resource == "leases" and write.namespace == LEASE_NAMESPACE:
            # A take, a renewal, a release, or an idle replica asking the holder to count it.
            if write.name in buckets.names:
                holders[write.name] = write.holder or ""
            continue
        if write.namespace != namespace or write.name is None:
            continue
        service = next((n for n in by_length if write.name.startswith(n)), None)
        if service is None:
            continue
        key = f"{namespace}/{service}"
        if holders.get(buckets.names[buckets.of(key)]) != who:
            stale.append(write)
        if at >= since and who not in writers[key]:
            writers[key].append(who)
    return Audit(stale, dict(writers))


def spread_names(
    buckets: shards.Buckets, namespace: str, *, per_bucket: int = PER_BUCKET
) -> list[str]:
    """Service names, `per_bucket` in every bucket."""
    chosen: dict[int, list[str]] = collections.defaultdict(list)
    i = 0
    while any(len(chosen[b]) < per_bucket for b in range(len(buckets))):
        name = f"m{i:03d}"
        bucket = buckets.of(f"{namespace}/{name}")
        if len(chosen[bucket]) < per_bucket:
            chosen[bucket].append(name)
        i += 1
    return sorted(n for names in chosen.values() for n in names)


def holders(kube: Kube, buckets: shards.Buckets) -> dict[str, str | None]:
    found = {}
    for name in buckets.names:
        lease = kube.store.get(LEASES, LEASE_NAMESPACE, name)
        found[name] = lease["spec"].get("holderIdentity")
    return found


def led(running: Running) -> frozenset[int]:
    return running.controller.buckets_led()


async def healthz(running: Running) -> str:
    port = running.controller.http_port
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/healthz") as answer,
    ):
        assert answer.status == 200
        return (await answer.text()).strip()


async def test_three_replicas_split_the_buckets_and_a_killed_ones_move_within_a_lease(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
) -> None:
    """Each replica leads two of six buckets and writes only for their services; a killed
    replica's buckets go one to each of the others within a lease and a few retries, and no
    service ever has a writer that does not hold its bucket."""
    for node in range(3):
        kubelet.add_node(f"gpu-{node}", gpus=16)
    namespace = f"{unique}-sh"
    buckets = shards.Buckets.named("inference-autoscaler", BUCKETS)
    names = spread_names(buckets, namespace)
    services = [await Service.create(kube, kubelet, stack.upper, namespace, name) for name in names]
    window = len(kube.requests.writes)

    # Each takes its first choice of bucket at once, the others a fraction of a retry apart;
    # a replica that came away with more than its share then hands the surplus over.
    replicas = [
        await cluster.start(identity, lease_buckets=BUCKETS)
        for identity in ("shard-a", "shard-b", "shard-c")
    ]
    await advance_until(
        clock,
        lambda: [len(led(r)) for r in replicas] == [2, 2, 2],
        limit_s=45,
        what="two buckets each",
    )
    await clock.advance(5)
    evened = len(kube.requests.writes) - window
    shares = [led(r) for r in replicas]
    assert all(shares), shares  # each leads some
    assert sorted(b for share in shares for b in share) == list(range(BUCKETS))  # and only one
    seen = holders(kube, buckets)
    for r, share in zip(replicas, shares, strict=True):
        assert {seen[buckets.names[b]] for b in share} == {r.controller.identity}
        # The loop sees exactly the services of the buckets it leads.
        assert r.controller.loop is not None
        assert {w.id for w in r.controller.last_workloads} == {
            f"{namespace}/{n}" for n in names if buckets.of(f"{namespace}/{n}") in share
        }
    assert all(s.status() is not None for s in services)
    for r, share in zip(replicas, shares, strict=True):
        assert await healthz(r) == f"ok\nbuckets: {len(share)}/{BUCKETS} " + ",".join(
            buckets.names[b] for b in sorted(share)
        )
        registry = r.controller.telemetry.registry
        assert registry.get_sample_value("autoscaler_lease_buckets_led") == len(share)
        assert registry.get_sample_value("autoscaler_leader") == 1

    victim = max(replicas, key=lambda r: len(led(r)))
    survivors = [r for r in replicas if r is not victim]
    moved = led(victim)
    await victim.kill()
    killed_s = clock.now()
    config = victim.controller.settings.kubernetes
    bound_s = config.lease_duration_s + 3.4 * config.retry_interval_s
    while not all(any(b in led(r) for r in survivors) for b in moved):
        assert clock.now() - killed_s <= bound_s, "the dead replica's buckets did not move"
        await clock.advance_to_next(limit_s=1.0)
    took_s = clock.now() - killed_s
    assert took_s <= bound_s
    assert sorted(b for r in survivors for b in led(r)) == list(range(BUCKETS))
    # One each; or both to one when they expired together, which then hands one over.
    await advance_until(
        clock,
        lambda: [len(led(r)) for r in survivors] == [3, 3],
        limit_s=3 * config.lease_duration_s,
        what="three buckets each",
    )
    assert all(r.controller.ready() for r in survivors)
    seen = holders(kube, buckets)
    assert victim.controller.identity not in seen.values()
    for r in survivors:
        registry = r.controller.telemetry.registry
        assert registry.get_sample_value("autoscaler_lease_buckets_led") == len(led(r))
        for b in moved:
            assert registry.get_sample_value(
                "autoscaler_lease_bucket_leader", {"lease": buckets.names[b]}
            ) == (b in led(r))

    # A new floor for everyone: each service is scaled by whoever leads its bucket now.
    for service in services:
        service.annotate(**{"min-replicas": "3"})
    await advance_until(
        clock,
        lambda: all(s.replicas == 3 for s in services),
        limit_s=20,
        what="every service at its new floor",
    )
    for r in survivors:
        await wait_for(lambda r=r: r.controller.ticks > 0, what="ticks")
        await r.controller.cluster.events.wait_idle()

    found = audit(kube.requests.writes[window:], buckets, namespace, names, since=evened)
    assert found.stale == []
    victim_id = victim.controller.identity
    survivor_ids = {r.controller.identity for r in survivors}
    for name in names:
        key = f"{namespace}/{name}"
        owner = seen[buckets.names[buckets.of(key)]]
        wrote = found.writers[key]
        if buckets.of(key) in moved:  # the dead one's, if it wrote, then the survivors'
            assert owner in wrote, (key, wrote)
            assert set(wrote[1:]) <= survivor_ids, (key, wrote)
            assert wrote[0] in {victim_id} | survivor_ids, (key, wrote)
        else:
            assert wrote == [owner], (key, wrote)
    # Events too: each service's come from replicas that held its bucket when they wrote.
    everyone = audit(kube.requests.writes[window:], buckets, namespace, names)
    for service in services:
        key = f"{namespace}/{service.name}"
        posted = [e["reportingInstance"] for e in service.events()]
        assert set(posted) <= set(everyone.writers[key]), (key, posted)


def moves(writes: list[Write], buckets: shards.Buckets) -> int:
    """How many times a bucket Lease went to a new holder."""
    holders: dict[str, str] = {}
    moved = 0
    for write in writes:
        if write.status >= 300 or write.resource != "leases" or write.name not in buckets.names:
            continue
        if write.holder and holders.get(write.name, write.holder) != write.holder:
            moved += 1
        if write.holder:
            holders[write.name] = write.holder
    return moved


async def test_replicas_that_start_in_the_worst_order_even_out_and_a_killed_ones_are_split(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
) -> None:
    """A replica that took all nine buckets hands them over one at a time until three replicas
    lead three each, a killed replica's three move within a lease and a few retries and end
    split five to four, and no service ever has a writer that does not hold its bucket."""
    count = 9
    for node in range(3):
        kubelet.add_node(f"gpu-{node}", gpus=16)
    namespace = f"{unique}-ev"
    buckets = shards.Buckets.named("inference-autoscaler", count)
    names = spread_names(buckets, namespace, per_bucket=1)
    services = [await Service.create(kube, kubelet, stack.upper, namespace, name) for name in names]
    window = len(kube.requests.writes)

    first = await cluster.start("shard-a", lease_buckets=count)
    await advance_until(
        clock, lambda: len(led(first)) == count, limit_s=10, what="every bucket led by one"
    )
    replicas = [first] + [
        await cluster.start(identity, leader=False, lease_buckets=count)
        for identity in ("shard-b", "shard-c")
    ]
    config = first.controller.settings.kubernetes
    lease_s = config.lease_duration_s
    # Services keep changing while the buckets move: a new floor, written by whoever leads.
    for service in services:
        service.annotate(**{"min-replicas": "3"})
    await advance_until(
        clock,
        lambda: sorted(len(led(r)) for r in replicas) == [3, 3, 3],
        limit_s=6 * lease_s,
        what="three buckets each",
    )
    # Settled: nothing moves over the next few leases.
    shares = [led(r) for r in replicas]
    await clock.advance(3 * lease_s)
    assert [led(r) for r in replicas] == shares
    assert moves(kube.requests.writes[window:], buckets) == count - 3
    await advance_until(
        clock,
        lambda: all(s.replicas == 3 for s in services),
        limit_s=20,
        what="every service at its new floor",
    )

    victim = replicas[2]
    survivors = replicas[:2]
    moved = led(victim)
    await victim.kill()
    killed_s = clock.now()
    bound_s = lease_s + 3.4 * config.retry_interval_s
    while not all(any(b in led(r) for r in survivors) for b in moved):
        assert clock.now() - killed_s <= bound_s, "the dead replica's buckets did not move"
        await clock.advance_to_next(limit_s=1.0)
    await advance_until(
        clock,
        lambda: sorted(len(led(r)) for r in survivors) == [4, 5],
        limit_s=3 * lease_s,
        what="the survivors' even split",
    )
    assert victim.controller.identity not in holders(kube, buckets).values()

    for service in services:
        service.annotate(**{"min-replicas": "4"})
    await advance_until(
        clock,
        lambda: all(s.replicas == 4 for s in services),
        limit_s=20,
        what="every service at its second floor",
    )
    for r in survivors:
        await r.controller.cluster.events.wait_idle()
    found = audit(kube.requests.writes[window:], buckets, namespace, names)
    assert found.stale == []
    seen = holders(kube, buckets)
    for name in names:
        key = f"{namespace}/{name}"
        assert seen[buckets.names[buckets.of(key)]] in found.writers[key], key
