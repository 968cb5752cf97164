"""Loop scale on the Kubernetes path: one controller (or several shards), N annotated
Deployments, real clients.

    .venv/bin/python -m bench.loop_scale_k8s [--deployments 1000] [--ticks 60] [--warm-ticks 1]
        [--change-share 0.1] [--change-every-s 60] [--seed 14] [--cold-start]
        [--forecast auto|off] [--scrape-interval-s 5]
        [--query-timeout-s 2] [--profile-cluster PATH]
        [--profile PATH] [--profile-first PATH] [--trace-memory N] | [--shards N [--buckets 3N]]

Run it with `OPENBLAS_NUM_THREADS=1 MALLOC_MMAP_THRESHOLD_=131072`, as the image runs the
controller: the controller runs in this process, idle BLAS threads spinning beside a
single-threaded loop double its CPU on a busy two-core machine, and without the fixed threshold
the freed answers of the forecast history's first fetch keep the heap about 200 MB higher.

The controller is wired by `autoscaler.app` exactly as `autoscaler run` wires it (wall clock,
1 s ticks, leader election, caches, HTTP server) and talks over HTTP to the in-process
Kubernetes API emulator of the tests (`tests/kube`), which runs in a child process so that this
process's memory is the controller's, and to a real Prometheus (Debian's `prometheus`) that
scrapes an exporter in that same child every `--scrape-interval-s`: per pod, vLLM's request
counter and waiting-queue gauge and DCGM's GPU utilisation. Every service has real data and
decides.

Each service has a seeded load of one to six replicas' worth, split over its pods, and each
Deployment starts with as many Running, Ready pods as that load needs at its targets (two at
least), as in a cluster whose controller has been running (`Load.needed`); with `--cold-start`,
every Deployment starts at two, so that the first tick scales most of them at once. The pods
are created directly in the emulator's store, with their ReplicaSet, as the Deployment and
ReplicaSet controllers would; when the controller scales a Deployment, Ready pods follow its
replicas at once (`follow`). Every `--change-every-s` seconds a
seeded `--change-share` of the services moves to a new load (so some scale, and their status and
replicas are written), the rest keep theirs. The controller starts once Prometheus has a full
rate window (four scrapes) of every pod.

Printed: the duration of the whole tick (`Loop.step()`, with its publish, and the telemetry
that follows it), the first tick apart; process CPU per tick; the garbage collector's time per
tick and its collections by generation (0, 1, 2); the controller process's RSS;
Prometheus queries per tick (the adapter's counter); API writes per tick (the emulator's
request log), beside the outcomes that changed (a new count, kind or, unless steady, reason:
what the loop publishes on, so status writes should not outnumber them); the ticks'
decisions by kind; and for the first tick apart, its decisions, the CPU from the controller's
start to its end, and the lists and watches until then (a watch expired shows as a list); the
second tick's duration and CPU apart too (it reads back the first tick's writes, one per
service on a new term). `--warm-ticks N` leaves the first N ticks (1 unless told) out of the
summary and the profile, and runs `--ticks` after them: a new term's first tick defers most of
its publishes, 500 a later tick, so at 10,000 services the 20 ticks after it still carry them;
`--warm-ticks 25` measures the steady ticks after them. The CPU per tick is the process's,
this recorder included: it reads the loop's arrays of outcomes, not a record per service.
`--profile-first` profiles the controller from its start to the end of its first tick,
`--profile-cluster` the emulator's process, `--profile` the ticks measured (the controller's
profiles count process CPU, not wall time; with `--shards`, each shard's process from its
measured ticks to its stop, in process time, into `PATH.shard-<i>`); `--trace-memory N` traces
the controller's allocations from its start (`tracemalloc`: slower) and prints the N largest
holders of memory at the end, by line and by file. Last, the CPU and size of one rendering of
the controller's `/metrics` after its last tick (the bench's Prometheus does not scrape it).

With `--shards N`, N controllers run, each in its own process (`autoscaler run`'s wiring, with
`AUTOSCALER_KUBERNETES__LEASE_BUCKETS` = `--buckets`, 3 per shard unless told, and its own
identity), started together as a Deployment's replicas are. Once every bucket is led by one of
them, each ticks twice more and then `--ticks` times; printed per shard: the buckets it led, the
services it decided per tick, tick p50 and p99, process CPU and collections per tick, the wall
time from one tick's end to the next and the CPU per second of it (a core's share: when ticks
overrun their period, the work paced by wall time lands in fewer ticks), queries per tick, its
first tick, its RSS and its Events; overall: the services decided per tick, the ticks
of all shards together, CPU and RSS summed, API writes per tick, and each service's writers
replayed from the emulator's log of writes (`audit_writers`: a write for a service by a replica
that did not hold its bucket at that moment is counted; the promise is none). The shards share
the machine with the emulator and Prometheus: on a small one, compare CPU per tick as well as
wall time.

The controller's settings come from the environment as `autoscaler run`'s do, but for the ones
the bench sets (the cluster, Prometheus, the Leases): `AUTOSCALER_LOOP__GC_THRESHOLD=50000,20`,
for one, measures the collector's thresholds.

Timings are printed, never asserted (docs/benchmark.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import dataclasses
import datetime
import gc
import itertools
import json
import math
import os
import pstats
import re
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from autoscaler.core import shards

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
NAMESPACES = 10
LEASE_NAME = "inference-autoscaler"
LEASE_NAMESPACE = "inference-autoscaler"
WRITES = ("create", "update", "patch", "delete")
COLD_START_REPLICAS = 2
"""Every Deployment's pods with `--cold-start`: the floor, whatever its load."""
MIN_REPLICAS = 2
MAX_REPLICAS = 20
TARGET_QPS_PER_REPLICA = 5.0
TARGET_QUEUE_PER_REPLICA = 4.0
QUEUE_PER_QPS = 0.4
"""A pod's waiting requests per request per second it serves."""
WATCH_HISTORY = 100_000
"""Changes the emulator keeps per resource for watches to resume from (the tests' 1,000 by
default). An API server serves watches from minutes of etcd's history; with 1,000, a watch that
fell behind a first tick's thousands of writes was expired, and its cache listed every pod
again."""


# -- the child: the API emulator with the cluster in it --------------------------------------


async def serve_cluster(
    deployments: int,
    *,
    change_share: float,
    change_every_s: float,
    seed: int,
    cold_start: bool,
    forecast: str,
) -> None:
    """Run the emulator and the exporter, fill both, print the kubeconfig, the exporter's
    address and the pods made; print request counts on each stdin line, and the writers of
    each service on `writers <buckets>`."""
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
            store = Store(history_limit=WATCH_HISTORY)
            async with serve(Emulator(store=store), kubeconfig=kubeconfig) as kube:
                fill(store, load, cold_start=cold_start, forecast=forecast)
                tasks += [asyncio.create_task(change()), asyncio.create_task(follow(store, load))]
                started = {"kubeconfig": str(kube.kubeconfig), "target": target}
                print(json.dumps({**started, "pods": load.pods()}), flush=True)
                while line := await asyncio.to_thread(sys.stdin.readline):
                    counts: dict[str, int] = {}
                    for call, n in kube.requests.counts.items():
                        key = f"{call.verb} {call.resource}" + (
                            f"/{call.subresource}" if call.subresource else ""
                        )
                        counts[key] = counts.get(key, 0) + n
                    counts["pods (not a write)"] = load.pods()
                    answer: dict[str, Any] = {"request": line.strip(), "counts": counts}
                    if line.startswith("writers "):
                        buckets = shards.Buckets.named(LEASE_NAME, int(line.split()[1]))
                        answer["writers"] = audit_writers(
                            kube.requests.writes, buckets, lease_namespace=LEASE_NAMESPACE
                        )
                    print(json.dumps(answer), flush=True)
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

    def needed(self, service: int) -> int:
        """The replicas the service's load needs at its targets, within its bounds: what a
        controller that has been running has already scaled it to."""
        rate_per_s = self.rate_per_s[service]
        by_requests = math.ceil(rate_per_s / TARGET_QPS_PER_REPLICA)
        by_queue = math.ceil(rate_per_s * QUEUE_PER_QPS / TARGET_QUEUE_PER_REPLICA)
        return max(MIN_REPLICAS, min(MAX_REPLICAS, max(by_requests, by_queue)))

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
        lines += [f"{pod.waiting}{pod.rate_per_s * QUEUE_PER_QPS:.0f}" for pod in pods]
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


def fill(store: Any, load: Load, *, cold_start: bool = False, forecast: str = "auto") -> None:
    """Namespaces, a GPU node, and each Deployment with its ReplicaSet and its Ready pods: as
    many as its load needs (`Load.needed`), or two each with `cold_start`; `forecast` is every
    Deployment's `forecast` annotation."""
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
        replicas = COLD_START_REPLICAS if cold_start else load.needed(i)
        namespace, name = f"team-{i % NAMESPACES}", deployment_name(i)
        labels = {"app": name}
        notes = {
            "autoscaler.dsec.io/enabled": "true",
            "autoscaler.dsec.io/min-replicas": str(MIN_REPLICAS),
            "autoscaler.dsec.io/max-replicas": str(MAX_REPLICAS),
            "autoscaler.dsec.io/target-qps-per-replica": f"{TARGET_QPS_PER_REPLICA:g}",
            "autoscaler.dsec.io/target-queue-per-replica": f"{TARGET_QUEUE_PER_REPLICA:g}",
            "autoscaler.dsec.io/forecast": forecast,
        }
        spec = {
            "replicas": replicas,
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
        scale_pods(store, load, i, replicas, now_s)


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


# -- the writers of each service, from the API server's log of writes --------------------------


SERVICE_NAME = re.compile(r"llm-\d{5}")
"""A service's Deployment name, which starts the name of every object written for it (the
Deployment, its placement tiers, its Events)."""
AGENT = "inference-autoscaler/"
"""How each controller's requests name it (its User-Agent)."""


def audit_writers(
    writes: Iterable[Sequence[Any]], buckets: shards.Buckets, *, lease_namespace: str
) -> dict[str, Any]:
    """Who wrote for which service, replayed from the API server's log of writes (verb,
    resource, namespace, name, user agent, status, a Lease's holder) in the order it answered
    them.

    A Lease write gives its bucket to the holder it names (none while released; an idle
    replica asking to be counted writes a Lease it does not hold); every other write in a team
    namespace is charged to the service that starts its object's name. Returned: the services
    written, how many had one writer and how many two or more (over the whole run: a bucket
    that moved gives its services two, one after the other), the writes by a controller that
    did not hold the service's bucket at that moment (0 is the promise), the moves of a bucket
    from one holder to another, and the services each controller wrote for.
    """
    holders: dict[str, str] = {}
    last: dict[str, str] = {}  # each bucket's last holder, through a release
    moves = 0
    stale = 0
    writers: dict[str, set[str]] = defaultdict(set)
    for _, resource, namespace, name, agent, status, holder in writes:
        if status >= 300 or namespace is None or name is None:
            continue
        who = agent.removeprefix(AGENT)
        if resource == "leases" and namespace == lease_namespace:
            if name in buckets.names:
                if holder:  # a move through a release counts too
                    moves += last.get(name, holder) != holder
                    last[name] = holder
                holders[name] = holder or ""
            continue
        found = SERVICE_NAME.match(name)
        if found is None:
            continue
        key = f"{namespace}/{found[0]}"
        stale += holders.get(buckets.names[buckets.of(key)]) != who
        writers[key].add(who)
    per_writer = Counter(who for found in writers.values() for who in found)
    return {
        "services_written": len(writers),
        "with_one_writer": sum(len(found) == 1 for found in writers.values()),
        "with_two_or_more": sum(len(found) > 1 for found in writers.values()),
        "writes_by_a_non_holder": stale,
        "bucket_moves": moves,
        "services_per_writer": dict(sorted(per_writer.items())),
    }


# -- one controller's ticks -------------------------------------------------------------------


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


@dataclasses.dataclass(frozen=True, slots=True)
class Tick:
    """One tick of one controller, as its process saw it when the tick (and its telemetry)
    ended. The counters are running totals: a tick's share is the difference from the last."""

    duration_s: float
    cpu_s: float
    """The process's CPU time so far."""
    gc_s: float
    """The garbage collector's CPU time so far."""
    gc_counts: list[int]
    """Collections so far, by generation."""
    queries: int
    """Prometheus queries sent so far."""
    decided: int
    """Services this tick decided on."""
    changed: int | None
    """Services whose outcome (count, kind or, unless steady, reason) differs from the last
    tick's; None on the first tick."""
    kinds: dict[str, int]
    """This tick's decisions by kind and reason."""
    led: list[int] = dataclasses.field(default_factory=list)
    """The buckets the controller led at the tick's end."""
    rss_mib: float = 0.0
    ended_s: float = 0.0
    """The process's monotonic clock at the tick's end."""


class Ticks:
    """The `on_tick` of one controller: a `Tick` for each of its ticks, in order.

    It runs inside the CPU a tick is charged with, so it reads the tick's outcomes as the
    loop's arrays (`loop.Codes`) rather than a `Brief` per service: at 10,000 services the
    briefs and a dictionary of outcomes cost about as much as the Kubernetes side's own work.
    """

    def __init__(self, queries_sent: Callable[[], int], led: Callable[[], list[int]]) -> None:
        self.records: list[Tick] = []
        self.collections = Collections()
        self._queries_sent = queries_sent
        self._led = led
        self._last: tuple[tuple[Any, ...], np.ndarray[Any, Any]] | None = None

    def __call__(self, report: Any, duration_s: float) -> Tick:
        ids, outcomes = outcome_rows(report.decisions)
        last = self._last
        # What the loop publishes on: a new count, kind or (unless steady) reason.
        changed = None if last is None else changed_rows(last, (ids, outcomes))
        self._last = (ids, outcomes)
        gc_s, gc_counts = self.collections.snapshot()
        tick = Tick(
            duration_s=duration_s,
            cpu_s=time.process_time(),
            gc_s=gc_s,
            gc_counts=gc_counts,
            queries=self._queries_sent(),
            decided=len(ids),
            changed=changed,
            kinds=kinds_of(report.decisions),
            led=self._led(),
            rss_mib=round(rss_mib()[0], 1),
            ended_s=time.monotonic(),
        )
        self.records.append(tick)
        return tick


def outcome_rows(decisions: Any) -> tuple[tuple[Any, ...], np.ndarray[Any, Any]]:
    """The services of a tick, in order, and per service what the loop publishes on: the
    desired count, the kind and the reason (-1 when steady), as codes into `core.batch`'s
    `KINDS` and `REASONS`."""
    from autoscaler import loop
    from autoscaler.core import batch

    if isinstance(decisions, loop.Decisions):
        codes = decisions.codes()
        ids = tuple(workload.id for workload in decisions.workloads)
        return ids, codes.published()[:, :3]
    ids = tuple(decisions)
    rows = [
        (
            d.desired,
            batch.KINDS.index(d.kind),
            -1 if d.kind.value == "steady" else batch.REASONS.index(d.reason),
        )
        for d in decisions.values()
    ]
    return ids, np.array(rows, dtype=np.int64).reshape(len(ids), 3)


def changed_rows(
    last: tuple[tuple[Any, ...], np.ndarray[Any, Any]],
    now: tuple[tuple[Any, ...], np.ndarray[Any, Any]],
) -> int:
    """How many services of `now` have an outcome other than in `last` (or none there)."""
    (was_ids, was), (ids, rows) = last, now
    if was_ids == ids:
        return int((was != rows).any(axis=1).sum())
    before = {service: tuple(row) for service, row in zip(was_ids, was.tolist(), strict=True)}
    return sum(before.get(s) != tuple(row) for s, row in zip(ids, rows.tolist(), strict=True))


def kinds_of(decisions: Any) -> dict[str, int]:
    """A tick's decisions counted by `kind/reason`."""
    from autoscaler import loop
    from autoscaler.core import batch

    if not isinstance(decisions, loop.Decisions):
        return dict(Counter(f"{d.kind.value}/{d.reason.value}" for d in decisions.values()))
    codes = decisions.codes()
    reasons = len(batch.REASONS)
    pairs = codes.kind.astype(np.int64) * reasons + codes.reason
    counts = np.bincount(pairs, minlength=len(batch.KINDS) * reasons).tolist()
    return {
        f"{batch.KINDS[pair // reasons].value}/{batch.REASONS[pair % reasons].value}": n
        for pair, n in enumerate(counts)
        if n
    }


def event_outcomes(controller: Any) -> dict[str, int]:
    """The controller's Events so far by what became of them (`autoscaler_kubernetes_events`)."""
    return {
        sample.labels["outcome"]: int(sample.value)
        for metric in controller.telemetry.registry.collect()
        if metric.name == "autoscaler_kubernetes_events"
        for sample in metric.samples
        if sample.name.endswith("_total")
    }


def scrape_cost(telemetry: Any) -> dict[str, float]:
    """What one scrape of a controller's `/metrics` (its `Telemetry`) costs it: the CPU of
    rendering the text (a scrape renders it on a worker thread, under the same interpreter
    lock as the loop) and its size. The bench's Prometheus does not scrape the controller."""
    started_s = time.process_time()
    text = telemetry.exposition()
    return {
        "cpu_s": round(time.process_time() - started_s, 3),
        "mib": round(len(text) / 2**20, 1),
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summarise(records: Sequence[Tick], *, warm: int) -> dict[str, Any]:
    """The ticks after the first `warm` of `records`: their durations; CPU, collections and
    queries per tick (differences of the running totals, CPU and collections from the first of
    them on, queries from the one before); the wall time from one tick's end to the next
    (`tick_interval_s`: the period, or longer when ticks overrun it) and the CPU per second of
    it (`cpu_per_s`, the share of a core: work paced by wall time, such as the forecast's
    history, watches and Lease polls, lands in fewer ticks when they overrun, and CPU per
    tick grows with the interval); decisions, outcomes changed and services decided."""
    steady = records[warm:]
    durations = [t.duration_s for t in steady]
    cpu = [b.cpu_s - a.cpu_s for a, b in itertools.pairwise(steady)]
    wall_s = steady[-1].ended_s - steady[0].ended_s
    queries = [b.queries - a.queries for a, b in itertools.pairwise(records[warm - 1 :])]
    kinds: Counter[str] = Counter()
    for t in steady:
        kinds.update(t.kinds)
    return {
        "tick_p50_s": round(statistics.median(durations), 4),
        "tick_p99_s": round(percentile(durations, 0.99), 4),
        "tick_max_s": round(max(durations), 4),
        "ticks_measured": len(steady),
        "cpu_per_tick_s": round(statistics.mean(cpu), 4) if cpu else None,
        "tick_interval_s": round(wall_s / len(cpu), 4) if cpu else None,
        "cpu_per_s": round(sum(cpu) / wall_s, 4) if wall_s > 0 else None,
        "gc_s_per_tick": round((steady[-1].gc_s - steady[0].gc_s) / max(1, len(cpu)), 4),
        "gc_collections_in_later_ticks": [
            b - a for a, b in zip(steady[0].gc_counts, steady[-1].gc_counts, strict=True)
        ],
        "services_decided_per_tick": round(statistics.median(t.decided for t in steady)),
        "decisions_in_later_ticks": dict(sorted(kinds.items())),
        "prometheus_queries_per_tick": sorted(set(queries)),
        "outcomes_changed_in_later_ticks": sum(t.changed or 0 for t in steady),
    }


# -- the parent: the cluster, Prometheus and the controllers ------------------------------------


class ClusterChild:
    """The child process with the emulator and the exporter, asked for its request counts."""

    def __init__(self, process: asyncio.subprocess.Process, started: dict[str, Any]) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self.process = process
        self.kubeconfig: str = started["kubeconfig"]
        self.target: str = started["target"]
        self.pods: int = started["pods"]
        """The pods it started with."""
        self._stdin, self._stdout = process.stdin, process.stdout

    @classmethod
    async def start(
        cls,
        deployments: int,
        *,
        change_share: float,
        change_every_s: float,
        seed: int,
        cold_start: bool,
        forecast: str,
        profile: Path | None = None,
    ) -> ClusterChild:
        """Start it, filled, and return once it serves; with `profile`, it profiles itself
        (cProfile) and writes the stats there when it stops."""
        process = await asyncio.create_subprocess_exec(
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
            *(["--cold-start"] if cold_start else []),
            "--forecast",
            forecast,
            *(["--profile-cluster", str(profile)] if profile else []),
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=2**24,
        )
        assert process.stdout is not None
        return cls(process, json.loads(await process.stdout.readline()))

    async def ask(self, what: str) -> dict[str, Any]:
        """Its answer to one line: the request counts (`counts`), and with `writers <buckets>`
        the audit of the writers (`audit_writers`)."""
        self._stdin.write(what.encode() + b"\n")
        await self._stdin.drain()
        answer: dict[str, Any] = json.loads(await self._stdout.readline())
        return answer

    async def close(self) -> None:
        self._stdin.close()
        await self.process.wait()


def api_writes(
    first: dict[str, int], last: dict[str, int], *, verbs: Sequence[str] = WRITES
) -> dict[str, tuple[int, int]]:
    """Writes (or other `verbs`) by verb and resource: (until `first`, from `first` to
    `last`)."""
    return {
        key: (first.get(key, 0), n - first.get(key, 0))
        for key, n in last.items()
        if key.split()[0] in verbs
    }


async def wait_for_rates(prom: Any, pods: int, *, scrape_interval_s: float) -> float:
    """Seconds until Prometheus has a full rate window of every pod's counter.

    The controller's rate window is four scrape intervals. A series younger than its window
    reads low: Prometheus extrapolates a rate to the window's start by half an interval at
    most and then divides by the whole window, so two samples read about half the rate. A
    controller started then scales down services whose replicas their load needs.
    """
    timeout_s = max(120.0, 30 * scrape_interval_s)
    started_s = time.monotonic()
    samples = 4
    window = f"{samples * scrape_interval_s:g}s"
    query = f"count(count_over_time(vllm:request_success_total[{window}]) >= {samples})"
    while time.monotonic() - started_s < timeout_s:
        try:
            found = await asyncio.to_thread(prom.query, query)
        except TimeoutError:  # a query over every pod's series, on a busy machine: ask again
            found = []
        if found and int(float(found[0]["value"][1])) >= pods:
            return time.monotonic() - started_s
        await asyncio.sleep(0.5)
    raise SystemExit(f"Prometheus had no full rate window of {pods} pods after {timeout_s:g} s")


def controller_settings(
    kubeconfig: str,
    prometheus_url: str,
    *,
    scrape_interval_s: float,
    query_timeout_s: float,
    buckets: int = 1,
    identity: str | None = None,
) -> Any:
    """The settings `autoscaler run` would read from the environment for this bench."""
    from autoscaler import settings

    return settings.Settings(
        kubernetes={
            "kubeconfig": kubeconfig,
            "lease_name": LEASE_NAME,
            "lease_namespace": LEASE_NAMESPACE,
            "lease_buckets": buckets,
            "identity": identity,
        },
        prometheus={
            "url": prometheus_url,
            "scrape_interval_s": scrape_interval_s,
            "timeout_s": query_timeout_s,
        },
        http={"host": "127.0.0.1", "port": 0},
    )


@contextlib.asynccontextmanager
async def prometheus_on(
    cluster: ClusterChild, *, scrape_interval_s: float
) -> AsyncIterator[tuple[Any, float]]:
    """A real Prometheus scraping the child's exporter, once it has a rate for every pod; and
    the seconds that took."""
    sys.path.insert(0, str(TESTS))
    from prom import server

    binary = server.find_binary()
    if binary is None:
        raise SystemExit("needs Debian's prometheus package (make prometheus)")
    # The tests' harness scrapes every second; 20,000 pods' series that often crowd out the
    # controller on a small machine, and scrapes that miss their deadline read as missing data.
    server.SCRAPE_INTERVAL_S = scrape_interval_s
    with (
        tempfile.TemporaryDirectory() as tmp,
        server.running(binary, Path(tmp), targets=[cluster.target]) as prom,
    ):
        data_s = await wait_for_rates(prom, cluster.pods, scrape_interval_s=scrape_interval_s)
        yield prom, data_s


async def measure(
    deployments: int,
    ticks: int,
    *,
    change_share: float,
    change_every_s: float,
    seed: int,
    cold_start: bool,
    forecast: str,
    scrape_interval_s: float,
    query_timeout_s: float,
    warm_ticks: int = 1,
    profile: cProfile.Profile | None = None,
    first_profile: cProfile.Profile | None = None,
    cluster_profile: Path | None = None,
    trace_memory: int = 0,
) -> dict[str, Any]:
    """One controller in this process, with the one Lease of the base. `profile` profiles its
    steady ticks, `first_profile` its start to the end of its first tick (the caches' sync, the
    Lease, the first tick), `cluster_profile` the emulator's child process; with `trace_memory`,
    the `trace_memory` largest holders of memory at the end, by line and by file, as
    `tracemalloc` sees them (traced from the controller's start). The first `warm_ticks` ticks
    are left out of the summary and the profile; `ticks` more follow them."""
    from autoscaler import app, logs

    logs.configure(json=True, level="warning", stream=sys.stderr)
    started_s = time.monotonic()
    cluster = await ClusterChild.start(
        deployments,
        change_share=change_share,
        change_every_s=change_every_s,
        seed=seed,
        cold_start=cold_start,
        forecast=forecast,
        profile=cluster_profile,
    )
    filled_s = time.monotonic() - started_s
    counted = asyncio.Event()
    box: dict[str, app.Controller] = {}
    recorder = Ticks(
        lambda: box["controller"].metrics.queries_sent,
        lambda: sorted(box["controller"].buckets_led()),
    )
    gc.callbacks.append(recorder.collections)
    try:
        async with prometheus_on(cluster, scrape_interval_s=scrape_interval_s) as (
            prom,
            data_s,
        ):
            config = controller_settings(
                cluster.kubeconfig,
                prom.url,
                scrape_interval_s=scrape_interval_s,
                query_timeout_s=query_timeout_s,
            )
            before_mib = rss_mib()[0]
            if trace_memory:
                tracemalloc.start()

            first_at: list[float] = []

            def on_tick(report: Any, duration_s: float) -> None:
                recorder(report, duration_s)
                done = len(recorder.records)
                if done == 1:
                    first_at.append(time.monotonic())
                    if first_profile is not None:
                        first_profile.disable()
                if done in (warm_ticks + 1, warm_ticks + ticks):
                    counted.set()
                if profile is not None and done == warm_ticks:
                    profile.enable()
                if profile is not None and done == warm_ticks + ticks:
                    profile.disable()

            async with app.wire(config, on_tick=on_tick, freeze_heap=True) as controller:
                box["controller"] = controller
                stop = asyncio.Event()
                if first_profile is not None:
                    first_profile.enable()
                task = asyncio.create_task(controller.serve(stop))
                synced_at, cpu_at_start_s = time.monotonic(), time.process_time()
                await controller.cluster.wait_synced()
                sync_s = time.monotonic() - synced_at
                await counted.wait()
                counted.clear()
                first = (await cluster.ask("after the first tick"))["counts"]
                await counted.wait()
                last = (await cluster.ask("at the end"))["counts"]
                held = memory_holders(trace_memory) if trace_memory else {}
                thresholds = gc.get_threshold()
                events = event_outcomes(controller)
                scrape = scrape_cost(controller.telemetry)
                stop.set()
                await task
            rss, hwm = rss_mib()
    finally:
        gc.callbacks.remove(recorder.collections)
        await cluster.close()
    writes = api_writes(first, last)
    # A watch that falls too far behind is expired (410) and its cache lists everything again.
    lists = api_writes(first, last, verbs=("list", "watch"))
    records = recorder.records
    steady = summarise(records, warm=warm_ticks)
    return {
        "deployments": deployments,
        "pods_at_start": cluster.pods,
        "cluster_filled_s": round(filled_s, 1),
        "prometheus_data_s": round(data_s, 1),
        "caches_synced_s": round(sync_s, 2),
        "first_tick_ended_s": round(first_at[0] - synced_at, 2),
        "first_tick_s": round(records[0].duration_s, 3),
        "cpu_until_first_tick_ended_s": round(records[0].cpu_s - cpu_at_start_s, 2),
        "decisions_first_tick": dict(sorted(records[0].kinds.items())),
        # A new term's first tick writes every status and state: the second reads them back.
        "second_tick_s": round(records[1].duration_s, 3),
        "cpu_second_tick_s": round(records[1].cpu_s - records[0].cpu_s, 3),
        **steady,
        "prometheus_queries_first_tick": records[0].queries,
        # Counted once the tick after the warm ones is done (the second, unless told).
        "api_writes_until_first_tick_done"
        if warm_ticks == 1
        else f"api_writes_until_tick_{warm_ticks + 1}_done": {
            k: v[0] for k, v in sorted(writes.items())
        },
        "api_writes_in_later_ticks": {k: v[1] for k, v in sorted(writes.items())},
        "api_lists_and_watches": {k: list(v) for k, v in sorted(lists.items())},
        "events_by_outcome": dict(sorted(events.items())),
        "metrics_scrape": scrape,
        "pods_at_end": last.get("pods (not a write)"),
        "gc_threshold": list(thresholds),
        "rss_mib_before_controller": round(before_mib, 1),
        "rss_mib_at_ticks": {
            i: records[i].rss_mib for i in sorted({0, 1, *range(0, len(records), 15)})
        },
        "rss_mib_at_end": round(rss, 1),
        "rss_mib_peak": round(hwm, 1),
        **held,
    }


def memory_holders(top: int) -> dict[str, Any]:
    """The `top` largest holders of traced memory, by line and by file (MiB and blocks), and
    the total traced; tracing stops."""
    gc.collect()
    snapshot = tracemalloc.take_snapshot()
    tracemalloc.stop()
    root = str(Path(__file__).resolve().parents[1]) + os.sep

    def rows(key: str) -> dict[str, str]:
        found = snapshot.statistics(key)[:top]
        return {
            f"{s.traceback[0].filename.removeprefix(root)}"
            + (f":{s.traceback[0].lineno}" if key == "lineno" else ""): (
                f"{s.size / (1 << 20):.1f} MiB, {s.count} blocks"
            )
            for s in found
        }

    total = sum(s.size for s in snapshot.statistics("filename"))
    return {
        "traced_mib_at_end": round(total / (1 << 20), 1),
        "held_by_line": rows("lineno"),
        "held_by_file": rows("filename"),
    }


# -- several controllers, each in its own process ---------------------------------------------


async def serve_shard(spec: dict[str, Any]) -> None:
    """One controller replica: print `wired`, start serving at the first stdin line, print a
    `Tick` per tick, stop at the end of stdin and print its memory. With `spec["profile"]`, a
    `profile` line on stdin starts profiling the process (cProfile, in process time), and its
    stats are written
    to that path when it stops."""
    from autoscaler import app, logs

    logs.configure(json=True, level="warning", stream=sys.stderr)
    config = controller_settings(
        spec["kubeconfig"],
        spec["prometheus"],
        scrape_interval_s=spec["scrape_interval_s"],
        query_timeout_s=spec["query_timeout_s"],
        buckets=spec["buckets"],
        identity=spec["identity"],
    )
    box: dict[str, app.Controller] = {}
    recorder = Ticks(
        lambda: box["controller"].metrics.queries_sent,
        lambda: sorted(box["controller"].buckets_led()),
    )
    gc.callbacks.append(recorder.collections)

    def on_tick(report: Any, duration_s: float) -> None:
        tick = recorder(report, duration_s)
        print(json.dumps({"tick": dataclasses.asdict(tick)}), flush=True)

    async with app.wire(config, on_tick=on_tick, freeze_heap=True) as controller:
        box["controller"] = controller
        print(json.dumps({"wired": controller.identity}), flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        stop = asyncio.Event()
        task = asyncio.create_task(controller.serve(stop))
        # Process time: the shards wait for a core on a shared machine, and a wall-clock
        # profile would charge that wait to whatever ran next.
        profile = cProfile.Profile(time.process_time) if spec.get("profile") else None
        while line := await asyncio.to_thread(sys.stdin.readline):
            if line.strip() == "profile" and profile is not None:
                profile.enable()
        if profile is not None:
            profile.disable()
            profile.dump_stats(spec["profile"])
        events = event_outcomes(controller)
        stop.set()
        await task
    rss, hwm = rss_mib()
    stopped = {"rss_mib": round(rss, 1), "rss_mib_peak": round(hwm, 1), "events": events}
    print(json.dumps({"stopped": stopped}))


class Shard:
    """A controller replica in a child process, and the ticks it has reported."""

    def __init__(self, identity: str, process: asyncio.subprocess.Process) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self.identity = identity
        self.process = process
        self.records: list[Tick] = []
        self.stopped: dict[str, Any] = {}
        self._stdin, self._stdout = process.stdin, process.stdout

    @classmethod
    async def start(cls, spec: dict[str, Any]) -> Shard:
        """Start the process and return once its controller is wired (not yet serving)."""
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.loop_scale_k8s",
            "--serve-shard",
            json.dumps(spec),
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "AUTOSCALER_KUBERNETES__LEASE_BUCKETS": str(spec["buckets"])},
        )
        shard = cls(spec["identity"], process)
        assert "wired" in json.loads(await shard._stdout.readline())
        return shard

    def go(self) -> None:
        self._stdin.write(b"go\n")

    def profile(self) -> None:
        """Start profiling itself (with a profile path in its spec)."""
        self._stdin.write(b"profile\n")

    async def read(self, ticked: asyncio.Event) -> None:
        """Collect its ticks until it stops, setting `ticked` at each."""
        while line := await self._stdout.readline():
            message = json.loads(line)
            if "tick" in message:
                self.records.append(Tick(**message["tick"]))
                ticked.set()
            else:
                self.stopped = message["stopped"]

    def led(self) -> list[int]:
        return self.records[-1].led if self.records else []

    async def stop(self) -> None:
        self._stdin.close()
        await self.process.wait()


async def measure_shards(
    deployments: int,
    ticks: int,
    *,
    shards_n: int,
    buckets: int,
    change_share: float,
    change_every_s: float,
    seed: int,
    cold_start: bool,
    forecast: str,
    scrape_interval_s: float,
    query_timeout_s: float,
    timeout_s: float = 600.0,
    tick_timeout_s: float = 20.0,
    cluster_profile: Path | None = None,
    profile: Path | None = None,
) -> dict[str, Any]:
    """`shards_n` controllers, each in its own process, over `buckets` bucket Leases: once
    every bucket is led, two more ticks of each, then `ticks` measured; `cluster_profile`
    profiles the emulator's child process, `profile` each shard's process from the end of its
    two warm ticks to its stop (`<profile>.shard-<i>`). The split may take `timeout_s`, the
    ticks after it `tick_timeout_s` each (a tick that waits for Prometheus's deadline is as long
    as it)."""
    cluster = await ClusterChild.start(
        deployments,
        change_share=change_share,
        change_every_s=change_every_s,
        seed=seed,
        cold_start=cold_start,
        forecast=forecast,
        profile=cluster_profile,
    )
    replicas: list[Shard] = []
    readers: list[asyncio.Task[None]] = []
    ticked = asyncio.Event()
    try:
        async with prometheus_on(cluster, scrape_interval_s=scrape_interval_s) as (
            prom,
            data_s,
        ):
            spec = {
                "kubeconfig": cluster.kubeconfig,
                "prometheus": prom.url,
                "scrape_interval_s": scrape_interval_s,
                "query_timeout_s": query_timeout_s,
                "buckets": buckets,
            }
            replicas = list(
                await asyncio.gather(
                    *(
                        Shard.start(
                            {
                                **spec,
                                "identity": f"shard-{i}",
                                "profile": f"{profile}.shard-{i}" if profile else None,
                            }
                        )
                        for i in range(shards_n)
                    )
                )
            )
            readers = [asyncio.create_task(r.read(ticked)) for r in replicas]
            started_s = time.monotonic()
            for replica in replicas:  # at once: each takes its first choice of bucket
                replica.go()

            async def wait(done: Callable[[], bool], what: str, within_s: float) -> None:
                since_s = time.monotonic()
                while not done():
                    if time.monotonic() - since_s > within_s:
                        raise SystemExit(f"not {what} after {within_s:g} s")
                    ticked.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(ticked.wait(), 5.0)

            def split() -> bool:
                led = [b for r in replicas for b in r.led()]
                return sorted(led) == list(range(buckets))

            await wait(split, "every bucket led by one replica", timeout_s)
            split_s = time.monotonic() - started_s
            starts = {r.identity: len(r.records) for r in replicas}
            leading = [r for r in replicas if r.led()]
            first = (await cluster.ask("every bucket led"))["counts"]
            warm = 2
            if profile is not None:
                await wait(
                    lambda: all(len(r.records) >= starts[r.identity] + warm for r in leading),
                    "the warm ticks of each replica",
                    tick_timeout_s * warm,
                )
                for replica in replicas:
                    replica.profile()
            await wait(
                lambda: all(len(r.records) >= starts[r.identity] + warm + ticks for r in leading),
                f"{ticks} ticks of each replica",
                tick_timeout_s * (warm + ticks),
            )
            final = await cluster.ask(f"writers {buckets}")
            for replica in replicas:
                await replica.stop()
            await asyncio.gather(*readers)
    finally:
        for replica in replicas:
            if replica.process.returncode is None:
                replica.process.kill()
                await replica.process.wait()
        for task in readers:
            task.cancel()
        await cluster.close()
    windows = {
        r.identity: r.records[starts[r.identity] : starts[r.identity] + warm + ticks]
        for r in leading
    }
    per_shard = {}
    for replica in replicas:
        window = windows.get(replica.identity)
        if not window:
            per_shard[replica.identity] = {
                "buckets_led": 0,
                "rss_mib": replica.stopped.get("rss_mib"),
            }
            continue
        summary = summarise(window, warm=warm)
        per_shard[replica.identity] = {
            "buckets_led": len(window[-1].led),
            "services_decided_per_tick": summary["services_decided_per_tick"],
            "tick_p50_s": summary["tick_p50_s"],
            "tick_p99_s": summary["tick_p99_s"],
            "cpu_per_tick_s": summary["cpu_per_tick_s"],
            "tick_interval_s": summary["tick_interval_s"],
            "cpu_per_s": summary["cpu_per_s"],
            "gc_s_per_tick": summary["gc_s_per_tick"],
            "prometheus_queries_per_tick": summary["prometheus_queries_per_tick"],
            "decisions_in_later_ticks": summary["decisions_in_later_ticks"],
            "first_tick_s": round(replica.records[0].duration_s, 3),
            "led_changed_while_measured": len({tuple(t.led) for t in window}) > 1,
            "rss_mib": window[-1].rss_mib,
            "rss_mib_peak": replica.stopped.get("rss_mib_peak"),
            "events_by_outcome": dict(sorted(replica.stopped.get("events", {}).items())),
        }
    durations = [t.duration_s for w in windows.values() for t in w[warm:]]
    cpu = [s["cpu_per_tick_s"] for s in per_shard.values() if s.get("cpu_per_tick_s")]
    writes = api_writes(first, final["counts"])
    return {
        "deployments": deployments,
        "pods_at_start": cluster.pods,
        "shards": shards_n,
        "buckets": buckets,
        "prometheus_data_s": round(data_s, 1),
        "every_bucket_led_s": round(split_s, 1),
        "services_decided_per_tick": sum(
            s.get("services_decided_per_tick", 0) for s in per_shard.values()
        ),
        "tick_p50_s": round(statistics.median(durations), 4),
        "tick_p99_s": round(percentile(durations, 0.99), 4),
        "cpu_per_tick_s_summed": round(sum(cpu), 4),
        "cpu_per_s_summed": round(sum(s.get("cpu_per_s") or 0.0 for s in per_shard.values()), 4),
        "rss_mib_summed": round(sum(s.get("rss_mib") or 0.0 for s in per_shard.values()), 1),
        "api_writes_per_tick": round(sum(v[1] for v in writes.values()) / (warm + ticks), 1),
        "api_writes_while_measured": {k: v[1] for k, v in sorted(writes.items())},
        "writers": final["writers"],
        "per_shard": per_shard,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployments", type=int, default=1000)
    parser.add_argument("--ticks", type=int, default=60, help="steady ticks to time (1 s each)")
    parser.add_argument(
        "--warm-ticks",
        type=int,
        default=1,
        metavar="N",
        help="ticks left out of the summary and the profile before the --ticks measured "
        "(a new term's first tick defers its publishes to the next ones, 500 a tick)",
    )
    parser.add_argument(
        "--change-share", type=float, default=0.1, help="share of services whose load changes"
    )
    parser.add_argument(
        "--change-every-s", type=float, default=60.0, help="seconds between load changes"
    )
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument(
        "--cold-start",
        action="store_true",
        help=f"every Deployment starts at {COLD_START_REPLICAS} pods, whatever its load (by "
        "default each starts at the count its load needs, as in a cluster already running)",
    )
    parser.add_argument(
        "--forecast",
        choices=("auto", "off"),
        default="auto",
        help="every Deployment's forecast annotation: `off` leaves out the seasonal forecast "
        "and its history's range queries (one or more per service, every five minutes)",
    )
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
        "--shards",
        type=int,
        default=0,
        metavar="N",
        help="N controller processes over bucket Leases (0: one controller in this process, "
        "with the one Lease of the base)",
    )
    parser.add_argument(
        "--buckets", type=int, help="bucket Leases with --shards (default: 3 per shard)"
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="PATH",
        help="profile the steady ticks (cProfile), write the stats to PATH and print the top; "
        "with --shards, each shard's process from its measured ticks to its stop (in process "
        "time), to PATH.shard-<i>",
    )
    parser.add_argument(
        "--profile-first",
        type=Path,
        metavar="PATH",
        help="profile the controller from its start to the end of its first tick (cProfile), "
        "write the stats to PATH and print the top",
    )
    parser.add_argument(
        "--profile-cluster",
        type=Path,
        metavar="PATH",
        help="profile the emulator's process (cProfile) over the whole run, write the stats to "
        "PATH and print the top",
    )
    parser.add_argument(
        "--trace-memory",
        type=int,
        default=0,
        metavar="N",
        help="trace the controller's allocations (tracemalloc, from its start: slower) and "
        "print the N largest holders at the end, by line and by file",
    )
    parser.add_argument("--serve-cluster", type=int, metavar="N", help=argparse.SUPPRESS)
    parser.add_argument("--serve-shard", metavar="JSON", help=argparse.SUPPRESS)
    args = parser.parse_args()
    changes = {
        "change_share": args.change_share,
        "change_every_s": args.change_every_s,
        "seed": args.seed,
        "cold_start": args.cold_start,
        "forecast": args.forecast,
    }
    if args.serve_cluster is not None:
        child = cProfile.Profile() if args.profile_cluster else None
        with child or contextlib.nullcontext():
            asyncio.run(serve_cluster(args.serve_cluster, **changes))
        if child is not None:
            child.dump_stats(args.profile_cluster)
        return
    os.environ.pop("KUBERNETES_SERVICE_HOST", None)  # the emulator's kubeconfig, always
    if args.serve_shard is not None:
        asyncio.run(serve_shard(json.loads(args.serve_shard)))
        return
    timing = {
        "scrape_interval_s": args.scrape_interval_s,
        "query_timeout_s": args.query_timeout_s,
    }
    # Timed in the process's CPU: on a shared machine, wall time charges a call with the time
    # its process waited for a core (a socket's `send` with the other processes' turns).
    profile = cProfile.Profile(time.process_time) if args.profile else None
    first_profile = cProfile.Profile(time.process_time) if args.profile_first else None
    shard_profiles: list[Path] = []
    if args.shards:
        if first_profile is not None:
            parser.error("--profile-first profiles the one controller in this process")
        profile = None  # each shard profiles itself
        if args.profile is not None:
            shard_profiles = [Path(f"{args.profile}.shard-{i}") for i in range(args.shards)]
        result = asyncio.run(
            measure_shards(
                args.deployments,
                args.ticks,
                shards_n=args.shards,
                buckets=args.buckets or 3 * args.shards,
                cluster_profile=args.profile_cluster,
                profile=args.profile,
                **timing,
                **changes,
            )
        )
    else:
        result = asyncio.run(
            measure(
                args.deployments,
                args.ticks,
                warm_ticks=args.warm_ticks,
                profile=profile,
                first_profile=first_profile,
                cluster_profile=args.profile_cluster,
                trace_memory=args.trace_memory,
                **timing,
                **changes,
            )
        )
    print_result(result)
    for title, found, path in (
        ("the steady ticks", profile, None if args.shards else args.profile),
        ("the start to the end of the first tick", first_profile, args.profile_first),
        ("the emulator's process", None, args.profile_cluster),
        *((f"shard-{i}'s measured ticks", None, p) for i, p in enumerate(shard_profiles)),
    ):
        if path is None:
            continue
        if found is not None:
            found.dump_stats(path)
        print(f"\nprofile of {title} ({path})")
        stats = pstats.Stats(str(path))
        stats.sort_stats("tottime").print_stats(25)
        stats.sort_stats("cumulative").print_stats(40)


def print_result(result: dict[str, Any], indent: str = "") -> None:
    width = max(map(len, result))
    for key, value in result.items():
        if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
            print(f"{indent}{key}")
            for name, inner in value.items():
                print(f"{indent}  {name}")
                print_result(inner, indent + "    ")
        elif key.startswith("held_by_"):
            print(f"{indent}{key}")
            for name, inner in value.items():
                print(f"{indent}  {inner:>26}  {name}")
        else:
            print(f"{indent}{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
