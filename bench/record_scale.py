"""What one record per service costs: the smoothing windows' memory and `KubeCluster.workloads()`.

    .venv/bin/python -m bench.record_scale [--services 1000 10000] [--calls 20] [--kind statefulset]

`windows`: a `smoothing.Windows` with the controller's defaults (300 s at 1 s ticks, every
signal) for N services, filled for a whole window: the bytes its buffers hold and the median
time of one `estimate` over every service.

`workloads`: N annotated Deployments, each with a ReplicaSet and two Running, Ready pods on one
GPU node, in the API emulator of the tests (`tests/kube`, in this process, idle while timed); a
`KubeCluster` on the real client lists and watches them. Timed: the first `workloads()` call, the
median of `--calls` calls with nothing changed, and the median of calls after a label change on
one pod of 1 % of the services (the call waits until the informer has seen every change), and
the call after a write of every service's `status` and `state` annotations (what a new term's
first tick writes on a cluster whose Deployments hold no state yet: the second tick's call).
With `--kind statefulset` every service is a StatefulSet with its two pods instead (no
ReplicaSet): the other kinds' records, whose serving pods are those their selector selects.

Timings are printed, never asserted (docs/benchmark.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
NAMESPACES = 10
MIB = 1 << 20


def windows(services: int) -> dict[str, Any]:
    from autoscaler.core import model, smoothing

    w = smoothing.Windows(smoothing.SmoothingConfig())
    ids = [model.ServiceId(f"team-{i % NAMESPACES}/llm-{i:05d}") for i in range(services)]
    rows = w.rows_for(ids)
    rng = np.random.default_rng(7)
    slots = w.config.slots
    for t in range(slots):
        w.record(float(t), rows, rng.uniform(0.0, 50.0, (services, len(w.signals))))
    buffers = sum(a.nbytes for a in vars(w).values() if isinstance(a, np.ndarray))
    half_lives = np.full(services, 30.0)
    took = []
    for _ in range(5):
        started = time.perf_counter()
        w.estimate(float(slots - 1), rows, half_lives)
        took.append(time.perf_counter() - started)
    return {
        "services": services,
        "windows_rows_allocated": int(vars(w)["_val"].shape[0]),
        "windows_mib": round(buffers / MIB, 1),
        "estimate_ms": round(1000 * statistics.median(took), 1),
    }


KINDS = {"deployment": "apps/v1/deployments", "statefulset": "apps/v1/statefulsets"}


def fill(store: Any, services: int, kind: str = "deployment") -> list[tuple[str, str]]:
    """Namespaces, a GPU node, and each Deployment with its ReplicaSet and two Ready pods (or
    each StatefulSet with its two pods); the first pod of each, by namespace and name."""
    for i in range(NAMESPACES):
        store.create("v1/namespaces", {"metadata": {"name": f"team-{i}"}})
    allocatable = {"cpu": "256", "memory": "2Ti", "pods": "100000", "nvidia.com/gpu": "100000"}
    node = {"metadata": {"name": "gpu-node"}}
    store.create("v1/nodes", {**node, "status": {"allocatable": allocatable}})
    ready = [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2025-01-01T00:01:00Z"},
        {"type": "ContainersReady", "status": "True"},
    ]
    firsts = []
    for i in range(services):
        namespace, name = f"team-{i % NAMESPACES}", f"llm-{i:05d}"
        labels = {"app": name}
        notes = {
            "autoscaler.dsec.io/enabled": "true",
            "autoscaler.dsec.io/max-replicas": "20",
            "autoscaler.dsec.io/target-qps-per-replica": "5",
        }
        template = {
            "metadata": {"labels": labels},
            "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.10.1"}]},
        }
        spec = {"replicas": 2, "selector": {"matchLabels": labels}, "template": template}
        meta = {"name": name, "annotations": notes, "labels": labels}
        if kind == "statefulset":
            made = store.create(
                KINDS[kind],
                {"metadata": meta, "spec": {**spec, "serviceName": name}},
                namespace=namespace,
            )
            pods, parent = [f"{name}-0", f"{name}-1"], owner(made, "StatefulSet")
        else:
            deployment = store.create(
                KINDS[kind], {"metadata": meta, "spec": spec}, namespace=namespace
            )
            rs_meta = {"name": f"{name}-5d8f7c", "labels": labels}
            rs_meta["ownerReferences"] = [owner(deployment, "Deployment")]
            replicaset = store.create(
                "apps/v1/replicasets", {"metadata": rs_meta, "spec": spec}, namespace=namespace
            )
            pods = [f"{name}-5d8f7c-{suffix}" for suffix in ("a1b2c", "d3e4f")]
            parent = owner(replicaset, "ReplicaSet")
        for pod_name in pods:
            pod_meta = {"name": pod_name, "labels": labels}
            pod_meta["ownerReferences"] = [parent]
            pod_spec = {"nodeName": "gpu-node", **template["spec"]}
            pod = store.create(
                "v1/pods", {"metadata": pod_meta, "spec": pod_spec}, namespace=namespace
            )
            store.patch(
                "v1/pods",
                namespace,
                pod["metadata"]["name"],
                {"status": {"phase": "Running", "conditions": ready}},
                content_type="application/merge-patch+json",
                subresource="status",
            )
        firsts.append((namespace, pods[0]))
    return firsts


class _Countdown:
    """Set `done` after `left` informer events."""

    def __init__(self, left: int) -> None:
        self.left = left
        self.done = asyncio.Event()

    def tick(self, *_: object) -> None:
        self.left -= 1
        if self.left <= 0:
            self.done.set()


def owner(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    meta = obj["metadata"]
    uid = meta["uid"]
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "name": meta["name"],
        "uid": uid,
        "controller": True,
    }


async def workloads(
    services: int, calls: int, kind: str = "deployment", profile: str | None = None
) -> dict[str, Any]:
    sys.path.insert(0, str(TESTS))
    from kube.emulator import Emulator, serve
    from kube.store import Store

    from autoscaler import logs
    from autoscaler.adapters.kubernetes import cluster

    logs.configure(json=True, level="warning", stream=sys.stderr)
    async with serve(Emulator(store=Store())) as kube:
        firsts = fill(kube.store, services, kind)
        api = kube.api_client()
        made = cluster.KubeCluster(api, identity="bench", wall_now=time.time)
        task = asyncio.create_task(made.run())
        try:
            await made.wait_synced()
            started = time.perf_counter()
            found = made.workloads()
            first_s = time.perf_counter() - started
            assert len(found) == services, len(found)
            steady = []
            for _ in range(calls):
                started = time.perf_counter()
                made.workloads()
                steady.append(time.perf_counter() - started)
            changed = []
            step = 100  # 1 % of the services
            for call in range(min(calls, step)):
                touched = firsts[call::step]
                seen = _Countdown(len(touched))
                made.caches.pods.add_handler(seen.tick)
                for namespace, pod in touched:
                    patch = {"metadata": {"labels": {"bench": str(call)}}}
                    kube.store.patch(
                        "v1/pods",
                        namespace,
                        pod,
                        patch,
                        content_type="application/merge-patch+json",
                    )
                await asyncio.wait_for(seen.done.wait(), 60)
                made.caches.pods.remove_handler(seen.tick)
                started = time.perf_counter()
                made.workloads()
                changed.append(time.perf_counter() - started)
            restated_s = await write_states(kube.store, made, services, kind, profile)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await api.close()
    return {
        "services": services,
        "workloads_first_ms": round(1000 * first_s, 1),
        "workloads_unchanged_ms": round(1000 * statistics.median(steady), 3),
        "workloads_1pct_changed_ms": round(1000 * statistics.median(changed), 3),
        "workloads_after_every_state_ms": round(1000 * restated_s[0], 1),
        "workloads_after_every_state_cpu_ms": round(1000 * restated_s[1], 1),
    }


async def write_states(
    store: Any, made: Any, services: int, kind: str, profile: str | None = None
) -> tuple[float, float]:
    """Write every service's `status` and `state` annotations as a publish does, wait until the
        informer has seen them all, and time the `workloads()` call that follows (wall clock and
    process CPU)."""
    from autoscaler.contract import annotations as contract
    from autoscaler.contract import targets

    seen = _Countdown(services)
    informer = (
        made.caches.deployments
        if kind == "deployment"
        else made.caches.workloads[targets.STATEFULSETS]
    )
    informer.add_handler(seen.tick)
    state = '{"lastScaleChange":1735689600.0,"replicas":2}'
    for i in range(services):
        notes = {contract.STATUS_KEY: '{"desired":2}', contract.STATE_KEY: state}
        store.patch(
            KINDS[kind],
            f"team-{i % NAMESPACES}",
            f"llm-{i:05d}",
            {"metadata": {"annotations": notes}},
            content_type="application/merge-patch+json",
        )
    await asyncio.wait_for(seen.done.wait(), 120)
    informer.remove_handler(seen.tick)
    profiler = cProfile.Profile() if profile else None
    started, cpu = time.perf_counter(), time.process_time()
    if profiler is not None:
        profiler.enable()
    found = made.workloads()
    took = time.perf_counter() - started, time.process_time() - cpu
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(profile)
    assert all(w.state is not None for w in found)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--kind", choices=sorted(KINDS), default="deployment")
    parser.add_argument("--profile", metavar="FILE", help="cProfile the state write's call")
    args = parser.parse_args()
    for services in args.services:
        found = asyncio.run(workloads(services, args.calls, args.kind, args.profile))
        result = {"kind": args.kind, **windows(services), **found}
        print("  ".join(f"{key}={value}" for key, value in result.items()), flush=True)


if __name__ == "__main__":
    main()
