"""The Prometheus adapter against a real Prometheus scraping test exporters every second."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import operator
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Final

import aiohttp
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from prom import server, stub
from prom.fixtures import Stack
from structlog.testing import capture_logs

from autoscaler import errors, ports
from autoscaler.adapters import prometheus
from autoscaler.core import gpuhealth, model

LOAD, SATURATION, CAPACITY = model.Signal.LOAD, model.Signal.SATURATION, model.Signal.CAPACITY
VLLM = prometheus.PRESETS["vllm"]
NOWHERE = prometheus.Client("http://127.0.0.1:9")
"""A client that never sends: its session opens at the first query."""
HOSTILE = [
    'a"} or vector(1) #',
    'a",pod=~".*',
    "a|b",
    ".*",
    "a\\",
    "a\nb",
    "A",
    "a_b",
    "",
    "a b",
    "ünï",
]


def serving(
    namespace: str, *pods: str, metrics: prometheus.MetricNames = VLLM
) -> prometheus.ServingPods:
    return prometheus.ServingPods(namespace, frozenset(pods), metrics)


def workloads(services: Mapping[str, prometheus.ServingPods], *ids: str) -> list[ports.Workload]:
    """The records of `ids`, each naming its pods as `services` says (none when absent)."""
    config = model.PolicyConfig(max_replicas=10, target_load_per_replica=1.0)
    found = []
    for s in ids:
        where = services.get(s)
        found.append(
            ports.Workload(
                model.ServiceId(s),
                config,
                half_life_s=math.inf,
                replicas=2,
                serving=2,
                namespace="" if where is None else where.namespace,
                pods=frozenset() if where is None else where.pods,
                metrics=None if where is None else where.metrics,
            )
        )
    return found


SourceFactory = Callable[..., prometheus.MetricsSource]


@pytest.fixture
async def source_for() -> AsyncIterator[SourceFactory]:
    """Makes adapters; closes them after the test."""
    made: list[prometheus.MetricsSource] = []

    def make(
        url: str, *, timeout_s: float = prometheus.DEFAULT_TIMEOUT_S, **kwargs: Any
    ) -> prometheus.MetricsSource:
        client = prometheus.Client(url, timeout_s=timeout_s)
        source = prometheus.MetricsSource(
            client, scrape_interval_s=server.SCRAPE_INTERVAL_S, **kwargs
        )
        made.append(source)
        return source

    yield make
    for source in made:
        await source.client.close()


async def sample_until(
    source: prometheus.MetricsSource,
    load: Sequence[ports.Workload],
    done: Callable[[npt.NDArray[np.float64]], bool],
    what: str,
) -> npt.NDArray[np.float64]:
    return await server.poll(lambda: source.sample(load, 0.0), done, what=what)


async def wait_for_series(stack: Stack, promql: str, count: int) -> None:
    """Wait until Prometheus has scraped `count` series of `promql`."""
    await stack.prometheus.wait_for_series(promql, lambda result: len(result) >= count)


# The query builder, on its own.


@pytest.mark.parametrize("bad", HOSTILE)
def test_query_builder_refuses_namespaces_that_are_not_kubernetes_names(bad: str) -> None:
    """A namespace that is not a DNS-1123 label never reaches PromQL: building the query fails."""
    with pytest.raises(ValueError, match="not a namespace name"):
        prometheus.build_queries([serving(bad, "chat-0")], rate_window_s=4, max_age_s=3)


@pytest.mark.parametrize("bad", [*HOSTILE, "-a", "a.", "a" * 254])
def test_query_builder_refuses_pods_that_are_not_kubernetes_names(bad: str) -> None:
    """A pod name that is not a DNS-1123 subdomain never reaches PromQL: building fails."""
    with pytest.raises(ValueError, match="not a pod name"):
        prometheus.build_queries([serving("ns-a", "chat-0", bad)], rate_window_s=4, max_age_s=3)


@pytest.mark.parametrize(
    "bad", ['up{job="x"}', "up or vector(1)", "1up", "vllm-num", "", 'a"b', "sum(up)"]
)
def test_metric_names_outside_the_grammar_are_refused(bad: str) -> None:
    """Metric names must match `[a-zA-Z_:][a-zA-Z0-9_:]*`, in presets, `custom` names and GPU."""
    with pytest.raises(ValueError, match="not a Prometheus metric name"):
        prometheus.MetricNames(requests=bad, queue="q")
    with pytest.raises(ValueError, match="not a Prometheus metric name"):
        prometheus.MetricNames(requests="r", queue=bad)
    with pytest.raises(ValueError, match="not a Prometheus metric name"):
        prometheus.MetricsSource(NOWHERE, gpu_metric=bad)


def test_queries_quote_pod_names_and_group_servers_by_metric_name() -> None:
    """Dots in pod names are escaped, each metric name gets one `or` branch, limits render."""
    sglang = prometheus.PRESETS["sglang"]
    queries = prometheus.build_queries(
        [
            serving("ns-b", "chat.v2-0"),
            serving("ns-a", "chat-0", "chat-1"),
            serving("ns-c", "lm-0", metrics=sglang),
        ],
        rate_window_s=4,
        max_age_s=3,
    )

    sglang_pods = 'sglang:e2e_request_latency_seconds_count{namespace=~"ns-c",pod=~"lm-0"}'
    vllm_pods = (
        'vllm:request_success_total{namespace=~"ns-a|ns-b",pod=~"chat-0|chat-1|chat\\\\.v2-0"}'
    )
    assert queries[LOAD] == (
        f"sum by (namespace, pod) (rate({sglang_pods}[4s])"
        f" and (time() - timestamp({sglang_pods})) <= 3)"
        f" or sum by (namespace, pod) (rate({vllm_pods}[4s])"
        f" and (time() - timestamp({vllm_pods})) <= 3)"
    )
    assert queries[SATURATION].count(" or ") == 1
    assert queries[CAPACITY].startswith("(100 * avg by (namespace, pod) ((DCGM_FI_PROF_GR_")
    assert " or avg by (namespace, pod) ((DCGM_FI_DEV_GPU_UTIL{" in queries[CAPACITY]
    assert 'exported_pod=~"chat-0|chat-1|chat\\\\.v2-0|lm-0"' in queries[CAPACITY]


def test_long_pod_lists_fall_back_to_namespace_selection() -> None:
    """Past the pod-matcher limit a query selects by namespace alone (pods are filtered later)."""
    pods = [f"chat-{i}" for i in range(100)]
    queries = prometheus.build_queries(
        [serving("ns-a", *pods)], rate_window_s=0.5, max_age_s=2.5, max_pod_matcher_chars=100
    )

    for query in queries.values():
        assert "pod=~" not in query
        assert 'namespace=~"ns-a"' in query
    assert "[500ms]" in queries[LOAD]
    assert "<= 2.5" in queries[SATURATION]


def test_a_pod_matcher_stays_while_it_fits_counting_a_shared_name_once() -> None:
    """The pod matcher stays while its literal fits the limit, a pod name two namespaces share
    counted once, and goes one character past it."""
    pods = [f"chat-{i}" for i in range(10)]  # the literal: 10 names of 6, 9 bars, 2 quotes
    services = [serving("ns-a", *pods), serving("ns-b", *pods)]

    def matched(limit: int) -> set[bool]:
        queries = prometheus.build_queries(
            services, rate_window_s=0.5, max_age_s=2.5, max_pod_matcher_chars=limit
        )
        return {"pod=~" in query for query in queries.values()}

    assert matched(71) == {True}
    assert matched(70) == {False}


def test_limits_default_to_multiples_of_the_scrape_interval() -> None:
    """Values older than 3 scrape intervals are stale; rates span 4 intervals."""
    source = prometheus.MetricsSource(NOWHERE, scrape_interval_s=15)

    assert (source.max_age_s, source.rate_window_s) == (45.0, 60.0)


def test_every_preset_has_a_request_counter_and_a_queue_gauge() -> None:
    """vllm, tgi, triton and sglang each name the two series the loop reads per tick."""
    assert set(prometheus.PRESETS) == {"vllm", "tgi", "triton", "sglang"}
    assert prometheus.PRESETS["tgi"].queue == "tgi_queue_size"
    assert prometheus.PRESETS["triton"].queue == "nv_inference_pending_request_count"


def test_a_custom_server_with_one_metric_gets_only_the_queries_it_names() -> None:
    """A server naming only a queue gauge joins the saturation query and no load query."""
    queue_only = prometheus.MetricNames(requests=None, queue="app_queue")
    queries = prometheus.build_queries(
        [serving("ns-a", "q-0", metrics=queue_only)], rate_window_s=4, max_age_s=3
    )

    assert set(queries) == {SATURATION, CAPACITY}
    assert queries[SATURATION].startswith("sum by (namespace, pod) (app_queue{")
    with pytest.raises(ValueError, match="request counter or a queue gauge"):
        prometheus.MetricNames(requests=None, queue=None)


# Against the real Prometheus.


async def test_rates_and_queues_come_back_per_service(
    stack: Stack, unique: str, source_for: SourceFactory
) -> None:
    """Two services in different namespaces read their own pods' summed rates and queues."""
    a, b = f"{unique}-a", f"{unique}-b"
    stack.upper.set_vllm(a, "chat-0", rate_per_s=2.0, waiting=3)
    stack.upper.set_vllm(a, "chat-0", rate_per_s=1.0, finished_reason="length")
    stack.lower.set_vllm(a, "chat-1", rate_per_s=4.0, waiting=4)
    stack.upper.set_vllm(b, "chat-0", rate_per_s=7.0, waiting=5)  # same pod name, other namespace
    services = {"a/chat": serving(a, "chat-0", "chat-1"), "b/chat": serving(b, "chat-0")}
    source = source_for(stack.prometheus.url)
    # A rate reads low until its window has filled: wait for samples older than the window.
    full = f"{source.rate_window_s + 2 * server.SCRAPE_INTERVAL_S:g}"
    await stack.prometheus.wait_for_series(
        f'count_over_time(vllm:request_success_total{{namespace=~"{a}|{b}"}}[{full}s])',
        lambda result: (
            len(result) == 4 and all(float(s["value"][1]) >= float(full) for s in result)
        ),
    )

    values = await source.sample(workloads(services, "a/chat", "b/chat"), 0.0)

    assert values[:, LOAD] == pytest.approx([7.0, 7.0], rel=0.1)
    assert values[:, SATURATION].tolist() == [7.0, 5.0]
    assert np.isnan(values[:, CAPACITY]).all()
    assert source.client.scanned == 3  # Prometheus's answers, read without the JSON decoder
    for promql in source.last_queries:
        client = source.client
        _, body = await client._fetch("check", client.endpoint, {"query": promql})
        decoded = prometheus._per_pod(json.loads(body)["data"]["result"])
        assert_same_samples(prometheus._scan_per_pod(body), decoded)


def assert_same_samples(
    scanned: prometheus.PodSamples | None, decoded: prometheus.PodSamples
) -> None:
    """The scan read the answer, into the very pods and values (bit for bit) of the decoder."""
    assert scanned is not None
    assert scanned.pods == decoded.pods
    assert scanned.values.dtype == decoded.values.dtype == np.float64
    assert scanned.values.tobytes() == decoded.values.tobytes()


def per_pod_answer(*series: dict[str, Any], **after: list[str]) -> bytes:
    """An instant vector written as Prometheus writes it (compact, labels sorted), with the
    `warnings` or `infos` given after its data."""
    answer = {"status": "success", "data": {"resultType": "vector", "result": list(series)}}
    return json.dumps({**answer, **after}, separators=(",", ":"), sort_keys=False).encode()


def per_pod(namespace: str, pod: str, value: str, **more: str) -> dict[str, Any]:
    return {"metric": {"namespace": namespace, "pod": pod, **more}, "value": [1764.5, value]}


ANSWERED: Final = per_pod_answer(per_pod("ns-a", "chat-0", "1"), per_pod("ns-a", "chat-1", "2"))
"""A good answer, whose bytes the broken ones below are cut from."""


@pytest.mark.parametrize(
    "body",
    [
        per_pod_answer(),
        per_pod_answer(per_pod("ns-a", "chat-0", "2.5"), per_pod("ns-b", "chat.x-1", "NaN")),
        per_pod_answer(per_pod("ns-a", "chat-0", "+Inf"), per_pod("ns-a", "chat-1", "1e+06")),
        per_pod_answer(
            *(per_pod("ns-a", f"chat-{i}", v) for i, v in enumerate(["-Inf", "1e-07", "-0"])),
            per_pod("ns-a", "chat-0", "1.7976931348623157e+308"),  # the same pod again
            per_pod("ns-a", "chat-9", "0.30000000000000004"),
        ),
        per_pod_answer(per_pod("ns-a", "chat-0", "2"), warnings=['a "quoted" \\ warning']),
        per_pod_answer(per_pod("ns-a", "chat-0", "2"), infos=["PromQL info: not a counter"]),
        per_pod_answer(warnings=["w"], infos=["i"]),
        ANSWERED.replace(b"1764.5", b"1764"),
        # Series stamped at other times than the first's (read by the number's grammar):
        ANSWERED.replace(b"1764.5", b"1764.55", 1),
        ANSWERED.replace(b"1764.5", b"1764", 1),
        ANSWERED.replace(b"1764.5", b"1.7645e3", 1),
        ANSWERED.replace(b"1764.5", b"17645", 1).replace(b"1764.5", b"1764.5e0"),
    ],
)
def test_the_scan_reads_what_the_json_decoder_reads(body: bytes) -> None:
    """Answers of the usual shape give the same samples by the scan as by decoding them."""
    assert_same_samples(
        prometheus._scan_per_pod(body), prometheus._per_pod(json.loads(body)["data"]["result"])
    )


@pytest.mark.parametrize(
    "body",
    [
        per_pod_answer(per_pod("ns-a", "chat-0", "1"), per_pod('ns-"b', "chat-0", "2")),
        per_pod_answer(per_pod("ns-a", "chat-0", "1"), per_pod("ns-a", "chat-1", "2", le="1")),
        per_pod_answer(per_pod("ns-a", "chat-0", "1"), {"metric": {"pod": "p"}, "value": [1, "2"]}),
        per_pod_answer(per_pod("ns-a", "chat-0", "not a number")),
        per_pod_answer(per_pod("ns-a", "chat-0", "1_0")),  # `float` reads it; so does the decoder
        per_pod_answer(per_pod("ns-a", "chat-0", "1"), warnings=["[bracketed]"]),
        json.dumps({"status": "error", "errorType": "bad_data", "error": "x"}).encode(),
        json.dumps({"status": "success", "data": {"result": []}}).encode(),
        ANSWERED.replace(b"},{", b"} ,{"),
        ANSWERED.replace(b"},{", b"}{"),
        ANSWERED.replace(b"1764.5", b"1764.5.5", 1),
        ANSWERED.replace(b"1764.5", b"1764.5.5", 2).replace(b"1764.5.5", b"1764.5", 1),
        ANSWERED.replace(b"1764.5", b"01764.5", 2).replace(b"01764.5", b"1764.5", 1),
        ANSWERED.replace(b"1764.5", b"1764.", 2).replace(b"1764.", b"1764.5", 1),
        ANSWERED.replace(b'"1"', b'"\t1"'),  # a control character, which JSON refuses
        ANSWERED.replace(b'"1"', b'"\\t1"'),  # its escape, which the decoder reads
        ANSWERED.replace(b'"1"', b'" 1"'),
        ANSWERED.replace(b"ns-a", b"ns-\\u0061", 1),
        ANSWERED.replace(b"ns-a", b"ns-\xff", 1),  # no UTF-8
        ANSWERED.replace(b"ns-a", "ns-ä".encode(), 1),
        ANSWERED[:-1],
        ANSWERED[:-3],
        ANSWERED + b"}",
        ANSWERED.replace(b"]}}", b']},"data":{"result":[]}}'),
    ],
)
def test_any_other_answer_is_left_to_the_json_decoder(body: bytes) -> None:
    """An escaped, a missing or an extra label, a value that is no number, an error, a broken
    separator, time or ending is not scanned: the decoder reads it and reports what is wrong."""
    assert prometheus._scan_per_pod(body) is None


POOL: Final = [("ns-a", "chat-0"), ("ns-a", "chat-1"), ("ns-b", "chat-0"), ("ns-b", "lm.x-2")]
"""The pods the answers below name: the same name in two namespaces, a dot in a name."""
ROWS: Final = 4


def value_text(value: float) -> str:
    """A float as Prometheus writes it: `NaN`, `+Inf`, `-Inf`, else its shortest digits."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def filled(
    answers: Sequence[prometheus.PodSamples], rows: prometheus._Rows, *, mean: bool
) -> npt.NDArray[np.float64]:
    column = np.full(ROWS, math.nan)
    prometheus._fill(column, answers, rows, mean=mean)
    return column


def filled_one_by_one(
    series: Sequence[tuple[tuple[str, str], float]], rows: prometheus._Rows, *, mean: bool
) -> npt.NDArray[np.float64]:
    """Each row's sum (or mean) over its pods' finite values, added in the answer's order."""
    total, count = [0.0] * ROWS, [0] * ROWS
    for (namespace, pod), value in series:
        if math.isfinite(value):
            for row in rows.of(prometheus.pod_key(namespace, pod)):
                total[row] += value
                count[row] += 1
    column = np.full(ROWS, math.nan)
    for row in range(ROWS):
        if count[row]:
            column[row] = total[row] / count[row] if mean else total[row]
    return column


@settings(max_examples=100, deadline=None)
@given(
    series=st.lists(
        st.tuples(
            st.sampled_from(POOL),
            st.floats() | st.sampled_from([1e-07, 1e21, -0.0, 0.1, 3.0, 1e16, -1e16, 1e308]),
        ),
        max_size=12,
    ),
    pod_rows=st.lists(st.lists(st.integers(0, ROWS - 1), max_size=3), min_size=4, max_size=4),
    cut=st.integers(0, 12),
)
# Row 0 is chat-1's second row: its sum is (1e16 - 1e16) + 3, where 3 + 1e16 - 1e16 reads 4.
@example([(POOL[1], 1e16), (POOL[1], -1e16), (POOL[0], 3.0)], [[0], [1, 0], [], []], 1)
def test_the_scan_and_the_decoder_fill_the_same_columns(
    series: list[tuple[tuple[str, str], float]], pod_rows: list[list[int]], cut: int
) -> None:
    """Columns filled from the scan equal, bit for bit, those from the decoder and a sum in the
    answer's order, with NaN, infinite, missing and repeated pods and pods of several rows."""
    rows = prometheus._Rows()
    for (namespace, pod), its_rows in zip(POOL, pod_rows, strict=True):
        for row in its_rows:
            rows.add(prometheus.pod_key(namespace, pod), row)
    answer = [per_pod(ns, pod, value_text(v)) for (ns, pod), v in series]
    scanned = prometheus._scan_per_pod(per_pod_answer(*answer))
    decoded = prometheus._per_pod(answer)
    # As a bisected query reads it: two answers, one after the other.
    first = prometheus._scan_per_pod(per_pod_answer(*answer[:cut]))
    then = prometheus._scan_per_pod(per_pod_answer(*answer[cut:]))
    assert scanned is not None
    assert first is not None
    assert then is not None

    for mean in (False, True):
        expected = filled_one_by_one(series, rows, mean=mean).tobytes()
        assert filled([scanned], rows, mean=mean).tobytes() == expected
        assert filled([decoded], rows, mean=mean).tobytes() == expected
        assert filled([first, then], rows, mean=mean).tobytes() == expected


def test_rows_are_looked_up_again_only_when_an_answer_names_other_pods() -> None:
    """An answer naming the last one's pods in the same order reuses their rows, while one in
    another order, or with fewer pods, is looked up anew."""
    rows = prometheus._Rows()
    keys = [prometheus.pod_key("ns-a", f"chat-{i}") for i in range(3)]
    for row, key in enumerate(keys):
        rows.add(key, row)

    def column(pods: Sequence[str], values: Sequence[float]) -> npt.NDArray[np.float64]:
        filled = np.full(3, math.nan)
        samples = prometheus.PodSamples(tuple(pods), np.array(values, np.float64))
        prometheus._fill(filled, [samples], rows, mean=False, slot=LOAD)
        return filled

    np.testing.assert_array_equal(column(keys, [1.0, 2.0, 4.0]), [1.0, 2.0, 4.0])
    located = rows.locate(tuple(keys), slot=LOAD)
    anew = tuple("".join(list(key)) for key in keys)  # equal strings, other objects
    assert all(map(operator.is_, rows.locate(anew, slot=LOAD), located))
    np.testing.assert_array_equal(column(anew, [8.0, 16.0, 32.0]), [8.0, 16.0, 32.0])
    np.testing.assert_array_equal(column(keys[::-1], [1.0, 2.0, 4.0]), [4.0, 2.0, 1.0])
    np.testing.assert_array_equal(column(keys[1:], [1.0, 2.0]), [math.nan, 1.0, 2.0])


@settings(max_examples=150, deadline=None)
@given(
    answers=st.lists(
        st.lists(
            st.tuples(
                st.sampled_from(POOL),
                st.sampled_from(["1", "2.5", "-0", "0", "NaN", "+Inf", "-Inf", "1e+06", "0.1"]),
            ),
            max_size=6,
        ),
        min_size=1,
        max_size=6,
    )
)
def test_values_read_again_only_where_their_text_changed_read_the_same(
    answers: list[list[tuple[tuple[str, str], str]]],
) -> None:
    """Answers scanned one after another through the last one's values read what each
    reads alone, bit for bit, whatever moved, repeated or changed in between."""
    last = prometheus._LastValues()
    for series in answers:
        body = per_pod_answer(*(per_pod(ns, pod, value) for (ns, pod), value in series))
        alone = prometheus._scan_per_pod(body)
        scanned = prometheus._scan_per_pod(body, last.read)
        assert alone is not None
        assert_same_samples(scanned, alone)


def test_a_value_whose_text_is_the_last_answers_is_not_read_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Of an answer whose series hold their last texts but one, that one is read; of one
    naming other pods, or not scanned, every value; an unchanged answer reads none."""
    read: list[str] = []
    real = prometheus._floats

    def counting(texts: list[str]) -> npt.NDArray[np.float64]:
        read.extend(texts)
        return real(texts)

    monkeypatch.setattr(prometheus, "_floats", counting)
    last = prometheus._LastValues()

    def scanned(*values: str) -> list[float]:
        body = per_pod_answer(*(per_pod("ns-a", f"chat-{i}", v) for i, v in enumerate(values)))
        samples = prometheus._scan_per_pod(body, last.read)
        assert samples is not None
        assert not samples.values.flags.writeable
        return samples.values.tolist()

    assert scanned("1", "2", "3") == [1.0, 2.0, 3.0]
    assert read == ["1", "2", "3"]
    read.clear()
    assert scanned("1", "2", "3") == [1.0, 2.0, 3.0]
    assert scanned("1", "2.5", "3") == [1.0, 2.5, 3.0]
    assert read == ["2.5"]
    read.clear()
    assert scanned("1", "2.5") == [1.0, 2.5]
    assert read == ["1", "2.5"]
    read.clear()
    assert prometheus._scan_per_pod(per_pod_answer(per_pod("ns-a", "x", "x")), last.read) is None
    assert scanned("1", "2.5") == [1.0, 2.5]
    assert read == ["x"]  # a failed read leaves the last values as they were


RECORD_PODS: Final = ["chat-0", "chat-1", "lm.x-2", "Bad_Pod"]
"""The pods records below name: one is no Kubernetes name (left out, with a warning)."""


def rows_as_built(rows: prometheus._Rows) -> dict[str, list[int]]:
    """Each pod's rows, in no particular order."""
    return {pod: sorted(rows.of(pod)) for pod in rows.one}


record_strategy = st.tuples(
    st.sampled_from(["ns-a", "ns-b"]),
    st.frozensets(st.sampled_from(RECORD_PODS), max_size=3),
    st.booleans(),  # names metrics
    st.integers(1, 3),  # replicas: a record made again for its counts alone
)


@settings(max_examples=150, deadline=None)
@given(
    first=st.lists(record_strategy, min_size=1, max_size=5),
    changes=st.lists(
        st.lists(st.tuples(st.integers(0, 4), record_strategy), max_size=3)
        | st.just([(-1, ("", frozenset(), False, 1))]),  # a service gone: built anew
        max_size=6,
    ),
)
def test_records_patched_in_place_locate_as_records_built_anew(
    first: list[tuple[str, frozenset[str], bool, int]],
    changes: list[list[tuple[int, tuple[str, frozenset[str], bool, int]]]],
) -> None:
    """Rows patched for the records that changed, tick after tick, are those of the same
    records located from scratch, and fill the same columns bit for bit, also through the
    rows remembered of an answer naming the same pods every tick."""
    config = model.PolicyConfig(max_replicas=10, target_load_per_replica=1.0)

    def record(i: int, drawn: tuple[str, frozenset[str], bool, int]) -> ports.Workload:
        namespace, pods, named, replicas = drawn
        return ports.Workload(
            model.ServiceId(f"svc/{i}"),
            config,
            half_life_s=math.inf,
            replicas=replicas,
            serving=replicas,
            namespace=namespace,
            pods=pods,
            metrics=VLLM if named else None,
        )

    answer = tuple(
        prometheus.pod_key(ns, pod) for pod in RECORD_PODS[:3] for ns in ("ns-b", "ns-a")
    )
    values = np.array([1.0, 2.0, 4.0, 8.0, 16.0, 0.1])
    records = [record(i, drawn) for i, drawn in enumerate(first)]
    source = prometheus.MetricsSource(NOWHERE)
    for tick in [[], *changes]:
        for row, drawn in tick:
            if row < 0:
                records = records[1:] or [record(9, drawn)]
            elif row < len(records):
                records[row] = record(int(records[row].id.split("/")[1]), drawn)
        with capture_logs():
            located = source._locate(list(records))
            anew = prometheus.MetricsSource(NOWHERE)._locate(list(records))
        assert rows_as_built(located.rows) == rows_as_built(anew.rows)
        assert located.targets == anew.targets
        for mean in (False, True):
            columns = []
            for rows in (located.rows, anew.rows):
                column = np.full(len(records), math.nan)
                samples = prometheus.PodSamples(answer, values)
                prometheus._fill(column, [samples], rows, mean=mean, slot=LOAD)
                columns.append(column.tobytes())
            assert columns[0] == columns[1]


def same_pods_iterated_otherwise() -> tuple[frozenset[str], frozenset[str]]:
    """Two equal sets of pod names that iterate in different orders (found, not assumed: the
    order follows the strings' hashes, which change from process to process)."""
    for n in range(200):
        names = [f"chat-{n}-{i}" for i in range(5)]
        one, other = frozenset(names), frozenset(reversed(names))
        if list(one) != list(other):
            return one, other
    raise AssertionError("no two insertion orders iterate apart")


def test_a_record_made_again_with_its_pods_iterated_otherwise_reads_as_the_same_target() -> None:
    """Equal pod sets give equal targets whatever order each set iterates in: a record made
    again with the same pods is located as a record built anew is (the property test above
    met this only for the hash seeds that make two such sets iterate apart)."""
    config = model.PolicyConfig(max_replicas=10, target_load_per_replica=1.0)
    one, other = same_pods_iterated_otherwise()

    def record(pods: frozenset[str]) -> ports.Workload:
        return ports.Workload(
            model.ServiceId("svc/0"),
            config,
            half_life_s=math.inf,
            replicas=5,
            serving=5,
            namespace="ns-a",
            pods=pods,
            metrics=VLLM,
        )

    source = prometheus.MetricsSource(NOWHERE)
    source._locate([record(one)])
    patched = source._locate([record(other)])
    anew = prometheus.MetricsSource(NOWHERE)._locate([record(other)])
    assert patched.targets == anew.targets


PLAN_CONFIGS: Final = (
    model.PolicyConfig(max_replicas=10, target_load_per_replica=1.0),
    model.PolicyConfig(max_replicas=10, target_load_per_replica=1.0, target_kv_cache_ratio=0.8),
    model.PolicyConfig(
        max_replicas=10,
        target_load_per_replica=1.0,
        target_tokens_per_replica=100.0,
        target_ttft_p95_s=0.5,
        target_tpot_p95_s=0.05,
    ),
)
"""Policies that read none, one or every token signal."""
PLAN_METRICS: Final = (
    VLLM,
    prometheus.PRESETS["tgi"],
    prometheus.MetricNames(requests=None, queue="custom_waiting"),
)
"""Servers of other names, one of them with a queue gauge alone."""
PLAN_PODS: Final = ["a-0", "a-1", "b-0", "bb-1", "lm.x-2", "Bad_Pod", "a-much-longer-pod-name-0"]

plan_record = st.tuples(
    st.sampled_from(["ns-a", "ns-b", "ns-c"]),
    st.frozensets(st.sampled_from(PLAN_PODS), max_size=4),
    st.integers(-1, len(PLAN_METRICS) - 1),  # -1: names no metrics
    st.integers(0, len(PLAN_CONFIGS) - 1),
    st.integers(1, 3),  # replicas: a record made again for its counts alone
)


@settings(max_examples=200, deadline=None)
@given(
    first=st.lists(plan_record, min_size=1, max_size=6),
    changes=st.lists(
        st.lists(st.tuples(st.integers(0, 5), plan_record), max_size=3)
        | st.just([(-1, ("ns-a", frozenset(), 0, 0, 1))]),  # a service gone: built anew
        max_size=8,
    ),
    max_chars=st.sampled_from([8, 20, 40, 1500]),
)
def test_queries_kept_up_record_by_record_are_those_built_from_scratch(
    first: list[tuple[str, frozenset[str], int, int, int]],
    changes: list[list[tuple[int, tuple[str, frozenset[str], int, int, int]]]],
    max_chars: int,
) -> None:
    """The queries of every service of a tick, made from groups patched as records change
    (new pods, names, signals, namespaces; a service gone), are those `build_queries` makes
    from the same services anew, whether the pods fit the matcher or not."""

    def record(i: int, drawn: tuple[str, frozenset[str], int, int, int]) -> ports.Workload:
        namespace, pods, metrics, config, replicas = drawn
        return ports.Workload(
            model.ServiceId(f"svc/{i}"),
            PLAN_CONFIGS[config],
            half_life_s=math.inf,
            replicas=replicas,
            serving=replicas,
            namespace=namespace,
            pods=pods,
            metrics=None if metrics < 0 else PLAN_METRICS[metrics],
        )

    options: dict[str, Any] = {"rate_window_s": 60.0, "max_age_s": 45.0}
    records = [record(i, drawn) for i, drawn in enumerate(first)]
    source = prometheus.MetricsSource(NOWHERE, max_pod_matcher_chars=max_chars)
    for tick in [[], *changes]:
        for row, drawn in tick:
            if row < 0:
                records = records[1:] or [record(9, drawn)]
            elif row < len(records):
                records[row] = record(int(records[row].id.split("/")[1]), drawn)
        with capture_logs():
            located = source._locate(list(records))
        kept = prometheus._render(
            located.groups(),
            gpu_metric=prometheus.GPU_UTILIZATION,
            gpu_ratio_metric=prometheus.GPU_ACTIVITY,
            max_pod_matcher_chars=max_chars,
            **options,
        )
        anew = prometheus.build_queries(
            [t.serving for t in located.targets], max_pod_matcher_chars=max_chars, **options
        )
        assert kept == anew


def test_a_changed_record_moves_only_its_own_pods_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Of a hundred records, one with new pods costs the rows of its pods alone, and one made
    again for its counts alone none; the other services' targets stay the same objects."""
    services = {f"ns/s{i}": serving("ns", f"s{i}-0", f"s{i}-1") for i in range(100)}
    records = workloads(services, *services)
    source = prometheus.MetricsSource(NOWHERE)
    targets = source._locate(list(records)).targets
    added: list[str] = []
    real = prometheus._Rows.add

    def counting(rows: prometheus._Rows, pod: str, row: int) -> None:
        added.append(pod)
        real(rows, pod, row)

    monkeypatch.setattr(prometheus._Rows, "add", counting)
    records[7] = dataclasses.replace(records[7], replicas=3)
    again = source._locate(list(records))
    assert added == []
    assert again.targets is targets

    records[3] = dataclasses.replace(records[3], pods=frozenset({"s3-0", "s3-new"}))
    moved = source._locate(list(records))
    assert sorted(added) == ['ns","pod":"s3-0', 'ns","pod":"s3-new']
    assert moved.rows.of(prometheus.pod_key("ns", "s3-new")) == [3]
    assert moved.rows.of(prometheus.pod_key("ns", "s3-1")) == []
    assert all(map(operator.is_, moved.targets[4:], targets[4:]))


def test_bucket_series_are_read_through_the_same_sample_reader() -> None:
    """Buckets of other pods are skipped, even with a broken bound, while a broken value of any
    pod raises as the per-pod reader does."""
    asked = {prometheus.pod_key("ns-a", "chat-0")}
    good = per_pod("ns-a", "chat-0", "2.5", le="0.5")
    other = per_pod("ns-a", "chat-9", "1", le="not a bound")
    broken = per_pod("ns-a", "chat-9", "not a number", le="1")

    assert prometheus._buckets([good, other], asked) == [('ns-a","pod":"chat-0', 0.5, 2.5)]
    for reader in (prometheus._per_pod, lambda series: prometheus._buckets(series, asked)):
        with pytest.raises(errors.ObservationError, match="sample malformed") as caught:
            reader([good, broken])
        assert isinstance(caught.value.__cause__, ValueError)
    with pytest.raises(errors.ObservationError, match="bucket malformed"):
        prometheus._buckets([per_pod("ns-a", "chat-0", "1", le="x")], asked)


@pytest.mark.parametrize("max_pod_matcher_chars", [prometheus.DEFAULT_MAX_POD_MATCHER_CHARS, 0])
async def test_pods_not_in_the_index_are_ignored(
    stack: Stack, unique: str, max_pod_matcher_chars: int, source_for: SourceFactory
) -> None:
    """Warming pods, unmanaged pods and same-named pods elsewhere add nothing to a service."""
    a, other = f"{unique}-a", f"{unique}-other"
    stack.upper.set_vllm(a, "chat-0", waiting=1)
    stack.upper.set_vllm(a, "chat-1", waiting=2)
    stack.upper.set_vllm(a, "chat-2", waiting=100)  # warming: not serving yet
    stack.upper.set_vllm(other, "chat-0", waiting=1000)  # unmanaged namespace
    stack.upper.set_vllm(other, "lm-0", waiting=10000)  # a managed pod name, another namespace
    await wait_for_series(stack, f'vllm:num_requests_waiting{{namespace=~"{a}|{other}"}}', 5)
    services = {"a/chat": serving(a, "chat-0", "chat-1"), "b/lm": serving(f"{unique}-b", "lm-0")}
    source = source_for(stack.prometheus.url, max_pod_matcher_chars=max_pod_matcher_chars)

    values = await source.sample(workloads(services, "a/chat", "b/lm"), 0.0)

    assert values[0, SATURATION] == 3.0
    assert np.isnan(values[1]).all()
    assert all(("pod=~" in q) == (max_pod_matcher_chars > 0) for q in source.last_queries)


async def test_services_without_series_read_nan_never_zero(
    stack: Stack, unique: str, source_for: SourceFactory
) -> None:
    """No series, pods or index entry reads NaN; a partly reporting service sums its reporters."""
    a = f"{unique}-a"
    stack.upper.set_vllm(a, "chat-0", waiting=4)
    stack.upper.set_gpu(a, "chat-0", 70.0)
    await wait_for_series(stack, f'{{namespace="{a}"}}', 5)  # the vLLM and GPU series
    services = {
        "a/chat": serving(a, "chat-0", "chat-1"),  # chat-1 exports nothing
        "b/quiet": serving(f"{unique}-b", "quiet-0"),
        "c/empty": serving(f"{unique}-c"),
    }
    source = source_for(stack.prometheus.url)

    values = await source.sample(
        workloads(services, "a/chat", "b/quiet", "c/empty", "d/unknown"), 0.0
    )

    assert values[0, SATURATION] == 4.0
    assert values[0, CAPACITY] == 70.0
    assert np.isnan(values[0, LOAD])  # chat-0's counter has no series
    assert np.isnan(values[1:]).all()


async def test_gpu_utilisation_reads_either_hostname_label_and_renamed_pods(
    stack: Stack, unique: str, source_for: SourceFactory
) -> None:
    """DCGM series labelled `Hostname` or `hostname`, or with `exported_pod`, all count."""
    a, b, c = f"{unique}-a", f"{unique}-b", f"{unique}-c"
    stack.upper.set_gpu(a, "chat-0", 40.0, index=0)  # Hostname
    stack.upper.set_gpu(a, "chat-0", 60.0, index=1)
    stack.upper.set_gpu(a, "chat-1", 80.0, index=2)
    stack.lower.set_gpu(b, "chat-0", 30.0)  # hostname
    stack.lower.set_gpu(c, "chat-0", 90.0, index=3, renamed=True)  # exported_namespace/pod
    await wait_for_series(stack, f'DCGM_FI_DEV_GPU_UTIL{{namespace=~"{a}|{b}"}}', 4)
    await wait_for_series(stack, f'DCGM_FI_DEV_GPU_UTIL{{exported_namespace="{c}"}}', 1)
    services = {
        "a/chat": serving(a, "chat-0", "chat-1"),
        "b/chat": serving(b, "chat-0"),
        "c/chat": serving(c, "chat-0"),
    }
    source = source_for(stack.prometheus.url)

    values = await source.sample(workloads(services, "a/chat", "b/chat", "c/chat"), 0.0)

    # Pod means (50, 80), then the mean over the service's pods.
    assert values[:, CAPACITY].tolist() == [65.0, 30.0, 90.0]


async def test_gpu_utilisation_prefers_engine_activity_and_reads_mig_instances(
    stack: Stack, unique: str, source_for: SourceFactory
) -> None:
    """A pod with `DCGM_FI_PROF_GR_ENGINE_ACTIVE` (a MIG instance has nothing else) reads it as
    percent; a pod with only `DCGM_FI_DEV_GPU_UTIL` reads that."""
    a = f"{unique}-a"
    stack.upper.set_gpu(a, "mig-0", None, index=0, activity_ratio=0.42)  # a MIG instance
    stack.upper.set_gpu(a, "old-0", 70.0, index=1)  # a card older than Volta
    stack.upper.set_gpu(a, "both-0", 30.0, index=2, activity_ratio=0.5)
    await wait_for_series(stack, f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{namespace="{a}"}}', 2)
    await wait_for_series(stack, f'DCGM_FI_DEV_GPU_UTIL{{namespace="{a}"}}', 2)
    services = {
        "a/mig": serving(a, "mig-0"),
        "a/old": serving(a, "old-0"),
        "a/both": serving(a, "both-0"),
    }
    source = source_for(stack.prometheus.url)

    values = await source.sample(workloads(services, "a/mig", "a/old", "a/both"), 0.0)

    assert values[:, CAPACITY].tolist() == pytest.approx([42.0, 70.0, 50.0])


async def test_gpu_utilisation_reads_the_percent_metric_alone_without_a_ratio_metric(
    stack: Stack, unique: str, source_for: SourceFactory
) -> None:
    """With no ratio metric set, the percent metric is read even where the ratio exists."""
    a = f"{unique}-a"
    stack.upper.set_gpu(a, "both-0", 30.0, activity_ratio=0.5)
    await wait_for_series(stack, f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{namespace="{a}"}}', 1)
    source = source_for(stack.prometheus.url, gpu_ratio_metric=None)

    values = await source.sample(workloads({"a/both": serving(a, "both-0")}, "a/both"), 0.0)

    assert values[0, CAPACITY] == 30.0


async def test_gpu_health_reads_xid_errors_per_node_and_no_memory_rule_before_its_window(
    stack: Stack, unique: str
) -> None:
    """XID codes come back per node (the highest of its cards); memory full for less than the
    window reads as no data."""
    bad, good = f"{unique}-bad", f"{unique}-good"
    stack.upper.set_node_gpu(bad, index=0, xid=0, fb_used_mib=100, fb_free_mib=900)
    stack.upper.set_node_gpu(bad, index=1, xid=79, fb_used_mib=990, fb_free_mib=10)
    stack.upper.set_node_gpu(good, xid=0, fb_used_mib=999, fb_free_mib=1)
    await wait_for_series(stack, f'DCGM_FI_DEV_XID_ERRORS{{Hostname=~"{unique}-.*"}}', 3)
    client = prometheus.Client(stack.prometheus.url)
    health = prometheus.GpuHealth(client, scrape_interval_s=server.SCRAPE_INTERVAL_S)
    try:
        readings = await health.read()
    finally:
        await client.close()

    assert readings[bad] == gpuhealth.Reading(xid_error=79.0, memory_ratio=None)
    assert readings[good] == gpuhealth.Reading(xid_error=0.0, memory_ratio=None)


async def test_a_sticky_xid_code_older_than_the_window_excludes_nothing_and_a_new_one_does(
    stack: Stack, unique: str
) -> None:
    """DCGM keeps showing the last XID: once it has stood unchanged for the window it reads 0,
    and a new code reads again at once."""
    node = f"{unique}-n"
    selector = f'DCGM_FI_DEV_XID_ERRORS{{Hostname="{node}"}}'
    stack.upper.set_node_gpu(node, xid=43, fb_used_mib=100, fb_free_mib=900)
    # Unchanged for a whole 8 s window, and present before it.
    await stack.prometheus.wait_for_series(
        f"changes({selector}[8s]) == 0 and {selector} offset 8s",
        lambda found: len(found) == 1,
        timeout_s=30,
    )
    client = prometheus.Client(stack.prometheus.url)
    health = prometheus.GpuHealth(
        client, rules=gpuhealth.Rules(xid_window_s=8), scrape_interval_s=server.SCRAPE_INTERVAL_S
    )
    try:
        stale = (await health.read())[node]
        stack.upper.set_node_gpu(node, xid=79, fb_used_mib=100, fb_free_mib=900)
        await stack.prometheus.wait_for_series(f"{selector} == 79", lambda found: len(found) == 1)
        fresh = (await health.read())[node]
    finally:
        await client.close()

    assert stale.xid_error == 0.0
    assert fresh.xid_error == 79.0


def test_gpu_health_query_needs_the_whole_memory_window() -> None:
    """The memory rule reads the lowest share over ten steps and only cards seen at all ten."""
    rules = gpuhealth.Rules(xid_window_s=300, memory_window_s=600)
    promql = prometheus.gpu_health_query(
        prometheus.GpuHealthNames(node_label="node"), rules, scrape_interval_s=15
    )

    assert "changes(DCGM_FI_DEV_XID_ERRORS[300s]) > 0" in promql
    assert "unless DCGM_FI_DEV_XID_ERRORS offset 300s" in promql
    ratio = "(DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE))"
    assert f"min_over_time({ratio}[600s:60s])" in promql
    assert f"count_over_time({ratio}[600s:60s]) >= 10" in promql
    assert '"$1", "node", "(.+)"' in promql


@pytest.mark.parametrize("bad", ["a-b", "1a", ""])
def test_gpu_health_refuses_a_node_label_that_is_not_a_label_name(bad: str) -> None:
    """A node label outside Prometheus's grammar never reaches PromQL."""
    with pytest.raises(ValueError, match="not a Prometheus label name"):
        prometheus.GpuHealthNames(node_label=bad)


async def test_one_query_per_signal_per_tick_whatever_the_number_of_services(
    stack: Stack, unique: str, source_for: SourceFactory
) -> None:
    """One service or a hundred with four kinds of server: three HTTP queries reach Prometheus."""
    kinds = list(prometheus.PRESETS.values())
    for count in (1, 100):
        services = {
            f"ns/s{i}": serving(f"{unique}-{i % 7}", f"s{i}-0", f"s{i}-1", metrics=kinds[i % 4])
            for i in range(count)
        }
        source = source_for(stack.prometheus.url)
        received = stack.prometheus.http_requests("/api/v1/query")

        await source.sample(workloads(services, *services), 0.0)

        assert stack.prometheus.http_requests("/api/v1/query") - received == 3
        assert source.queries_sent == len(source.last_queries) == 3


async def test_a_tick_builds_each_groups_queries_once(
    stack: Stack, unique: str, source_for: SourceFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The three signals of one shared query are built from one plan, not one each."""
    built: list[int] = []
    real = prometheus._render

    def counting(groups: Any, **kwargs: Any) -> dict[model.Signal, str]:
        built.append(1)
        return real(groups, **kwargs)

    monkeypatch.setattr(prometheus, "_render", counting)
    services = {f"ns/s{i}": serving(unique, f"s{i}-0") for i in range(20)}
    source = source_for(stack.prometheus.url)

    await source.sample(workloads(services, *services), 0.0)

    assert source.queries_sent == 3
    assert len(built) == 1


async def test_queries_are_built_again_only_when_a_record_changes(
    stack: Stack, unique: str, source_for: SourceFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ticks over records that read the same pods reuse their queries; new pods are queried."""
    built: list[int] = []
    real = prometheus._render

    def counting(groups: Any, **kwargs: Any) -> dict[model.Signal, str]:
        built.append(1)
        return real(groups, **kwargs)

    monkeypatch.setattr(prometheus, "_render", counting)
    services = {f"ns/s{i}": serving(unique, f"s{i}-0") for i in range(5)}
    records = workloads(services, *services)
    source = source_for(stack.prometheus.url)

    await source.sample(records, 0.0)
    first = source.last_queries
    await source.sample(list(records), 1.0)
    records[1] = dataclasses.replace(records[1], replicas=3)  # made again, the same pods
    await source.sample(records, 1.5)
    assert len(built) == 1
    assert source.last_queries == first

    records[2] = dataclasses.replace(records[2], pods=frozenset({"s2-0", "s2-new"}))
    await source.sample(records, 2.0)
    assert len(built) == 2
    assert all("s2-new" in promql for promql in source.last_queries)


async def test_a_service_gone_is_forgotten_when_another_takes_its_place(
    stack: Stack, unique: str, source_for: SourceFactory
) -> None:
    """What the source keeps of a service goes with it, though the number of services stays."""
    services = {f"ns/s{i}": serving(unique, f"s{i}-0") for i in range(3)}
    source = source_for(stack.prometheus.url)

    await source.sample(workloads(services, "ns/s0", "ns/s1"), 0.0)
    await source.sample(workloads(services, "ns/s0", "ns/s2"), 1.0)

    assert set(source._targets) == {"ns/s0", "ns/s2"}


async def test_a_bad_pod_name_is_warned_of_once_per_record(
    stack: Stack, unique: str, source_for: SourceFactory
) -> None:
    """A pod name that is not a Kubernetes name is logged when its record is new, not each tick."""
    services = {"a/chat": serving(unique, "chat-0", "Bad_Pod")}
    records = workloads(services, "a/chat")
    source = source_for(stack.prometheus.url)

    with capture_logs() as logs:
        await source.sample(records, 0.0)
        await source.sample(records, 1.0)
        changed = [dataclasses.replace(records[0], pods=frozenset({"chat-1", "Bad_Pod"}))]
        await source.sample(changed, 2.0)

    skipped = [e for e in logs if e["event"] == "metrics.pods_skipped"]
    assert [(e["service"], e["pods"]) for e in skipped] == [("a/chat", ["Bad_Pod"])] * 2
    assert all("Bad_Pod" not in promql for promql in source.last_queries)


async def test_hostile_names_from_the_index_never_reach_promql(
    stack: Stack, unique: str, source_for: SourceFactory
) -> None:
    """Pods and namespaces that are not Kubernetes names are skipped; the rest are still read."""
    a = f"{unique}-a"
    stack.upper.set_vllm(a, "chat-0", waiting=2)
    await wait_for_series(stack, f'vllm:num_requests_waiting{{namespace="{a}"}}', 1)
    services = {
        "a/chat": serving(a, "chat-0", *HOSTILE),
        "b/chat": serving('b"} or vector(1) #', "chat-0"),
    }
    source = source_for(stack.prometheus.url)

    values = await source.sample(workloads(services, "a/chat", "b/chat"), 0.0)

    assert values[0, SATURATION] == 2.0
    assert np.isnan(values[1]).all()
    sent = "\n".join(source.last_queries)
    assert "vector(1)" not in sent
    assert ".*" not in sent
    assert "chat-0" in sent


async def test_regex_literals_match_exactly_their_values(stack: Stack) -> None:
    """On the real PromQL engine a quoted value matches itself and nothing else."""
    values = ["a.b", "aXb", "a|b", ".*", 'x"y', "back\\slash", "new\nline", "(p)", "[s]", "{1}",
              "^$", "ünï", "a+"]  # fmt: skip
    for value in values:
        stack.upper.add_probe(value)
    await wait_for_series(stack, "promql_probe", len(values))

    for value in values:
        matched = stack.prometheus.query(
            f"promql_probe{{value=~{prometheus.regex_literal([value])}}}"
        )
        assert [s["metric"]["value"] for s in matched] == [value]
    both = stack.prometheus.query(
        f"promql_probe{{value=~{prometheus.regex_literal(['a.b', '.*'])}}}"
    )
    assert sorted(s["metric"]["value"] for s in both) == [".*", "a.b"]


async def test_a_dropped_series_reads_nan_after_prometheus_marks_it_stale(
    stack: Stack, unique: str, source_for: SourceFactory
) -> None:
    """When an exporter stops serving a pod, its values turn NaN (Prometheus's staleness marker)."""
    a = f"{unique}-a"
    stack.upper.set_vllm(a, "chat-0", waiting=6)
    source = source_for(stack.prometheus.url)
    load = workloads({"a/chat": serving(a, "chat-0")}, "a/chat")
    await sample_until(source, load, lambda v: v[0, SATURATION] == 6.0, "queue read")

    stack.upper.drop(a, "chat-0")

    await sample_until(source, load, lambda v: bool(np.isnan(v[0]).all()), "queue gone")


async def test_a_series_older_than_the_limit_reads_nan_though_prometheus_still_has_it(
    stack: Stack, unique: str, source_for: SourceFactory
) -> None:
    """A sample whose timestamp stopped moving turns NaN past `max_age_s`, by the adapter."""
    a = f"{unique}-a"
    # An explicit, frozen timestamp: Prometheus keeps the series (no staleness marker) and its
    # 5-minute lookback still answers it, but the sample ages.
    stack.upper.set_vllm(a, "chat-0", waiting=9, timestamp_s=time.time())
    source = source_for(stack.prometheus.url)
    load = workloads({"a/chat": serving(a, "chat-0")}, "a/chat")
    await sample_until(source, load, lambda v: v[0, SATURATION] == 9.0, "queue read while fresh")

    await sample_until(source, load, lambda v: bool(np.isnan(v[0, SATURATION])), "queue stale")

    raw = stack.prometheus.values(f'vllm:num_requests_waiting{{namespace="{a}"}}')
    assert raw == {"chat-0": 9.0}


async def test_a_stopped_prometheus_raises_observation_error(
    lone_prometheus: server.Prometheus, unique: str, source_for: SourceFactory
) -> None:
    """Connection refused is an `ObservationError` raised from the library's exception."""
    source = source_for(lone_prometheus.url)
    load = workloads({"a/chat": serving(f"{unique}-a", "chat-0")}, "a/chat")
    assert np.isnan(await source.sample(load, 0.0)).all()  # answered: no series yet

    lone_prometheus.stop()

    with pytest.raises(errors.ObservationError, match="query failed") as caught:
        await source.sample(load, 0.0)
    assert isinstance(caught.value.__cause__, aiohttp.ClientConnectionError)


@pytest.mark.parametrize(
    ("status", "body", "content_type", "cause", "message"),
    [
        (503, "overloaded", "text/plain", ValueError, "HTTP 503, not JSON"),
        (503, '{"status":"error","errorType":"unavailable"}', "application/json", type(None),
         "HTTP 503"),
        (400, "<html>bad request</html>", "text/html", ValueError, "HTTP 400, not JSON"),
        (200, "<html>not json</html>", "text/html", ValueError, "not JSON"),
        (200, '{"status":"success"}', "application/json", KeyError, "malformed"),
        (200, json.dumps({"data": {"result": 1}}), "application/json", type(None),
         "not an instant vector"),
        (200, json.dumps({"data": {"result": [{"metric": {}, "value": [1, "x"]}]}}),
         "application/json", ValueError, "sample malformed"),
        # Answers of the scanned shape, broken: the decoder's errors all the same.
        (200, ANSWERED.replace(b'"2"', b'"2x"').decode(), "application/json", ValueError,
         "sample malformed"),
        (200, ANSWERED.replace(b"},{", b"}{").decode(), "application/json", ValueError,
         "HTTP 200, not JSON"),
        (200, ANSWERED[:-1].decode(), "application/json", ValueError, "HTTP 200, not JSON"),
    ],
)  # fmt: skip
async def test_a_broken_answer_raises_observation_error(
    status: int,
    body: str,
    content_type: str,
    cause: type[BaseException],
    message: str,
    source_for: SourceFactory,
) -> None:
    """HTTP errors, bad JSON and malformed results raise `ObservationError` from their cause,
    and none of them is taken for a refused query."""
    async with stub.answering(status, body, content_type) as url:
        source = source_for(url)

        with pytest.raises(errors.ObservationError, match=message) as caught:
            await source.sample(workloads({"a/chat": serving("ns-a", "chat-0")}, "a/chat"), 0.0)

    assert not isinstance(caught.value, prometheus.QueryRejected)
    assert isinstance(caught.value.__cause__, cause)
    assert source.queries_sent == 3
    assert source.rejected == {}


async def test_a_silent_prometheus_times_out_as_observation_error(
    source_for: SourceFactory,
) -> None:
    """A server that never answers costs one deadline, then an `ObservationError`."""
    with stub.silent() as url:
        source = source_for(url, timeout_s=0.2)

        with pytest.raises(
            errors.ObservationError, match=r"no whole answer within 0\.2 s"
        ) as caught:
            await source.sample(workloads({"a/chat": serving("ns-a", "chat-0")}, "a/chat"), 0.0)

    assert isinstance(caught.value.__cause__, TimeoutError)


async def test_a_dripping_prometheus_is_cut_at_the_deadline(source_for: SourceFactory) -> None:
    """A server that sends its headers, then one byte every 0.1 s, costs one 0.3 s deadline."""
    loop = asyncio.get_running_loop()
    async with stub.dripping(byte_every_s=0.1) as drip:
        source = source_for(drip.url, timeout_s=0.3)
        started = loop.time()

        with pytest.raises(errors.ObservationError, match=r"no whole answer within 0\.3 s"):
            await source.sample(workloads({"a/chat": serving("ns-a", "chat-0")}, "a/chat"), 0.0)

        took_s = loop.time() - started
    assert drip.bytes_sent >= 1  # the answer had begun: a per-read timeout never fires
    assert 0.3 <= took_s < 2.0
