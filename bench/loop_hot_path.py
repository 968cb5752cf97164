"""The loop's own CPU per tick at scale, in seconds rather than the minutes of `loop_scale_k8s`.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python -m bench.loop_hot_path [--services 10000]
        [--ticks 10] [--seed 14] [--churn RATIO [--scrape-ticks N]] [--telemetry]
        [--gc-threshold N[,N,N]] [--profile PATH]

`Loop.step()` with the real Prometheus adapter (`MetricsSource` over `Client`, its HTTP and its
reading of the answers) and the default policy, for N services in ten namespaces. The answers
are served from memory by an aiohttp server in this process, written as Prometheus writes them
(compact JSON, one series per pod), with seeded values that are new every tick.

Two workloads:
- by default every sample is drawn anew each tick, uniformly over a wide range, for services of
  two pods each; the cluster is a list of records that never changes and takes every write at
  once. Nearly every service's load jumps every tick: about a fifth of them ask to scale and a
  third publish a new outcome, every tick, the heaviest case for acting and publishing.
- `--churn RATIO`: each service serves a steady load sized for its replicas (2 to 4 pods, inside
  the deadband), with a few per cent of noise per sample, and RATIO of the services move to a
  new load each minute (spread over the ticks), as a fleet's traffic does. The cluster takes
  each scale write into its record (new replicas, serving pods and pod names, a new record as
  the Kubernetes adapter makes), so the services settle and the writes are those the changes
  call for. The warm-up is longer (`CHURN_WARM_TICKS`), for the first outcomes to settle.
  Each pod's samples are new every tick, unless `--scrape-ticks N`: then each pod's series keep
  their values for N ticks, as Prometheus answers between two scrapes of a target, the pods'
  scrapes spread over the N ticks (a pod's turn is fixed by its name), so a load that moved
  shows at its pods' next scrape.
What it leaves out, `loop_scale_k8s` measures: the Kubernetes adapter and its caches, Events,
Prometheus itself, and a machine shared with all of them; telemetry only with `--telemetry`
(which also times a rendering of `/metrics` after the last tick).

Printed: CPU per tick (process time: the server's share is the same few copies of bytes for any
code under test), the loop's own share of it (all but the metrics sample: the read path and the
server), its wall time, the scale writes and publishes per tick, the garbage collector's share
and its collections by generation, and with `--profile` the top of the steady ticks' profile
(then without the collector's share). `--gc-threshold` sets the collector's thresholds after the
freeze, as the controller's `AUTOSCALER_LOOP__GC_THRESHOLD` does (generations left out keep
theirs; 0 for the first keeps Python's). Timings are printed, never asserted
(docs/benchmark.md).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import dataclasses
import gc
import json
import pstats
import random
import statistics
import sys
import time
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
from aiohttp import web

from autoscaler import clock, logs, loop, ports
from autoscaler import telemetry as telemetry_
from autoscaler.adapters import prometheus
from autoscaler.core import model, policy, smoothing
from bench import loop_scale_k8s

NAMESPACES = 10
PODS_PER_SERVICE = 2
WARM_TICKS = 5
SCRAPES = 5
"""Renderings of /metrics timed after the ticks, with `--telemetry`."""
CHURN_WARM_TICKS = 30
TARGET_LOAD_PER_REPLICA = 5.0
CHURN_REPLICAS = (2, 4)
"""The replicas a churning service's load asks for, least and most."""
NOISE_RATIO = 0.03
"""A churning service's per-sample noise: the standard deviation, as a share of its level."""


def records(services: int, replicas: Sequence[int] = ()) -> list[ports.Workload]:
    """N services as the Kubernetes adapter would record them: the default policy, vLLM; each
    with `replicas[i]` pods (`PODS_PER_SERVICE` when not given)."""
    config = policy.default(
        max_replicas=20,
        target_load_per_replica=TARGET_LOAD_PER_REPLICA,
        target_queue_per_replica=4.0,
        forecast=None,
    )
    found = []
    for i in range(services):
        name = f"llm-{i:05d}"
        namespace = f"team-{i % NAMESPACES}"
        count = replicas[i] if replicas else PODS_PER_SERVICE
        found.append(
            ports.Workload(
                model.ServiceId(f"{namespace}/{name}"),
                config,
                half_life_s=30.0,
                replicas=count,
                serving=count,
                namespace=namespace,
                deployment=name,
                metrics=prometheus.PRESETS["vllm"],
                pods=pod_names(name, count),
                core_rate=float(count),  # a GPU per pod
            )
        )
    return found


def pod_names(deployment: str, count: int) -> frozenset[str]:
    return frozenset(f"{deployment}-7d9f8c6b5-{j:05d}" for j in range(count))


class Answers:
    """Prometheus's answers for the three signals, new values every tick, seeded."""

    def __init__(self, workloads: Sequence[ports.Workload], seed: int) -> None:
        self._pods = [(w.namespace, pod) for w in workloads for pod in sorted(w.pods)]
        self._random = random.Random(seed)
        self._ranges = {"load": (1.0, 9.0), "queue": (0.0, 3.0), "gpu": (20.0, 60.0)}
        self.bodies: dict[str, bytes] = {}
        self.renew()

    def renew(self) -> None:
        for kind, (low, high) in self._ranges.items():
            result = [
                {
                    "metric": {"namespace": namespace, "pod": pod},
                    "value": [1796163512.358, repr(self._random.uniform(low, high))],
                }
                for namespace, pod in self._pods
            ]
            answer = {"status": "success", "data": {"resultType": "vector", "result": result}}
            self.bodies[kind] = json.dumps(answer, separators=(",", ":")).encode()

    async def handle(self, request: web.Request) -> web.Response:
        promql = request.query["query"]
        kind = "gpu" if "DCGM" in promql else "load" if "rate(" in promql else "queue"
        return web.Response(body=self.bodies[kind], content_type="application/json")


def _body(result: list[dict[str, object]]) -> bytes:
    answer = {"status": "success", "data": {"resultType": "vector", "result": result}}
    return json.dumps(answer, separators=(",", ":")).encode()


class Churning:
    """Prometheus's answers for a fleet whose load is steady but for `churn` of the services
    moving to a new level each minute; each pod reports its share of its service's level, with
    noise, new every tick. Seeded."""

    def __init__(
        self,
        services: int,
        *,
        churn_per_minute: float,
        tick_s: float,
        seed: int,
        scrape_ticks: int = 1,
    ) -> None:
        self._random = random.Random(seed)
        self._scrape_ticks = scrape_ticks
        self._tick = 0
        self._held: dict[tuple[str, str], tuple[tuple[str, float], ...]] = {}
        """Each pod's last samples (kind, value), kept until its next scrape."""
        self._moves_per_tick = churn_per_minute * services * tick_s / 60.0
        self._owed = 0.0
        self.replicas = [self._random.randint(*CHURN_REPLICAS) for _ in range(services)]
        self.load = [self._level(r) for r in self.replicas]
        self.queue = [self._random.uniform(0.0, 0.5) for _ in range(services)]
        self.gpu = [self._random.uniform(30.0, 60.0) for _ in range(services)]
        self.moved = 0
        """Services moved to a new load so far."""
        self.bodies: dict[str, bytes] = {}

    def _level(self, replicas: int) -> float:
        """A load that `replicas` serve inside the deadband, asking for no more of them."""
        return replicas * TARGET_LOAD_PER_REPLICA * self._random.uniform(0.92, 0.98)

    def move(self) -> None:
        """One tick's share of the minute's changes of load."""
        self._owed += self._moves_per_tick
        count, self._owed = int(self._owed), self._owed % 1.0
        for i in self._random.sample(range(len(self.load)), count):
            self.load[i] = self._level(self._random.randint(*CHURN_REPLICAS))
            self.queue[i] = self._random.uniform(0.0, 0.5)
        self.moved += count

    def renew(self, workloads: Sequence[ports.Workload]) -> None:
        """This tick's samples for the pods the records name now: new ones for the pods
        scraped this tick (every pod unless `scrape_ticks`), the last ones for the others."""
        gauss = self._random.gauss
        series: dict[str, list[dict[str, object]]] = {"load": [], "queue": [], "gpu": []}
        every, tick, held = self._scrape_ticks, self._tick, self._held
        now_held: dict[tuple[str, str], tuple[tuple[str, float], ...]] = {}
        for i, w in enumerate(workloads):
            share = 1.0 / max(1, len(w.pods))
            levels = (
                ("load", self.load[i] * share),
                ("queue", self.queue[i] * share),
                ("gpu", self.gpu[i]),
            )
            for pod in sorted(w.pods):
                labels = {"namespace": w.namespace, "pod": pod}
                samples = held.get((w.namespace, pod))
                if samples is None or every == 1 or (tick + zlib.crc32(pod.encode())) % every == 0:
                    samples = tuple(
                        (kind, max(0.0, level * (1.0 + gauss(0.0, NOISE_RATIO))))
                        for kind, level in levels
                    )
                now_held[(w.namespace, pod)] = samples
                for kind, value in samples:
                    series[kind].append({"metric": labels, "value": [1796163512.358, repr(value)]})
        self._held = now_held
        self._tick += 1
        self.bodies = {kind: _body(result) for kind, result in series.items()}

    async def handle(self, request: web.Request) -> web.Response:
        promql = request.query["query"]
        kind = "gpu" if "DCGM" in promql else "load" if "rate(" in promql else "queue"
        return web.Response(body=self.bodies[kind], content_type="application/json")


class Following:
    """`ports.Cluster` over records that take each scale write at once: the service's replicas,
    serving pods and their names become the count written, in a new record."""

    def __init__(self, workloads: list[ports.Workload]) -> None:
        self._workloads = workloads
        self._index = {w.id: i for i, w in enumerate(workloads)}
        self.scales = 0
        self.publishes = 0

    def workloads(self) -> Sequence[ports.Workload]:
        return list(self._workloads)  # a tick's records stay as they were while it writes

    async def scale(self, service: model.ServiceId, replicas: int) -> None:
        i = self._index[service]
        w = self._workloads[i]
        self._workloads[i] = dataclasses.replace(
            w,
            replicas=replicas,
            serving=replicas,
            pods=pod_names(w.deployment, replicas),
            core_rate=float(replicas),
        )
        self.scales += 1

    async def publish(
        self, service: model.ServiceId, decision: model.Decision, state: model.PolicyState
    ) -> None:
        self.publishes += 1


class Timed:
    """A `ports.MetricsSource` that adds up the process time its source's samples take (the
    Prometheus adapter's, and this process's server's share), so that the loop's own CPU per
    tick is told apart from the read path's."""

    def __init__(self, source: ports.MetricsSource) -> None:
        self._source = source
        self.spent_s = 0.0

    async def sample(
        self, workloads: Sequence[ports.Workload], now_s: float
    ) -> npt.NDArray[np.float64]:
        started = time.process_time()
        try:
            return await self._source.sample(workloads, now_s)
        finally:
            self.spent_s += time.process_time() - started


class Unchanging:
    """`ports.Cluster` over fixed records: every scale and publish succeeds at once."""

    def __init__(self, workloads: list[ports.Workload]) -> None:
        self._workloads = workloads
        self.scales = 0
        self.publishes = 0

    def workloads(self) -> Sequence[ports.Workload]:
        return self._workloads

    async def scale(self, service: model.ServiceId, replicas: int) -> None:
        self.scales += 1

    async def publish(
        self, service: model.ServiceId, decision: model.Decision, state: model.PolicyState
    ) -> None:
        self.publishes += 1


async def measure(
    services: int,
    ticks: int,
    *,
    seed: int,
    profile: cProfile.Profile | None,
    gc_threshold: Sequence[int] = (),
    churn: float | None = None,
    scrape_ticks: int = 1,
    telemetry: bool = False,
) -> dict[str, object]:
    """`churn`: the share of services moving to a new load each minute (see the module
    docstring); None draws every sample anew each tick. `scrape_ticks`: with `churn`, the
    ticks a pod's samples hold between two scrapes. `telemetry`: each tick ends with
    `Telemetry.observe_tick`, as the controller's does, inside the time measured."""
    ticking = clock.ManualClock(0.0)
    tick_s = smoothing.SmoothingConfig().tick_s
    churning: Churning | None = None
    drawn: Answers | None = None
    answers: Answers | Churning
    cluster: Unchanging | Following
    if churn is None:
        workloads = records(services)
        drawn = answers = Answers(workloads, seed)
        cluster = Unchanging(workloads)
    else:
        churning = answers = Churning(
            services, churn_per_minute=churn, tick_s=tick_s, seed=seed, scrape_ticks=scrape_ticks
        )
        cluster = Following(records(services, churning.replicas))
    server = web.Application()
    server.router.add_get("/api/v1/query", answers.handle)
    runner = web.AppRunner(server)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    client = prometheus.Client(f"http://127.0.0.1:{port}", timeout_s=60.0)
    source = Timed(prometheus.MetricsSource(client, scrape_interval_s=5.0))
    the_loop = loop.Loop(cluster=cluster, metrics=source, clock=ticking)
    exported = telemetry_.Telemetry() if telemetry else None

    async def step() -> None:
        report = await the_loop.step()
        if exported is not None:
            exported.observe_tick(
                report, report.workloads, duration_s=0.0, wall_time_s=0.0, tick_s=tick_s
            )

    collected_s = [0.0]
    collections = [0, 0, 0]
    started = [0.0]

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.process_time()
        else:
            collected_s[0] += time.process_time() - started[0]
            collections[info["generation"]] += 1

    def renew() -> None:
        if drawn is not None:
            drawn.renew()
        elif churning is not None:
            churning.move()
            churning.renew(cluster.workloads())

    cpu: list[float] = []
    own: list[float] = []
    wall: list[float] = []
    thresholds = measured_threshold = gc.get_threshold()
    try:
        if churning is not None:
            renew()
        for _ in range(WARM_TICKS if churning is None else CHURN_WARM_TICKS):
            await step()
            ticking.advance(tick_s)
            if churning is not None:
                renew()
        gc.collect()
        gc.freeze()  # as the controller does once its caches have synced
        if gc_threshold and gc_threshold[0]:
            gc.set_threshold(*gc_threshold, *thresholds[len(gc_threshold) :])
        measured_threshold = gc.get_threshold()
        if profile is None:  # the callback would time the profiler too
            gc.callbacks.append(timed)
        scales, publishes, moved = cluster.scales, cluster.publishes, churning and churning.moved
        for _ in range(ticks):
            renew()
            cpu_s, wall_s, sampled_s = time.process_time(), time.perf_counter(), source.spent_s
            if profile is not None:
                profile.enable()
            await step()
            if profile is not None:
                profile.disable()
            cpu.append(time.process_time() - cpu_s)
            own.append(cpu[-1] - (source.spent_s - sampled_s))
            wall.append(time.perf_counter() - wall_s)
            ticking.advance(tick_s)
    finally:
        if timed in gc.callbacks:
            gc.callbacks.remove(timed)
        gc.unfreeze()
        gc.set_threshold(*thresholds)
        await client.close()
        await runner.cleanup()
    result: dict[str, object] = {
        "services": services,
        "workload": "random"
        if churn is None
        else f"churn {churn:g} per minute, scraped every {scrape_ticks} ticks",
        "telemetry": telemetry,
        "ticks_measured": ticks,
        "cpu_per_tick_p50_s": round(statistics.median(cpu), 4),
        "cpu_per_tick_min_s": round(min(cpu), 4),
        "loop_cpu_per_tick_p50_s": round(statistics.median(own), 4),
        "loop_cpu_per_tick_min_s": round(min(own), 4),
        "wall_per_tick_p50_s": round(statistics.median(wall), 4),
        "gc_s_per_tick": round(collected_s[0] / ticks, 4),
        "gc_collections_by_generation": collections,
        "gc_threshold": list(measured_threshold),
        "scales_per_tick": round((cluster.scales - scales) / ticks, 1),
        "publishes_per_tick": round((cluster.publishes - publishes) / ticks, 1),
        "answer_mib_per_signal": round(len(answers.bodies["load"]) / 2**20, 2),
    }
    if churning is not None:
        result["load_moves_per_tick"] = round((churning.moved - int(moved or 0)) / ticks, 1)
    if exported is not None:
        # What a scrape of /metrics costs after the last tick (the controller renders it on a
        # worker thread, but under the same interpreter lock).
        scrapes = [loop_scale_k8s.scrape_cost(exported) for _ in range(SCRAPES)]
        result["metrics_scrape_cpu_p50_s"] = statistics.median(s["cpu_s"] for s in scrapes)
        result["metrics_scrape_mib"] = scrapes[-1]["mib"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=10_000)
    parser.add_argument("--ticks", type=int, default=10)
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument(
        "--churn",
        type=float,
        metavar="RATIO",
        help="share of services moving to a new load each minute (default: every sample random)",
    )
    parser.add_argument(
        "--scrape-ticks",
        type=int,
        default=1,
        metavar="N",
        help="with --churn: each pod's samples hold for N ticks between its scrapes, the pods' "
        "scrapes spread over them (default: 1, new every tick)",
    )
    parser.add_argument(
        "--telemetry",
        action="store_true",
        help="end each tick with the controller's telemetry (Telemetry.observe_tick), and "
        "time a rendering of /metrics after the last",
    )
    parser.add_argument(
        "--gc-threshold",
        type=lambda text: tuple(int(n) for n in text.split(",")),
        default=(),
        metavar="N[,N,N]",
        help="the collector's thresholds after the freeze (default: Python's)",
    )
    parser.add_argument("--profile", type=Path, metavar="PATH", help="write cProfile stats here")
    args = parser.parse_args()
    logs.configure(json=True, level="error", stream=sys.stderr)
    # Process time: on a shared machine a wall-time profile charges a call with the time its
    # process waited for a core.
    profile = cProfile.Profile(time.process_time) if args.profile else None
    result = asyncio.run(
        measure(
            args.services,
            args.ticks,
            seed=args.seed,
            profile=profile,
            gc_threshold=args.gc_threshold,
            churn=args.churn,
            scrape_ticks=args.scrape_ticks,
            telemetry=args.telemetry,
        )
    )
    width = max(map(len, result))
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    if profile is not None:
        profile.dump_stats(args.profile)
        pstats.Stats(profile).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
