"""A query Prometheus refuses is narrowed to the services that break it; an outage is not."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

import numpy as np
import pytest
from prom import server, stub
from prom.fixtures import Stack

from autoscaler import errors, metricnames, ports
from autoscaler.adapters import prometheus
from autoscaler.core import model

LOAD, SATURATION = model.Signal.LOAD, model.Signal.SATURATION
VLLM = metricnames.PRESETS["vllm"]
SIGNALS = len(model.BASE_SIGNALS)  # what a service without token targets is read for
BAD_DATA = json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error"})


def past_validation(requests: str) -> metricnames.MetricNames:
    """vLLM's names with `requests` put in place as no validated path would let it."""
    names = metricnames.MetricNames(requests="placeholder", queue=VLLM.queue)
    object.__setattr__(names, "requests", requests)  # bypasses `__post_init__` on purpose
    return names


def workloads(
    services: Mapping[model.ServiceId, prometheus.ServingPods],
) -> list[ports.Workload]:
    """One record per service, naming its pods and metrics as `services` says."""
    config = model.PolicyConfig(max_replicas=10, target_load_per_replica=1.0)
    return [
        ports.Workload(
            s,
            config,
            half_life_s=math.inf,
            replicas=1,
            serving=1,
            namespace=where.namespace,
            pods=where.pods,
            metrics=where.metrics,
        )
        for s, where in services.items()
    ]


def source(url: str, **kwargs: float) -> prometheus.MetricsSource:
    return prometheus.MetricsSource(
        prometheus.Client(url), scrape_interval_s=server.SCRAPE_INTERVAL_S, **kwargs
    )  # type: ignore[arg-type]


def grammar_only(name: str) -> None:
    """The name check as it was before reserved words were refused."""
    if not metricnames.METRIC_NAME.fullmatch(name):
        raise ValueError(f"not a Prometheus metric name: {name!r}")


async def test_a_service_that_breaks_the_shared_query_is_found_and_read_apart(
    stack: Stack, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the service named `nan` reads NaN load, with Prometheus's error; the six others read
    their values; the next tick queries it apart without bisecting again."""
    # Refused words no longer reach a query: let one through, as any query error would.
    monkeypatch.setattr(prometheus, "_check_metric_name", grammar_only)
    namespace = f"{unique}-a"
    names = [f"s{i}" for i in range(7)]
    bad = "s4"
    services = {}
    for i, name in enumerate(names):
        stack.upper.set_vllm(namespace, f"{name}-0", rate_per_s=1.0, waiting=i)
        metrics = past_validation("nan") if name == bad else VLLM
        services[model.ServiceId(name)] = prometheus.ServingPods(
            namespace, frozenset({f"{name}-0"}), metrics
        )
    await stack.prometheus.wait_for_series(
        f'count_over_time(vllm:request_success_total{{namespace="{namespace}"}}[4s])',
        lambda result: len(result) == 7 and all(float(s["value"][1]) >= 3 for s in result),
    )
    reader = source(stack.prometheus.url)
    load = workloads(services)
    try:
        values = await reader.sample(load, 0.0)
        first_tick = reader.queries_sent

        good = [i for i, name in enumerate(names) if name != bad]
        assert np.isfinite(values[good, LOAD]).all()
        assert np.isnan(values[names.index(bad), LOAD])
        assert values[:, SATURATION].tolist() == [float(i) for i in range(7)]
        (rejected,) = reader.rejected.items()
        assert rejected[0] == bad
        assert rejected[1].signal is LOAD
        assert rejected[1].error.startswith("Prometheus refused the load query: bad_data: ")
        # One level of halves per doubling of the services: 3 shared, then 2 per level.
        assert first_tick <= SIGNALS + 2 * math.ceil(math.log2(7))

        values = await reader.sample(load, 0.0)

        assert reader.queries_sent - first_tick == 2 * SIGNALS  # shared, and the culprit's own
        assert np.isfinite(values[good, LOAD]).all()
        assert np.isnan(values[names.index(bad), LOAD])
        assert set(reader.rejected) == {bad}

        # Its owner fixes the name: it rejoins the shared query at once.
        services[model.ServiceId(bad)] = prometheus.ServingPods(
            namespace, frozenset({f"{bad}-0"}), VLLM
        )
        load = workloads(services)
        before = reader.queries_sent
        values = await reader.sample(load, 0.0)

        assert reader.queries_sent - before == SIGNALS
        assert np.isfinite(values[:, LOAD]).all()
        assert reader.rejected == {}
    finally:
        await reader.client.close()


@pytest.mark.parametrize(
    ("status", "body"),
    [(503, '{"status":"error","errorType":"unavailable","error":"x"}'), (502, "<html>gw</html>")],
)
async def test_an_outage_fails_the_tick_without_bisecting(status: int, body: str) -> None:
    """A 5xx holds every service after one query per signal: nothing is bisected or blamed."""
    services = {
        model.ServiceId(f"s{i}"): prometheus.ServingPods("ns-a", frozenset({f"s{i}-0"}), VLLM)
        for i in range(16)
    }
    async with stub.answering(status, body, "application/json") as url:
        reader = source(url)
        try:
            with pytest.raises(errors.ObservationError) as caught:
                await reader.sample(workloads(services), 0.0)
        finally:
            await reader.client.close()

    assert not isinstance(caught.value, prometheus.QueryRejected)
    assert reader.queries_sent == SIGNALS
    assert reader.rejected == {}


async def test_a_prometheus_refusing_every_query_costs_a_bounded_number_of_queries() -> None:
    """When every query is refused, a tick spends at most its isolation budget, then holds all."""
    services = {
        model.ServiceId(f"s{i}"): prometheus.ServingPods("ns-a", frozenset({f"s{i}-0"}), VLLM)
        for i in range(100)
    }
    async with stub.answering(400, BAD_DATA, "application/json") as url:
        reader = source(url, max_isolation_queries=10)
        try:
            for _ in range(3):
                with pytest.raises(prometheus.QueryRejected, match="bad_data: parse error"):
                    await reader.sample(workloads(services), 0.0)
        finally:
            await reader.client.close()

    assert reader.queries_sent <= 3 * (SIGNALS + 10)
    assert reader.rejected == {}


async def test_a_namespace_wide_answer_counts_each_pod_once_for_its_own_service() -> None:
    """With a service read apart, the shared answer and its own both name every pod of the
    namespace, and each service still reads its own pod once."""
    services = {
        model.ServiceId(f"s{i}"): prometheus.ServingPods("ns-a", frozenset({f"s{i}-0"}), VLLM)
        for i in range(3)
    }
    series = [
        {"metric": {"namespace": "ns-a", "pod": f"s{i}-0"}, "value": [1764.5, f"{2**i}"]}
        for i in range(4)  # s3-0 is no service's
    ]
    every_pod = json.dumps(
        {"status": "success", "data": {"resultType": "vector", "result": series}},
        separators=(",", ":"),
    )
    async with stub.answering(200, every_pod, "application/json") as url:
        reader = source(url, max_pod_matcher_chars=0)
        reader.rejected = {
            model.ServiceId("s2"): prometheus.Rejected(VLLM, LOAD, "refused last tick")
        }
        try:
            values = await reader.sample(workloads(services), 0.0)
        finally:
            await reader.client.close()

    assert reader.queries_sent == 2 * SIGNALS  # the shared query, and the one read apart
    assert reader.client.scanned == 2 * SIGNALS
    assert values[:, list(model.BASE_SIGNALS)].tolist() == [[1.0] * 3, [2.0] * 3, [4.0] * 3]
