"""The token signals of LLM servers through the Prometheus adapter: the query builder, the
percentile of a service's histograms, and a real Prometheus scraping vLLM-style series."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping

import numpy as np
import pytest
from prom import server
from prom.fixtures import Stack

from autoscaler import ports
from autoscaler.adapters import prometheus
from autoscaler.core import model
from tests.adapters.test_prometheus import SourceFactory, serving, workloads
from tests.adapters.test_prometheus import source_for as source_for  # the fixture

Signal = model.Signal
VLLM = prometheus.PRESETS["vllm"]
TOKEN_COLUMNS = list(model.LLM_SIGNALS)
TOKEN_CONFIG = model.PolicyConfig(
    max_replicas=10,
    target_load_per_replica=1.0,
    target_kv_cache_ratio=0.8,
    target_tokens_per_replica=2000.0,
    target_ttft_p95_s=2.0,
    target_tpot_p95_s=0.05,
)


def opted(
    namespace: str,
    *pods: str,
    metrics: prometheus.MetricNames = VLLM,
    signals: Iterable[model.Signal] = model.LLM_SIGNALS,
) -> prometheus.ServingPods:
    """A service's pods, with targets set for `signals`."""
    return dataclasses.replace(
        serving(namespace, *pods, metrics=metrics), llm_signals=frozenset(signals)
    )


def test_one_query_per_token_signal_reads_every_version_of_a_name() -> None:
    """Both of vLLM's KV-cache names and every server's names share one query per signal."""
    services = [
        opted("a", "chat-0"),
        opted("b", "chat-0", metrics=prometheus.PRESETS["sglang"]),
        opted("c", "chat-0", metrics=prometheus.PRESETS["tgi"]),
    ]
    queries = prometheus.build_queries(services, rate_window_s=4.0, max_age_s=3.0)

    assert set(queries) == set(Signal)
    kv = queries[Signal.KV_CACHE]
    for name in ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"):
        assert f"avg by (namespace, pod) ({name}{{" in kv
    assert "tgi" not in kv
    assert "rate(tgi_request_input_length_sum{" in queries[Signal.PROMPT_TOKENS]
    assert "rate(tgi_request_generated_tokens_sum{" in queries[Signal.TOKENS]
    assert "prompt" not in queries[Signal.TOKENS]
    assert (
        "sum by (namespace, pod, le) (rate(vllm:time_to_first_token_seconds_bucket{"
        in (queries[Signal.TTFT])
    )
    assert "tgi" not in queries[Signal.TTFT]


def test_servers_without_token_series_send_no_token_query() -> None:
    """Triton exports no token series: its services add no token query."""
    queries = prometheus.build_queries(
        [opted("a", "m-0", metrics=prometheus.PRESETS["triton"])],
        rate_window_s=4.0,
        max_age_s=3.0,
    )
    assert set(queries) == {Signal.LOAD, Signal.SATURATION, Signal.CAPACITY}


def test_services_without_token_targets_send_no_token_query() -> None:
    """vLLM and SGLang services that set no token target add no token query: a fleet without
    one sends the three queries it sent before the token signals existed."""
    services = [
        serving("a", "chat-0"),
        serving("b", "chat-0", metrics=prometheus.PRESETS["sglang"]),
    ]
    queries = prometheus.build_queries(services, rate_window_s=4.0, max_age_s=3.0)
    assert set(queries) == set(model.BASE_SIGNALS)
    assert not any("token" in q or "cache" in q for q in queries.values())


def test_a_token_query_names_only_the_pods_of_services_that_set_its_target() -> None:
    """A service that sets only a KV-cache target joins the KV-cache query and no other; the
    pods of a service without a token target are in none of them."""
    services = [
        opted("a", "kv-0", signals=[Signal.KV_CACHE]),
        opted("b", "slo-0", signals=[Signal.TTFT]),
        serving("c", "plain-0"),
    ]
    queries = prometheus.build_queries(services, rate_window_s=4.0, max_age_s=3.0)

    assert set(queries) == {*model.BASE_SIGNALS, Signal.KV_CACHE, Signal.TTFT}
    assert "kv-0" in queries[Signal.KV_CACHE]
    assert "slo-0" not in queries[Signal.KV_CACHE]
    assert "slo-0" in queries[Signal.TTFT]
    assert "kv-0" not in queries[Signal.TTFT]
    assert not any("plain-0" in queries[s] for s in (Signal.KV_CACHE, Signal.TTFT))


@pytest.mark.parametrize(
    ("buckets", "expected"),
    [
        ({0.1: 0.0, 0.5: 10.0, math.inf: 10.0}, 0.1 + 0.4 * 0.95),
        ({0.5: 5.0, 5.0: 10.0, math.inf: 10.0}, 0.5 + 4.5 * 0.9),
        ({1.0: 1.0, math.inf: 10.0}, 1.0),
        ({0.5: 10.0, math.inf: 10.0}, 0.5 * 0.95),
        ({0.5: 0.0, math.inf: 0.0}, math.nan),
        ({0.5: 3.0}, math.nan),
    ],
)
def test_the_percentile_follows_prometheus(buckets: dict[float, float], expected: float) -> None:
    """Linear within the bucket, the highest finite bound past it, NaN with nothing observed."""
    got = prometheus.histogram_quantile(0.95, buckets)
    if math.isnan(expected):
        assert math.isnan(got)
    else:
        assert got == pytest.approx(expected)


async def test_token_signals_come_back_per_service(
    stack: Stack, unique: str, source_for: SourceFactory
) -> None:
    """KV-cache usage averages over pods whatever their vLLM version names it, tokens add up,
    TTFT is the P95 of the service's histograms added up (as Prometheus computes it), and a
    service whose pods export no token series reads NaN, never zero."""
    a, b = f"{unique}-a", f"{unique}-b"
    common = {"prompt_per_s": 1000.0, "generation_per_s": 100.0, "requests_per_s": 2.0}
    stack.upper.set_tokens(a, "chat-0", kv_cache_ratio=0.5, ttft_s=0.3, tpot_s=0.02, **common)
    stack.lower.set_tokens(
        a,
        "chat-1",
        kv_cache_ratio=0.9,
        ttft_s=3.0,
        tpot_s=0.02,
        kv_cache_name="vllm:gpu_cache_usage_perc",
        **common,
    )
    stack.upper.set_vllm(b, "chat-0", rate_per_s=1.0, waiting=1)
    services = {"a/chat": opted(a, "chat-0", "chat-1"), "b/chat": opted(b, "chat-0")}
    source = source_for(stack.prometheus.url)
    full = f"{source.rate_window_s + 2 * server.SCRAPE_INTERVAL_S:g}"
    await stack.prometheus.wait_for_series(
        f'count_over_time(vllm:prompt_tokens_total{{namespace="{a}"}}[{full}s])',
        lambda result: (
            len(result) == 2 and all(float(s["value"][1]) >= float(full) for s in result)
        ),
    )

    values = await source.sample(token_workloads(services, "a/chat", "b/chat"), 0.0)

    assert source.queries_sent == len(Signal)
    chat, other = values
    assert chat[Signal.KV_CACHE] == pytest.approx(0.7)
    assert chat[Signal.TOKENS] == pytest.approx(200.0, rel=0.1)
    assert chat[Signal.PROMPT_TOKENS] == pytest.approx(2000.0, rel=0.1)
    # Half the requests within 0.5 s, half within 5 s: the P95 is in the (2.5, 5] bucket.
    assert chat[Signal.TTFT] == pytest.approx(2.5 + 2.5 * 0.9, rel=1e-3)  # two scrape clocks
    assert chat[Signal.TPOT] == pytest.approx(0.01 + 0.015 * 0.95)
    window = f"{source.rate_window_s:g}s"
    (answer,) = await source.client.query(
        "check",
        "histogram_quantile(0.95, sum by (le) "
        f'(rate(vllm:time_to_first_token_seconds_bucket{{namespace="{a}"}}[{window}])))',
    )
    # Asked after the sample, so a scrape may land between the two: the same bound as above.
    assert chat[Signal.TTFT] == pytest.approx(float(answer["value"][1]), rel=1e-3)
    assert np.isnan(other[TOKEN_COLUMNS]).all()
    assert not np.isnan(other[Signal.SATURATION])


def token_workloads(
    services: Mapping[str, prometheus.ServingPods], *ids: str
) -> list[ports.Workload]:
    """The records of `ids`, each with the targets its `ServingPods` opts into."""
    found = workloads(services, *ids)
    return [
        dataclasses.replace(w, policy=TOKEN_CONFIG) if services[w.id].llm_signals else w
        for w in found
    ]


async def test_token_queries_stay_one_per_signal_however_many_services_opt_in(
    stack: Stack, unique: str, source_for: SourceFactory
) -> None:
    """A hundred services, a third of them with token targets: one HTTP query per signal, as
    for one service; with none opted in, the three of the request signals."""
    for every, expected in ((3, len(Signal)), (0, len(model.BASE_SIGNALS))):
        services = {
            f"ns/s{i}": (opted if every and i % every == 0 else serving)(
                f"{unique}-{i % 7}", f"s{i}-0", f"s{i}-1"
            )
            for i in range(100)
        }
        source = source_for(stack.prometheus.url)
        received = stack.prometheus.http_requests("/api/v1/query")

        await source.sample(token_workloads(services, *services), 0.0)

        assert stack.prometheus.http_requests("/api/v1/query") - received == expected
        assert source.queries_sent == len(source.last_queries) == expected
