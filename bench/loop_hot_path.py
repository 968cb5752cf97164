"""The loop's own CPU per tick at scale, in seconds rather than the minutes of `loop_scale_k8s`.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python -m bench.loop_hot_path [--services 10000]
        [--ticks 10] [--seed 14] [--gc-threshold N[,N,N]] [--profile PATH]

`Loop.step()` with the real Prometheus adapter (`MetricsSource` over `Client`, its HTTP and its
reading of the answers) and the default policy, for N services of two pods each in ten
namespaces. The answers are served from memory by an aiohttp server in this process, written
as Prometheus writes them (compact JSON, one series per pod), with seeded values that are new
every tick; the cluster is a list of records that never changes and takes every write at once.
What it leaves out, `loop_scale_k8s` measures: the Kubernetes adapter and its caches, Events,
telemetry, Prometheus itself, and a machine shared with all of them.

Printed: CPU per tick (process time: the server's share is the same few copies of bytes for any
code under test), its wall time, the garbage collector's share and its collections by generation,
and with `--profile` the top of the steady ticks' profile (then without the collector's share).
`--gc-threshold` sets the collector's thresholds after the freeze, as the controller's
`AUTOSCALER_LOOP__GC_THRESHOLD` does (generations left out keep theirs; 0 for the first keeps
Python's). Timings are printed, never
asserted (docs/benchmark.md).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import pstats
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from aiohttp import web

from autoscaler import clock, logs, loop, ports
from autoscaler.adapters import prometheus
from autoscaler.core import model, policy

NAMESPACES = 10
PODS_PER_SERVICE = 2
WARM_TICKS = 5


def records(services: int) -> list[ports.Workload]:
    """N services as the Kubernetes adapter would record them: the default policy, vLLM."""
    config = policy.default(
        max_replicas=20, target_load_per_replica=5.0, target_queue_per_replica=4.0, forecast=None
    )
    found = []
    for i in range(services):
        name = f"llm-{i:05d}"
        namespace = f"team-{i % NAMESPACES}"
        found.append(
            ports.Workload(
                model.ServiceId(f"{namespace}/{name}"),
                config,
                half_life_s=30.0,
                replicas=PODS_PER_SERVICE,
                serving=PODS_PER_SERVICE,
                namespace=namespace,
                deployment=name,
                metrics=prometheus.PRESETS["vllm"],
                pods=frozenset(f"{name}-7d9f8c6b5-{j:05d}" for j in range(PODS_PER_SERVICE)),
            )
        )
    return found


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


class Unchanging:
    """`ports.Cluster` over fixed records: every scale and publish succeeds at once."""

    def __init__(self, workloads: list[ports.Workload]) -> None:
        self._workloads = workloads

    def workloads(self) -> Sequence[ports.Workload]:
        return self._workloads

    async def scale(self, service: model.ServiceId, replicas: int) -> None:
        return None

    async def publish(
        self, service: model.ServiceId, decision: model.Decision, state: model.PolicyState
    ) -> None:
        return None


async def measure(
    services: int,
    ticks: int,
    *,
    seed: int,
    profile: cProfile.Profile | None,
    gc_threshold: Sequence[int] = (),
) -> dict[str, object]:
    workloads = records(services)
    answers = Answers(workloads, seed)
    server = web.Application()
    server.router.add_get("/api/v1/query", answers.handle)
    runner = web.AppRunner(server)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    client = prometheus.Client(f"http://127.0.0.1:{port}", timeout_s=60.0)
    source = prometheus.MetricsSource(client, scrape_interval_s=5.0)
    ticking = clock.ManualClock(0.0)
    the_loop = loop.Loop(cluster=Unchanging(workloads), metrics=source, clock=ticking)
    collected_s = [0.0]
    collections = [0, 0, 0]
    started = [0.0]

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.process_time()
        else:
            collected_s[0] += time.process_time() - started[0]
            collections[info["generation"]] += 1

    cpu: list[float] = []
    wall: list[float] = []
    thresholds = measured_threshold = gc.get_threshold()
    try:
        for _ in range(WARM_TICKS):
            await the_loop.step()
            ticking.advance(1.0)
        gc.collect()
        gc.freeze()  # as the controller does once its caches have synced
        if gc_threshold and gc_threshold[0]:
            gc.set_threshold(*gc_threshold, *thresholds[len(gc_threshold) :])
        measured_threshold = gc.get_threshold()
        if profile is None:  # the callback would time the profiler too
            gc.callbacks.append(timed)
        for _ in range(ticks):
            answers.renew()
            cpu_s, wall_s = time.process_time(), time.perf_counter()
            if profile is not None:
                profile.enable()
            await the_loop.step()
            if profile is not None:
                profile.disable()
            cpu.append(time.process_time() - cpu_s)
            wall.append(time.perf_counter() - wall_s)
            ticking.advance(1.0)
    finally:
        if timed in gc.callbacks:
            gc.callbacks.remove(timed)
        gc.unfreeze()
        gc.set_threshold(*thresholds)
        await client.close()
        await runner.cleanup()
    return {
        "services": services,
        "ticks_measured": ticks,
        "cpu_per_tick_p50_s": round(statistics.median(cpu), 4),
        "cpu_per_tick_min_s": round(min(cpu), 4),
        "wall_per_tick_p50_s": round(statistics.median(wall), 4),
        "gc_s_per_tick": round(collected_s[0] / ticks, 4),
        "gc_collections_by_generation": collections,
        "gc_threshold": list(measured_threshold),
        "answer_mib_per_signal": round(len(answers.bodies["load"]) / 2**20, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=10_000)
    parser.add_argument("--ticks", type=int, default=10)
    parser.add_argument("--seed", type=int, default=14)
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
    profile = cProfile.Profile() if args.profile else None
    result = asyncio.run(
        measure(
            args.services,
            args.ticks,
            seed=args.seed,
            profile=profile,
            gc_threshold=args.gc_threshold,
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
