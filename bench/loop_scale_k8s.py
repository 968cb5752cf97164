"""Loop scale on the Kubernetes path: one controller, N annotated Deployments, real clients.

    .venv/bin/python -m bench.loop_scale_k8s [--deployments 1000] [--ticks 60]

The controller is wired by `autoscaler.app` exactly as `autoscaler run` wires it (wall clock,
1 s ticks, leader election, caches, HTTP server) and talks over HTTP to the in-process
Kubernetes API emulator of the tests (`tests/kube`), which runs in a child process so that this
process's memory is the controller's, and to a real Prometheus (Debian's `prometheus`) that
scrapes nothing: every service holds with `missing-data`, which costs the same three queries
per tick as real data.

Each Deployment has two Running, Ready pods (created directly in the emulator's store, with
their ReplicaSet, as the Deployment and ReplicaSet controllers would). Printed: the duration
of `Loop.step()` per tick (the first tick, which publishes every service's status, apart),
process CPU per tick, the controller process's RSS, Prometheus queries per tick (the adapter's
counter) and API writes per tick (the emulator's request log).

Timings are printed, never asserted (docs/benchmark.md).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
NAMESPACES = 10
LEASE_NAMESPACE = "inference-autoscaler"
WRITES = ("create", "update", "patch", "delete")


# -- the child: the API emulator with the cluster in it --------------------------------------


async def serve_cluster(deployments: int) -> None:
    """Run the emulator, fill it, print its kubeconfig; print request counts on each stdin line."""
    sys.path.insert(0, str(TESTS))
    from kube.emulator import Emulator, serve
    from kube.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        async with serve(Emulator(store=Store()), kubeconfig=Path(tmp) / "kubeconfig") as kube:
            store = kube.store
            fill(store, deployments)
            print(json.dumps({"kubeconfig": str(kube.kubeconfig)}), flush=True)
            while line := await asyncio.to_thread(sys.stdin.readline):
                counts: dict[str, int] = {}
                for call, n in kube.requests.counts.items():
                    key = f"{call.verb} {call.resource}" + (
                        f"/{call.subresource}" if call.subresource else ""
                    )
                    counts[key] = counts.get(key, 0) + n
                print(json.dumps({"request": line.strip(), "counts": counts}), flush=True)


def fill(store: Any, deployments: int) -> None:
    """Namespaces, a GPU node, and each Deployment with its ReplicaSet and two Ready pods."""
    for name in [LEASE_NAMESPACE, *(f"team-{i}" for i in range(NAMESPACES))]:
        store.create("v1/namespaces", {"metadata": {"name": name}})
    allocatable = {"cpu": "256", "memory": "2Ti", "pods": "10000", "nvidia.com/gpu": "10000"}
    store.create(
        "v1/nodes",
        {
            "metadata": {"name": "gpu-node"},
            "status": {"allocatable": allocatable, "capacity": allocatable},
        },
    )
    ready = [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2025-01-01T00:01:00Z"},
        {"type": "ContainersReady", "status": "True"},
    ]
    for i in range(deployments):
        namespace, name = f"team-{i % NAMESPACES}", f"llm-{i:05d}"
        labels = {"app": name}
        notes = {
            "autoscaler.dsec.io/enabled": "true",
            "autoscaler.dsec.io/max-replicas": "20",
            "autoscaler.dsec.io/target-qps-per-replica": "5",
            "autoscaler.dsec.io/target-queue-per-replica": "4",
        }
        template = {
            "metadata": {"labels": labels},
            "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.10.1"}]},
        }
        deployment = store.create(
            "apps/v1/deployments",
            {
                "metadata": {"name": name, "annotations": notes, "labels": labels},
                "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": template},
            },
            namespace=namespace,
        )
        replicaset = store.create(
            "apps/v1/replicasets",
            {
                "metadata": {
                    "name": f"{name}-5d8f7c",
                    "labels": labels,
                    "ownerReferences": [owner(deployment, "Deployment")],
                },
                "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": template},
            },
            namespace=namespace,
        )
        for suffix in ("a1b2c", "d3e4f"):
            pod = store.create(
                "v1/pods",
                {
                    "metadata": {
                        "name": f"{name}-5d8f7c-{suffix}",
                        "labels": labels,
                        "ownerReferences": [owner(replicaset, "ReplicaSet")],
                    },
                    "spec": {"nodeName": "gpu-node", **template["spec"]},
                },
                namespace=namespace,
            )
            store.patch(
                "v1/pods",
                namespace,
                pod["metadata"]["name"],
                {"status": {"phase": "Running", "conditions": ready}},
                content_type="application/merge-patch+json",
                subresource="status",
            )


def owner(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    meta = obj["metadata"]
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
    }


# -- the parent: the controller ---------------------------------------------------------------


def rss_mib() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MiB."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure(deployments: int, ticks: int) -> dict[str, Any]:
    sys.path.insert(0, str(TESTS))
    from prom import server

    from autoscaler import app, logs, settings

    binary = server.find_binary()
    if binary is None:
        raise SystemExit("needs Debian's prometheus package (make prometheus)")
    logs.configure(json=True, level="warning", stream=sys.stderr)
    started_s = time.monotonic()
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.loop_scale_k8s",
        "--serve-cluster",
        str(deployments),
        cwd=ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert child.stdin is not None
    assert child.stdout is not None
    stdin, stdout = child.stdin, child.stdout

    async def ask(what: str) -> dict[str, int]:
        stdin.write(what.encode() + b"\n")
        await stdin.drain()
        counts: dict[str, int] = json.loads(await stdout.readline())["counts"]
        return counts

    kubeconfig = json.loads(await stdout.readline())["kubeconfig"]
    filled_s = time.monotonic() - started_s
    durations: list[float] = []
    queries: list[int] = []
    cpu: list[float] = []
    counted = asyncio.Event()
    try:
        with tempfile.TemporaryDirectory() as tmp, server.running(binary, Path(tmp)) as prom:
            config = settings.Settings(
                kubernetes={"kubeconfig": kubeconfig, "lease_namespace": LEASE_NAMESPACE},
                prometheus={"url": prom.url},
                http={"host": "127.0.0.1", "port": 0},
            )
            before_mib = rss_mib()[0]
            box: dict[str, app.Controller] = {}

            def on_tick(report: Any, duration_s: float) -> None:
                durations.append(duration_s)
                queries.append(box["controller"].metrics.queries_sent)
                cpu.append(time.process_time())
                if len(durations) in (2, ticks + 1):
                    counted.set()

            async with app.wire(config, on_tick=on_tick) as controller:
                box["controller"] = controller
                stop = asyncio.Event()
                task = asyncio.create_task(controller.serve(stop))
                synced_at = time.monotonic()
                await controller.cluster.wait_synced()
                sync_s = time.monotonic() - synced_at
                await counted.wait()
                counted.clear()
                first = await ask("after the first tick")
                await counted.wait()
                last = await ask("at the end")
                stop.set()
                await task
            rss, hwm = rss_mib()
    finally:
        stdin.close()
        await child.wait()
    writes = {
        key: (first.get(key, 0), n - first.get(key, 0))
        for key, n in last.items()
        if key.split()[0] in WRITES
    }
    steady = durations[1:]
    steady_queries = [b - a for a, b in itertools.pairwise(queries)]
    steady_cpu = [b - a for a, b in itertools.pairwise(cpu[1:])]
    return {
        "deployments": deployments,
        "pods": 2 * deployments,
        "cluster_filled_s": round(filled_s, 1),
        "caches_synced_s": round(sync_s, 2),
        "first_tick_s": round(durations[0], 3),
        "tick_p50_s": round(statistics.median(steady), 4),
        "tick_p99_s": round(percentile(steady, 0.99), 4),
        "tick_max_s": round(max(steady), 4),
        "ticks_measured": len(steady),
        "cpu_per_tick_s": round(statistics.mean(steady_cpu), 4) if steady_cpu else None,
        "prometheus_queries_first_tick": queries[0],
        "prometheus_queries_per_tick": sorted(set(steady_queries)),
        "api_writes_until_first_tick_done": {k: v[0] for k, v in sorted(writes.items())},
        "api_writes_in_later_ticks": {k: v[1] for k, v in sorted(writes.items())},
        "rss_mib_before_controller": round(before_mib, 1),
        "rss_mib_at_end": round(rss, 1),
        "rss_mib_peak": round(hwm, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployments", type=int, default=1000)
    parser.add_argument("--ticks", type=int, default=60, help="steady ticks to time (1 s each)")
    parser.add_argument("--serve-cluster", type=int, metavar="N", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_cluster is not None:
        asyncio.run(serve_cluster(args.serve_cluster))
        return
    os.environ.pop("KUBERNETES_SERVICE_HOST", None)  # the emulator's kubeconfig, always
    result = asyncio.run(measure(args.deployments, args.ticks))
    width = max(map(len, result))
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
