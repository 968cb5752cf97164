"""What each model server exports to Prometheus (docs/architecture.md, "Signals"): the one table of
metric presets.

The annotation contract maps a Deployment's `server` (or its `custom` `metric-*` names) to a
`MetricNames`, and the Prometheus adapter queries exactly those names; both read `PRESETS` from
here, so the names the README documents are the names the controller queries.

Plain data: no I/O, no PromQL. Every name is checked against Prometheus's metric-name grammar
when a `MetricNames` is built, so text that is not a name can never reach a query.
"""

from __future__ import annotations

import re
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

METRIC_NAME: Final = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_NAME: Final = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

RESERVED_WORDS: Final = frozenset(
    {"atan2", "bool", "on", "ignoring", "group_left", "group_right", "inf", "nan"}
)
"""Names of the grammar that PromQL never reads as a metric name, in any letter case.

Prometheus's lexer (promql/parser/lex.go, its `key` map) turns these words into keywords or
numbers whatever their case, and its grammar (generated_parser.y, `metric_identifier`) takes back
as metric names only some keywords: the aggregators (`sum`, `count`, ...), the set operators
`and`, `or`, `unless`, and `by`, `without`, `offset`, `start`, `end`, `step`, `range`,
`limitk`, `limit_ratio`, `smoothed`, `anchored`. `fill`, `fill_left` and `fill_right` are
keywords only before `(`. What is left is here: in a selector such as `nan{pod="a"}` Prometheus
answers 400 bad_data, and the one query shared by every service would fail with it.
"""


def is_metric_name(name: str) -> bool:
    """Whether `name` is a metric name PromQL reads as one: the grammar, and not a reserved word."""
    return METRIC_NAME.fullmatch(name) is not None and name.lower() not in RESERVED_WORDS


def check_metric_name(name: str) -> None:
    """Raise `ValueError` unless `name` is a Prometheus metric name (a name, not a query)."""
    if not METRIC_NAME.fullmatch(name):
        raise ValueError(f"not a Prometheus metric name: {name!r}")
    if name.lower() in RESERVED_WORDS:
        raise ValueError(f"not a Prometheus metric name: {name!r} is a word of PromQL's grammar")


@dataclass(frozen=True, slots=True)
class MetricNames:
    """The series one kind of model server exports, each name checked against PromQL's grammar.

    `requests`, `queue` and the token signals are read per tick; `latency` and `errors` are for
    the traffic ramp's health gates. A `custom` server may name only one of `requests` and
    `queue` (the one its target needs); the other signal then reads as missing, which the
    policy ignores for a signal without a target.
    """

    requests: str | None
    """Counter of requests; its per-second rate is the LOAD signal."""
    queue: str | None
    """Gauge of requests waiting in the server's queue: the SATURATION signal."""
    latency: str | None = None
    """Histogram of end-to-end request latency in seconds (the name without `_bucket`)."""
    errors: str | None = None
    """Counter of failed requests."""
    error_label: str | None = None
    """When set, only the `errors` series whose `error_label` is one of `error_values` count."""
    error_values: tuple[str, ...] = ()
    # An LLM server's token signals. Each is a tuple of names, one per version of the server
    # that renamed it: a pod reports under whichever its version exports, and the adapter's
    # query reads them all (`or`). Empty: the server exports none, and the signal reads missing.
    kv_cache: tuple[str, ...] = ()
    """Gauge of the KV cache in use, a ratio in [0, 1]: the KV_CACHE signal."""
    prompt_tokens: tuple[str, ...] = ()
    """Counter of prompt tokens prefilled; with `generation_tokens`, the TOKENS signal."""
    generation_tokens: tuple[str, ...] = ()
    """Counter of output tokens generated."""
    ttft: tuple[str, ...] = ()
    """Histogram of the time to first token in seconds (the name without `_bucket`): TTFT."""
    tpot: tuple[str, ...] = ()
    """Histogram of the time per output token in seconds: TPOT."""

    def __post_init__(self) -> None:
        if self.requests is None and self.queue is None:
            raise ValueError("a server needs a request counter or a queue gauge")
        for name in (self.requests, self.queue, self.latency, self.errors, *self.token_names):
            if name is not None:
                check_metric_name(name)
        if self.error_label is not None and not LABEL_NAME.fullmatch(self.error_label):
            raise ValueError(f"not a Prometheus label name: {self.error_label!r}")
        if (self.error_label is None) != (not self.error_values):
            raise ValueError("error_label and error_values go together")

    @property
    def token_names(self) -> tuple[str, ...]:
        """Every name of the token signals."""
        return (
            *self.kv_cache,
            *self.prompt_tokens,
            *self.generation_tokens,
            *self.ttft,
            *self.tpot,
        )


# Names as each server exports them, checked against the source that registers them (names
# change between versions; check again when a server renames one).
PRESETS: Final[Mapping[str, MetricNames]] = types.MappingProxyType(
    {
        # vllm-project/vllm vllm/v1/metrics/loggers.py (PrometheusStatLogger): the counter
        # `vllm:request_success` (served as `..._total`) has one series per `finished_reason`,
        # whose values are in vllm/v1/engine/__init__.py (FINISH_REASON_STRINGS: stop, length,
        # abort, error, repetition): every finished request counts as load.
        "vllm": MetricNames(
            requests="vllm:request_success_total",
            queue="vllm:num_requests_waiting",
            latency="vllm:e2e_request_latency_seconds",
            errors="vllm:request_success_total",
            error_label="finished_reason",
            error_values=("abort", "error"),
            # The KV-cache gauge was `vllm:gpu_cache_usage_perc` (a ratio despite the name)
            # until vLLM 0.10 renamed it `vllm:kv_cache_usage_perc`.
            kv_cache=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
            prompt_tokens=("vllm:prompt_tokens_total",),
            generation_tokens=("vllm:generation_tokens_total",),
            ttft=("vllm:time_to_first_token_seconds",),
            tpot=("vllm:time_per_output_token_seconds",),
        ),
        # huggingface/text-generation-inference docs/source/reference/metrics.md; the Rust
        # exporter adds no `_total`. `tgi_request_count` is incremented as a request arrives
        # (router/src/server.rs), so its rate is demand, served or not. `tgi_request_failure`
        # (label `err`) is emitted by router/src/infer/mod.rs though missing from the docs table.
        "tgi": MetricNames(
            requests="tgi_request_count",
            queue="tgi_queue_size",
            latency="tgi_request_duration",
            errors="tgi_request_failure",
            # TGI exports no KV-cache gauge and no time to first token. Its token counts are
            # per-request histograms whose `_sum` grows by each request's tokens, so their rate
            # is tokens per second (counted as the request finishes).
            prompt_tokens=("tgi_request_input_length_sum",),
            generation_tokens=("tgi_request_generated_tokens_sum",),
            tpot=("tgi_request_mean_time_per_token_duration",),
        ),
        # triton-inference-server/server docs/user_guide/metrics.md. Load counts successful
        # requests only: summing two counters per pod needs the metric name that `rate()` drops
        # (the adapter joins metric names with `or`, which keeps one of them per pod).
        # Latency is a cumulative counter (`nv_inference_request_duration_us`), not a histogram,
        # unless summaries or histograms are switched on, so there is none here.
        "triton": MetricNames(
            requests="nv_inference_request_success",
            queue="nv_inference_pending_request_count",
            errors="nv_inference_request_failure",
        ),
        # sgl-project/sglang python/sglang/srt/metrics/collector.py: a finished request observes
        # the e2e histogram and increments `sglang:num_requests_total` in the same call
        # (`observe_one_finished_request`), so the histogram's `_count` counts finished requests;
        # it is read because the histogram is older than the counter and exists in more versions.
        "sglang": MetricNames(
            requests="sglang:e2e_request_latency_seconds_count",
            queue="sglang:num_queue_reqs",
            latency="sglang:e2e_request_latency_seconds",
            errors="sglang:num_aborted_requests_total",
            # docs/references/production_metrics.md: `sglang:token_usage` is the KV-cache
            # (token pool) usage ratio; the per-token histogram was renamed
            # `sglang:inter_token_latency_seconds` in later versions.
            kv_cache=("sglang:token_usage",),
            prompt_tokens=("sglang:prompt_tokens_total",),
            generation_tokens=("sglang:generation_tokens_total",),
            ttft=("sglang:time_to_first_token_seconds",),
            tpot=("sglang:time_per_output_token_seconds", "sglang:inter_token_latency_seconds"),
        ),
    }
)
