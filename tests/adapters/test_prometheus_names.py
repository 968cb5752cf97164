"""The metric-name rule proven on the real Prometheus: what it accepts parses in every query the
project sends, and every reserved word it refuses breaks them."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

import pytest
from prom.fixtures import Stack

from autoscaler import metricnames
from autoscaler.adapters import prometheus

PLACEHOLDER = "placeholder_metric_name"
SPELLINGS = [w for word in sorted(metricnames.RESERVED_WORDS) for w in (word, word.upper())]
ACCEPTED = [
    # Near a reserved word.
    "nan_total", "inf:x", "bool_x", "on_x", "xnan", "Info", "ignoring2", "group_left:x", "atan",
    # Keywords that the grammar takes back as metric names.
    "sum", "avg", "count", "min", "max", "group", "stddev", "stdvar", "topk", "bottomk",
    "count_values", "quantile", "limitk", "limit_ratio", "and", "or", "unless", "by", "without",
    "offset", "start", "end", "step", "range", "smoothed", "anchored", "fill", "fill_left",
    "fill_right",
    # Function names, and names of odd shape the grammar allows.
    "rate", "time", "abs", "vector", "histogram_quantile", "label_replace", "x", "e", "_", ":",
    "::a", "a:b:c", "_0", "A" * 200,
]  # fmt: skip


def project_queries(name: str) -> list[str]:
    """Every kind of query the adapters send, with `name` as each metric name."""
    names = prometheus.MetricNames(
        requests=PLACEHOLDER, queue=PLACEHOLDER, latency=PLACEHOLDER, errors=PLACEHOLDER
    )
    pods = ["chat-0", "chat-1"]
    target = prometheus.ServingPods("ns-a", frozenset(pods), names)
    texts = [
        *prometheus.build_queries([target], rate_window_s=4, max_age_s=3).values(),
        *prometheus.build_queries(
            [target], rate_window_s=4, max_age_s=3, max_pod_matcher_chars=0
        ).values(),
        *prometheus.health_queries("ns-a", names, pods, window_s=4).values(),
        prometheus.in_flight_query("ns-a", names, pods, max_age_s=3) or "",
    ]
    return [text.replace(PLACEHOLDER, name) for text in texts if PLACEHOLDER in text]


def answer(url: str, promql: str) -> tuple[int, str]:
    """The HTTP status of an instant query, and the error type when it failed."""
    address = f"{url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    try:
        with urllib.request.urlopen(address, timeout=5) as response:
            return response.status, ""
    except urllib.error.HTTPError as e:
        return e.code, str(json.load(e).get("errorType"))


@pytest.mark.parametrize("name", ACCEPTED)
async def test_every_accepted_name_parses_in_every_query(stack: Stack, name: str) -> None:
    """A name the contract accepts is a metric name to Prometheus in every query we send."""
    assert metricnames.is_metric_name(name)
    for promql in project_queries(name):
        assert answer(stack.prometheus.url, promql) == (200, ""), promql


@pytest.mark.parametrize("word", SPELLINGS)
async def test_every_reserved_word_breaks_every_query(stack: Stack, word: str) -> None:
    """A reserved word in place of a metric name makes Prometheus refuse each query that selects
    it (bad_data); the latency histogram's `<word>_bucket` is another name."""
    assert not metricnames.is_metric_name(word)
    queries = [promql for promql in project_queries(word) if f"{word}{{" in promql]
    assert len(queries) == 7
    for promql in queries:
        assert answer(stack.prometheus.url, promql) == (400, "bad_data"), promql
