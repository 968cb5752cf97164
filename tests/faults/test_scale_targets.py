"""Scale targets other than Deployments under API faults.

`scale_targets`: a StatefulSet, a LeaderWorkerSet and an Argo Rollout are each scaled by one
controller while the emulator's seeded chaos fails half of the calls, first with 409s on
every write (the `/scale` patches and the annotation patches), then with 500/503s on every
call (watches included). Each phase raises the service's floor; the workload is never scaled
below what it had, the controller never crashes, and once the faults stop it reaches the new
floor. The writes to `<kind>/scale` are counted.
"""

from __future__ import annotations

import functools

import pytest
from e2e.support import Controllers, Running, SteppedClock, advance_until, managed, wait_for
from e2e.support import wait_for_load as wait_for_load_of
from e2e.test_scale_targets import Workload, install_crd
from kube.emulator import Kube
from kube.kubelet import FakeCluster
from prom.fixtures import Stack

from autoscaler.contract import targets
from autoscaler.contract.annotations import PREFIX

from .figures import Figures

REQUEST_TIMEOUT_S = 1.5
RATE = 0.5
FAULT_S = 15
"""Seconds of controller time each fault lasts."""
MIN_FAULTS = 3
WATCH_LIMIT_S = 0.5
"""Wall seconds a watch lasts on the emulator here, so that watches come back under chaos."""
PHASES = (("409", 5), ("5xx", 8))
"""Each fault, and the floor (`min-replicas`) set while it lasts."""
KINDS = [targets.STATEFULSETS, targets.LEADER_WORKER_SETS, targets.ROLLOUTS]


def crashed(running: Running) -> bool:
    return running.task.done() and not running.task.cancelled() and bool(running.task.exception())


def seen(running: Running, workload: Workload, min_replicas: str) -> bool:
    """Whether the controller's cache holds the workload with this `min-replicas`."""
    cached = running.controller.cluster.caches.workload(
        workload.kind, workload.namespace, workload.name
    )
    notes = (cached or {}).get("metadata", {}).get("annotations") or {}
    return bool(notes.get(PREFIX + "min-replicas") == min_replicas)


@pytest.mark.timeout(170)
@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
async def test_a_scale_target_converges_through_conflicts_and_server_errors(
    kind: targets.TargetKind,
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
    figures: Figures,
) -> None:
    """Under 409s on half the writes, then 5xx on half the calls, the controller never crashes
    nor scales the workload down, and brings it to its new floor once the faults stop."""
    kube.emulator.watch_limit_s = WATCH_LIMIT_S
    if kind.custom:
        install_crd(kube, kind)
    kubelet.add_node("gpu-1", gpus=40)
    notes = managed(**{"scale-up-cooldown": "0s", "max-replicas": "12"})
    ns = f"{unique}-{kind.name[:4]}"
    model = await Workload.make(
        kube, kubelet, stack.upper, ns, "model", kind=kind, annotations=notes
    )
    model.serve(rate_per_s=12.5)
    await wait_for_load_of(stack.prometheus, model, 25.0)
    running = await cluster.start("ctl-a", request_timeout_s=REQUEST_TIMEOUT_S)
    await advance_until(clock, lambda: model.replicas == 3, limit_s=10, what="first scale-up")
    scale = f"{kind.plural}/scale"

    for seed, (fault, floor) in enumerate(PHASES):
        model.annotate(**{"min-replicas": str(floor)})
        before = model.replicas
        writes = kube.requests.count("patch", scale, namespace=model.namespace)
        chaos = kube.chaos(fault, RATE, seed=1000 + 10 * KINDS.index(kind) + seed)
        lowest = before
        steps = 0
        while steps < FAULT_S or (chaos.hits < MIN_FAULTS and steps < 10 * FAULT_S):
            await clock.advance(1.0)
            lowest = min(lowest, model.replicas)
            steps += 1
        kube.calm()
        calm_s = clock.now()
        await wait_for(
            functools.partial(seen, running, model, str(floor)),
            what=f"the cache after {fault}",
            timeout_s=15,
        )

        def converged(floor: int = floor) -> bool:
            nonlocal lowest
            lowest = min(lowest, model.replicas)
            return model.replicas == floor

        await advance_until(clock, converged, limit_s=60, what=f"{kind.kind} after {fault}")
        sent = kube.requests.count("patch", scale, namespace=model.namespace) - writes
        figures.record(
            "scale_targets",
            case=f"{kind.kind} {fault} {RATE:.0%}",
            faults=chaos.hits,
            scale_writes=sent,
            converged_s=clock.now() - calm_s,
            scale_downs=int(lowest < before),
            crashes=int(crashed(running)),
        )
        assert not crashed(running)
        assert lowest >= before
        assert chaos.hits >= MIN_FAULTS
