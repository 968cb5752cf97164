"""The per-Deployment annotation contract (docs/annotations.md): one pydantic model, one source of
truth.

A service owner opts in by annotating their inference Deployment under `autoscaler.dsec.io/`.
`parse` turns those annotations into a `ServiceConfig` (the core's `PolicyConfig` plus what the
adapters need) or an `Invalid` listing every `Problem`; the reference table in
docs/annotations.md is generated from the same model (`contract.reference`). The quoting and the
problems are in `contract.text`, the value parsers in `contract.values`; the names a message
needs (`quote`, `escape`, `Problem`, `Invalid`) are re-exported here, where every caller looks.

Annotation values are untrusted text. Every value is parsed strictly (no float for a count, no
`yes` for `true`), metric names are checked against the Prometheus name grammar before they can
reach a query, and a value only ever appears in a message through `quote`, which escapes control
characters and truncates. This module never logs, never performs I/O and never raises on bad
input: bad input is data.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic import model_validator as _model_validator
from pydantic_core import PydanticCustomError

from autoscaler import metricnames
from autoscaler.contract import values
from autoscaler.contract.text import QUOTE_LIMIT as QUOTE_LIMIT
from autoscaler.contract.text import Invalid as Invalid
from autoscaler.contract.text import Problem as Problem
from autoscaler.contract.text import escape as escape
from autoscaler.contract.text import quote as quote
from autoscaler.contract.text import show_key as show_key
from autoscaler.core import model, placement, policy, standby
from autoscaler.core.ramp import RampConfig

PREFIX = "autoscaler.dsec.io/"
STATUS_KEY = PREFIX + "status"
"""Written by the controller: the last decision as JSON. Not a setting; `parse` ignores it."""
STATE_KEY = PREFIX + "state"
"""Written by the controller: cooldown timestamps and ramp step. Not a setting; ignored."""
RAMP_KEY = PREFIX + "ramp"
"""Written by the controller: the traffic ramp's step and deadlines, for resuming after a
restart (docs/architecture.md, "The warm-up gate and the traffic ramp"). Not a setting; ignored."""
STANDBY_KEY = PREFIX + "standby-replicas"
"""The warm standby pool's size (a setting; named here for the messages about it)."""
CONTROLLER_KEYS = frozenset({STATUS_KEY, STATE_KEY, RAMP_KEY})
WARM_GATE = PREFIX + "warm"
"""The readiness gate (`spec.template.spec.readinessGates[].conditionType`) behind which a
gated service's new pods wait until the controller has warmed them up."""
WARMING_LABEL = PREFIX + "warming"
"""The pod label (value `"true"`) a gated service's new pods start with: the ramp's warming set.
Never in a selector: the controller removes it from each pod it promotes."""
STABLE_LABEL = PREFIX + "stable"
"""The pod label the controller puts on promoted pods: the ramp's stable set."""
STANDBY_REASON = "PromotedFromStandby"
"""The warm condition's reason on a pod let out of the standby pool: it became Ready when a
scale-up promoted it, long after its start-up, which ended when its containers were ready."""
STATUS_LIMIT_BYTES = 64 * 1024
"""Longest `status` read; the controller writes about 1 kB. Longer text is ignored."""
STATE_LIMIT_BYTES = 4 * 1024
"""Longest `state` read; the controller writes under 200 bytes. Longer text is corrupt."""
CORRUPT_STATE = "CorruptState"
"""The Warning Event's reason when the controller's `state` or `ramp` annotation cannot be read:
it names the key, the value and the rule broken, and the state is rebuilt as for a new service
(a ramp starts over with the new pods' weight back to 0)."""

REFERENCE_BEGIN = "<!-- annotations:begin -->"
REFERENCE_END = "<!-- annotations:end -->"


T = TypeVar("T")


# ---------------------------------------------------------------------------------------------
# Choices


class Mode(enum.Enum):
    ACTIVE = "active"
    DRY_RUN = "dry-run"
    """Decide and explain, never write replicas or traffic weights."""


class Server(enum.Enum):
    VLLM = "vllm"
    TGI = "tgi"
    TRITON = "triton"
    SGLANG = "sglang"
    CUSTOM = "custom"


class PolicyName(enum.Enum):
    SEED = "seed"
    """The plain rule (docs/architecture.md, "The replica count"): no burst path, no look-ahead."""
    DEFAULT = "default"
    """The seed policy plus the burst fast path and the trend look-ahead."""


class Forecast(enum.Enum):
    AUTO = "auto"
    """The seasonal forecast votes while its backtest says it beats the reactive estimate."""
    OFF = "off"


class TrafficRouter(enum.Enum):
    NONE = "none"
    ISTIO = "istio"
    GATEWAY_API = "gateway-api"
    SMI = "smi"


Placement = placement.Mode
"""The `placement` annotation's values: the core's own (`core.placement.Mode`)."""


# Bounds. Each says what is absurd for that setting, not what is merely unusual.
_MAX_REPLICAS = 10_000
_DAY_S = 86_400.0
_HOUR_S = 3_600.0
_MAX_MODEL_MIB = 4 * 2**20  # 4Ti: beyond any node's total GPU memory today.

_FLAG = values.flag()
_MODE = values.choice(Mode)
_SERVER = values.choice(Server)
_POLICY = values.choice(PolicyName)
_ROUTER = values.choice(TrafficRouter)
_FORECAST = values.choice(Forecast)
_PLACEMENT = values.choice(Placement)
# Scale to zero needs a wake-up signal that does not come from the service's own pods.
_MIN_REPLICAS = values.whole(
    1,
    _MAX_REPLICAS,
    why="not 0: a service at 0 replicas has no pods, so no metrics, and would hold there "
    "on missing data forever",
)
_MAX_REPLICAS_P = values.whole(1, _MAX_REPLICAS)
# Any count, as KEDA's `paused-replicas`: an incident may need 0 (free the GPUs) or more than
# max-replicas; the service is paused there, so the bounds that the policy keeps do not apply.
_PAUSED_REPLICAS = values.whole(0, _MAX_REPLICAS)
_TARGET = values.number(0, None, lo_open=True)
_GPU_PCT = values.number(0, 100, lo_open=True, percent=True)
_SHARE = values.fraction()
_WEIGHT = values.number(0, 1, lo_open=True)
_LATENCY = values.duration(0.001, _HOUR_S)
_METRIC = values.metric_name()
_WINDOW = values.duration(10.0, _HOUR_S)
_HALF_LIFE = values.duration(1.0, _HOUR_S)
_DEADBAND = values.number(0, 1, hi_open=True)
_COOLDOWN = values.duration(0.0, _DAY_S, zero=True)
_DOWN_RATIO = values.number(0, 1, lo_open=True)
_STEPS_P = values.steps()
_STEP_INTERVAL = values.duration(1.0, _HOUR_S)
_ERROR_RATE = values.number(0, 1)
_P95 = values.duration(0.001, _HOUR_S)
_P95_RATIO = values.number(1, 100)
_PATH = values.url_path()
_PORT = values.whole(1, 65_535)
_WARMUP_REQUESTS = values.whole(1, 1_000)
_DEADLINE = values.duration(10.0, 6 * _HOUR_S)
_MEMORY = values.quantity(1, _MAX_MODEL_MIB)
_PROJECT = values.label_value()
_MODEL_ID = values.model_id()
_MODEL_SIZE = values.number(0, 16_384, lo_open=True)
_STANDBY = values.whole_or_auto(0, _MAX_REPLICAS)
_STANDBY_MAX = values.whole(1, _MAX_REPLICAS)
DEFAULT_STANDBY_MAX = 2
"""The automatic standby pool's cap when `standby-max-replicas` is not set: a pool is paid for
every hour, so a small one unless the owner says more."""


def _v(parser: values.Parser[Any]) -> BeforeValidator:
    return BeforeValidator(parser)


# ---------------------------------------------------------------------------------------------
# The model


class Annotations(BaseModel):
    """Every setting a service owner can put on their Deployment, keyed by annotation name.

    Field aliases are the keys without the prefix; values arrive as strings and each field's
    validator parses them strictly. Defaults are typed values. Rules across keys live in the
    model validator. Build it with `parse`, not directly.
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", validate_by_alias=True, validate_by_name=False
    )

    enabled: Annotated[bool, _v(_FLAG)] = Field(
        alias="enabled",
        description='Opt in: `"true"` manages this Deployment, `"false"` leaves it alone (and '
        "opens the warm-up readiness gate of its ready pods).",
    )
    mode: Annotated[Mode, _v(_MODE)] = Field(
        Mode.ACTIVE,
        alias="mode",
        description="`active` scales and shifts traffic; `dry-run` decides and explains "
        "(status annotation, Events, logs) but never writes replicas or weights; it opens the "
        "warm-up readiness gate of pods whose containers are ready.",
    )
    paused: Annotated[bool, _v(_FLAG)] = Field(
        False,
        alias="paused",
        description='`"true"` stops scaling at the current count (as KEDA\'s '
        "`autoscaling.keda.sh/paused`): the controller writes no replicas, so a `kubectl scale` "
        "stays, and a traffic ramp of pods already created goes on. Removing it resumes from "
        "the current count, as after a manual change (no scale-down for `scale-down-cooldown`).",
    )
    paused_replicas: Annotated[int | None, _v(_PAUSED_REPLICAS)] = Field(
        None,
        alias="paused-replicas",
        description="Scale to this count once, then stay paused there (as KEDA's "
        "`autoscaling.keda.sh/paused-replicas`; it wins over `paused`). Any count, 0 and "
        "outside `min-replicas`..`max-replicas` included; a new value scales once again.",
    )
    policy: Annotated[PolicyName, _v(_POLICY)] = Field(
        PolicyName.DEFAULT,
        alias="policy",
        description="Replica policy: `seed` is the plain one (deadband, asymmetric cooldowns, "
        "scale-down cap); `default` adds a burst fast path and a look-ahead by the pod start-up "
        "time.",
    )
    forecast: Annotated[Forecast, _v(_FORECAST)] = Field(
        Forecast.AUTO,
        alias="forecast",
        description="Seasonal pre-scaling (policy `default` only): `auto` scales up ahead of the "
        "load expected one pod start-up from now, read from the same time yesterday (or last "
        "week) in Prometheus, while a rolling backtest shows it predicts better than the live "
        "load; without enough history, or when it predicts worse, it stays off and the "
        "decision says why. `off` never does.",
    )
    min_replicas: Annotated[int, _v(_MIN_REPLICAS)] = Field(
        2, alias="min-replicas", description="Fewest replicas, even with no load."
    )
    max_replicas: Annotated[int, _v(_MAX_REPLICAS_P)] = Field(
        alias="max-replicas", description="Most replicas, whatever the load."
    )
    server: Annotated[Server, _v(_SERVER)] = Field(
        Server.VLLM,
        alias="server",
        description="Model server, for its metric names (see the presets below); `custom` takes "
        "them from the `metric-*` keys.",
    )
    target_qps_per_replica: Annotated[float | None, _v(_TARGET)] = Field(
        None,
        alias="target-qps-per-replica",
        description="Load target: completed requests per second per serving replica.",
    )
    target_queue_per_replica: Annotated[float | None, _v(_TARGET)] = Field(
        None,
        alias="target-queue-per-replica",
        description="Saturation target: waiting requests per serving replica.",
    )
    target_gpu_utilization_pct: Annotated[float, _v(_GPU_PCT)] = Field(
        75.0,
        alias="target-gpu-utilization",
        description="Capacity guard, percent (DCGM GPU utilisation): above it, no scale-down "
        "(policy default: none to fewer replicas than could carry the GPU work); it never "
        "scales up on its own.",
    )
    target_kv_cache_ratio: Annotated[float | None, _v(_SHARE)] = Field(
        None,
        alias="target-kv-cache-utilization",
        description="LLM servers: KV-cache usage per serving replica (`0.8` or `80%`); the "
        "replicas that bring the mean usage to it are a vote.",
    )
    target_tokens_per_replica: Annotated[float | None, _v(_TARGET)] = Field(
        None,
        alias="target-tokens-per-replica",
        description="LLM servers: generated tokens per second per serving replica, a prompt "
        "token counting as `prompt-token-weight` of one; the replicas that carry the "
        "service's tokens at it are a vote.",
    )
    prompt_token_weight: Annotated[float | None, _v(_WEIGHT)] = Field(
        None,
        alias="prompt-token-weight",
        description="LLM servers: what one prompt token counts for in "
        "`target-tokens-per-replica`, in generated tokens: a replica's output tokens per "
        "second with a full batch over its prompt tokens per second (both from a load test). "
        f"Unset: {model.DEFAULT_PROMPT_TOKEN_WEIGHT:g} (vLLM, Llama-3-8B, one A100: about "
        "10,000 prompt against 2,000 output tokens per second).",
    )
    target_ttft_p95_s: Annotated[float | None, _v(_LATENCY)] = Field(
        None,
        alias="target-ttft-p95",
        description="LLM servers: P95 time to first token; above it, a vote for more replicas "
        "(at most twice the serving ones per decision), and near it no scale-down. With "
        "`policy: default` and no other latency SLO, also the SLO's queueing model, sized as "
        "a queueing delay (as `target-p95-queue-delay`; `replica-capacity` applies).",
    )
    target_tpot_p95_s: Annotated[float | None, _v(_LATENCY)] = Field(
        None,
        alias="target-tpot-p95",
        description="LLM servers: P95 time per output token, voting as `target-ttft-p95`.",
    )
    target_p95_latency_s: Annotated[float | None, _v(_P95)] = Field(
        None,
        alias="target-p95-latency",
        description="`default` policy: latency SLO, end to end (needs `service-time`); the "
        "replicas never fall below what keeps the P95 under it at the observed rate (an M/G/c "
        "queueing model fitted to the service's queue, as measured over 2 minutes at the "
        "current serving count).",
    )
    target_p95_queue_delay_s: Annotated[float | None, _v(_P95)] = Field(
        None,
        alias="target-p95-queue-delay",
        description="`default` policy: the SLO as the P95 of the time a request waits before "
        "service, instead of `target-p95-latency`.",
    )
    service_time_s: Annotated[float | None, _v(_P95)] = Field(
        None,
        alias="service-time",
        description="Latency of a request that does not wait, for `target-p95-latency`.",
    )
    replica_capacity_rps: Annotated[float | None, _v(_TARGET)] = Field(
        None,
        alias="replica-capacity",
        description="Requests per second one replica completes at most, for the SLO's model; "
        "without it, measured while every replica has requests waiting (until then the SLO "
        "does not vote).",
    )
    metric_requests: Annotated[str | None, _v(_METRIC)] = Field(
        None,
        alias="metric-requests",
        description="`custom` only: counter of finished requests (its rate is the load).",
    )
    metric_queue: Annotated[str | None, _v(_METRIC)] = Field(
        None,
        alias="metric-queue",
        description="`custom` only: gauge of requests waiting in the server's queue.",
    )
    metric_errors: Annotated[str | None, _v(_METRIC)] = Field(
        None,
        alias="metric-errors",
        description="`custom` only: counter of failed requests, for the traffic ramp's gate.",
    )
    metric_latency: Annotated[str | None, _v(_METRIC)] = Field(
        None,
        alias="metric-latency",
        description="`custom` only: histogram of request latency in seconds (its `_bucket` "
        "series), for the traffic ramp's P95 gate.",
    )
    window_s: Annotated[float, _v(_WINDOW)] = Field(
        300.0, alias="window", description="Smoothing window: how much history the decision sees."
    )
    half_life_s: Annotated[float, _v(_HALF_LIFE)] = Field(
        30.0,
        alias="half-life",
        description="Half-life of the exponentially weighted mean over the window.",
    )
    deadband_ratio: Annotated[float, _v(_DEADBAND)] = Field(
        0.1,
        alias="deadband",
        description="No change while the smoothed load/target ratio is within 1 ± this.",
    )
    scale_up_cooldown_s: Annotated[float, _v(_COOLDOWN)] = Field(
        60.0, alias="scale-up-cooldown", description="No scale-up this soon after a scale-up."
    )
    scale_down_cooldown_s: Annotated[float, _v(_COOLDOWN)] = Field(
        300.0,
        alias="scale-down-cooldown",
        description="No scale-down this soon after any scale change.",
    )
    scale_down_max_ratio: Annotated[float, _v(_DOWN_RATIO)] = Field(
        0.2,
        alias="scale-down-max-ratio",
        description="One scale-down removes at most max(1, floor(ratio x replicas)).",
    )
    traffic_router: Annotated[TrafficRouter, _v(_ROUTER)] = Field(
        TrafficRouter.NONE,
        alias="traffic-router",
        description="How new pods get traffic in steps: Istio, Gateway API, SMI, or `none` "
        "(readiness gate only, no ramp).",
    )
    traffic_steps_pct: Annotated[tuple[int, ...], _v(_STEPS_P)] = Field(
        (10, 30, 50, 100),
        alias="traffic-steps",
        description="Ramp steps, percent of the new pods' fair share of traffic.",
    )
    traffic_step_interval_s: Annotated[float, _v(_STEP_INTERVAL)] = Field(
        30.0,
        alias="traffic-step-interval",
        description="Longest time at a ramp step before its health check (a busy step is "
        "judged once its new pods have served enough requests, after a third of this).",
    )
    max_error_rate: Annotated[float, _v(_ERROR_RATE)] = Field(
        0.01,
        alias="max-error-rate",
        description="Ramp gate: highest error rate (failed / all requests) of the new pods.",
    )
    max_p95_latency_s: Annotated[float | None, _v(_P95)] = Field(
        None,
        alias="max-p95-latency",
        description="Ramp and warm-up gate: absolute P95 latency limit; none when unset.",
    )
    max_p95_ratio: Annotated[float, _v(_P95_RATIO)] = Field(
        1.2,
        alias="max-p95-ratio",
        description="Ramp gate: highest P95 latency of the new pods relative to the serving pods.",
    )
    warmup_path: Annotated[str | None, _v(_PATH)] = Field(
        None,
        alias="warmup-path",
        description="HTTP path the warm-up probe requests; without it, a pod is warm once Ready.",
    )
    warmup_port: Annotated[int | None, _v(_PORT)] = Field(
        None,
        alias="warmup-port",
        description="Port of the warm-up probe; the first container port when unset.",
    )
    warmup_requests: Annotated[int, _v(_WARMUP_REQUESTS)] = Field(
        3,
        alias="warmup-requests",
        description="Probe requests a new pod must answer before it counts as warm.",
    )
    warmup_deadline_s: Annotated[float, _v(_DEADLINE)] = Field(
        600.0,
        alias="warmup-deadline",
        description="A pod not warm by then is reclaimed and replaced.",
    )
    placement: Annotated[Placement, _v(_PLACEMENT)] = Field(
        Placement.AUTO,
        alias="placement",
        description="GPU tier for new replicas: `auto` climbs whole GPU → MIG slice → "
        "time-sliced GPU as room runs out; the others pin one tier.",
    )
    model_memory_mib: Annotated[int | None, _v(_MEMORY)] = Field(
        None,
        alias="model-memory",
        description="GPU memory one replica needs; decides which MIG slices and shared GPUs fit. "
        "Without it, `auto` uses whole GPUs only.",
    )
    project: Annotated[str | None, _v(_PROJECT)] = Field(
        None,
        alias="project",
        description="Accounting label on the GPU-hours counter.",
    )
    model: Annotated[str | None, _v(_MODEL_ID)] = Field(
        None,
        alias="model",
        description="The model the pods serve, for cache-aware placement: pods of the same model "
        "prefer the nodes that ran it recently. Without it, the pod template's image and its "
        '`--model` argument or `MODEL` variable (docs/operations.md, "Cache-aware placement").',
    )
    model_size_gib: Annotated[float | None, _v(_MODEL_SIZE)] = Field(
        None,
        alias="model-size-gib",
        description="Size of the model's weights in GiB: bigger models stay in a node's cache "
        "for less time after their last pod there.",
    )
    standby_replicas: Annotated[int | values.Auto, _v(_STANDBY)] = Field(
        0,
        alias="standby-replicas",
        description="Warm standby pool: replicas started and warmed up beside the serving "
        "ones that wait with no traffic, so that a scale-up lets them out first and capacity "
        "arrives after the ramp alone. `0` has none; `auto` sizes it from how far the load "
        "outran the policy's estimate within one pod start-up, up to `standby-max-replicas`. "
        "Needs the warm-up gate in the pod template; counted on top of `max-replicas`.",
    )
    standby_max_replicas: Annotated[int, _v(_STANDBY_MAX)] = Field(
        DEFAULT_STANDBY_MAX,
        alias="standby-max-replicas",
        description="The most replicas `standby-replicas: auto` keeps in the pool.",
    )

    @_model_validator(mode="after")
    def _check_across_keys(self) -> Annotations:
        problems = tuple(p for check in CROSS_RULES for p in check.check(self))
        if problems:
            raise PydanticCustomError("annotations", "rules across keys", {"problems": problems})
        return self


@dataclass(frozen=True, slots=True)
class _CrossRule:
    summary: str
    """The rule for the reference."""
    check: Callable[[Annotations], list[Problem]]


def _value(key: str, a: Annotations) -> str:
    """The canonical text of a field's value, for a cross-field problem."""
    name = _FIELD_BY_KEY[key]
    raw = getattr(a, name)
    return PARSERS[name].show(raw)


def _bounds(a: Annotations) -> list[Problem]:
    if a.min_replicas <= a.max_replicas:
        return []
    rule = f"must be <= {PREFIX}max-replicas ({a.max_replicas})"
    return [Problem(PREFIX + "min-replicas", _value("min-replicas", a), rule)]


_CAPACITY_TARGETS = (
    "target-qps-per-replica",
    "target-queue-per-replica",
    "target-kv-cache-utilization",
    "target-tokens-per-replica",
)
_TOKEN_TARGETS = (
    "target-kv-cache-utilization",
    "target-tokens-per-replica",
    "target-ttft-p95",
    "target-tpot-p95",
)


def _targets(a: Annotations) -> list[Problem]:
    if any(getattr(a, _FIELD_BY_KEY[key]) is not None for key in _CAPACITY_TARGETS):
        return []
    others = ", ".join(PREFIX + key for key in _CAPACITY_TARGETS[1:])
    rule = f"required unless one of {others} is set"
    return [Problem(PREFIX + "target-qps-per-replica", None, rule)]


def _token_signal_of(key: str, names: metricnames.MetricNames) -> bool:
    return bool(
        {
            "target-kv-cache-utilization": names.kv_cache,
            "target-tokens-per-replica": names.prompt_tokens and names.generation_tokens,
            "target-ttft-p95": names.ttft,
            "target-tpot-p95": names.tpot,
        }[key]
    )


def _prompt_weight(a: Annotations) -> list[Problem]:
    if a.prompt_token_weight is None or a.target_tokens_per_replica is not None:
        return []
    rule = f"has no effect without {PREFIX}target-tokens-per-replica"
    return [Problem(PREFIX + "prompt-token-weight", _value("prompt-token-weight", a), rule)]


def _token_targets(a: Annotations) -> list[Problem]:
    if a.server is Server.CUSTOM:
        rule = "needs a server preset that exports the signal (`server: custom` names none)"
    else:
        rule = f"`server: {a.server.value}` does not export the signal this target reads"
    names = None if a.server is Server.CUSTOM else metricnames.PRESETS[a.server.value]
    return [
        Problem(PREFIX + key, _value(key, a), rule)
        for key in _TOKEN_TARGETS
        if getattr(a, _FIELD_BY_KEY[key]) is not None
        and (names is None or not _token_signal_of(key, names))
    ]


_METRIC_KEYS = ("metric-requests", "metric-queue", "metric-errors", "metric-latency")


def _custom_metrics(a: Annotations) -> list[Problem]:
    given = {key: getattr(a, _FIELD_BY_KEY[key]) for key in _METRIC_KEYS}
    if a.server is not Server.CUSTOM:
        rule = f"only for {PREFIX}server=custom; server {a.server.value} has its own metric names"
        return [Problem(PREFIX + key, value, rule) for key, value in given.items() if value]
    needed: list[tuple[str, str]] = []
    if a.target_qps_per_replica is not None:
        needed.append(("metric-requests", "target-qps-per-replica"))
    if a.target_queue_per_replica is not None:
        needed.append(("metric-queue", "target-queue-per-replica"))
    if a.traffic_router is not TrafficRouter.NONE:
        needed += [("metric-errors", "traffic-router"), ("metric-latency", "traffic-router")]
    return [
        Problem(PREFIX + key, None, f"required with server custom and {PREFIX}{why}")
        for key, why in needed
        if not given[key]
    ]


def _warmup(a: Annotations) -> list[Problem]:
    if a.warmup_port is None or a.warmup_path is not None:
        return []
    rule = f"has no effect without {PREFIX}warmup-path"
    return [Problem(PREFIX + "warmup-port", _value("warmup-port", a), rule)]


def _placement(a: Annotations) -> list[Problem]:
    if a.placement not in (Placement.MIG, Placement.SHARED) or a.model_memory_mib is not None:
        return []
    rule = f"required with placement {a.placement.value}: it decides which GPUs fit the model"
    return [Problem(PREFIX + "model-memory", None, rule)]


_SLO_TARGETS = ("target-p95-latency", "target-p95-queue-delay")


def _slo(a: Annotations) -> list[Problem]:
    targets = [key for key in _SLO_TARGETS if getattr(a, _FIELD_BY_KEY[key]) is not None]
    if len(targets) > 1:
        rule = f"only one of {PREFIX}target-p95-latency, {PREFIX}target-p95-queue-delay"
        return [Problem(PREFIX + key, _value(key, a), rule) for key in targets]
    if targets and a.policy is not PolicyName.DEFAULT:
        rule = f"only with {PREFIX}policy default: seed is the plain formula"
        return [Problem(PREFIX + targets[0], _value(targets[0], a), rule)]
    if a.target_p95_latency_s is not None:
        if a.service_time_s is None:
            rule = f"required with {PREFIX}target-p95-latency: the latency of a request that "
            return [Problem(PREFIX + "service-time", None, rule + "does not wait")]
        if a.service_time_s >= a.target_p95_latency_s:
            rule = f"must be below {PREFIX}target-p95-latency ({a.target_p95_latency_s:g}s)"
            return [Problem(PREFIX + "service-time", _value("service-time", a), rule)]
    problems = []
    if a.service_time_s is not None and a.target_p95_latency_s is None:
        rule = f"has no effect without {PREFIX}target-p95-latency"
        problems.append(Problem(PREFIX + "service-time", _value("service-time", a), rule))
    if a.replica_capacity_rps is not None and not targets and a.target_ttft_p95_s is None:
        rule = (
            f"has no effect without {PREFIX}target-p95-latency, {PREFIX}target-p95-queue-delay "
            f"or {PREFIX}target-ttft-p95"
        )
        problems.append(Problem(PREFIX + "replica-capacity", _value("replica-capacity", a), rule))
    return problems


def _standby(a: Annotations) -> list[Problem]:
    room = a.max_replicas - a.min_replicas
    if isinstance(a.standby_replicas, int):
        problems = []
        if room >= 0 and a.standby_replicas > room:  # a negative room is `_bounds`'s problem
            rule = (
                f"must be <= {PREFIX}max-replicas - {PREFIX}min-replicas ({room}): a scale-up "
                "never lets more pods out of the pool"
            )
            value = _value("standby-replicas", a)
            problems.append(Problem(PREFIX + "standby-replicas", value, rule))
        if "standby_max_replicas" in a.model_fields_set:
            rule = f"has no effect without {PREFIX}standby-replicas auto"
            value = _value("standby-max-replicas", a)
            problems.append(Problem(PREFIX + "standby-max-replicas", value, rule))
        return problems
    return []


def _standby_config(a: Annotations) -> standby.PoolConfig:
    if isinstance(a.standby_replicas, int):
        return standby.PoolConfig(cap=0, fixed=a.standby_replicas)
    room = a.max_replicas - a.min_replicas
    return standby.PoolConfig(cap=max(0, min(a.standby_max_replicas, room)))


def _slo_config(a: Annotations) -> model.SloConfig | None:
    if a.target_p95_latency_s is not None:
        return model.SloConfig(
            target_latency_s=a.target_p95_latency_s,
            service_time_s=a.service_time_s or 0.0,
            replica_capacity_rps=a.replica_capacity_rps,
        )
    if a.target_p95_queue_delay_s is not None:
        return model.SloConfig(
            target_latency_s=a.target_p95_queue_delay_s,
            replica_capacity_rps=a.replica_capacity_rps,
        )
    if a.target_ttft_p95_s is not None and a.policy is PolicyName.DEFAULT:
        # The time to first token is mostly the wait for a place in the batch: the SLO's
        # queueing model sizes it as a queueing delay.
        return model.SloConfig(
            target_latency_s=a.target_ttft_p95_s,
            replica_capacity_rps=a.replica_capacity_rps,
        )
    return None


CROSS_RULES = (
    _CrossRule("`min-replicas` ≤ `max-replicas`.", _bounds),
    _CrossRule(
        "At least one of `target-qps-per-replica`, `target-queue-per-replica`, "
        "`target-kv-cache-utilization`, `target-tokens-per-replica`; with several, the "
        "largest replica count wins.",
        _targets,
    ),
    _CrossRule(
        "`target-kv-cache-utilization`, `target-tokens-per-replica`, `target-ttft-p95` and "
        "`target-tpot-p95` only with a `server` whose preset exports the signal (vLLM: all "
        "four; SGLang: all four; TGI: tokens and TPOT; Triton and `custom`: none).",
        _token_targets,
    ),
    _CrossRule(
        "`prompt-token-weight` only with `target-tokens-per-replica`.",
        _prompt_weight,
    ),
    _CrossRule(
        "`metric-*` keys only with `server: custom`. With `custom`: `metric-requests` when "
        "`target-qps-per-replica` is set, `metric-queue` when `target-queue-per-replica` is "
        "set, `metric-errors` and `metric-latency` when `traffic-router` is not `none`.",
        _custom_metrics,
    ),
    _CrossRule("`warmup-port` only with `warmup-path`.", _warmup),
    _CrossRule("`placement: mig` or `shared` needs `model-memory`.", _placement),
    _CrossRule(
        "At most one of `target-p95-latency`, `target-p95-queue-delay`, and only with `policy: "
        "default`; `target-p95-latency` needs `service-time` below it; `service-time` and "
        "`replica-capacity` only with a latency SLO.",
        _slo,
    ),
    _CrossRule(
        "`standby-replicas` ≤ `max-replicas` - `min-replicas`; `standby-max-replicas` only with "
        "`standby-replicas: auto` (whose pool it caps, and which never exceeds that room either).",
        _standby,
    ),
)


def _parser_of(field_name: str) -> values.Parser[Any]:
    for meta in Annotations.model_fields[field_name].metadata:
        if isinstance(meta, BeforeValidator) and isinstance(meta.func, values.Parser):
            return meta.func
    raise AssertionError(f"field {field_name} has no annotation parser")


def alias_of(field_name: str) -> str:
    alias = Annotations.model_fields[field_name].alias
    assert alias is not None
    return alias


PARSERS: dict[str, values.Parser[Any]] = {
    name: _parser_of(name) for name in Annotations.model_fields
}
_FIELD_BY_KEY: dict[str, str] = {alias_of(name): name for name in Annotations.model_fields}
SETTING_KEYS: tuple[str, ...] = tuple(PREFIX + key for key in _FIELD_BY_KEY)
"""Every key a service owner may set, in the order of the reference table."""
RULES: Mapping[str, str] = {PREFIX + key: PARSERS[name].rule for key, name in _FIELD_BY_KEY.items()}
"""The rule of every setting, by full key, in the words the error messages use."""
ENABLED_KEY = PREFIX + "enabled"


# ---------------------------------------------------------------------------------------------
# Metric names (docs/architecture.md, "Signals"): presets from `metricnames`, the one table the
# adapter queries.


def _metric_names(a: Annotations) -> metricnames.MetricNames:
    """The preset of `server`, or the validated `metric-*` names of a `custom` server."""
    if a.server is not Server.CUSTOM:
        return metricnames.PRESETS[a.server.value]
    return metricnames.MetricNames(
        requests=a.metric_requests,
        queue=a.metric_queue,
        errors=a.metric_errors,
        latency=a.metric_latency,
    )


# ---------------------------------------------------------------------------------------------
# The parsed service


@dataclass(frozen=True, slots=True)
class TrafficConfig:
    """The traffic ramp (docs/architecture.md, "The warm-up gate and the traffic ramp")."""

    router: TrafficRouter
    steps_pct: tuple[int, ...]
    step_interval_s: float
    max_error_rate: float
    max_p95_latency_s: float | None
    max_p95_ratio: float


@dataclass(frozen=True, slots=True)
class WarmupConfig:
    """The warm-up gate (docs/architecture.md, "The warm-up gate and the traffic ramp")."""

    path: str | None
    port: int | None
    requests: int
    deadline_s: float


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    """One Deployment's validated settings, in the shapes the core and the adapters take."""

    enabled: bool
    mode: Mode
    policy_name: PolicyName
    policy: model.PolicyConfig
    window_s: float
    half_life_s: float
    server: Server
    metrics: metricnames.MetricNames
    traffic: TrafficConfig
    warmup: WarmupConfig
    ramp: RampConfig
    """`traffic` and `warmup` as the ramp's state machine takes them, built here so that a
    setting it refuses is an `Invalid` at parse time rather than an error at every tick."""
    placement: Placement
    model_memory_mib: int | None
    project: str
    standby: standby.PoolConfig
    """The warm standby pool: a fixed count (0, none) or sized automatically up to its cap."""
    model: str | None = None
    """The `model` annotation: the model's identity for the node caches (None: from the pod
    template)."""
    model_size_gib: float | None = None


def opted_in(annotations: Mapping[str, str]) -> bool:
    """Whether the Deployment asks to be managed: `enabled` is exactly `"true"`."""
    return annotations.get(ENABLED_KEY) == "true"


def unknown_keys(annotations: Mapping[str, object]) -> list[Problem]:
    """A problem for every key under the prefix that is neither a setting nor the controller's."""
    problems = []
    known = list(_FIELD_BY_KEY)
    for key in annotations:
        if not key.startswith(PREFIX) or key in CONTROLLER_KEYS:
            continue
        short = key[len(PREFIX) :]
        if short in _FIELD_BY_KEY:
            continue
        # Bounded input keeps difflib cheap on hostile keys.
        close = difflib.get_close_matches(short[:100].lower(), known, n=1, cutoff=0.6)
        rule = "unknown key" + (f"; did you mean {PREFIX}{close[0]}?" if close else "")
        problems.append(Problem(key, None, rule))
    return problems


def parse(annotations: Mapping[str, str], *, namespace: str) -> ServiceConfig | Invalid:
    """Validate a Deployment's annotations; every problem is reported, none raises.

    Keys outside the prefix are ignored, as are the controller's own `status` and `state`.
    `namespace` is the default `project`.
    """
    problems = unknown_keys(annotations)
    settings = {
        key[len(PREFIX) :]: value
        for key, value in annotations.items()
        if key.startswith(PREFIX) and key[len(PREFIX) :] in _FIELD_BY_KEY
    }
    try:
        parsed = Annotations.model_validate(settings)
    except ValidationError as e:
        problems += _problems(e, settings)
        return Invalid(tuple(problems))
    if problems:
        return Invalid(tuple(problems))
    return _service(parsed, namespace=namespace)


_RAMP_FIELD_KEYS = {
    "steps_pct": "traffic-steps",
    "step_interval_s": "traffic-step-interval",
    "max_error_rate": "max-error-rate",
    "max_p95_latency_s": "max-p95-latency",
    "max_p95_ratio": "max-p95-ratio",
    "warmup_requests": "warmup-requests",
    "warmup_deadline_s": "warmup-deadline",
}
"""The ramp core's settings that come from an annotation, by the name its errors start with."""


def ramp_config(traffic: TrafficConfig, warmup: WarmupConfig) -> RampConfig:
    """The ramp's core settings from a Deployment's; the rest keep the core's defaults.

    Raises `ValueError` for settings the core refuses (the ranges above should prevent it).
    """
    return RampConfig(
        steps_pct=traffic.steps_pct,
        step_interval_s=traffic.step_interval_s,
        max_error_rate=traffic.max_error_rate,
        max_p95_latency_s=traffic.max_p95_latency_s,
        max_p95_ratio=traffic.max_p95_ratio,
        warmup_probe=warmup.path is not None,
        warmup_requests=warmup.requests,
        warmup_deadline_s=warmup.deadline_s,
        gate_only=traffic.router is TrafficRouter.NONE,
    )


def _problems(error: ValidationError, settings: Mapping[str, str]) -> list[Problem]:
    problems: list[Problem] = []
    for detail in error.errors():
        ctx = detail.get("ctx") or {}
        if detail["type"] == "annotations" and "problems" in ctx:
            problems.extend(ctx["problems"])
            continue
        short = str(detail["loc"][0]) if detail["loc"] else ""
        key = PREFIX + short
        if detail["type"] == "missing":
            rule = PARSERS[_FIELD_BY_KEY[short]].rule
            problems.append(Problem(key, None, f"required; {rule}"))
            continue
        raw = settings.get(short)
        value = raw if isinstance(raw, str) else None
        problems.append(Problem(key, value, str(detail["msg"])))
    return problems


def _service(a: Annotations, *, namespace: str) -> ServiceConfig | Invalid:
    build = policy.default if a.policy is PolicyName.DEFAULT else policy.seed
    paused = a.paused or a.paused_replicas is not None
    config = build(
        pause=model.Pause(replicas=a.paused_replicas) if paused else None,
        max_replicas=a.max_replicas,
        min_replicas=a.min_replicas,
        target_load_per_replica=a.target_qps_per_replica,
        target_queue_per_replica=a.target_queue_per_replica,
        target_gpu_utilization_pct=a.target_gpu_utilization_pct,
        target_kv_cache_ratio=a.target_kv_cache_ratio,
        target_tokens_per_replica=a.target_tokens_per_replica,
        target_ttft_p95_s=a.target_ttft_p95_s,
        target_tpot_p95_s=a.target_tpot_p95_s,
        prompt_token_weight=(
            model.DEFAULT_PROMPT_TOKEN_WEIGHT
            if a.prompt_token_weight is None
            else a.prompt_token_weight
        ),
        deadband_ratio=a.deadband_ratio,
        scale_up_cooldown_s=a.scale_up_cooldown_s,
        scale_down_cooldown_s=a.scale_down_cooldown_s,
        scale_down_max_ratio=a.scale_down_max_ratio,
        slo=_slo_config(a),
    )
    if a.forecast is Forecast.OFF:
        config = dataclasses.replace(config, forecast=None)
    metrics = _metric_names(a)
    traffic = TrafficConfig(
        router=a.traffic_router,
        steps_pct=a.traffic_steps_pct,
        step_interval_s=a.traffic_step_interval_s,
        max_error_rate=a.max_error_rate,
        max_p95_latency_s=a.max_p95_latency_s,
        max_p95_ratio=a.max_p95_ratio,
    )
    warmup = WarmupConfig(
        path=a.warmup_path,
        port=a.warmup_port,
        requests=a.warmup_requests,
        deadline_s=a.warmup_deadline_s,
    )
    try:
        ramp = ramp_config(traffic, warmup)
    except ValueError as e:
        # The ranges above should make this unreachable; if they ever fall short, the service
        # is refused here with the key to fix, not on every tick of the ramp.
        field = str(e).split(" ", 1)[0]
        key = PREFIX + _RAMP_FIELD_KEYS.get(field, "traffic-steps")
        return Invalid((Problem(key, None, f"refused by the traffic ramp: {e}"),))
    return ServiceConfig(
        enabled=a.enabled,
        mode=a.mode,
        policy_name=a.policy,
        policy=config,
        window_s=a.window_s,
        half_life_s=a.half_life_s,
        server=a.server,
        metrics=metrics,
        traffic=traffic,
        warmup=warmup,
        ramp=ramp,
        placement=a.placement,
        model_memory_mib=a.model_memory_mib,
        project=a.project if a.project is not None else namespace,
        model=a.model,
        model_size_gib=a.model_size_gib,
        standby=_standby_config(a),
    )
