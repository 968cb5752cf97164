"""Loop scale on the Kubernetes path: one controller, N annotated Deployments, real clients.

    .venv/bin/python -m bench.loop_scale_k8s [--deployments 1000] [--ticks 60]
        [--change-share 0.1] [--change-every-s 60] [--seed 14] [--scrape-interval-s 5]
        [--query-timeout-s 2] [--profile PATH]

Run it with `OPENBLAS_NUM_THREADS=1`, as the image runs the controller: the controller runs in
this process, and idle BLAS threads spinning beside a single-threaded loop double its CPU on a
busy two-core machine.

The controller is wired by `autoscaler.app` exactly as `autoscaler run` wires it (wall clock,
1 s ticks, leader election, caches, HTTP server) and talks over HTTP to the in-process
Kubernetes API emulator of the tests (`tests/kube`), which runs in a child process so that this
process's memory is the controller's, and to a real Prometheus (Debian's `prometheus`) that
scrapes an exporter in that same child every `--scrape-interval-s`: per pod, vLLM's request
counter and waiting-queue gauge and DCGM's GPU utilisation. Every service has real data and
decides.

Each Deployment starts with two Running, Ready pods (created directly in the emulator's store,
with their ReplicaSet, as the Deployment and ReplicaSet controllers would); when the controller
scales a Deployment, Ready pods follow its replicas at once (`follow`). Each service starts at a
seeded load of one to six replicas' worth, split over its pods; every `--change-every-s` seconds a
seeded `--change-share` of the services moves to a new load (so some scale, and their status and
replicas are written), the rest keep theirs. The controller starts once Prometheus has a rate for
every pod.

Printed: the duration of the whole tick (`Loop.step()`, with its publish, and the telemetry
that follows it), the first tick apart; process CPU per tick; the garbage collector's time per
tick and its collections by generation (0, 1, 2); the controller process's RSS;
Prometheus queries per tick (the adapter's counter); API writes per tick (the emulator's
request log), beside the outcomes that changed (a new count, kind or, unless steady, reason:
what the loop publishes on, so status writes should not outnumber them); and the ticks'
decisions by kind.

Timings are printed, never asserted (docs/benchmark.md).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import datetime
import gc
import itertools
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
NAMESPACES = 10
LEASE_NAMESPACE = "inference-autoscaler"
WRITES = ("create", "update", "patch", "delete")
PODS_PER_DEPLOYMENT = 2
TARGET_QPS_PER_REPLICA = 5.0
TARGET_QUEUE_PER_REPLICA = 4.0


# -- the child: the API emulator with the cluster in it --------------------------------------


async def serve_cluster(
    deployments: int, *, change_share: float, change_every_s: float, seed: int
) -> None:
    """Run the emulator and the exporter, fill both, print the kubeconfig and the exporter's
    address; print request counts on each stdin line."""
    sys.path.insert(0, str(TESTS))
    from aiohttp import web
    from kube.emulator import Emulator, serve
    from kube.store import Store

    load = Load(deployments, change_share=change_share, seed=seed)

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(
            body=load.render(time.monotonic()),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

    async def change() -> None:
        while True:
            await asyncio.sleep(change_every_s)
            load.change(time.monotonic())

    exporter = web.Application()
    exporter.router.add_get("/metrics", metrics)
    runner = web.AppRunner(exporter, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    target = f"127.0.0.1:{runner.addresses[0][1]}"
    tasks: list[asyncio.Task[None]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            kubeconfig = Path(tmp) / "kubeconfig"
            async with serve(Emulator(store=Store()), kubeconfig=kubeconfig) as kube:
                store = kube.store
                fill(store, load)
                tasks += [asyncio.create_task(change()), asyncio.create_task(follow(store, load))]
                print(
                    json.dumps({"kubeconfig": str(kube.kubeconfig), "target": target}), flush=True
                )
                while line := await asyncio.to_thread(sys.stdin.readline):
                    counts: dict[str, int] = {}
                    for call, n in kube.requests.counts.items():
                        key = f"{call.verb} {call.resource}" + (
                            f"/{call.subresource}" if call.subresource else ""
                        )
                        counts[key] = counts.get(key, 0) + n
                    counts["pods (not a write)"] = load.pods()
                    print(json.dumps({"request": line.strip(), "counts": counts}), flush=True)
    finally:
        for task in tasks:
            task.cancel()
        await runner.cleanup()


class Pod:
    """One pod's series: its request counter counts at its share of its service's rate."""

    __slots__ = ("counted", "gpu", "name", "rate_per_s", "requests", "since_s", "waiting")

    def __init__(self, namespace: str, name: str, now_s: float) -> None:
        labels = f'namespace="{namespace}",pod="{name}"'
        self.name = name
        self.requests = f'vllm:request_success_total{{{labels},finished_reason="stop"}} '
        self.waiting = f"vllm:num_requests_waiting{{{labels}}} "
        self.gpu = f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",{labels},container="vllm"}} '
        self.counted = 0.0
        self.since_s = now_s
        self.rate_per_s = 0.0

    def counter(self, now_s: float) -> float:
        return self.counted + self.rate_per_s * (now_s - self.since_s)


class Load:
    """Every pod's series as vLLM and dcgm-exporter serve them, under a seeded load.

    Per service, a request rate split evenly over its pods, with a waiting queue and a GPU
    utilisation that follow each pod's share. `change` moves a share of the services to new
    loads; pods come and go with their Deployment's replicas (`follow`). A request counter keeps
    counting from where it was at a change, as a server's does.
    """

    def __init__(self, deployments: int, *, change_share: float, seed: int) -> None:
        self.random = np.random.default_rng(seed)
        self.deployments = deployments
        self.change_share = change_share
        self.rate_per_s: list[float] = self._loads(deployments)
        self.serving: list[list[Pod]] = [[] for _ in range(deployments)]

    def _loads(self, n: int) -> list[float]:
        """Service-wide request rates: what one to six replicas serve at their target."""
        rates: list[float] = (self.random.uniform(1.0, 6.0, n) * TARGET_QPS_PER_REPLICA).tolist()
        return rates

    def pods(self) -> int:
        return sum(map(len, self.serving))

    def set_pods(self, service: int, names: list[str], now_s: float) -> None:
        """The service's pods are now `names`: new ones start counting, gone ones stop."""
        kept = {pod.name: pod for pod in self.serving[service]}
        namespace = f"team-{service % NAMESPACES}"
        self.serving[service] = [kept.get(n) or Pod(namespace, n, now_s) for n in names]
        self._split(service, now_s)

    def change(self, now_s: float) -> None:
        n = max(1, round(self.change_share * self.deployments))
        services = self.random.choice(self.deployments, size=n, replace=False).tolist()
        for service, rate in zip(services, self._loads(n), strict=True):
            self.rate_per_s[service] = rate
            self._split(service, now_s)

    def _split(self, service: int, now_s: float) -> None:
        pods = self.serving[service]
        for pod in pods:
            pod.counted, pod.since_s = pod.counter(now_s), now_s
            pod.rate_per_s = self.rate_per_s[service] / len(pods)

    def render(self, now_s: float) -> bytes:
        pods = [pod for serving in self.serving for pod in serving]
        lines = ["# TYPE vllm:request_success_total counter"]
        lines += [f"{pod.requests}{pod.counter(now_s):.3f}" for pod in pods]
        lines.append("# TYPE vllm:num_requests_waiting gauge")
        lines += [f"{pod.waiting}{pod.rate_per_s * 0.4:.0f}" for pod in pods]
        lines.append("# TYPE DCGM_FI_DEV_GPU_UTIL gauge")
        lines += [f"{pod.gpu}{min(100.0, 20.0 + 10.0 * pod.rate_per_s):.0f}" for pod in pods]
        return ("\n".join(lines) + "\n").encode()


def pod_name(i: int, n: int) -> str:
    return f"{deployment_name(i)}-5d8f7c-{n:05x}"


def deployment_name(i: int) -> str:
    return f"llm-{i:05d}"


def ready_now() -> list[dict[str, str]]:
    """A pod's conditions once Ready, now: ready as it starts (the bench has no warm-up)."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return [
        {"type": "Ready", "status": "True", "lastTransitionTime": now},
        {"type": "ContainersReady", "status": "True"},
    ]


def fill(store: Any, load: Load) -> None:
    """Namespaces, a GPU node, and each Deployment with its ReplicaSet and two Ready pods."""
    for name in [LEASE_NAMESPACE, *(f"team-{i}" for i in range(NAMESPACES))]:
        store.create("v1/namespaces", {"metadata": {"name": name}})
    allocatable = {"cpu": "256", "memory": "2Ti", "pods": "100000", "nvidia.com/gpu": "100000"}
    store.create(
        "v1/nodes",
        {
            "metadata": {"name": "gpu-node"},
            "status": {"allocatable": allocatable, "capacity": allocatable},
        },
    )
    now_s = time.monotonic()
    for i in range(load.deployments):
        namespace, name = f"team-{i % NAMESPACES}", deployment_name(i)
        labels = {"app": name}
        notes = {
            "autoscaler.dsec.io/enabled": "true",
            "autoscaler.dsec.io/max-replicas": "20",
            "autoscaler.dsec.io/target-qps-per-replica": f"{TARGET_QPS_PER_REPLICA:g}",
            "autoscaler.dsec.io/target-queue-per-replica": f"{TARGET_QUEUE_PER_REPLICA:g}",
        }
        spec = {
            "replicas": PODS_PER_DEPLOYMENT,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.10.1"}]},
            },
        }
        deployment = store.create(
            "apps/v1/deployments",
            {"metadata": {"name": name, "annotations": notes, "labels": labels}, "spec": spec},
            namespace=namespace,
        )
        store.create(
            "apps/v1/replicasets",
            {
                "metadata": {
                    "name": f"{name}-5d8f7c",
                    "labels": labels,
                    "ownerReferences": [owner(deployment, "Deployment")],
                },
                "spec": spec,
            },
            namespace=namespace,
        )
        scale_pods(store, load, i, PODS_PER_DEPLOYMENT, now_s)


def scale_pods(store: Any, load: Load, service: int, replicas: int, now_s: float) -> None:
    """What the ReplicaSet controller, the scheduler and the kubelet do for one Deployment:
    Ready pods up to `replicas` (the newest deleted first), and its ReplicaSet's count."""
    namespace, name = f"team-{service % NAMESPACES}", deployment_name(service)
    names = [pod.name for pod in load.serving[service]]
    if len(names) == replicas:
        return
    replicaset = store.get("apps/v1/replicasets", namespace, f"{name}-5d8f7c")
    while len(names) > replicas:
        store.delete("v1/pods", namespace, names.pop())
    taken = set(names)
    n = 0
    while len(names) < replicas:
        while pod_name(service, n) in taken:
            n += 1
        pod = pod_name(service, n)
        taken.add(pod)
        names.append(pod)
        template = replicaset["spec"]["template"]
        store.create(
            "v1/pods",
            {
                "metadata": {
                    "name": pod,
                    "labels": template["metadata"]["labels"],
                    "ownerReferences": [owner(replicaset, "ReplicaSet")],
                },
                "spec": {"nodeName": "gpu-node", **template["spec"]},
            },
            namespace=namespace,
        )
        store.patch(
            "v1/pods",
            namespace,
            pod,
            {"status": {"phase": "Running", "conditions": ready_now()}},
            content_type="application/merge-patch+json",
            subresource="status",
        )
    store.patch(
        "apps/v1/replicasets",
        namespace,
        f"{name}-5d8f7c",
        {"spec": {"replicas": replicas}},
        content_type="application/merge-patch+json",
    )
    load.set_pods(service, names, now_s)


async def follow(store: Any, load: Load) -> None:
    """Pods follow each Deployment's `spec.replicas`, as the controllers of a cluster make them,
    from a watch on the Deployments (changes only, never a list per pass)."""
    index = {deployment_name(i): i for i in range(load.deployments)}
    watch = store.watch("apps/v1/deployments", None, resource_version=store.resource_version)
    async for event in watch:
        deployment = event.get("object") or {}
        service = index.get(deployment.get("metadata", {}).get("name"))
        replicas = deployment.get("spec", {}).get("replicas")
        if event.get("type") == "MODIFIED" and service is not None and isinstance(replicas, int):
            scale_pods(store, load, service, replicas, time.monotonic())


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


class Collections:
    """CPU time the garbage collector spends, by generation, from `gc.callbacks` (process time:
    on a shared machine, wall time would count the time the process waits for a core)."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.counts = [0, 0, 0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.process_time()
        else:
            generation = info["generation"]
            self.seconds[generation] += time.process_time() - self._started
            self.counts[generation] += 1

    def snapshot(self) -> tuple[float, list[int]]:
        return sum(self.seconds), list(self.counts)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def wait_for_rates(
    prom: Any, pods: int, *, scrape_interval_s: float, timeout_s: float = 120.0
) -> float:
    """Seconds until Prometheus has a request rate for every pod (two scrapes of each)."""
    started_s = time.monotonic()
    window = f"{4 * scrape_interval_s:g}s"
    while time.monotonic() - started_s < timeout_s:
        found = await asyncio.to_thread(
            prom.query, f"count(rate(vllm:request_success_total[{window}]))"
        )
        if found and int(float(found[0]["value"][1])) >= pods:
            return time.monotonic() - started_s
        await asyncio.sleep(0.5)
    raise SystemExit(f"Prometheus had no rate for all {pods} pods after {timeout_s:g} s")


async def measure(
    deployments: int,
    ticks: int,
    *,
    change_share: float,
    change_every_s: float,
    seed: int,
    scrape_interval_s: float,
    query_timeout_s: float,
    profile: cProfile.Profile | None = None,
) -> dict[str, Any]:
    sys.path.insert(0, str(TESTS))
    from prom import server

    from autoscaler import app, logs, settings

    binary = server.find_binary()
    if binary is None:
        raise SystemExit("needs Debian's prometheus package (make prometheus)")
    # The tests' harness scrapes every second; 20,000 pods' series that often crowd out the
    # controller on a small machine, and scrapes that miss their deadline read as missing data.
    server.SCRAPE_INTERVAL_S = scrape_interval_s
    logs.configure(json=True, level="warning", stream=sys.stderr)
    started_s = time.monotonic()
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.loop_scale_k8s",
        "--serve-cluster",
        str(deployments),
        "--change-share",
        str(change_share),
        "--change-every-s",
        str(change_every_s),
        "--seed",
        str(seed),
        cwd=ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        limit=2**24,
    )
    assert child.stdin is not None
    assert child.stdout is not None
    stdin, stdout = child.stdin, child.stdout

    async def ask(what: str) -> dict[str, int]:
        stdin.write(what.encode() + b"\n")
        await stdin.drain()
        counts: dict[str, int] = json.loads(await stdout.readline())["counts"]
        return counts

    started = json.loads(await stdout.readline())
    filled_s = time.monotonic() - started_s
    durations: list[float] = []
    queries: list[int] = []
    cpu: list[float] = []
    kinds: Counter[str] = Counter()
    counted = asyncio.Event()
    collections = Collections()
    gc.callbacks.append(collections)
    collected: list[tuple[float, list[int]]] = []
    changes: list[int] = []
    last_outcomes: dict[Any, tuple[Any, ...]] = {}
    try:
        with (
            tempfile.TemporaryDirectory() as tmp,
            server.running(binary, Path(tmp), targets=[started["target"]]) as prom,
        ):
            data_s = await wait_for_rates(
                prom, PODS_PER_DEPLOYMENT * deployments, scrape_interval_s=scrape_interval_s
            )
            config = settings.Settings(
                kubernetes={
                    "kubeconfig": started["kubeconfig"],
                    "lease_namespace": LEASE_NAMESPACE,
                },
                prometheus={
                    "url": prom.url,
                    "scrape_interval_s": scrape_interval_s,
                    "timeout_s": query_timeout_s,
                },
                http={"host": "127.0.0.1", "port": 0},
            )
            before_mib = rss_mib()[0]
            box: dict[str, app.Controller] = {}

            def on_tick(report: Any, duration_s: float) -> None:
                durations.append(duration_s)
                queries.append(box["controller"].metrics.queries_sent)
                cpu.append(time.process_time())
                collected.append(collections.snapshot())
                outcomes = {
                    service: (d.desired, d.kind, None if d.kind.value == "steady" else d.reason)
                    for service, d in report.decisions.items()
                }
                if len(durations) > 1:
                    kinds.update(
                        f"{d.kind.value}/{d.reason.value}" for d in report.decisions.values()
                    )
                    # What the loop publishes on: a new count, kind or (unless steady) reason.
                    changes.append(sum(outcomes[s] != last_outcomes.get(s) for s in outcomes))
                last_outcomes.clear()
                last_outcomes.update(outcomes)
                if len(durations) in (2, ticks + 1):
                    counted.set()
                if profile is not None and len(durations) == 1:
                    profile.enable()
                if profile is not None and len(durations) == ticks + 1:
                    profile.disable()

            async with app.wire(config, on_tick=on_tick, freeze_heap=True) as controller:
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
        gc.callbacks.remove(collections)
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
        "pods": PODS_PER_DEPLOYMENT * deployments,
        "cluster_filled_s": round(filled_s, 1),
        "prometheus_data_s": round(data_s, 1),
        "caches_synced_s": round(sync_s, 2),
        "first_tick_s": round(durations[0], 3),
        "tick_p50_s": round(statistics.median(steady), 4),
        "tick_p99_s": round(percentile(steady, 0.99), 4),
        "tick_max_s": round(max(steady), 4),
        "ticks_measured": len(steady),
        "cpu_per_tick_s": round(statistics.mean(steady_cpu), 4) if steady_cpu else None,
        "gc_s_per_tick": round((collected[-1][0] - collected[1][0]) / max(1, len(steady_cpu)), 4),
        "gc_collections_in_later_ticks": [
            b - a for a, b in zip(collected[1][1], collected[-1][1], strict=True)
        ],
        "decisions_in_later_ticks": dict(sorted(kinds.items())),
        "prometheus_queries_first_tick": queries[0],
        "prometheus_queries_per_tick": sorted(set(steady_queries)),
        "api_writes_until_first_tick_done": {k: v[0] for k, v in sorted(writes.items())},
        "api_writes_in_later_ticks": {k: v[1] for k, v in sorted(writes.items())},
        "outcomes_changed_in_later_ticks": sum(changes),
        "pods_at_end": last.get("pods (not a write)"),
        "rss_mib_before_controller": round(before_mib, 1),
        "rss_mib_at_end": round(rss, 1),
        "rss_mib_peak": round(hwm, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployments", type=int, default=1000)
    parser.add_argument("--ticks", type=int, default=60, help="steady ticks to time (1 s each)")
    parser.add_argument(
        "--change-share", type=float, default=0.1, help="share of services whose load changes"
    )
    parser.add_argument(
        "--change-every-s", type=float, default=60.0, help="seconds between load changes"
    )
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument(
        "--scrape-interval-s",
        type=float,
        default=5.0,
        help="Prometheus's scrape interval, and the controller's setting of it",
    )
    parser.add_argument(
        "--query-timeout-s",
        type=float,
        default=2.0,
        help="the controller's deadline per query (past it every service holds, missing data)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="PATH",
        help="profile the steady ticks (cProfile), write the stats to PATH and print the top",
    )
    parser.add_argument("--serve-cluster", type=int, metavar="N", help=argparse.SUPPRESS)
    args = parser.parse_args()
    changes = {
        "change_share": args.change_share,
        "change_every_s": args.change_every_s,
        "seed": args.seed,
    }
    if args.serve_cluster is not None:
        asyncio.run(serve_cluster(args.serve_cluster, **changes))
        return
    os.environ.pop("KUBERNETES_SERVICE_HOST", None)  # the emulator's kubeconfig, always
    profile = cProfile.Profile() if args.profile else None
    result = asyncio.run(
        measure(
            args.deployments,
            args.ticks,
            profile=profile,
            scrape_interval_s=args.scrape_interval_s,
            query_timeout_s=args.query_timeout_s,
            **changes,
        )
    )
    width = max(map(len, result))
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    if profile is not None:
        profile.dump_stats(args.profile)
        stats = pstats.Stats(profile)
        stats.sort_stats("tottime").print_stats(25)
        stats.sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
