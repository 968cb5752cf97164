"""The forecast's load history against a real Prometheus holding a day of backfilled series."""

from __future__ import annotations

import math
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from prom import server

from autoscaler import errors, ports
from autoscaler.adapters import prometheus
from autoscaler.core import model

STEP_S = 60.0
SCRAPE_S = 60
DAY_S = 86_400
GAP = (600, 660)
"""Minutes of the day with no sample of the service's own pods (a metrics outage)."""
SERVICE = model.ServiceId("ns/chat")
LOOP_NOW_S = 5_000.0
"""The loop's own clock when it asks: not Unix time."""


@dataclass(frozen=True)
class Backfilled:
    prometheus: server.Prometheus
    end_s: int
    """Unix time just after the last sample."""


def series(
    name: str, namespace: str, pod: str, rate: float, times: range, *, day_s: int
) -> Iterator[str]:
    """OpenMetrics lines of a counter growing at `rate` per second at `times`; the service's own
    pods (not its tier's) send nothing in the `GAP` minutes of the day that began at `day_s`."""
    own = namespace == "ns" and pod.startswith("chat-7d9f8c6b5")
    for t in times:
        if own and GAP[0] <= (t - day_s) // 60 < GAP[1]:
            continue
        labels = f'namespace="{namespace}",pod="{pod}"'
        yield f"{name}{{{labels}}} {rate * (t - times.start):.1f} {t}"


@pytest.fixture
def backfilled(prometheus_binary: str, tmp_path: Path) -> Iterator[Backfilled]:
    """A Prometheus started on a day of history written by `promtool`: the service's pods (one
    replaced at noon, one of its `shared` tier), a Deployment whose name begins the same, and a
    namespace of the same Deployment name."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed")
    end = (int(time.time()) // 3600 - 1) * 3600
    start = end - DAY_S
    first_half, second_half = (
        range(start, start + DAY_S // 2, SCRAPE_S),
        range(start + DAY_S // 2, end, SCRAPE_S),
    )
    whole = range(start, end, SCRAPE_S)
    name = "vllm:request_success_total"
    lines = ["# TYPE vllm:request_success counter"]
    lines += series(name, "ns", "chat-7d9f8c6b5-abcde", 2.0, first_half, day_s=start)
    lines += series(name, "ns", "chat-7d9f8c6b5-fghij", 3.0, second_half, day_s=start)
    lines += series(name, "ns", "chat-shared-6c5b4d8f7-klmno", 1.0, whole, day_s=start)
    lines += series(name, "ns", "chat-large-5f6d7c9b8-pqrst", 100.0, whole, day_s=start)
    lines += series(name, "other", "chat-7d9f8c6b5-uvwxy", 50.0, whole, day_s=start)
    lines.append("# EOF")
    source = tmp_path / "history.om"
    source.write_text("\n".join(lines) + "\n")
    port = free_port()
    data = tmp_path / f"data-{port}"
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    prom = server.start(prometheus_binary, tmp_path, port=port)
    try:
        yield Backfilled(prom, end)
    finally:
        prom.stop()


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def workloads(*services: model.ServiceId) -> list[ports.Workload]:
    config = model.PolicyConfig(max_replicas=10, target_load_per_replica=1.0)
    return [
        ports.Workload(
            s,
            config,
            half_life_s=30.0,
            replicas=2,
            serving=2,
            namespace=s.split("/", 1)[0],
            deployment=s.split("/", 1)[1],
            metrics=prometheus.PRESETS["vllm"],
        )
        for s in services
    ]


@pytest.fixture
async def history_for() -> AsyncIterator[list[prometheus.LoadHistory]]:
    made: list[prometheus.LoadHistory] = []
    yield made
    for source in made:
        await source.client.close()


def _source(
    backfilled: Backfilled,
    history_for: list[prometheus.LoadHistory],
    wall_now: Callable[[], float],
    **options: int,
) -> prometheus.LoadHistory:
    """A history source on the backfilled Prometheus, closed after the test."""
    source = prometheus.LoadHistory(
        prometheus.Client(backfilled.prometheus.url),
        wall_now=wall_now,
        scrape_interval_s=SCRAPE_S,
        **options,
    )
    history_for.append(source)
    return source


async def test_the_history_sums_the_deployments_pods_over_a_day(
    backfilled: Backfilled, history_for: list[prometheus.LoadHistory]
) -> None:
    """A day of one Deployment's load, its replaced and tier pods summed, another Deployment
    and namespace left out, a gap read as NaN, on the loop's clock."""
    wall = [float(backfilled.end_s)]
    source = _source(backfilled, history_for, lambda: wall[0], max_range_points=500)
    found = await source.load_history(
        workloads(SERVICE), LOOP_NOW_S, span_s=DAY_S - 3600, step_s=STEP_S
    )
    history = found[SERVICE]
    assert history.step_s == STEP_S
    assert history.end_s == pytest.approx(LOOP_NOW_S)
    assert len(history.load_per_s) == (DAY_S - 3600) // STEP_S
    assert source.queries_sent == math.ceil(len(history.load_per_s) / 500)
    minute = np.arange(len(history.load_per_s)) + 60  # the day's minute of each step
    values = history.load_per_s
    morning = (minute > 65) & (minute < 500)
    afternoon = (minute > 725) & (minute < 1400)
    assert np.allclose(values[morning], 3.0)  # 2 from the pod, 1 from the shared tier
    assert np.allclose(values[afternoon], 4.0)  # the replacement pod carries 3
    outage = (minute >= GAP[0] + 5) & (minute < GAP[1])
    assert np.allclose(values[outage], 1.0)  # only the tier pod reported
    assert float(np.nanmax(values)) < 10.0  # neither chat-large nor the other namespace


async def test_later_calls_fetch_only_the_new_steps(
    backfilled: Backfilled, history_for: list[prometheus.LoadHistory]
) -> None:
    """Ten minutes on, one query fetches the ten new steps and the oldest ten are dropped."""
    wall = [float(backfilled.end_s - 1800)]
    source = _source(backfilled, history_for, lambda: wall[0])
    span = 6 * 3600.0
    first = (await source.load_history(workloads(SERVICE), 0.0, span_s=span, step_s=STEP_S))[
        SERVICE
    ]
    sent = source.queries_sent
    wall[0] += 600.0
    later = (await source.load_history(workloads(SERVICE), 600.0, span_s=span, step_s=STEP_S))[
        SERVICE
    ]
    assert source.queries_sent == sent + 1
    assert len(later.load_per_s) == len(first.load_per_s)
    assert later.start_s == first.start_s + 600.0
    assert np.array_equal(later.load_per_s[:-10], first.load_per_s[10:], equal_nan=True)
    assert np.allclose(later.load_per_s[-10:], 4.0)


async def test_a_refresh_hands_out_its_one_array_read_only_and_leaves_the_last_as_it_was(
    backfilled: Backfilled, history_for: list[prometheus.LoadHistory]
) -> None:
    """Each history is a read-only view of the span the source keeps, never a copy, and a
    refresh writes its new steps after it in place, leaving the history handed out before as
    it was."""
    wall = [float(backfilled.end_s - 7200)]
    source = _source(backfilled, history_for, lambda: wall[0])
    span = 6 * 3600.0
    first = (await source.load_history(workloads(SERVICE), 0.0, span_s=span, step_s=STEP_S))[
        SERVICE
    ]
    again = (await source.load_history(workloads(SERVICE), 0.0, span_s=span, step_s=STEP_S))[
        SERVICE
    ]
    assert not first.load_per_s.flags.writeable
    assert len(first.load_per_s) == span // STEP_S
    before = first.load_per_s.copy()
    wall[0] += 600.0
    later = (await source.load_history(workloads(SERVICE), 600.0, span_s=span, step_s=STEP_S))[
        SERVICE
    ]
    assert len(later.load_per_s) == len(first.load_per_s)  # replaced, not grown
    assert np.shares_memory(later.load_per_s, first.load_per_s)  # written after, not copied
    assert np.array_equal(first.load_per_s, before, equal_nan=True)
    assert np.array_equal(later.load_per_s[:-10], before[10:], equal_nan=True)
    wall[0] += 3600.0  # past the room after the span: the span is kept anew
    hour = (await source.load_history(workloads(SERVICE), 4200.0, span_s=span, step_s=STEP_S))[
        SERVICE
    ]
    assert len(hour.load_per_s) == len(first.load_per_s)
    assert not np.shares_memory(hour.load_per_s, first.load_per_s)
    assert np.array_equal(hour.load_per_s[:-60], later.load_per_s[60:], equal_nan=True)
    assert np.array_equal(first.load_per_s, before, equal_nan=True)
    # Asked again with nothing new, the source hands out the one array it keeps.
    assert np.shares_memory(again.load_per_s, first.load_per_s)


async def test_a_service_without_metric_names_has_no_history_and_a_dead_server_raises(
    backfilled: Backfilled, history_for: list[prometheus.LoadHistory]
) -> None:
    """A record without metric names gets no history; an unreachable Prometheus is an
    `ObservationError`."""
    source = _source(backfilled, history_for, lambda: float(backfilled.end_s))
    config = model.PolicyConfig(max_replicas=10, target_load_per_replica=1.0)
    nameless = [ports.Workload(SERVICE, config, half_life_s=30.0, replicas=2, serving=2)]
    assert await source.load_history(nameless, 0.0, span_s=3600, step_s=STEP_S) == {}
    dead = prometheus.LoadHistory(
        prometheus.Client(f"http://127.0.0.1:{free_port()}"),
        wall_now=lambda: float(backfilled.end_s),
        scrape_interval_s=SCRAPE_S,
    )
    history_for.append(dead)
    with pytest.raises(errors.ObservationError):
        await dead.load_history(workloads(SERVICE), 0.0, span_s=3600, step_s=STEP_S)


def test_the_query_selects_the_deployments_pods_by_name() -> None:
    """The PromQL matches the owner's and its tiers' pods by name, quoted, and nothing else."""
    serving = prometheus.ServingPods("ns", frozenset(), prometheus.PRESETS["vllm"])
    promql = prometheus.history_query(SERVICE, serving, window_s=240.0)
    assert promql == (
        'sum(rate(vllm:request_success_total{namespace="ns",'
        'pod=~"chat-((mig-[a-z0-9.-]+|shared)-)?[a-z0-9]{1,10}-[a-z0-9]{5}"}[240s]))'
    )
    with pytest.raises(ValueError, match="not a Deployment name"):
        prometheus.history_query(model.ServiceId('ns/a"b'), serving, window_s=60.0)
