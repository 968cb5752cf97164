"""The loop's own memory at scale, with the seasonal forecast's history on.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python -m bench.loop_memory [--services 3000]
        [--ticks 5] [--refreshes 2] [--seed 14] [--top 12] [--no-trace]

`bench.loop_hot_path`'s loop (the real Prometheus adapter, answers served from memory by an
aiohttp server in this process, the default policy), with the default policy's seasonal
forecast on for every service and the real `prometheus.LoadHistory` behind it: its range queries
are answered over the forecast's whole span (a week and some hours) with a seeded daily
pattern per service, as Prometheus writes them. The
loop's clock is moved by a refresh period between refreshes, so every refresh after the first
fetches only the steps added since, as in a cluster.

Printed: the process's RSS (now and its peak) and the bytes `tracemalloc` sees, after the first
ticks (before any history), after the first refresh, after each later one and after the ticks
that follow; the CPU and wall seconds of each history fetch (the first is the whole span, the
later ones the new steps); then the top allocations by line still held at the end, and the
top growth from the first point to the end. `--no-trace` leaves `tracemalloc` off (it costs
CPU and some memory of its own) and prints RSS alone. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import math
import re
import resource
import sys
import time
import tracemalloc
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from aiohttp import web

from autoscaler import clock, logs, loop, ports
from autoscaler.adapters import prometheus
from autoscaler.core import forecast as forecast_
from autoscaler.core import model, policy
from bench import loop_hot_path

STEP_S = 60.0
WALL_START_S = 1_796_000_000.0
"""Unix time of the first tick: the history's range queries are asked in Unix time."""


def rss_mib() -> tuple[float, float]:
    """(current, peak) resident set of this process, MiB."""
    current = 0.0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            current = int(line.split()[1]) / 1024
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return current, peak


class RangeAnswers:
    """Answers to the history's range queries: one series, a daily pattern with noise, the same
    for every service (the shape, not the values, is what costs memory); one body per
    (start, end) asked, kept, as every service asks the same ranges."""

    def __init__(self, seed: int) -> None:
        self._seed = seed
        self._bodies: dict[tuple[str, str, str], bytes] = {}

    def _body(self, start_s: float, end_s: float, step_s: float) -> bytes:
        stamps = np.arange(start_s, end_s + step_s / 2, step_s)
        noise = np.random.default_rng([self._seed, int(start_s)]).normal(0.0, 0.5, len(stamps))
        load = 20.0 + 10.0 * np.sin(2 * math.pi * stamps / 86_400.0) + noise
        values = [[float(t), repr(float(v))] for t, v in zip(stamps, load, strict=True)]
        result = [{"metric": {}, "values": values}]
        answer = {"status": "success", "data": {"resultType": "matrix", "result": result}}
        return json.dumps(answer, separators=(",", ":")).encode()

    async def handle(self, request: web.Request) -> web.Response:
        form = await request.post() if request.method == "POST" else request.query
        key = (str(form["start"]), str(form["end"]), str(form["step"]))
        body = self._bodies.get(key)
        if body is None:
            body = self._bodies[key] = self._body(*map(float, key))
        owners = _OWNERS.search(str(form["query"]))
        if owners is None:
            return web.Response(body=body, content_type="application/json")
        # A query shared by several services: the same series for each, named by its owner.
        start, end = body.index(b'"values":'), body.rindex(b"]}}")
        values = body[start:end].decode()
        series = ",".join(
            f'{{"metric":{{"{prometheus.HISTORY_OWNER_LABEL}":"{owner}"}},{values}'
            for owner in owners.group(1).split("|")
        )
        text = f'{{"status":"success","data":{{"resultType":"matrix","result":[{series}]}}}}'
        return web.Response(text=text, content_type="application/json")


_OWNERS = re.compile(r'label_replace\(.*, "pod", "\(([-a-z0-9|]+)\)-')
"""The owners' alternation of a shared history query (`prometheus.history_batch_query`)."""


class Watched:
    """`ports.HistorySource` over another, telling when it has answered."""

    def __init__(self, inner: prometheus.LoadHistory) -> None:
        self.inner = inner
        self.answered = asyncio.Event()
        self.cpu_s: list[float] = []
        """Process CPU seconds of each call, from its start to its answer (the range answers'
        server in this process included: it serves stored bodies)."""
        self.wall_s: list[float] = []

    async def load_history(
        self, workloads: Sequence[ports.Workload], now_s: float, *, span_s: float, step_s: float
    ) -> Mapping[model.ServiceId, forecast_.History]:
        cpu, wall = time.process_time(), time.perf_counter()
        found = await self.inner.load_history(workloads, now_s, span_s=span_s, step_s=step_s)
        self.cpu_s.append(time.process_time() - cpu)
        self.wall_s.append(time.perf_counter() - wall)
        self.answered.set()
        return found


def traced_mib() -> float:
    return tracemalloc.get_traced_memory()[0] / 2**20 if tracemalloc.is_tracing() else math.nan


async def measure(args: argparse.Namespace) -> None:
    config = policy.default(
        max_replicas=20, target_load_per_replica=5.0, target_queue_per_replica=4.0
    )
    forecast = config.forecast
    assert forecast is not None
    workloads = [
        dataclasses.replace(w, policy=config) for w in loop_hot_path.records(args.services)
    ]
    answers = loop_hot_path.Answers(workloads, args.seed)
    ranges = RangeAnswers(args.seed)
    server = web.Application()
    server.router.add_get("/api/v1/query", answers.handle)
    server.router.add_route("*", "/api/v1/query_range", ranges.handle)
    runner = web.AppRunner(server, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    client = prometheus.Client(url, timeout_s=600.0)
    history_client = prometheus.Client(url, timeout_s=600.0)
    ticking = clock.ManualClock(0.0)
    history = Watched(
        prometheus.LoadHistory(
            history_client, wall_now=lambda: WALL_START_S + ticking.now(), scrape_interval_s=5.0
        )
    )
    the_loop = loop.Loop(
        cluster=loop_hot_path.Unchanging(workloads),
        metrics=prometheus.MetricsSource(client, scrape_interval_s=5.0),
        clock=ticking,
        history=history,
    )
    first: tracemalloc.Snapshot | None = None

    def point(name: str) -> None:
        gc.collect()
        current, peak = rss_mib()
        print(
            f"{name:<28} rss {current:8.1f} MiB  peak {peak:8.1f} MiB  "
            f"traced {traced_mib():8.1f} MiB",
            flush=True,
        )

    async def tick() -> None:
        answers.renew()
        await the_loop.step()
        ticking.advance(1.0)

    async def refreshed() -> None:
        """Tick once to start a refresh, let it run to its end, and tick to take it in."""
        history.answered.clear()
        await tick()
        await history.answered.wait()  # the fetch runs on this event loop meanwhile
        await tick()

    try:
        the_loop.history = None  # the first ticks without the forecast's history
        for _ in range(args.ticks):
            await tick()
        the_loop.history = history
        point("ticks, no history")
        if tracemalloc.is_tracing():
            first = tracemalloc.take_snapshot()
        await refreshed()
        point("first refresh (full)")
        for k in range(args.refreshes):
            ticking.advance(forecast.refresh_s)
            await refreshed()
            point(f"refresh {k + 2} (new steps)")
        for _ in range(args.ticks):
            await tick()
        point("ticks after")
        print(f"history queries sent: {history.inner.queries_sent}")
        for k, (cpu, wall) in enumerate(zip(history.cpu_s, history.wall_s, strict=True)):
            print(f"history fetch {k + 1}: cpu {cpu:7.2f} s  wall {wall:7.2f} s")
        if first is not None:
            last = tracemalloc.take_snapshot()
            print(f"\ntop {args.top} held at the end, by line:")
            for stat in last.statistics("lineno")[: args.top]:
                print(f"  {stat.size / 2**20:8.1f} MiB {stat.count:9d}  {stat.traceback[0]}")
            print(f"\ntop {args.top} growth since the first point, by line:")
            for diff in last.compare_to(first, "lineno")[: args.top]:
                print(f"  {diff.size_diff / 2**20:+8.1f} MiB  {diff.traceback[0]}")
    finally:
        await client.close()
        await history_client.close()
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=3_000)
    parser.add_argument("--ticks", type=int, default=5)
    parser.add_argument("--refreshes", type=int, default=2)
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--no-trace", action="store_true")
    args = parser.parse_args()
    logs.configure(json=True, level="error", stream=sys.stderr)
    if not args.no_trace:
        tracemalloc.start()
    asyncio.run(measure(args))


if __name__ == "__main__":
    main()
