"""Prometheus as the loop would see it for the simulated services (`ports.MetricsSource`).

The world calls `scrape` every `scrape_interval_s` with each service's raw readings; `sample`
answers the loop's query from the last scrape, as a Prometheus instant query would:

- LOAD: what the service's load query reads (`LoadQuery`, chosen per service):
  - `SERVED_RATE` (ours, and HPA or KEDA on the request rate): `rate()` of the served-requests
    counter over `rate_window_s`, evaluated at the last scrape with Prometheus' own
    extrapolation (`extrapolated_rate`). It lags by up to a window, reads low while a fresh
    counter's window fills, and cannot exceed what the replicas served, exactly like
    `rate(vllm:request_success_total[30s])`. The counter is one series per service (the sum of
    its pods' counters, as a recording rule would give).
  - `CONCURRENCY` (Knative's default metric, and HPA or KEDA on the servers' gauges): requests in
    service plus requests waiting at the last scrape, `sum(vllm:num_requests_running +
    vllm:num_requests_waiting)`. Unlike the rate it keeps growing past capacity while the queue
    does.
- SATURATION: the waiting-requests gauge (queue length) at the last scrape.
- CAPACITY: GPU utilisation in percent at the last scrape, `100 x served / (serving x mu)` over
  the last second, clipped to [0, 100]; NaN when nothing is serving. Load and queue of a service
  with no serving pods are still known (nothing served, the queue as it is).

It is also the seasonal forecast's history (`ports.HistorySource`): `load_history` gives the
served rate per step from the counter as scraped, and before the simulation began from the
trace's past (`add_service(past_rps=...)`), never from anything at or after the time asked.

A service in token mode also has token signals, named and computed as a vLLM server's
(`token_signals`, `TokenSignals`): what the policy side reads for token and KV-cache votes. They
sit beside the three signals above and change none of them.

Tests switch the whole source off (`sample` raises `ObservationError`, as when Prometheus is
unreachable; scraping goes on) or blank one signal (NaN) for a time range.

It must not move time or touch the cluster: it only sees what the world hands it.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from autoscaler import errors, ports
from autoscaler.core import forecast, model
from autoscaler.sim import tokens as tokens_

_NAN_ROW: tuple[float, float, float] = (math.nan, math.nan, math.nan)  # LOAD to CAPACITY
_NAN_TOKENS: tuple[float, ...] = (math.nan,) * 5
"""KV_CACHE, TOKENS, TTFT, TPOT, PROMPT_TOKENS of a service with no token series (the request
model)."""
# Scrape times are compared with this slack (float rounding of the clock).
_EPS = 1e-9


class LoadQuery(enum.Enum):
    """What a service's LOAD signal reads (see the module docstring)."""

    SERVED_RATE = "served-rate"
    """`rate(vllm:request_success_total[30s])`: requests served per second."""
    CONCURRENCY = "concurrency"
    """`vllm:num_requests_running + vllm:num_requests_waiting`: requests in the servers."""


class Reading(NamedTuple):
    """What a scrape finds for one service."""

    served_total: float
    """The served-requests counter (monotonic)."""
    queue: float
    """The waiting-requests gauge (`vllm:num_requests_waiting`)."""
    gpu_util_pct: float
    """GPU utilisation over the last second; NaN when nothing is serving."""
    in_service: float = 0.0
    """The running-requests gauge (`vllm:num_requests_running`): taken, not yet completed."""

    @property
    def concurrency(self) -> float:
        """Requests in the servers: running plus waiting."""
        return self.in_service + self.queue


class TokenReading(NamedTuple):
    """What a scrape finds for one service in token mode."""

    prompt_tokens_total: float
    """`vllm:prompt_tokens_total`: prompt tokens prefilled (monotonic)."""
    generation_tokens_total: float
    """`vllm:generation_tokens_total`: output tokens decoded (monotonic)."""
    kv_cache_usage_ratio: float
    """`vllm:kv_cache_usage_perc` (`vllm:gpu_cache_usage_perc` before vLLM 0.10), a ratio in
    [0, 1] despite its name: cache held over the serving replicas' cache; NaN with none."""
    ttft_histogram: npt.NDArray[np.float64]
    """`vllm:time_to_first_token_seconds` bucket counts (cumulative over the run)."""
    tpot_histogram: npt.NDArray[np.float64]
    """`vllm:time_per_output_token_seconds` bucket counts (cumulative over the run)."""


class TokenSignals(NamedTuple):
    """The token signals of one service at the last scrape, as PromQL over vLLM's series
    gives them; NaN where the window holds too little (a missing series is never zero load)."""

    kv_cache_usage_ratio: float
    """`avg(vllm:kv_cache_usage_perc)`."""
    prompt_tokens_per_s: float
    """`sum(rate(vllm:prompt_tokens_total[window]))`."""
    generation_tokens_per_s: float
    """`sum(rate(vllm:generation_tokens_total[window]))`."""
    ttft_p95_s: float
    """`histogram_quantile(0.95, sum(rate(vllm:time_to_first_token_seconds_bucket[window])))`."""
    tpot_p95_s: float
    """`histogram_quantile(0.95, sum(rate(vllm:time_per_output_token_seconds_bucket[window])))`."""


@dataclass(frozen=True, slots=True)
class Outage:
    """A time range `[start_s, end_s)` in which metrics are missing.

    With `signal` None the whole source is down; otherwise only that signal reads NaN, for
    `service` (or every service when None).
    """

    start_s: float
    end_s: float
    signal: model.Signal | None = None
    service: model.ServiceId | None = None

    def covers(self, now_s: float) -> bool:
        return self.start_s <= now_s < self.end_s


class _Series:
    __slots__ = (
        "added_s",
        "concurrency",
        "counter_s",
        "counter_v",
        "latest",
        "load",
        "offset",
        "past",
        "samples",
    )

    def __init__(self, max_samples: int, load: LoadQuery, added_s: float) -> None:
        self.samples: deque[tuple[float, float]] = deque(maxlen=max_samples)
        self.counter_s: list[float] = []
        self.counter_v: list[float] = []
        """Every scrape of the served counter, for the history."""
        self.added_s = added_s
        self.past: npt.NDArray[np.float64] | None = None
        """Requests per second in the seconds before `added_s` (the trace's past)."""
        self.latest: tuple[float, float, float] = _NAN_ROW
        self.offset = 0.0
        """Counter value before the simulation (the seeded history)."""
        self.load = load
        self.concurrency = math.nan
        """Running plus waiting at the last scrape."""


class SimMetrics:
    """Scraped signals for every simulated service, queried in one batch per tick."""

    def __init__(self, *, scrape_interval_s: float = 5.0, rate_window_s: float = 30.0) -> None:
        if not scrape_interval_s > 0:
            raise ValueError("scrape_interval_s must be > 0")
        if not rate_window_s > 0:
            raise ValueError("rate_window_s must be > 0")
        self.scrape_interval_s = scrape_interval_s
        self.rate_window_s = rate_window_s
        self._max_samples = math.ceil(rate_window_s / scrape_interval_s) + 2
        self._series: dict[model.ServiceId, _Series] = {}
        self._outages: list[Outage] = []
        self._queries = 0
        self.next_scrape_s: float | None = None
        self._tokens: dict[model.ServiceId, deque[tuple[float, TokenReading]]] = {}
        self._token_rows: dict[model.ServiceId, tuple[float, ...]] = {}
        """Each token-mode service's token signals at its last scrape, in `Signal` order."""
        self._token_scraped: set[model.ServiceId] = set()
        """Token-mode services scraped since their row was last worked out."""

    @property
    def queries(self) -> int:
        """How many times the loop asked (one batched query per tick)."""
        return self._queries

    def add_service(
        self,
        service: model.ServiceId,
        *,
        now_s: float,
        history_rps: float | None = None,
        load: LoadQuery = LoadQuery.SERVED_RATE,
        service_time_s: float = 0.0,
        past_rps: npt.NDArray[np.float64] | None = None,
    ) -> None:
        """Start scraping a service whose LOAD signal reads `load`. With `history_rps`, its
        counter already has a window of history at that steady rate (a service that was running
        before the simulation began), and `history_rps x service_time_s` requests are running;
        without, the counter is fresh and its rate reads low until the window has filled.
        `past_rps` is the load of the seconds before `now_s`, the last one ending at `now_s`:
        the history a Prometheus would hold for a service that ran before the simulation."""
        series = _Series(self._max_samples, load, now_s)
        if past_rps is not None:
            past = np.asarray(past_rps, dtype=np.float64)
            if past.ndim != 1 or not bool(np.all(np.isfinite(past)) and np.all(past >= 0)):
                raise ValueError("past_rps must be a 1-D array of finite values >= 0")
            series.past = past
        if history_rps is not None:
            if not (math.isfinite(history_rps) and history_rps >= 0):
                raise ValueError("history_rps must be finite and >= 0")
            n = math.floor(self.rate_window_s / self.scrape_interval_s + _EPS)
            base = history_rps * n * self.scrape_interval_s
            for k in range(n, 0, -1):
                at_s = now_s - k * self.scrape_interval_s
                series.samples.append((at_s, base - history_rps * k * self.scrape_interval_s))
            series.samples.append((now_s, base))
            series.offset = base
            series.concurrency = history_rps * service_time_s
            series.latest = (self._load(series, now_s), math.nan, math.nan)
        self._series[service] = series
        if self.next_scrape_s is None:
            self.next_scrape_s = now_s

    def remove_service(self, service: model.ServiceId) -> None:
        self._series.pop(service, None)
        self._tokens.pop(service, None)
        self._token_rows.pop(service, None)
        self._token_scraped.discard(service)

    def scrape_due(self, now_s: float) -> bool:
        return self.next_scrape_s is not None and now_s >= self.next_scrape_s - _EPS

    def scrape(self, now_s: float, readings: Mapping[model.ServiceId, Reading]) -> None:
        """Record one scrape of every service listed (the others keep their last values)."""
        for service, reading in readings.items():
            series = self._series[service]
            samples = series.samples
            if samples and samples[-1][0] >= now_s - _EPS:
                samples.pop()  # the history seeded at this very time
            samples.append((now_s, series.offset + reading.served_total))
            if series.counter_s and series.counter_s[-1] >= now_s - _EPS:
                series.counter_s.pop()
                series.counter_v.pop()
            series.counter_s.append(now_s)
            series.counter_v.append(reading.served_total)
            gpu = reading.gpu_util_pct
            if not math.isnan(gpu):
                gpu = min(100.0, max(0.0, gpu))
            series.concurrency = reading.concurrency
            series.latest = (self._load(series, now_s), reading.queue, gpu)
        if self.next_scrape_s is not None:
            while self.next_scrape_s <= now_s + _EPS:
                self.next_scrape_s += self.scrape_interval_s

    def scrape_tokens(self, now_s: float, readings: Mapping[model.ServiceId, TokenReading]) -> None:
        """Record one scrape of the token series of every service listed."""
        for service, reading in readings.items():
            samples = self._tokens.setdefault(service, deque(maxlen=self._max_samples))
            if samples and samples[-1][0] >= now_s - _EPS:
                samples.pop()
            samples.append((now_s, reading))
            self._token_scraped.add(service)

    def seed_tokens(
        self,
        service: model.ServiceId,
        now_s: float,
        reading: TokenReading,
        *,
        prompt_per_s: float,
        generation_per_s: float,
    ) -> None:
        """A window of scrapes before `now_s` whose counters grew at these steady rates up to
        `reading` (the values before the run's zero are the history's), as `add_service`'s
        `history_rps` gives the request counter: a server that was running before the
        simulation began reads its token rates from the first tick, not a rate that climbs
        from zero while the window fills (and a look-ahead that takes the climb for growth).
        The histograms hold nothing from before, so TTFT and TPOT read missing until two
        scrapes of the run."""
        if not (math.isfinite(prompt_per_s) and math.isfinite(generation_per_s)):
            raise ValueError("the seeded token rates must be finite")
        n = math.floor(self.rate_window_s / self.scrape_interval_s + _EPS)
        for k in range(n, 0, -1):
            back_s = k * self.scrape_interval_s
            past = reading._replace(
                prompt_tokens_total=reading.prompt_tokens_total - prompt_per_s * back_s,
                generation_tokens_total=reading.generation_tokens_total - generation_per_s * back_s,
            )
            self.scrape_tokens(now_s - back_s, {service: past})

    def _token_row(self, service: model.ServiceId) -> tuple[float, ...]:
        """The service's token signals at its last scrape, in `Signal` order; worked out at the
        first sample after the scrape, so a run nobody samples pays nothing for them."""
        if service in self._token_scraped:
            self._token_scraped.discard(service)
            signals = self._token_signals(service, self._tokens[service][-1][0])
            self._token_rows[service] = (
                signals.kv_cache_usage_ratio,
                signals.generation_tokens_per_s,
                signals.ttft_p95_s,
                signals.tpot_p95_s,
                signals.prompt_tokens_per_s,
            )
        return self._token_rows.get(service, _NAN_TOKENS)

    def token_signals(self, service: model.ServiceId, now_s: float) -> TokenSignals:
        """The service's token signals at `now_s` from its scrapes within the rate window.

        Raises `ObservationError` while the whole source is switched off, as `sample` does;
        a service with no token series (the request model) reads NaN throughout."""
        for outage in self._outages:
            if outage.signal is None and outage.covers(now_s):
                raise errors.ObservationError(
                    f"simulated metrics outage from {outage.start_s:g}s to {outage.end_s:g}s"
                )
        return self._token_signals(service, now_s)

    def _token_signals(self, service: model.ServiceId, now_s: float) -> TokenSignals:
        samples = self._tokens.get(service)
        if not samples:
            return TokenSignals(math.nan, math.nan, math.nan, math.nan, math.nan)
        window = self.rate_window_s
        latest = samples[-1][1]
        prompt = [(t, r.prompt_tokens_total) for t, r in samples]
        generation = [(t, r.generation_tokens_total) for t, r in samples]
        inside = [(t, r) for t, r in samples if now_s - window < t <= now_s + _EPS]
        ttft = tpot = math.nan
        if len(inside) >= 2:
            first, last = inside[0][1], inside[-1][1]
            ttft = tokens_.histogram_quantile(last.ttft_histogram - first.ttft_histogram, 0.95)
            tpot = tokens_.histogram_quantile(last.tpot_histogram - first.tpot_histogram, 0.95)
        return TokenSignals(
            latest.kv_cache_usage_ratio,
            extrapolated_rate(prompt, at_s=now_s, window_s=window),
            extrapolated_rate(generation, at_s=now_s, window_s=window),
            ttft,
            tpot,
        )

    def switch_off(self, start_s: float, end_s: float) -> None:
        """Make `sample` raise `ObservationError` for `now_s` in [start_s, end_s)."""
        self._outages.append(Outage(start_s, end_s))

    def drop(
        self,
        signal: model.Signal,
        start_s: float,
        end_s: float,
        *,
        service: model.ServiceId | None = None,
    ) -> None:
        """Make one signal read NaN for `now_s` in [start_s, end_s)."""
        self._outages.append(Outage(start_s, end_s, signal, service))

    async def sample(
        self, workloads: Sequence[ports.Workload], now_s: float
    ) -> npt.NDArray[np.float64]:
        self._queries += 1
        series = self._series
        token_row = self._token_row
        # A service reads its token signals only when it sets a target for one, as in a
        # cluster, where no query names its pods for them otherwise.
        rows = [
            (s.latest if (s := series.get(w.id)) is not None else _NAN_ROW)
            + (token_row(w.id) if w.policy.llm_signals else _NAN_TOKENS)
            for w in workloads
        ]
        values = np.array(rows, dtype=np.float64).reshape(len(workloads), len(model.Signal))
        if self._outages:
            self._apply_outages(values, workloads, now_s)
        return values

    def _apply_outages(
        self, values: npt.NDArray[np.float64], workloads: Sequence[ports.Workload], now_s: float
    ) -> None:
        for outage in self._outages:
            if not outage.covers(now_s):
                continue
            if outage.signal is None:
                raise errors.ObservationError(
                    f"simulated metrics outage from {outage.start_s:g}s to {outage.end_s:g}s"
                )
            for i, workload in enumerate(workloads):
                if outage.service is None or outage.service == workload.id:
                    values[i, outage.signal] = math.nan

    async def load_history(
        self, workloads: Sequence[ports.Workload], now_s: float, *, span_s: float, step_s: float
    ) -> dict[model.ServiceId, forecast.History]:
        """The served rate per `step_s` over the last `span_s`: the steps wholly before `now_s`
        only, as a range query ending at `now_s` would give. Services whose LOAD is not the
        served rate have none."""
        if not (step_s > 0 and span_s > 0):
            raise ValueError("span_s and step_s must be > 0")
        for outage in self._outages:
            if outage.signal is None and outage.covers(now_s):
                raise errors.ObservationError("simulated metrics outage: no range query")
        end = math.floor(now_s / step_s + _EPS)
        first = math.floor((now_s - span_s) / step_s + _EPS)
        edges = np.arange(first, end + 1, dtype=np.float64) * step_s
        found: dict[model.ServiceId, forecast.History] = {}
        for workload in workloads:
            series = self._series.get(workload.id)
            if series is None or series.load is not LoadQuery.SERVED_RATE or end <= first:
                continue
            values = np.full(end - first, np.nan)
            if series.past is not None:
                _fill_from_past(values, edges, series.past, series.added_s)
            _fill_from_counter(values, edges, series.counter_s, series.counter_v)
            found[workload.id] = forecast.History(float(edges[0]), step_s, values)
        return found

    def concurrency(self, service: model.ServiceId) -> float:
        """Running plus waiting requests of `service` at the last scrape, whatever its LOAD
        signal reads; NaN before its first scrape."""
        return self._series[service].concurrency

    def _load(self, series: _Series, now_s: float) -> float:
        if series.load is LoadQuery.CONCURRENCY:
            return series.concurrency
        return extrapolated_rate(series.samples, at_s=now_s, window_s=self.rate_window_s)


def extrapolated_rate(
    samples: Sequence[tuple[float, float]], *, at_s: float, window_s: float
) -> float:
    """Prometheus' `rate(counter[window])` evaluated at `at_s` from (time, value) samples.

    The range is `(at_s - window_s, at_s]` (left-open, as in Prometheus 3). Fewer than two
    samples give no result (NaN). The increase (with counter resets added back) is extrapolated
    towards the range's edges: by the gap when it is under 1.1 average sample intervals,
    otherwise by half an interval, and never back past the counter's zero (the order of
    `extrapolatedRate` in Prometheus' `promql/functions.go`).
    """
    start_s = at_s - window_s
    inside = [(t, v) for t, v in samples if start_s < t <= at_s + _EPS]
    if len(inside) < 2:
        return math.nan
    first_t, first_v = inside[0]
    last_t, last_v = inside[-1]
    increase = last_v - first_v
    previous = first_v
    for _, value in inside[1:]:
        if value < previous:  # a counter reset: the counter restarted from zero
            increase += previous
        previous = value
    sampled_s = last_t - first_t
    if not sampled_s > 0:
        return math.nan
    average_s = sampled_s / (len(inside) - 1)
    to_start_s = first_t - start_s
    to_end_s = max(0.0, at_s - last_t)
    threshold_s = 1.1 * average_s
    if to_start_s >= threshold_s:
        to_start_s = average_s / 2
    # After that clamp, as Prometheus does: a counter is never extrapolated below zero.
    if increase > 0 and first_v >= 0:
        to_start_s = min(to_start_s, sampled_s * first_v / increase)
    if to_end_s >= threshold_s:
        to_end_s = average_s / 2
    return increase * (sampled_s + to_start_s + to_end_s) / sampled_s / window_s


def _fill_from_past(
    values: npt.NDArray[np.float64],
    edges: npt.NDArray[np.float64],
    past: npt.NDArray[np.float64],
    ends_s: float,
) -> None:
    """Each step wholly inside the past (per-second rates ending at `ends_s`) gets its mean."""
    begins_s = ends_s - len(past)
    totals = np.concatenate(([0.0], np.cumsum(past)))
    lo, hi = edges[:-1], edges[1:]
    inside = (lo >= begins_s - _EPS) & (hi <= ends_s + _EPS)
    a = np.round(lo[inside] - begins_s).astype(np.int64)
    b = np.round(hi[inside] - begins_s).astype(np.int64)
    values[inside] = (totals[b] - totals[a]) / np.maximum(b - a, 1)


def _fill_from_counter(
    values: npt.NDArray[np.float64],
    edges: npt.NDArray[np.float64],
    at_s: Sequence[float],
    counter: Sequence[float],
) -> None:
    """Each step wholly inside the scraped span gets the counter's increase over it, per
    second (the counter read between scrapes as a straight line, as `increase()` does)."""
    if len(at_s) < 2:
        return
    times = np.asarray(at_s, dtype=np.float64)
    totals = np.asarray(counter, dtype=np.float64)
    lo, hi = edges[:-1], edges[1:]
    inside = (lo >= times[0] - _EPS) & (hi <= times[-1] + _EPS)
    if not bool(np.any(inside)):
        return
    increase = np.interp(hi[inside], times, totals) - np.interp(lo[inside], times, totals)
    values[inside] = increase / (hi[inside] - lo[inside])
