"""The forecast's load history against a real Prometheus holding a day of backfilled series."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import numpy as np
import numpy.typing as npt
import pytest
from aiohttp import web
from prom import server, stub

from autoscaler import errors, ports
from autoscaler.adapters import prometheus
from autoscaler.core import forecast, model

T = TypeVar("T")
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


def workloads(
    *services: model.ServiceId, policy: model.PolicyConfig | None = None
) -> list[ports.Workload]:
    config = policy or model.PolicyConfig(max_replicas=10, target_load_per_replica=1.0)
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


async def test_a_forecast_keeps_only_the_stretches_it_reads_and_asks_the_past_again_seldom(
    backfilled: Backfilled, history_for: list[prometheus.LoadHistory]
) -> None:
    """With a six-hour period over two periods the history holds now, six and twelve hours ago
    in float32, the
    same values the whole span holds; ten minutes on, one query fetches the new steps, and the
    past stretches are asked again only once their two hours of lead are used up."""
    config = forecast_config()
    assert config.forecast is not None
    wall = [float(backfilled.end_s - 4 * 3600)]
    whole = _source(backfilled, history_for, lambda: wall[0])
    source = _source(backfilled, history_for, lambda: wall[0])
    span = 2 * config.forecast.span_s
    dense = (await whole.load_history(workloads(SERVICE), 0.0, span_s=span, step_s=STEP_S))[SERVICE]
    kept = (
        await source.load_history(
            workloads(SERVICE, policy=config), 0.0, span_s=span, step_s=STEP_S
        )
    )[SERVICE]
    assert dense.pieces is None
    assert kept.pieces is not None
    assert (kept.start_s, kept.size) == (dense.start_s, dense.size)
    reads = forecast.reads(config.forecast, lead_s=config.forecast.refresh_s)
    assert len(kept.pieces) == len(reads) == 3
    for (first, values), (lo, hi) in zip(kept.pieces, reads, strict=True):
        assert values.dtype == np.float32
        assert first == kept.size + lo
        assert first + len(values) >= kept.size + hi  # the past ones with their lead
        assert np.array_equal(values, dense.load_per_s[first : first + len(values)], equal_nan=True)
    assert source.queries_sent == 3

    wall[0] += 600.0
    later = (
        await source.load_history(
            workloads(SERVICE, policy=config), 600.0, span_s=span, step_s=STEP_S
        )
    )[SERVICE]
    assert source.queries_sent == 4  # the new steps only
    assert later.pieces is not None
    for (first, values), (before_first, before) in zip(later.pieces, kept.pieces, strict=True):
        assert first == before_first  # at the same place from the history's start
        assert np.shares_memory(values, before)  # moved on ten steps, not copied
        assert np.array_equal(values[: len(before) - 10], before[10:], equal_nan=True)
    wall[0] += 2 * 3600.0
    await source.load_history(workloads(SERVICE, policy=config), 7800.0, span_s=span, step_s=STEP_S)
    assert source.queries_sent == 7  # the new steps, and each past stretch's next lead


def forecast_config() -> model.PolicyConfig:
    """A policy whose forecast reads six-hour periods with a one-hour backtest."""
    seasonal = model.ForecastConfig(periods_s=(6 * 3600.0,), backtest_s=3600.0)
    return dataclasses.replace(
        model.PolicyConfig(max_replicas=10, target_load_per_replica=1.0), forecast=seasonal
    )


def range_answer(seed: int, *, step_s: float = STEP_S, first: int = 29_933_000) -> bytes:
    """A seeded range answer as Prometheus writes it (compact), with gaps, NaN and infinite
    values, negative and absurd rates, times off the grid or between whole seconds, and a few
    series, some with labels."""
    rng = np.random.default_rng(seed)
    result = []
    for n in range(int(rng.integers(1, 4))):
        points: list[list[Any]] = []
        for k in range(first, first + int(rng.integers(0, 300))):
            if rng.random() < 0.1:
                continue  # a gap
            stamp: float = (k + 1) * step_s
            shift = rng.random()
            if shift < 0.05:
                stamp += float(rng.choice([0.5, 1e-4, -2e-3, 0.25 * step_s]))
            if stamp == int(stamp):
                stamp = int(stamp)
            value = repr(float(rng.lognormal(2.0, 1.0)))
            odd = rng.random()
            if odd < 0.15:
                value = str(rng.choice(["NaN", "+Inf", "-Inf", "-1.5", "2e+12", "0", "1e-07"]))
            points.append([stamp, value])
        labels = {} if n == 0 else {"pod": f"chat-{n}", "le": "+Inf"}
        result.append({"metric": labels, "values": points})
    answer = {"status": "success", "data": {"resultType": "matrix", "result": result}}
    return json.dumps(answer, separators=(",", ":")).encode()


def placed_one_by_one(
    series: list[Any], *, begin: int, within: tuple[int, int], step_s: float
) -> npt.NDArray[np.float64]:
    """The steps of a decoded answer read point by point, as the history read them before the
    scan."""
    fresh = np.full(within[1] - begin, np.nan)
    for item in series:
        for pair in item["values"]:
            stamp, value = float(pair[0]), float(pair[1])
            k = round(stamp / step_s) - 1
            on_grid = abs(stamp - (k + 1) * step_s) < 1e-3
            sane = math.isfinite(value) and 0 <= value <= prometheus.MAX_HISTORY_RATE
            if on_grid and sane and within[0] <= k < within[1]:
                fresh[k - begin] = value
    return fresh


@pytest.mark.parametrize("seed", range(24))
def test_the_scan_of_a_range_answer_places_the_steps_the_decoder_places(seed: int) -> None:
    """A range answer of the usual shape gives the same times and values by the scan as by
    the decoder, and both give the same steps as reading it point by point."""
    step_s = STEP_S if seed % 4 else 15.0
    first = 29_933_000 if seed % 3 else 0  # short times of every width: read by float
    body = range_answer(seed, step_s=step_s, first=first)
    series = json.loads(body)["data"]["result"]
    scanned = prometheus._scan_range(body)
    assert scanned is not None
    decoded = prometheus._range_points(series)
    for one, two in zip(scanned, decoded, strict=True):
        assert one.dtype == two.dtype == np.float64
        assert np.array_equal(one, two, equal_nan=True)
    begin, within = first + 20, (first + 30, first + 250)
    expected = placed_one_by_one(series, begin=begin, within=within, step_s=step_s)
    for stamps, values in (scanned, decoded):
        fresh = np.full(within[1] - begin, np.nan)
        prometheus._place(fresh, stamps, values, begin=begin, within=within, step_s=step_s)
        assert np.array_equal(fresh, expected, equal_nan=True)


def test_a_time_too_large_to_round_is_left_out() -> None:
    """A point at a time past any float's integer is left out, not raised."""
    body = b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":'
    body += b'[[1e400,"1"],[120,"2"]]}]}}'
    scanned = prometheus._scan_range(body)
    assert scanned is not None
    fresh = np.full(3, np.nan)
    prometheus._place(fresh, *scanned, begin=0, within=(0, 3), step_s=STEP_S)
    assert fresh.tolist()[1] == 2.0
    assert np.isnan(fresh[[0, 2]]).all()


async def outcome(answer: Awaitable[T]) -> T | errors.ObservationError:
    """What a query gives: its answer or its error."""
    try:
        return await answer
    except errors.ObservationError as e:
        return e


MATRIX = '{"status":"success","data":{"resultType":"matrix","result":%s}}'


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (200, "<html>not json</html>"),
        (200, MATRIX % '[{"metric":{},"values":[[60,"1"],[120,"2"]]}'),  # cut short
        (400, '{"status":"error","errorType":"bad_data","error":"parse error"}'),
        (200, '{"status":"success"}'),
        (200, MATRIX % "1"),
        (200, MATRIX % '[{"metric":{},"values":[[60,"1"],[+120,"2"]]}]'),  # not a JSON number
        (200, MATRIX % '[{"metric":{"a":"\\u00e9"},"values":[[60,"1"]]}]'),  # escaped label
        (200, MATRIX % '[{"metric":{},"values":[[60,"1"],[120,"1,5"],[180,"x"]]}]'),
        (200, MATRIX % '[{"metric":{},"values":[[60,"1"],[120],[180,"3"],[240,2]]}]'),
        (200, MATRIX % '[{"metric": {}, "values": [[60, "1"], [120, "2"]]}]'),  # spaced
        (200, MATRIX % '[{"metric":{},"values":[[60,"1"]],"histograms":[]}]'),
        (200, MATRIX % '[{"metric":{},"values":[[60,"1"]]},]'),  # a trailing comma
    ],
)
async def test_any_other_range_answer_is_decoded_and_a_broken_one_raises_the_same_error(
    status: int, body: str
) -> None:
    """An answer not of the usual shape is not scanned: the decoder reads it, giving the same
    points or raising the same error as the range query read before the scan."""
    assert prometheus._scan_range(body.encode()) is None
    async with stub.answering(status, body, "application/json") as url:
        client = prometheus.Client(url)
        try:
            ask = {"start_s": 60.0, "end_s": 240.0, "step_s": STEP_S}
            before = await outcome(client.query_range("h", "up", **ask))
            now = await outcome(client.query_range_points("h", "up", **ask))
            if isinstance(before, errors.ObservationError):
                assert isinstance(now, errors.ObservationError)
                assert str(now) == str(before)
                assert type(now.__cause__) is type(before.__cause__)
            else:
                assert not isinstance(now, errors.ObservationError)
                for one, two in zip(now, prometheus._range_points(before), strict=True):
                    assert np.array_equal(one, two, equal_nan=True)
            assert client.scanned == 0
        finally:
            await client.close()


# A namespace of many Deployments: placement tiers, names that begin others' (`chat` and
# `chat-large`, `a` and `a-b`), a Deployment whose pods `chat`'s MIG tier pattern also takes
# (`chat-mig-1g`), a pod with two series, a pod gone at noon, and another namespace.
FLEET_PODS: dict[str, tuple[float, str]] = {
    "ns/chat-7d9f8c6b5-abcde": (2.0, "morning"),
    "ns/chat-7d9f8c6b5-fghij": (3.0, "afternoon"),
    "ns/chat-shared-6c5b4d8f7-klmno": (1.0, "day"),
    "ns/chat-mig-1g.10gb-6c5b4d8f7-mnopq": (0.5, "day"),
    "ns/chat-large-5f6d7c9b8-pqrst": (100.0, "day"),
    "ns/chat-mig-1g-7c6b5d4f3-zyxwv": (7.0, "day"),
    "ns/a-5d8f7c6b9-aaaaa": (1.5, "day"),
    "ns/a-b-5d8f7c6b9-bbbbb": (2.5, "day"),
    "ns/a-b-shared-5d8f7c6b9-ccccc": (0.25, "day"),
    "other/chat-7d9f8c6b5-uvwxy": (50.0, "day"),
    "other/b-5d8f7c6b9-ddddd": (9.0, "day"),
    **{f"ns/llm-{i:05d}-5d8f7c6b9-p{i:04d}": (0.1 * i, "day") for i in range(1, 13)},
    "ns/llm-00003-5d8f7c6b9-q0003": (0.7, "morning"),  # a second pod, gone at noon
}
FLEET = tuple(
    model.ServiceId(s)
    for s in (
        "ns/chat",
        "ns/chat-large",
        "ns/chat-mig-1g",
        "ns/a",
        "ns/a-b",
        "other/chat",
        "other/b",
        *(f"ns/llm-{i:05d}" for i in range(1, 13)),
    )
)


@pytest.fixture
def fleet(prometheus_binary: str, tmp_path: Path) -> Iterator[Backfilled]:
    """A Prometheus started on a day of `FLEET_PODS`' series written by `promtool`."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed")
    end = (int(time.time()) // 3600 - 1) * 3600
    start = end - DAY_S
    parts = {
        "morning": range(start, start + DAY_S // 2, SCRAPE_S),
        "afternoon": range(start + DAY_S // 2, end, SCRAPE_S),
        "day": range(start, end, SCRAPE_S),
    }
    name = "vllm:request_success_total"
    lines = ["# TYPE vllm:request_success counter"]
    for key, (rate, part) in FLEET_PODS.items():
        namespace, pod = key.split("/")
        lines += series(name, namespace, pod, rate, parts[part], day_s=start)
        if pod.startswith("llm-00005"):  # a second series of the same pod
            more = series(name, namespace, pod, rate / 3, parts[part], day_s=start)
            lines += (line.replace("pod=", 'model="x",pod=') for line in more)
    lines.append("# EOF")
    source = tmp_path / "fleet.om"
    source.write_text("\n".join(lines) + "\n")
    port = free_port()
    subprocess.run(
        [
            promtool,
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            str(source),
            str(tmp_path / f"data-{port}"),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    prom = server.start(prometheus_binary, tmp_path, port=port)
    try:
        yield Backfilled(prom, end)
    finally:
        prom.stop()


def _same(one: forecast.History, two: forecast.History) -> None:
    """The two histories hold the same steps, bit for bit."""
    assert (one.start_s, one.step_s, one.size) == (two.start_s, two.step_s, two.size)
    assert np.array_equal(one.load_per_s, two.load_per_s, equal_nan=True)
    assert (one.pieces is None) == (two.pieces is None)
    for (a_first, a_values), (b_first, b_values) in zip(
        one.pieces or (), two.pieces or (), strict=True
    ):
        assert a_first == b_first
        assert np.array_equal(a_values, b_values, equal_nan=True)


def _range_queries(backfilled: Backfilled) -> int:
    """Range queries Prometheus has answered so far, by its own count."""
    return round(backfilled.prometheus.http_requests("/api/v1/query_range"))


@pytest.mark.parametrize("policy", ["forecast", "whole"])
async def test_many_services_share_a_range_query_and_read_what_each_reads_alone(
    fleet: Backfilled, history_for: list[prometheus.LoadHistory], policy: str
) -> None:
    """The services of a namespace are asked for in one range query per stretch (a second for
    names that begin others'), and each reads, bit for bit, the steps its own query reads: tier
    pods, prefix-named Deployments, a pod two patterns take, a gap, a pod gone. So do ten
    minutes and two hours on."""
    config = forecast_config() if policy == "forecast" else None
    stretches = 3 if policy == "forecast" else 1
    wall = [float(fleet.end_s - 4 * 3600)]
    batched = _source(fleet, history_for, lambda: wall[0])
    alone = _source(fleet, history_for, lambda: wall[0], max_batch_services=1)
    span = 2 * 6 * 3600.0
    asked = workloads(*FLEET, policy=config)
    for now in (0.0, 600.0, 7800.0):
        wall[0] = fleet.end_s - 4 * 3600 + now
        before, sent = _range_queries(fleet), batched.queries_sent
        mine = await batched.load_history(asked, now, span_s=span, step_s=STEP_S)
        answered = _range_queries(fleet) - before
        alone_sent = alone.queries_sent
        theirs = await alone.load_history(asked, now, span_s=span, step_s=STEP_S)
        assert sorted(mine) == sorted(theirs) == sorted(FLEET)
        for service in FLEET:
            _same(mine[service], theirs[service])
        # Per stretch asked: `ns` in two queries (`chat-large`, `chat-mig-1g` and `a-b` in the
        # second), `other` in one; one a service asked alone.
        asked_stretches = stretches if now != 600.0 else 1
        assert answered == batched.queries_sent - sent == 3 * asked_stretches
        assert alone.queries_sent - alone_sent == len(FLEET) * asked_stretches
    chat = mine[model.ServiceId("ns/chat")]
    values = np.concatenate([chat.load_per_s, *(v for _, v in chat.pieces or ())])
    # chat's own, its shared and MIG tier pods, and chat-mig-1g's pod that its MIG tier's
    # pattern also takes, as its own query always counted.
    assert np.nanmax(values) == pytest.approx(3.0 + 1.0 + 0.5 + 7.0)


@contextlib.asynccontextmanager
async def refusing(upstream: str, word: str) -> AsyncIterator[tuple[str, list[str]]]:
    """A proxy in front of `upstream` that refuses (422 `execution`) every query naming `word`
    and forwards the others; yields its URL and the queries it saw."""
    seen: list[str] = []
    session = aiohttp.ClientSession()

    async def handle(request: web.Request) -> web.Response:
        form = dict(await request.post()) if request.method == "POST" else dict(request.query)
        query = str(form.get("query", ""))
        seen.append(query)
        if word in query:
            return web.json_response(REFUSAL, status=422)
        async with session.post(upstream + request.path, data=form) as answer:
            return web.Response(status=answer.status, body=await answer.read())

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", seen
    finally:
        await runner.cleanup()
        await session.close()


async def test_a_service_refused_in_a_shared_query_is_found_and_only_it_goes_without(
    fleet: Backfilled, history_for: list[prometheus.LoadHistory]
) -> None:
    """Prometheus refuses every query that names one service: its shared query is bisected down
    to that service alone, the others read what they read alone, and only the refused service
    is left out of the refresh; at the next it is asked again. Past the refresh's budget of
    queries for that, or with every service refused, the refusal is raised."""
    wall = [float(fleet.end_s - 4 * 3600)]
    alone = _source(fleet, history_for, lambda: wall[0], max_batch_services=1)
    asked = workloads(*FLEET, policy=forecast_config())
    span = 2 * 6 * 3600.0
    theirs = await alone.load_history(asked, 0.0, span_s=span, step_s=STEP_S)
    bad = model.ServiceId("ns/llm-00007")
    async with refusing(fleet.prometheus.url, "llm-00007") as (url, seen):
        batched = prometheus.LoadHistory(
            prometheus.Client(url), wall_now=lambda: wall[0], scrape_interval_s=SCRAPE_S
        )
        history_for.append(batched)
        mine = await batched.load_history(asked, 0.0, span_s=span, step_s=STEP_S)
        assert sorted(mine) == sorted(set(FLEET) - {bad})
        for service in mine:
            _same(mine[service], theirs[service])
        # Per stretch: the three shared queries; `ns`'s first (chat, a, twelve llm-) halved
        # down to llm-00007: [7 | 7], [3 | 4], [llm-00006 | 2], [llm-00007 | llm-00008].
        assert len(seen) == 3 * (3 + 8)
        assert sum("llm-00007" in q for q in seen) == 3 * 5
        assert sum("label_replace" not in q for q in seen) == 3 * 3
        seen.clear()
        wall[0] += 600.0
        again = await batched.load_history(asked, 600.0, span_s=span, step_s=STEP_S)
        assert bad not in again
        # Asked again from the start of each stretch, in the shared query and alone.
        assert sum(q.startswith("sum(rate(") and "llm-00007" in q for q in seen) == 3
        frugal = prometheus.LoadHistory(
            prometheus.Client(url),
            wall_now=lambda: wall[0],
            scrape_interval_s=SCRAPE_S,
            max_isolation_queries=4,
        )
        history_for.append(frugal)
        with pytest.raises(prometheus.QueryRejected):
            await frugal.load_history(asked, 600.0, span_s=span, step_s=STEP_S)
    async with stub.answering(422, json.dumps(REFUSAL), "application/json") as url:
        refusing_all = prometheus.LoadHistory(
            prometheus.Client(url), wall_now=lambda: wall[0], scrape_interval_s=SCRAPE_S
        )
        history_for.append(refusing_all)
        with pytest.raises(prometheus.QueryRejected):
            await refusing_all.load_history(asked, 600.0, span_s=span, step_s=STEP_S)
        assert refusing_all.queries_sent < 3 * (3 + 2 * len(FLEET))


REFUSAL = {"status": "error", "errorType": "execution", "error": "too many samples"}


@pytest.mark.parametrize(
    ("options", "queries"),
    [
        ({}, 3),
        ({"max_range_points": 200}, 3 * 4),  # 720 steps in four
        ({"max_batch_services": 5}, 4 + 1),  # ns: 17 services in four
        ({"max_batch_points": 4 * 720}, 5 + 1),  # four services of 720 steps
        ({"max_batch_chars": 30}, 6 + 1),  # `llm-00001|` is ten characters
    ],
)
async def test_a_shared_range_query_keeps_to_its_limits(
    fleet: Backfilled,
    history_for: list[prometheus.LoadHistory],
    options: dict[str, int],
    queries: int,
) -> None:
    """Steps per query, services per query, points per answer and characters of names each
    split the shared queries, and every service still reads what it reads alone."""
    wall = [float(fleet.end_s - 4 * 3600)]
    batched = _source(fleet, history_for, lambda: wall[0], **options)
    alone = _source(fleet, history_for, lambda: wall[0], max_batch_services=1)
    asked = workloads(*FLEET)
    mine = await batched.load_history(asked, 0.0, span_s=12 * 3600.0, step_s=STEP_S)
    theirs = await alone.load_history(asked, 0.0, span_s=12 * 3600.0, step_s=STEP_S)
    assert batched.queries_sent == queries
    assert sorted(mine) == sorted(theirs) == sorted(FLEET)
    for service in FLEET:
        _same(mine[service], theirs[service])


def test_a_shared_query_takes_each_pod_for_the_one_owner_its_name_fits() -> None:
    """The owners' pattern is the one query's, their alternation captured; names that begin
    others' followed by `-` never share a batch."""
    promql = prometheus.history_batch_query(
        ["chat", "a.b"], "ns", "vllm:request_success_total", window_s=240.0
    )
    pods = '"(chat|a\\\\.b)-((mig-[a-z0-9.-]+|shared)-)?[a-z0-9]{1,10}-[a-z0-9]{5}"'
    assert promql == (
        "sum by (autoscaler_deployment) (label_replace(rate(vllm:request_success_total"
        f'{{namespace="ns",pod=~{pods}}}[240s]), "autoscaler_deployment", "$1", "pod", {pods}))'
    )
    with pytest.raises(ValueError, match="not a Deployment name"):
        prometheus.history_batch_query(["a|b"], "ns", "m", window_s=60.0)
    names = ["a", "a-b", "a-b-c", "ab", "b", "a-bc", "chat", "chat-mig-1g", "chat-large"]
    needs = [prometheus._Need(None, 0, name) for name in names]  # type: ignore[arg-type]
    batches = prometheus._batches(
        needs, max_services=100, max_chars=1000, per_service=10, max_points=1000
    )
    owners = [[need.owner for need in batch] for batch in batches]
    assert owners == [
        ["a", "ab", "b", "chat"],
        ["a-b", "a-bc", "chat-mig-1g", "chat-large"],
        ["a-b-c"],
    ]
    for batch in owners:
        for one in batch:
            assert not any(other.startswith(one + "-") for other in batch)


@pytest.mark.parametrize("spaced", [False, True])
async def test_a_shared_range_answer_is_read_by_series_scanned_or_decoded(spaced: bool) -> None:
    """Each series of a shared answer comes with its owner label, scanned from the compact
    shape or decoded from any other, the same either way."""
    result = [
        {"metric": {"autoscaler_deployment": "a"}, "values": [[60, "1"], [120, "2"]]},
        {"metric": {}, "values": [[60, "5"]]},
        {"metric": {"autoscaler_deployment": "b", "x": "y"}, "values": []},
        {"metric": {"autoscaler_deployment": "c"}, "values": [[60, "NaN"], [120, "3"]]},
    ]
    separators = (", ", ": ") if spaced else (",", ":")
    body = MATRIX % json.dumps(result, separators=separators)
    async with stub.answering(200, body, "application/json") as url:
        client = prometheus.Client(url)
        try:
            series = await client.query_range_series(
                "h", "up", label="autoscaler_deployment", start_s=60.0, end_s=120.0, step_s=60.0
            )
            assert client.scanned == (0 if spaced else 1)
        finally:
            await client.close()
    assert series.labels == ["a", None, "b", "c"]
    assert series.counts == [2, 1, 0, 2]
    assert series.times.tolist() == [60.0, 120.0, 60.0, 60.0, 120.0]
    assert series.values[[0, 1, 2, 4]].tolist() == [1.0, 2.0, 5.0, 3.0]
    assert math.isnan(series.values[3])
    assert (
        prometheus._label_of(b'"x":"y","autoscaler_deployment":"b"', "autoscaler_deployment") == "b"
    )


async def test_at_most_two_shared_queries_are_in_flight_at_once(
    history_for: list[prometheus.LoadHistory], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shared query costs Prometheus what hundreds of one service do: two at most run at
    once, leaving it room for the tick's instant queries."""
    source = prometheus.LoadHistory(
        prometheus.Client(f"http://127.0.0.1:{free_port()}"),
        wall_now=lambda: 1_800_000_000.0,
        scrape_interval_s=SCRAPE_S,
        max_batch_services=2,
    )
    history_for.append(source)
    flying = [0, 0]  # now, most

    async def answer(*_: object, **__: object) -> prometheus.RangeSeries:
        flying[0] += 1
        flying[1] = max(flying)
        for _ in range(5):
            await asyncio.sleep(0)  # the other fetches run meanwhile
        flying[0] -= 1
        return prometheus.RangeSeries([], [], np.empty(0), np.empty(0))

    async def alone(*_: object, **__: object) -> tuple[npt.NDArray[np.float64], ...]:
        return np.empty(0), np.empty(0)

    monkeypatch.setattr(source.client, "query_range_series", answer)
    monkeypatch.setattr(source.client, "query_range_points", alone)
    found = await source.load_history(workloads(*FLEET), 0.0, span_s=3600.0, step_s=STEP_S)
    assert len(found) == len(FLEET)
    assert flying[1] == 2
