"""`HealthQueries`: the ramp gate's health and the drain's in-flight count from Prometheus.

The query builders on their own, then against a real Prometheus scraping an exporter whose pods
serve steady traffic: a good stable set and a misbehaving warming pod.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from prom import server, stub
from prom.fixtures import Stack

from autoscaler import errors, metricnames
from autoscaler.adapters import prometheus

VLLM = metricnames.PRESETS["vllm"]
WINDOW_S = 4.0


def p95_within(lower_s: float, upper_s: float) -> float:
    """What `histogram_quantile(0.95, ...)` answers when every observation is in one bucket."""
    return lower_s + (upper_s - lower_s) * 0.95


@pytest.fixture
async def health_for() -> AsyncIterator[Callable[..., prometheus.HealthQueries]]:
    """Makes `HealthQueries` on a URL; closes them after the test."""
    made: list[prometheus.HealthQueries] = []

    def make(
        url: str, *, timeout_s: float = prometheus.DEFAULT_TIMEOUT_S, **kwargs: Any
    ) -> prometheus.HealthQueries:
        client = prometheus.Client(url, timeout_s=timeout_s)
        source = prometheus.HealthQueries(
            client, scrape_interval_s=server.SCRAPE_INTERVAL_S, **kwargs
        )
        made.append(source)
        return source

    yield make
    for source in made:
        await source.client.close()


async def wait_for_full_window(stack: Stack, namespace: str, pods: int) -> None:
    """Wait until each pod's latency histogram has samples older than the window."""
    full = f"{WINDOW_S + 2 * server.SCRAPE_INTERVAL_S:g}"
    await stack.prometheus.wait_for_series(
        f'count_over_time(vllm:e2e_request_latency_seconds_count{{namespace="{namespace}"}}'
        f"[{full}s])",
        lambda result: (
            len(result) == pods and all(float(s["value"][1]) >= float(full) for s in result)
        ),
    )


# -- the queries --------------------------------------------------------------------------------


def test_health_queries_fix_the_namespace_and_quote_the_pods() -> None:
    """Requests, errors by `finished_reason` and P95 from the buckets, for exactly these pods."""
    queries = prometheus.health_queries("ns-a", VLLM, ["chat.v2-0", "chat-1"], window_s=30)

    where = 'namespace="ns-a",pod=~"chat-1|chat\\\\.v2-0"'
    assert queries == {
        "requests": f"sum(increase(vllm:request_success_total{{{where}}}[30s]))",
        "errors": (
            f"sum(increase(vllm:request_success_total{{{where},"
            f'finished_reason=~"abort|error"}}[30s]))'
        ),
        "p95": (
            "histogram_quantile(0.95, sum by (le) "
            f"(rate(vllm:e2e_request_latency_seconds_bucket{{{where}}}[30s])))"
        ),
    }


def test_each_server_gets_the_queries_its_metrics_allow() -> None:
    """Triton has no histogram (no P95); a custom server without a counter counts the
    histogram's `_count`; one without an errors counter gets no errors query."""
    triton = prometheus.health_queries("ns", metricnames.PRESETS["triton"], ["p-0"], window_s=5)
    custom = metricnames.MetricNames(requests=None, queue="q", latency="lat_seconds")
    counted = prometheus.health_queries("ns", custom, ["p-0"], window_s=5)

    assert set(triton) == {"requests", "errors"}
    assert "nv_inference_request_failure{" in triton["errors"]
    assert set(counted) == {"requests", "p95"}
    assert "increase(lat_seconds_count{" in counted["requests"]


@pytest.mark.parametrize(
    ("namespace", "pod"),
    [('a"} or vector(1) #', "p-0"), ("ns", 'p",pod=~".*'), ("ns", "P"), ("", "p-0")],
)
def test_names_that_are_not_kubernetes_names_never_reach_promql(namespace: str, pod: str) -> None:
    """A hostile namespace or pod name raises ValueError before any query is built."""
    with pytest.raises(ValueError, match="not a"):
        prometheus.health_queries(namespace, VLLM, [pod], window_s=5)
    with pytest.raises(ValueError, match="not a"):
        prometheus.in_flight_query(namespace, VLLM, [pod], max_age_s=3)


def test_a_long_pod_list_is_read_through_a_sample_that_fits() -> None:
    """A stable set too long for one request line is read through its first pods by name."""
    pods = [f"chat-{i:04d}" for i in range(500)]

    queries = prometheus.health_queries("ns", VLLM, pods, window_s=5, max_pod_matcher_chars=100)

    matcher = queries["requests"].split("pod=~")[1].split("}")[0]
    assert len(matcher) <= 100
    assert json.loads(matcher).split("|") == pods[: len(json.loads(matcher).split("|"))]
    assert "chat-0000" in matcher


def test_in_flight_adds_the_running_gauge_where_the_server_has_one() -> None:
    """vLLM: waiting plus running; Triton: pending alone; no queue gauge: no query."""
    vllm = prometheus.in_flight_query("ns", VLLM, ["p-0"], max_age_s=3)
    triton = prometheus.in_flight_query("ns", metricnames.PRESETS["triton"], ["p-0"], max_age_s=3)
    custom = metricnames.MetricNames(requests="r", queue=None)

    assert vllm is not None
    assert "vllm:num_requests_waiting{" in vllm
    assert "vllm:num_requests_running{" in vllm
    assert triton is not None
    assert "+" not in triton
    assert prometheus.in_flight_query("ns", custom, ["p-0"], max_age_s=3) is None


# -- against the real Prometheus ------------------------------------------------------------------


async def test_warming_and_stable_health_come_out_as_served(
    stack: Stack, unique: str, health_for: Callable[..., prometheus.HealthQueries]
) -> None:
    """A warming pod aborting a quarter of its requests at 4 s reads so; the stable pods don't."""
    ns = f"{unique}-a"
    stack.upper.set_traffic(ns, "chat-0", rate_per_s=10.0, latency_s=0.4)
    stack.lower.set_traffic(ns, "chat-1", rate_per_s=10.0, latency_s=0.4)
    stack.upper.set_traffic(ns, "chat-2", rate_per_s=10.0, latency_s=4.0, error_ratio=0.25)
    await wait_for_full_window(stack, ns, 3)
    source = health_for(stack.prometheus.url)

    warming, stable = await source.health(ns, VLLM, {"chat-2"}, {"chat-0", "chat-1"}, WINDOW_S)

    assert warming.error_rate == pytest.approx(0.25, rel=0.05)
    assert warming.p95_s == pytest.approx(p95_within(2.5, 5.0))
    assert warming.requests == pytest.approx(10.0 * WINDOW_S, rel=0.3)
    assert stable.error_rate == 0.0
    assert stable.p95_s == pytest.approx(p95_within(0.3, 0.5))
    assert stable.requests == pytest.approx(20.0 * WINDOW_S, rel=0.3)
    assert len(source.last_queries) == 6
    assert all(f'namespace="{ns}"' in query for query in source.last_queries)


async def test_a_window_shorter_than_four_scrapes_is_read_over_four(
    stack: Stack, unique: str, health_for: Callable[..., prometheus.HealthQueries]
) -> None:
    """An early gate asking about one second gets the new pods' P95 all the same: the range is
    four scrape intervals at least, so the histogram has the samples a rate needs."""
    ns = f"{unique}-a"
    stack.upper.set_traffic(ns, "chat-0", rate_per_s=10.0, latency_s=0.4)
    stack.upper.set_traffic(ns, "chat-1", rate_per_s=10.0, latency_s=4.0)
    await wait_for_full_window(stack, ns, 2)
    source = health_for(stack.prometheus.url)

    warming, stable = await source.health(ns, VLLM, {"chat-1"}, {"chat-0"}, 1.0)

    shortest = f"[{4 * server.SCRAPE_INTERVAL_S:g}s]"
    assert all(shortest in query for query in source.last_queries)
    assert warming.p95_s == pytest.approx(p95_within(2.5, 5.0))
    assert stable.p95_s == pytest.approx(p95_within(0.3, 0.5))


async def test_pods_without_series_read_nan_never_zero(
    stack: Stack, unique: str, health_for: Callable[..., prometheus.HealthQueries]
) -> None:
    """No series, no pods, or a server whose metrics are absent: NaN everywhere."""
    ns = f"{unique}-a"
    stack.upper.set_traffic(ns, "chat-0", rate_per_s=5.0, latency_s=0.4)
    await stack.prometheus.wait_for_series(
        f'vllm:request_success_total{{namespace="{ns}"}}', lambda result: len(result) == 2
    )
    source = health_for(stack.prometheus.url)
    tgi = metricnames.PRESETS["tgi"]

    quiet, empty = await source.health(ns, VLLM, {"chat-9"}, set(), WINDOW_S)
    (absent, _) = await source.health(ns, tgi, {"chat-0"}, set(), WINDOW_S)

    for group in (quiet, empty, absent):
        assert math.isnan(group.requests)
        assert math.isnan(group.error_rate)
        assert math.isnan(group.p95_s)
    assert len(source.last_queries) == 3  # the empty stable group asked nothing


async def test_in_flight_reads_queued_plus_running_per_pod(
    stack: Stack, unique: str, health_for: Callable[..., prometheus.HealthQueries]
) -> None:
    """Waiting plus running per pod; a pod without series is absent, not zero."""
    ns = f"{unique}-a"
    stack.upper.set_vllm(ns, "chat-0", waiting=3, running=2)
    stack.upper.set_vllm(ns, "chat-1", waiting=0, running=0)
    stack.upper.set_vllm(f"{unique}-b", "chat-2", waiting=7, running=1)  # another namespace
    await stack.prometheus.wait_for_series(
        f'vllm:num_requests_running{{namespace=~"{ns}|{unique}-b"}}',
        lambda result: len(result) == 3,
    )
    source = health_for(stack.prometheus.url)

    found = await source.in_flight(ns, VLLM, {"chat-0", "chat-1", "chat-2", "chat-3"})

    assert found == {"chat-0": 5.0, "chat-1": 0.0}


async def test_a_stopped_prometheus_raises_observation_error(
    lone_prometheus: server.Prometheus,
    unique: str,
    health_for: Callable[..., prometheus.HealthQueries],
) -> None:
    """Connection refused is an `ObservationError` from the library's exception."""
    source = health_for(lone_prometheus.url)
    ns = f"{unique}-a"
    warming, _ = await source.health(ns, VLLM, {"chat-0"}, {"chat-1"}, WINDOW_S)
    assert math.isnan(warming.requests)  # answered: no series yet

    lone_prometheus.stop()

    with pytest.raises(errors.ObservationError, match="query failed") as caught:
        await source.health(ns, VLLM, {"chat-0"}, {"chat-1"}, WINDOW_S)
    assert isinstance(caught.value.__cause__, aiohttp.ClientConnectionError)
    with pytest.raises(errors.ObservationError, match="in-flight query failed"):
        await source.in_flight(ns, VLLM, {"chat-0"})


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (503, "overloaded"),
        (200, json.dumps({"data": {"result": [{"metric": {}, "value": [1, "x"]}]}})),
        (200, json.dumps({"data": {"result": [{"metric": {}, "value": [1, "1"]}] * 2}})),
    ],
)
async def test_a_broken_answer_raises_observation_error(
    status: int, body: str, health_for: Callable[..., prometheus.HealthQueries]
) -> None:
    """An HTTP error, a malformed sample or a vector where one value was due all raise."""
    async with stub.answering(status, body, "application/json") as url:
        source = health_for(url)

        with pytest.raises(errors.ObservationError):
            await source.health("ns-a", VLLM, {"chat-0"}, set(), WINDOW_S)
