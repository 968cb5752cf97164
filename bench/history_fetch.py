"""The forecast history's range queries against a real Prometheus, alone.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python -m bench.history_fetch [--services 1000]
        [--pods 2] [--hours 6] [--namespaces 10] [--per-service]

A real Prometheus (Debian's `prometheus`) started on `--hours` of backfilled series (`promtool`):
`--pods` pods per Deployment, `llm-NNNNN` in `--namespaces` namespaces as `bench.loop_scale_k8s`
names them, one with a `shared` placement tier, each counting requests at its own rate. The real
`prometheus.LoadHistory` with the default policy's seasonal forecast fetches the history an hour
before the data ends, then refreshes five minutes on, as the loop does every `refresh_s`.

Printed for the first fetch and for the refresh: the range queries sent, the wall time, the
process CPU of this process (the controller's side: building the queries, aiohttp, the scan,
the placement of the points) and of Prometheus (from `/proc`), and the latency of an instant
query over every pod (the tick's kind: `sum by (namespace, pod) (rate(...))`) asked every
100 ms while the fetch runs, p50 and p99; with `--profile N`, the refresh's profile (its top
N by cumulative time; the fetch's own CPU grows under it). `--per-service` asks one service per
query, as before the shared queries (where the code has no such setting, it is the only way).
Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import inspect
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent.parent / "tests"
STEP_S = 60
SCRAPE_S = 60
METRIC = "vllm:request_success_total"


def pod_names(service: int, pods: int) -> list[str]:
    """A Deployment's pods: `--pods` of its own, and a `shared` tier's for every seventh."""
    name, suffix = f"llm-{service:05d}", f"{service % 10_000:04d}"
    names = [f"{name}-5d8f7c6b9-{chr(97 + k % 26)}{suffix}" for k in range(pods)]
    if service % 7 == 0:
        names.append(f"{name}-shared-6c5b4d8f7-s{suffix}")
    return names


def backfill(promtool: str, data: Path, args: argparse.Namespace, end: int) -> None:
    start = end - args.hours * 3600
    text = data.parent / "history.om"
    with text.open("w") as out:
        out.write("# TYPE vllm:request_success counter\n")
        for service in range(args.services):
            namespace = f"team-{service % args.namespaces}"
            rate = 1.0 + (service % 50) / 10
            for pod in pod_names(service, args.pods):
                labels = f'namespace="{namespace}",pod="{pod}"'
                for t in range(start, end, SCRAPE_S):
                    out.write(f"{METRIC}{{{labels}}} {rate * (t - start):.1f} {t}\n")
        out.write("# EOF\n")
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(text), str(data)],
        check=True,
        capture_output=True,
    )
    text.unlink()


def cpu_of(pid: int) -> float:
    """A process's CPU seconds (user and system) from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(args: argparse.Namespace, prom: Any, end: int) -> None:
    from autoscaler import ports
    from autoscaler.adapters import prometheus
    from autoscaler.core import model

    policy = model.PolicyConfig(
        max_replicas=10, target_load_per_replica=1.0, forecast=model.ForecastConfig()
    )
    assert policy.forecast is not None
    workloads = [
        ports.Workload(
            model.ServiceId(f"team-{i % args.namespaces}/llm-{i:05d}"),
            policy,
            half_life_s=30.0,
            replicas=2,
            serving=2,
            namespace=f"team-{i % args.namespaces}",
            deployment=f"llm-{i:05d}",
            metrics=prometheus.PRESETS["vllm"],
        )
        for i in range(args.services)
    ]
    wall = [float(end - 3600)]
    options: dict[str, int] = {}
    batching = "max_batch_services" in inspect.signature(prometheus.LoadHistory).parameters
    if args.per_service and batching:
        options["max_batch_services"] = 1
    client = prometheus.Client(prom.url, timeout_s=600.0)
    history = prometheus.LoadHistory(
        client, wall_now=lambda: wall[0], scrape_interval_s=SCRAPE_S, **options
    )
    probe = prometheus.Client(prom.url, timeout_s=60.0)
    instant = f"sum by (namespace, pod) (rate({METRIC}[5m]))"
    print(
        f"services {args.services}, pods {args.pods}, hours {args.hours}, "
        f"{'one service a query' if args.per_service or not batching else 'shared queries'}"
    )
    try:
        for label, shift in (("first fetch", 0.0), ("refresh", float(policy.forecast.refresh_s))):
            wall[0] += shift
            latencies: list[float] = []
            done = asyncio.Event()

            async def probing(
                latencies: list[float] = latencies, done: asyncio.Event = done
            ) -> None:
                while not done.is_set():
                    began = time.perf_counter()
                    await probe.query("probe", instant)
                    latencies.append(time.perf_counter() - began)
                    await asyncio.sleep(0.1)

            prober = asyncio.create_task(probing())
            sent = client.sent
            cpu, prom_cpu, began = (
                time.process_time(),
                cpu_of(prom.process.pid),
                time.perf_counter(),
            )
            profile = cProfile.Profile() if args.profile and shift else None
            if profile is not None:
                profile.enable()
            found = await history.load_history(
                workloads, wall[0], span_s=policy.forecast.span_s, step_s=policy.forecast.step_s
            )
            if profile is not None:
                profile.disable()
                pstats.Stats(profile).sort_stats("cumulative").print_stats(args.profile)
            took = time.perf_counter() - began
            cpu, prom_cpu = time.process_time() - cpu, cpu_of(prom.process.pid) - prom_cpu
            done.set()
            await prober
            latencies.sort()
            p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
            print(
                f"{label:>11}: queries {client.sent - sent:6d}  wall {took:7.2f} s  "
                f"cpu {cpu:7.2f} s  prometheus cpu {prom_cpu:7.2f} s  "
                f"instant query p50 {statistics.median(latencies) * 1000:6.0f} ms "
                f"p99 {p99 * 1000:6.0f} ms ({len(latencies)})  histories {len(found)}"
            )
    finally:
        await client.close()
        await probe.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=2)
    parser.add_argument("--hours", type=int, default=6)
    parser.add_argument("--namespaces", type=int, default=10)
    parser.add_argument("--per-service", action="store_true")
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="print the refresh's top N by cumulative time",
    )
    parser.add_argument("--data", type=Path, help="keep the backfilled blocks here, and reuse them")
    args = parser.parse_args()
    sys.path.insert(0, str(TESTS))
    from prom import server

    binary, promtool = server.find_binary(), shutil.which("promtool")
    if binary is None or promtool is None:
        raise SystemExit("needs Debian's prometheus package (prometheus and promtool)")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        port = server._free_port()
        data = work / f"data-{port}"
        stamp = args.data / "end" if args.data else None
        if args.data and stamp is not None and stamp.exists():
            end = int(stamp.read_text())
            shutil.copytree(args.data / "blocks", data)
        else:
            end = (int(time.time()) // 3600 - 1) * 3600
            backfill(promtool, data, args, end)
            if args.data and stamp is not None:
                shutil.copytree(data, args.data / "blocks")
                stamp.write_text(str(end))
        prom = server.start(binary, work, port=port)
        try:
            asyncio.run(measure(args, prom, end))
        finally:
            prom.stop()


if __name__ == "__main__":
    main()
