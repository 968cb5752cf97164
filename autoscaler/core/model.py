"""Values the decision core takes and returns.

Plain frozen dataclasses and enums: no I/O, no clock, no pydantic (validation of user input
happens at the edges; here a bad value is a programming error and raises `ValueError`).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, NewType

ServiceId = NewType("ServiceId", str)
"""`namespace/name` of the Deployment that owns the service."""


class Signal(enum.IntEnum):
    """What is measured per service; the value is the column in sample matrices."""

    LOAD = 0
    """Requests per second completed by the service (sum over its serving pods)."""
    SATURATION = 1
    """Requests waiting in the servers' queues (sum over serving pods)."""
    CAPACITY = 2
    """GPU utilisation in percent (mean over serving pods); auxiliary, never scales up alone."""
    KV_CACHE = 3
    """KV-cache usage of an LLM server, a ratio in [0, 1] (mean over serving pods)."""
    TOKENS = 4
    """Generated (output) tokens per second (sum over serving pods)."""
    TTFT = 5
    """P95 time to first token in seconds, over the service's serving pods."""
    TPOT = 6
    """P95 time per output token in seconds, over the service's serving pods."""
    PROMPT_TOKENS = 7
    """Prompt tokens prefilled per second (sum over serving pods); it votes within the TOKENS
    vote, weighted by `PolicyConfig.prompt_token_weight`."""


PRIMARY_SIGNALS = (Signal.LOAD, Signal.SATURATION)
BASE_SIGNALS = (Signal.LOAD, Signal.SATURATION, Signal.CAPACITY)
"""The signals read, recorded and smoothed for every service."""
TOKEN_SIGNALS = (Signal.KV_CACHE, Signal.TOKENS)
"""The LLM servers' capacity signals: each votes as a utilisation against its target."""
LATENCY_SIGNALS = (Signal.TTFT, Signal.TPOT)
"""The LLM servers' latency percentiles: each votes for more when above its target."""
LLM_SIGNALS = (*TOKEN_SIGNALS, Signal.PROMPT_TOKENS, *LATENCY_SIGNALS)
"""The signals a service opts into by setting their targets (`PolicyConfig.llm_signals`): only
then are they queried, recorded and smoothed for it."""
_NONE: frozenset[Signal] = frozenset()
DEFAULT_PROMPT_TOKEN_WEIGHT = 0.2
"""Generated tokens one prompt token counts for when the service does not say: prefill runs
many tokens per weight read where decode runs one, so an LLM server prefills several times the
tokens per second it generates (vLLM with Llama-3-8B on one A100: about 10,000 prompt tokens/s
against 1,700 to 2,500 output tokens/s with a full batch)."""
MEAN_SIGNALS = frozenset({Signal.CAPACITY, Signal.KV_CACHE})
"""Signals that average over a service's pods; the others add up (or, latencies, are one
percentile over every pod's histogram)."""


class Kind(enum.Enum):
    """What a decision does to the replica count."""

    SCALE_UP = "scale-up"
    SCALE_DOWN = "scale-down"
    STEADY = "steady"
    """Nothing to do: the service is where it should be."""
    HOLD = "hold"
    """A change was wanted but something (cooldown, veto, missing data) blocked it."""


class Reason(enum.Enum):
    """Why a decision came out as it did; stable strings, used in events and metrics."""

    ABOVE_TARGET = "above-target"
    BELOW_TARGET = "below-target"
    BURST = "burst"
    FORECAST = "forecast"
    SLO = "slo"
    """The latency SLO's vote (`SloConfig`) asked for more than the targets."""
    SEASONAL = "seasonal"
    """The seasonal forecast (`ForecastConfig`) asks for more than the live signals."""
    BELOW_MIN = "below-min"
    ABOVE_MAX = "above-max"
    IN_DEADBAND = "in-deadband"
    AT_DESIRED = "at-desired"
    COOLDOWN = "cooldown"
    CAPACITY_VETO = "capacity-veto"
    BURST_HOLD = "burst-hold"
    RECENT_LOAD = "recent-load"
    """The smoothed signals allow a scale-down but the last few seconds do not."""
    MISSING_DATA = "missing-data"
    QUOTA = "quota"
    """The namespace's GPU ResourceQuota admits fewer replicas than the signals ask for."""
    NO_PLACEMENT = "no-placement"
    """No node can place another replica: the model is larger than every card, or its
    `placement` asks for a kind of GPU the cluster does not have."""
    PAUSED = "paused"
    """The service owner paused autoscaling (`PolicyConfig.pause`): no replica is written,
    except the one change to `Pause.replicas`."""


class Bound(enum.Enum):
    MIN = "min"
    MAX = "max"
    QUOTA = "quota"
    """The cap of `Observation.admissible` (the quota's, or the placement's when no node can
    place more), lower than `max`, was hit."""


@dataclass(frozen=True, slots=True)
class BurstConfig:
    """The fast path for sudden bursts, after Knative's panic mode.

    When the newest fresh sample of a primary signal asks for at least `threshold_ratio` times
    the capacity already asked for (pods starting included, so a burst fires once rather than
    every tick while they start), the policy scales on it at once, ignoring the scale-up
    cooldown, and refuses to scale down for `hold_s` afterwards. The newest sample rather than
    the mean of the last `window_s` seconds: that mean shows a step only after most of its
    window, too late to answer a 5x step within 5 s. For the queue, the newest sample's rise
    over that mean, spread over the mean's lag (half the window), counts as arrivals the served
    rate cannot show yet. It also refuses a scale-down that the smoothed signals allow while the
    short means are not below target: the smoothed mean lags the first seconds of a burst.
    """

    window_s: float = 6.0
    threshold_ratio: float = 2.0
    hold_s: float = 60.0
    # Knative's panic threshold is 200 %; `policy.default` uses 150 %, chosen on the benchmark
    # (bench/): measured against requested rather than ready capacity it fires once per burst,
    # and the lower threshold cut the SLO misses of a 5x step and of on/off bursts.

    def __post_init__(self) -> None:
        _require(self.window_s > 0, "burst window_s must be > 0")
        _require(self.threshold_ratio > 1, "burst threshold_ratio must be > 1")
        _require(self.hold_s >= 0, "burst hold_s must be >= 0")


@dataclass(frozen=True, slots=True)
class LookaheadConfig:
    """The trend term: scale up for the load expected once a new pod could be serving.

    The smoothed mean lags the signal by the weighted age of its samples; the forecast extends
    it by the trend over that lag plus the horizon, the observed pod start-up time (or
    `default_startup_s` until one is seen), capped at `max_horizon_s`. Only the part of the
    trend that is `confidence_z` standard errors above zero counts, so noise on a flat load
    does not project into phantom growth. Once the burst window's mean falls below the trend's
    line brought to now, by more than `confidence_z` standard errors of the trend over the
    mean's lag, the load has stopped rising (the trend is a step still in the window): the
    line is brought to now only, not extended over the start-up. It only ever adds capacity;
    scale-down uses the mean.
    """

    default_startup_s: float = 60.0
    max_horizon_s: float = 600.0
    confidence_z: float = 2.0

    def __post_init__(self) -> None:
        _require(self.default_startup_s >= 0, "lookahead default_startup_s must be >= 0")
        _require(self.max_horizon_s >= 0, "lookahead max_horizon_s must be >= 0")
        _require(self.confidence_z >= 0, "lookahead confidence_z must be >= 0")


@dataclass(frozen=True, slots=True)
class QueueDrainConfig:
    """Read the queue as demand, in requests per second, instead of as a count per replica.

    A queue is a stock, not a flow: `ceil(waiting / target per replica)` asks for dozens of
    replicas for a backlog that a few could clear. With this, the saturation vote asks for the
    replicas that carry the load estimate, plus the queue's growth rate (the demand the served
    rate cannot show while the servers are saturated; only the part `confidence_z` standard
    errors above zero), plus the waiting requests drained over `drain_s`. Waiting requests up
    to the queue target times the replicas the load asks for (in proportion to the load, and at
    most one replica's load target times `drain_s` per replica, so that more load never asks for
    fewer replicas) are normal queueing and are left alone. None of it depends on the replica
    count, so the vote has a fixed point and cannot swing between two counts.
    It needs a load target; without one the seed formula applies.
    """

    drain_s: float = 30.0
    """Chosen on the benchmark: 30 s cut the misses of steps and bursts against 60 s and 120 s,
    at a few percent more GPU time on a 60 s spike."""
    confidence_z: float = 2.0

    def __post_init__(self) -> None:
        _require(self.drain_s > 0, "queue drain_s must be > 0")
        _require(self.confidence_z >= 0, "queue confidence_z must be >= 0")


@dataclass(frozen=True, slots=True)
class SloConfig:
    """Size for a latency SLO: the fewest replicas whose `quantile` latency stays within
    `target_latency_s` at the observed arrival rate (`core.queueing`, an M/G/c model).

    The wait budget is `target_latency_s - service_time_s`: with `service_time_s` the latency of
    a request that does not wait, the target is end to end (the `target-p95-latency`
    annotation); with 0 it is the queueing delay alone (`target-p95-queue-delay`). A replica
    completes at most `replica_capacity_rps`; when that is not configured it is measured while
    the service is saturated (every serving replica has requests waiting), and without either
    the vote abstains. A replica serves `replica_capacity_rps x service_time_s` requests at once
    (at least 1). The burstiness, Allen-Cunneen's `(ca^2 + cs^2) / 2`, is fitted each tick to
    the queue the service shows against the model's queue for it, within
    [`min_burstiness`, `max_burstiness`]; while the model's queue is under `fit_min_queue`
    requests the fit has nothing to go on. Both fits read the service as it is now: with a
    queue that stays put while the load rises, the traffic reads as smoother and the vote can
    ask for a replica fewer; with a configured capacity and a settled burstiness the vote only
    grows with the load.

    The burstiness is fitted only on the queue and served rate sampled since the serving count
    last changed (`SloFit`: their means restart at each change), once those samples span
    `fit_settle_s`: after a scale-up the queue the smaller count left behind is not read against
    the model's queue for the larger one (which put the fit at its ceiling for minutes). Until
    then, and while the model's queue gives nothing to go on, the last fit holds; before the
    first (a new service, or a restarted controller), the fit on the queue's smoothed mean,
    `min_burstiness` when that has nothing to go on. With `fit_settle_s` None every tick fits
    the smoothed mean, whatever counts served during its window.
    """

    target_latency_s: float
    quantile: float = 0.95
    service_time_s: float = 0.0
    replica_capacity_rps: float | None = None
    min_burstiness: float = 1.0
    """Poisson arrivals and exponential service; a queue that looks smoother than this is
    taken as too little evidence to provision below it."""
    max_burstiness: float = 4.0
    fit_min_queue: float = 1.0
    fit_settle_s: float | None = 120.0
    """How long the samples at one serving count must span before they are fitted; chosen on
    the benchmark (docs/benchmark.md, "The SLO sizing's fit on the serving count")."""

    def __post_init__(self) -> None:
        _require(
            math.isfinite(self.target_latency_s) and self.target_latency_s > 0,
            "slo target_latency_s must be > 0",
        )
        _require(0 < self.quantile < 1, "slo quantile must be in (0, 1)")
        _require(
            0 <= self.service_time_s < self.target_latency_s,
            "slo service_time_s must be >= 0 and below target_latency_s",
        )
        capacity = self.replica_capacity_rps
        _require(
            capacity is None or (math.isfinite(capacity) and capacity > 0),
            "slo replica_capacity_rps must be > 0",
        )
        _require(
            0 < self.min_burstiness <= self.max_burstiness,
            "slo burstiness bounds must satisfy 0 < min <= max",
        )
        _require(self.fit_min_queue > 0, "slo fit_min_queue must be > 0")
        settle = self.fit_settle_s
        _require(
            settle is None or (math.isfinite(settle) and settle >= 0),
            "slo fit_settle_s must be >= 0",
        )

    @property
    def wait_budget_s(self) -> float:
        return self.target_latency_s - self.service_time_s


@dataclass(frozen=True, slots=True)
class ForecastConfig:
    """The seasonal forecast (`core/forecast.py`): pre-scale for the load one start-up ahead.

    The load at `now + start-up` is read from the load history one period earlier (a week when
    that much history exists, else a day), scaled by the ratio of the recent level to the level
    one period ago, and blended with the recent trend (`trend_weight`). It votes only while a
    rolling backtest (the last `backtest_s`, and the `backtest_s` after the same time one period
    ago) shows that its error is at most `1 - margin_ratio` times the error of the reactive
    estimate (the load as it was when the forecast was made), and no more than without its
    seasonal part; without enough history it stays off, and the decision says why. Like the
    look-ahead, it only ever raises the load vote.
    """

    periods_s: tuple[float, ...] = (7 * 86_400.0, 86_400.0)
    """Candidate periods, the first with enough history wins."""
    step_s: float = 60.0
    """Resolution of the history (one mean per step)."""
    level_window_s: float = 1_800.0
    """The recent level, the level one period ago and the trend are read over this window."""
    seasonal_window_s: float = 600.0
    """The load one period before the forecast time is the mean over this window around it."""
    trend_weight: float = 0.3
    max_level_ratio: float = 3.0
    """The level ratio is clipped to [1 / this, this]: a day unlike the last is not scaled
    by an outlier."""
    backtest_s: float = 6 * 3_600.0
    margin_ratio: float = 0.1
    min_backtest_ratio: float = 0.5
    """At least this share of the backtest's points must have both errors."""
    default_startup_s: float = 60.0
    """The horizon until a start-up time is observed."""
    max_horizon_s: float = 1_800.0
    refresh_s: float = 300.0
    """How often the controller fetches the history and reruns the backtest."""

    def __post_init__(self) -> None:
        _require(bool(self.periods_s), "forecast periods_s must not be empty")
        _require(all(p > 0 for p in self.periods_s), "forecast periods_s must be > 0")
        _require(self.step_s > 0, "forecast step_s must be > 0")
        _require(self.level_window_s >= self.step_s, "forecast level_window_s must be >= step_s")
        _require(self.seasonal_window_s >= 0, "forecast seasonal_window_s must be >= 0")
        _require(0 <= self.trend_weight <= 1, "forecast trend_weight must be in [0, 1]")
        _require(self.max_level_ratio >= 1, "forecast max_level_ratio must be >= 1")
        _require(self.backtest_s >= self.step_s, "forecast backtest_s must be >= step_s")
        _require(0 <= self.margin_ratio < 1, "forecast margin_ratio must be in [0, 1)")
        _require(0 < self.min_backtest_ratio <= 1, "forecast min_backtest_ratio must be in (0, 1]")
        _require(self.default_startup_s >= 0, "forecast default_startup_s must be >= 0")
        _require(self.max_horizon_s >= 0, "forecast max_horizon_s must be >= 0")
        _require(self.refresh_s > 0, "forecast refresh_s must be > 0")

    @property
    def span_s(self) -> float:
        """How much history the longest period needs, backtest included."""
        need = self.level_window_s + self.max_horizon_s + self.backtest_s + self.step_s
        return max(self.periods_s) + need


@dataclass(frozen=True, slots=True)
class ForecastVote:
    """What the seasonal forecast says for one service at one tick.

    `load_per_s` is NaN when it does not vote; `why` says why it does or does not, in words
    for the decision and `explain`.
    """

    on: bool
    load_per_s: float
    why: str
    horizon_s: float = 0.0

    @classmethod
    def off(cls, why: str) -> ForecastVote:
        return cls(on=False, load_per_s=math.nan, why=why)


@dataclass(frozen=True, slots=True)
class Pause:
    """Autoscaling paused by the service owner, with KEDA's semantics.

    Without `replicas` the service stays at whatever count it has, a manual one included. With
    `replicas` it is brought to that count once (any count: the bounds do not apply while
    paused), and then stays paused: a later manual change stays too.
    """

    replicas: int | None = None

    def __post_init__(self) -> None:
        _require(self.replicas is None or self.replicas >= 0, "paused replicas must be >= 0")


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """Per-service policy parameters (docs/architecture.md, "The replica count"). Targets are per
    serving replica."""

    max_replicas: int
    min_replicas: int = 2
    target_load_per_replica: float | None = None
    target_queue_per_replica: float | None = None
    target_gpu_utilization_pct: float | None = 75.0
    gpu_veto_projected: bool = False
    """GPU utilisation above its target vetoes only a scale-down to fewer replicas than could
    carry that GPU work (`policy.default`); False: it vetoes every scale-down (`seed`)."""
    burst_backlog_ahead: bool = False
    """A burst fired by the queue sizes the backlog it will have grown to when the new pods
    can serve (the pod start-up time, at most the queue drain's horizon), not the one now
    (`policy.default`; docs/benchmark.md)."""
    burst_release: bool = False
    """After a scale-up a burst drove, once all its pods serve, a scale-down may follow when the
    burst hold ends rather than after the scale-down cooldown: the capacity asked for to drain a
    backlog is needed while it drains (`policy.default`; docs/benchmark.md)."""
    target_kv_cache_ratio: float | None = None
    """KV-cache usage per serving replica, a ratio in (0, 1]."""
    target_tokens_per_replica: float | None = None
    """Prompt plus generated tokens per second per serving replica."""
    target_ttft_p95_s: float | None = None
    target_tpot_p95_s: float | None = None
    prompt_token_weight: float = DEFAULT_PROMPT_TOKEN_WEIGHT
    """What one prompt token counts for in `target_tokens_per_replica`, in generated tokens:
    a replica's output tokens per second at a full batch over its prompt tokens per second."""
    deadband_ratio: float = 0.1
    scale_up_cooldown_s: float = 60.0
    scale_down_cooldown_s: float = 300.0
    scale_down_max_ratio: float = 0.2
    burst: BurstConfig | None = None
    lookahead: LookaheadConfig | None = None
    queue_drain: QueueDrainConfig | None = None
    slo: SloConfig | None = None
    """Size for a latency SLO too (`policy.default` only); see `SloConfig`."""
    forecast: ForecastConfig | None = None
    """The seasonal forecast; None (the annotation `forecast: "off"`, or `seed`) never asks."""
    pause: Pause | None = None
    """Set while the service owner pauses autoscaling; see `Pause`."""

    def __post_init__(self) -> None:
        _require(self.min_replicas >= 0, "min_replicas must be >= 0")
        _require(self.max_replicas >= 1, "max_replicas must be >= 1")
        _require(self.min_replicas <= self.max_replicas, "min_replicas must be <= max_replicas")
        _require(
            any(self.target(signal) is not None for signal in (*PRIMARY_SIGNALS, *TOKEN_SIGNALS)),
            "at least one of target_load_per_replica, target_queue_per_replica, "
            "target_kv_cache_ratio, target_tokens_per_replica is required",
        )
        for name in ("target_load_per_replica", "target_queue_per_replica"):
            value = getattr(self, name)
            _require(value is None or (math.isfinite(value) and value > 0), f"{name} must be > 0")
        gpu = self.target_gpu_utilization_pct
        _require(gpu is None or 0 < gpu <= 100, "target_gpu_utilization_pct must be in (0, 100]")
        kv = self.target_kv_cache_ratio
        _require(kv is None or 0 < kv <= 1, "target_kv_cache_ratio must be in (0, 1]")
        for name in (
            "target_tokens_per_replica",
            "target_ttft_p95_s",
            "target_tpot_p95_s",
            "prompt_token_weight",
        ):
            value = getattr(self, name)
            _require(value is None or (math.isfinite(value) and value > 0), f"{name} must be > 0")
        _require(0 <= self.deadband_ratio < 1, "deadband_ratio must be in [0, 1)")
        _require(self.scale_up_cooldown_s >= 0, "scale_up_cooldown_s must be >= 0")
        _require(self.scale_down_cooldown_s >= 0, "scale_down_cooldown_s must be >= 0")
        _require(0 < self.scale_down_max_ratio <= 1, "scale_down_max_ratio must be in (0, 1]")

    @property
    def llm_signals(self) -> frozenset[Signal]:
        """The LLM signals this service sets a target for: the only ones read for it. A
        service without any costs what it did before they existed: no query names its pods
        for them, and its windows hold no column for them."""
        # Read every tick for every service: the common case is four attribute reads.
        if (
            self.target_kv_cache_ratio is None
            and self.target_tokens_per_replica is None
            and self.target_ttft_p95_s is None
            and self.target_tpot_p95_s is None
        ):
            return _NONE
        opted = {s for s in (*TOKEN_SIGNALS, *LATENCY_SIGNALS) if self.target(s) is not None}
        if Signal.TOKENS in opted:
            opted.add(Signal.PROMPT_TOKENS)
        return frozenset(opted)

    def target(self, signal: Signal) -> float | None:
        """The signal's target, per serving replica (a latency's is service-wide)."""
        # Read several times per service per tick: a field name by column, not a dict per call.
        name = _TARGET_FIELDS[signal]
        return None if name is None else getattr(self, name)


_TARGET_FIELDS: tuple[str | None, ...] = (
    "target_load_per_replica",  # LOAD
    "target_queue_per_replica",  # SATURATION
    "target_gpu_utilization_pct",  # CAPACITY
    "target_kv_cache_ratio",  # KV_CACHE
    "target_tokens_per_replica",  # TOKENS
    "target_ttft_p95_s",  # TTFT
    "target_tpot_p95_s",  # TPOT
    None,  # PROMPT_TOKENS: counted within the TOKENS target
)
assert len(_TARGET_FIELDS) == len(Signal)


class SignalEstimate(NamedTuple):
    """One signal of one service after smoothing (see `smoothing.Windows.estimate`).

    A NamedTuple rather than a frozen dataclass: the loop builds three per service per tick,
    and tuples construct several times faster.

    Values are NaN when the window holds no sample. `fresh` is true only when a valid sample was
    recorded at the current tick: stale or missing data is never read as zero.
    """

    mean: float
    """Exponentially weighted mean over the window."""
    level: float
    """The weighted linear fit's value now (the mean without its lag)."""
    trend_per_s: float
    """Slope of the weighted linear fit, units per second."""
    burst_mean: float
    """Plain mean over the burst window (the last few seconds)."""
    last: float
    """The sample recorded at this tick (NaN when it is missing)."""
    fresh: bool
    trend_stderr_per_s: float = math.inf
    """Standard error of `trend_per_s` (inf when the window holds too few samples)."""
    mean_age_s: float = 0.0
    """Weighted mean age of the samples behind `mean`: how far the mean lags behind now."""

    @classmethod
    def missing(cls) -> SignalEstimate:
        return _MISSING


_MISSING = SignalEstimate(
    mean=math.nan,
    level=math.nan,
    trend_per_s=math.nan,
    burst_mean=math.nan,
    last=math.nan,
    fresh=False,
)


@dataclass(frozen=True, slots=True)
class Observation:
    """Everything the policy knows about one service at one tick."""

    now_s: float
    replicas: int
    """Replicas asked for (the Deployment's spec): pods not yet serving count against scale-up."""
    serving: int
    """Warm pods in the stable traffic set: the only ones that count as capacity."""
    signals: Mapping[Signal, SignalEstimate]
    startup_s: float | None = None
    """Observed time from pod creation to serving, for the look-ahead horizon."""
    admissible: int | None = None
    """The most replicas the namespace's GPU quota admits over every placement tier
    (docs/architecture.md, "The placement ladder"); None when nothing caps it. A scale-up never
    asks for more."""
    admissible_reason: Reason = Reason.QUOTA
    """What sets `admissible`: the quota, or `NO_PLACEMENT` when no node can place the model
    (the service is then held at its size)."""
    forecast: ForecastVote | None = None
    """The seasonal forecast's vote (`core/forecast.py`); None when the service has none."""

    def signal(self, signal: Signal) -> SignalEstimate:
        return self.signals.get(signal) or SignalEstimate.missing()


@dataclass(frozen=True, slots=True)
class SloFit:
    """The SLO sizing's burstiness fit between ticks (`SloConfig.fit_settle_s`): the queue and
    served rate sampled since the serving count became `serving`, and the last fit made."""

    serving: int
    """The serving count the samples were taken at."""
    since_s: float
    """When the service was first seen serving that count."""
    sampled_s: float
    """When the last sample counted (`since_s` before the first)."""
    queue: float
    """Mean waiting requests since `since_s`; NaN before the first fresh sample."""
    load: float
    """Mean served rate (rps) since `since_s`, over the same samples as `queue`."""
    burstiness: float | None
    """The last fit made on samples at one serving count; None before the first (the
    controller's memory only: a restart fits the smoothed mean until the next)."""


@dataclass(frozen=True, slots=True)
class PolicyState:
    """What the policy remembers between ticks; persisted so a restart does not churn (all but
    `slo_fit`, which is rebuilt from the samples after a restart)."""

    last_scale_up_s: float | None = None
    last_scale_change_s: float | None = None
    burst_until_s: float | None = None
    paused_s: float | None = None
    """When the current pause began; None when not paused (a resume is seen by its end)."""
    paused_replicas: int | None = None
    """The `Pause.replicas` already carried out in this pause: it is not carried out again."""
    slo_fit: SloFit | None = None
    """The SLO sizing's fit on the current serving count (only with `SloConfig.fit_settle_s`)."""


class Contribution(NamedTuple):
    """How one signal voted: its utilisation ratio and the replicas it asks for.

    A NamedTuple for the same reason as `SignalEstimate`.
    """

    ratio: float
    """Estimate / (target x serving); NaN when nothing is serving or the signal is missing."""
    desired: int | None
    """Replicas this signal asks for; None when it is missing, stale or unused."""
    estimator: str
    """Which estimate drove it: `mean`, `forecast` or `burst`."""
    estimate: float = math.nan
    """The service-wide value the vote was computed from (rps or waiting requests)."""


@dataclass(frozen=True, slots=True)
class Standby:
    """A service's warm standby pool at one tick: warm replicas with no traffic, beside the
    serving ones the policy decides."""

    size: int
    """The pool's size asked for now (the fixed count, or the automatic size)."""
    replicas: int
    """The pool's replicas in the Deployment's count (as last scaled)."""
    waiting: int
    """Pods warm and waiting in the pool."""
    why: str = ""


@dataclass(frozen=True, slots=True)
class Decision:
    """The policy's verdict for one service at one tick. Data, not an action."""

    current: int
    desired: int
    kind: Kind
    reason: Reason
    detail: str
    contributions: Mapping[Signal, Contribution] = field(default_factory=dict)
    bound: Bound | None = None
    cooldown_until_s: float | None = None
    forecast: ForecastVote | None = None
    """The seasonal forecast's vote at this tick, on or off and why; None without one."""
    standby: Standby | None = None
    """The warm standby pool beside the replicas decided (added by the loop, never by the
    policy); None without one."""

    @property
    def changes(self) -> bool:
        return self.desired != self.current


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)
