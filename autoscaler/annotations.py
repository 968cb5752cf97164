"""The per-Deployment annotation contract (docs/annotations.md): one pydantic model, one source of
truth.

A service owner opts in by annotating their inference Deployment under `autoscaler.dsec.io/`.
`parse` turns those annotations into a `ServiceConfig` (the core's `PolicyConfig` plus what the
adapters need) or an `Invalid` listing every `Problem`; the reference table in
docs/annotations.md is generated from the same model (`reference_markdown`,
`python -m autoscaler.annotations`).

Annotation values are untrusted text. Every value is parsed strictly (no float for a count, no
`yes` for `true`), metric names are checked against the Prometheus name grammar before they can
reach a query, and a value only ever appears in a message through `quote`, which escapes control
characters and truncates. This module never logs, never performs I/O (except `main`, the
reference's generator) and never raises on bad input: bad input is data.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import itertools
import math
import re
import sys
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Any, Generic, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic import model_validator as _model_validator
from pydantic_core import PydanticCustomError

from autoscaler import metricnames
from autoscaler.core import model, policy

PREFIX = "autoscaler.dsec.io/"
STATUS_KEY = PREFIX + "status"
"""Written by the controller: the last decision as JSON. Not a setting; `parse` ignores it."""
STATE_KEY = PREFIX + "state"
"""Written by the controller: cooldown timestamps and ramp step. Not a setting; ignored."""
RAMP_KEY = PREFIX + "ramp"
"""Written by the controller: the traffic ramp's step and deadlines, for resuming after a
restart (docs/architecture.md, "The warm-up gate and the traffic ramp"). Not a setting; ignored."""
CONTROLLER_KEYS = frozenset({STATUS_KEY, STATE_KEY, RAMP_KEY})
WARM_GATE = PREFIX + "warm"
"""The readiness gate (`spec.template.spec.readinessGates[].conditionType`) behind which a
gated service's new pods wait until the controller has warmed them up."""
WARMING_LABEL = PREFIX + "warming"
"""The pod label (value `"true"`) a gated service's new pods start with: the ramp's warming set.
Never in a selector: the controller removes it from each pod it promotes."""
STABLE_LABEL = PREFIX + "stable"
"""The pod label the controller puts on promoted pods: the ramp's stable set."""
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

QUOTE_LIMIT = 80
"""Characters of an offending value shown in a message (after escaping)."""

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


class Placement(enum.Enum):
    AUTO = "auto"
    WHOLE = "whole"
    MIG = "mig"
    SHARED = "shared"


# ---------------------------------------------------------------------------------------------
# Quoting: the only way an annotation value (or key) reaches a message.

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_PLAIN_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,252}")


def _escape_char(ch: str) -> str:
    if ch in _ESCAPES:
        return _ESCAPES[ch]
    if ch.isprintable():
        return ch
    # Control, format (bidi overrides), separator and unassigned characters never pass raw.
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _escaped(text: str, limit: int) -> tuple[str, bool]:
    """`text` escaped and cut to `limit` characters, never inside an escape; and whether cut."""
    pieces: list[str] = []
    used = 0
    for ch in text:
        piece = _escape_char(ch)
        if used + len(piece) > limit:
            return "".join(pieces), True
        pieces.append(piece)
        used += len(piece)
    return "".join(pieces), False


def escape(text: str, *, limit: int = QUOTE_LIMIT) -> str:
    """`text` with control characters, quotes and backslashes escaped, cut after `limit`.

    A cut text ends in `...` and says how long the original was, so a 10 kB value costs a log
    line about 100 characters.
    """
    shown, cut = _escaped(text, limit)
    return f"{shown}... ({len(text)} characters)" if cut else shown


def quote(value: str, *, limit: int = QUOTE_LIMIT) -> str:
    """`value` escaped (see `escape`) in double quotes: how a value appears in a message."""
    shown, cut = _escaped(value, limit)
    return f'"{shown}..." ({len(value)} characters)' if cut else f'"{shown}"'


def show_key(key: str) -> str:
    """An annotation key for a message: as is when it is plain, else quoted."""
    return key if _PLAIN_KEY.fullmatch(key) else quote(key)


# ---------------------------------------------------------------------------------------------
# Problems


@dataclass(frozen=True, slots=True, repr=False)
class Problem:
    """One thing wrong with a Deployment's annotations: which key, which value, which rule.

    `key` and `value` are the raw text; only `message` (and `str`) is fit for logs and Events.
    """

    key: str
    value: str | None
    rule: str

    @property
    def message(self) -> str:
        if self.value is None:
            return f"{show_key(self.key)}: {self.rule}"
        return f"{show_key(self.key)}={quote(self.value)}: {self.rule}"

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"Problem({self.message!r})"


@dataclass(frozen=True, slots=True)
class Invalid:
    """The annotations cannot be used: the service is skipped with an `InvalidConfig` Event."""

    problems: tuple[Problem, ...]

    def __str__(self) -> str:
        return "; ".join(p.message for p in self.problems)


# ---------------------------------------------------------------------------------------------
# Value parsers. Each has the rule in plain words; the same text goes into error messages and
# into the reference table, so the two cannot drift apart.

_NUMBER = r"[0-9]{1,12}(?:\.[0-9]{1,12})?"
# [0-9], never \d: \d matches other scripts' digits, which int() and Decimal() accept.
_DECIMAL = re.compile(_NUMBER)
_WHOLE = re.compile(r"[0-9]{1,9}")
_DURATION = re.compile(
    rf"(?:(?P<h>{_NUMBER})h)?(?:(?P<m>{_NUMBER})m(?!s))?(?:(?P<s>{_NUMBER})s)?(?:(?P<ms>{_NUMBER})ms)?"
)
_DURATION_UNITS_S = {"h": Decimal(3600), "m": Decimal(60), "s": Decimal(1), "ms": Decimal("0.001")}
_QUANTITY = re.compile(rf"(?P<number>{_NUMBER})(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?")
_QUANTITY_BYTES = {
    None: 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_MIB = 2**20
METRIC_NAME = metricnames.METRIC_NAME
_METRIC_NAME_MAX = 200
_LABEL_VALUE = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_STEPS = re.compile(r"[0-9]{1,3}(?: *, *[0-9]{1,3}){0,99}")
_PATH_CHARS = re.compile(r"/(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/]|%[0-9A-Fa-f]{2})*")
_PATH_MAX = 1024
_MAX_TEXT = 64
"""Longest value any numeric parser looks at; longer text is rejected before any regex."""


def _fail(rule: str) -> PydanticCustomError:
    return PydanticCustomError("annotation", rule)


def _text(raw: object, rule: str, *, limit: int = _MAX_TEXT) -> str:
    if not isinstance(raw, str) or len(raw) > limit:
        raise _fail(rule)
    return raw


def format_duration(seconds: float) -> str:
    """Go-style text for a duration: `30s`, `5m`, `1h30m`, `250ms`, `1m0.5s`."""
    ms = round(seconds * 1000)
    if not math.isclose(ms / 1000, seconds, rel_tol=0, abs_tol=1e-9):
        return f"{Decimal(repr(seconds)).normalize():f}s"
    if ms == 0:
        return "0s"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    out = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "")
    if rest and not out and rest < 1000:
        return f"{rest}ms"
    if rest:
        out += f"{(Decimal(rest) / 1000).normalize():f}s"
    return out


def parse_duration(text: str) -> float | None:
    """Seconds for `30s`, `5m`, `1h30m`, `250ms`, `1.5h` or a plain number of seconds; else None.

    Units run from hours down to milliseconds, each at most once (Go accepts `5m5m`; a typo
    more likely than a wish). Days are not a unit, as in Go.
    """
    if len(text) > _MAX_TEXT:
        return None
    if _DECIMAL.fullmatch(text):
        return float(Decimal(text))
    match = _DURATION.fullmatch(text)
    if match is None or not any(match.groupdict().values()):
        return None
    total = sum(
        (Decimal(v) * _DURATION_UNITS_S[unit] for unit, v in match.groupdict().items() if v),
        Decimal(0),
    )
    return float(total)


def format_quantity(mib: int) -> str:
    """Kubernetes quantity text for a size in MiB: `12Gi`, `1Ti`, `1500Mi`."""
    for suffix, size in (("Ti", 2**20), ("Gi", 2**10)):
        if mib % size == 0:
            return f"{mib // size}{suffix}"
    return f"{mib}Mi"


def parse_quantity_bytes(text: str) -> int | None:
    """Bytes (rounded up) in a Kubernetes memory quantity like `12Gi`, `24000Mi`, `16G`; else None.

    Plain numbers are bytes, as in Kubernetes. Exponent forms (`12e9`) and milli (`m`) are not
    accepted: neither is a sensible way to write a model's memory.
    """
    if len(text) > _MAX_TEXT:
        return None
    match = _QUANTITY.fullmatch(text)
    if match is None:
        return None
    return math.ceil(Decimal(match["number"]) * _QUANTITY_BYTES[match["suffix"]])


def parse_quantity_mib(text: str) -> int | None:
    """MiB (rounded up) in a Kubernetes memory quantity; None when it is not one."""
    size = parse_quantity_bytes(text)
    return None if size is None else -(-size // _MIB)


@dataclass(frozen=True, slots=True)
class _Parser(Generic[T]):
    """Turns one annotation value (a string) into a typed value, or raises with `rule`."""

    rule: str
    convert: Callable[[str], T | None]
    """Returns None for text that breaks the rule."""
    show: Callable[[T], str]
    """The canonical annotation text of a value, for defaults in the reference."""
    limit: int = _MAX_TEXT

    def __call__(self, raw: object) -> T:
        value = self.convert(_text(raw, self.rule, limit=self.limit))
        if value is None:
            raise _fail(self.rule)
        return value


def _flag() -> _Parser[bool]:
    table = {"true": True, "false": False}
    return _Parser('must be "true" or "false"', table.get, lambda v: "true" if v else "false")


def _choice(choices: type[enum.Enum]) -> _Parser[Any]:
    table = {member.value: member for member in choices}
    names = ", ".join(table)
    return _Parser(f"must be one of: {names}", table.get, lambda v: str(v.value))


def _whole(lo: int, hi: int, *, why: str = "") -> _Parser[int]:
    def convert(text: str) -> int | None:
        if not _WHOLE.fullmatch(text):
            return None
        value = int(text)
        return value if lo <= value <= hi else None

    rule = f"must be a whole number from {lo} to {hi}" + (f" ({why})" if why else "")
    return _Parser(rule, convert, str)


def _number(
    lo: float,
    hi: float | None,
    *,
    lo_open: bool = False,
    hi_open: bool = False,
    percent: bool = False,
) -> _Parser[float]:
    def convert(text: str) -> float | None:
        if percent and text.endswith("%"):
            text = text[:-1]
        if not _DECIMAL.fullmatch(text):
            return None
        value = float(Decimal(text))
        above = value > lo if lo_open else value >= lo
        below = hi is None or (value < hi if hi_open else value <= hi)
        return value if above and below else None

    low = f"> {lo:g}" if lo_open else f">= {lo:g}"
    if hi is None:
        bounds = low
    elif not lo_open and not hi_open:
        bounds = f"from {lo:g} to {hi:g}"
    else:
        bounds = f"{low} and {'<' if hi_open else '<='} {hi:g}"
    kind = "a number of percent" if percent else "a decimal number"
    return _Parser(f"must be {kind} {bounds}", convert, lambda v: f"{v:g}")


def _duration(lo_s: float, hi_s: float, *, zero: bool = False) -> _Parser[float]:
    def convert(text: str) -> float | None:
        seconds = parse_duration(text)
        if seconds is None:
            return None
        if seconds == 0:
            return 0.0 if zero else None
        return seconds if lo_s <= seconds <= hi_s else None

    lo = "0s" if zero else format_duration(lo_s)
    rule = (
        "must be a duration such as 30s, 5m, 1h30m or 250ms (or plain seconds), "
        f"from {lo} to {format_duration(hi_s)}"
    )
    return _Parser(rule, convert, format_duration)


def _quantity(lo_mib: int, hi_mib: int) -> _Parser[int]:
    def convert(text: str) -> int | None:
        # Bounds on bytes, not rounded MiB: `12000` (bytes, meant as MiB) must not pass as 1Mi.
        size = parse_quantity_bytes(text)
        if size is None or not lo_mib * _MIB <= size <= hi_mib * _MIB:
            return None
        return -(-size // _MIB)

    rule = (
        "must be a Kubernetes memory quantity such as 12Gi or 24000Mi, "
        f"from {format_quantity(lo_mib)} to {format_quantity(hi_mib)}"
    )
    return _Parser(rule, convert, format_quantity)


def _metric_name() -> _Parser[str]:
    def convert(text: str) -> str | None:
        return text if metricnames.is_metric_name(text) else None

    reserved = ", ".join(sorted(metricnames.RESERVED_WORDS))
    rule = (
        "must be a Prometheus metric name: a letter, _ or : followed by letters, digits, _ or :, "
        f"at most {_METRIC_NAME_MAX} characters (a name, not a query), and not a word PromQL "
        f"reserves ({reserved}; in any case)"
    )
    return _Parser(rule, convert, str, limit=_METRIC_NAME_MAX)


def _label_value() -> _Parser[str]:
    def convert(text: str) -> str | None:
        return text if _LABEL_VALUE.fullmatch(text) else None

    rule = (
        "must be a Kubernetes label value: 1 to 63 letters, digits, -, _ or ., "
        "starting and ending with a letter or digit"
    )
    return _Parser(rule, convert, str)


def _steps() -> _Parser[tuple[int, ...]]:
    def convert(text: str) -> tuple[int, ...] | None:
        if not _STEPS.fullmatch(text):
            return None
        steps = tuple(int(part) for part in text.split(","))
        increasing = all(a < b for a, b in itertools.pairwise(steps))
        if not increasing or steps[0] < 1 or steps[-1] != 100:
            return None
        return steps

    rule = (
        "must be percentages like 10,30,50,100: whole numbers from 1, strictly increasing, "
        "ending at 100"
    )
    return _Parser(rule, convert, lambda v: ",".join(map(str, v)), limit=400)


def _url_path() -> _Parser[str]:
    def convert(text: str) -> str | None:
        if not _PATH_CHARS.fullmatch(text) or text.startswith("//"):
            return None
        decoded = urllib.parse.unquote(text)
        if any(not ch.isprintable() or ch in "\\?#" for ch in decoded):
            return None
        if any(segment in (".", "..") for segment in decoded.split("/")):
            return None
        return text

    rule = (
        "must be an absolute URL path such as /health: starting with a single /, at most "
        f"{_PATH_MAX} characters of letters, digits, -._~!$&'()*+,;=:@/ or %XX escapes; "
        "no scheme, host, query, fragment, . or .. segment, or control character"
    )
    return _Parser(rule, convert, str, limit=_PATH_MAX)


# Bounds. Each says what is absurd for that setting, not what is merely unusual.
_MAX_REPLICAS = 10_000
_DAY_S = 86_400.0
_HOUR_S = 3_600.0
_MAX_MODEL_MIB = 4 * 2**20  # 4Ti: beyond any node's total GPU memory today.

_FLAG = _flag()
_MODE = _choice(Mode)
_SERVER = _choice(Server)
_POLICY = _choice(PolicyName)
_ROUTER = _choice(TrafficRouter)
_FORECAST = _choice(Forecast)
_PLACEMENT = _choice(Placement)
# Scale to zero needs a wake-up signal that does not come from the service's own pods.
_MIN_REPLICAS = _whole(
    1,
    _MAX_REPLICAS,
    why="not 0: a service at 0 replicas has no pods, so no metrics, and would hold there "
    "on missing data forever",
)
_MAX_REPLICAS_P = _whole(1, _MAX_REPLICAS)
# Any count, as KEDA's `paused-replicas`: an incident may need 0 (free the GPUs) or more than
# max-replicas; the service is paused there, so the bounds that the policy keeps do not apply.
_PAUSED_REPLICAS = _whole(0, _MAX_REPLICAS)
_TARGET = _number(0, None, lo_open=True)
_GPU_PCT = _number(0, 100, lo_open=True, percent=True)
_METRIC = _metric_name()
_WINDOW = _duration(10.0, _HOUR_S)
_HALF_LIFE = _duration(1.0, _HOUR_S)
_DEADBAND = _number(0, 1, hi_open=True)
_COOLDOWN = _duration(0.0, _DAY_S, zero=True)
_DOWN_RATIO = _number(0, 1, lo_open=True)
_STEPS_P = _steps()
_STEP_INTERVAL = _duration(1.0, _HOUR_S)
_ERROR_RATE = _number(0, 1)
_P95 = _duration(0.001, _HOUR_S)
_P95_RATIO = _number(1, 100)
_PATH = _url_path()
_PORT = _whole(1, 65_535)
_WARMUP_REQUESTS = _whole(1, 1_000)
_DEADLINE = _duration(10.0, 6 * _HOUR_S)
_MEMORY = _quantity(1, _MAX_MODEL_MIB)
_PROJECT = _label_value()


def _v(parser: _Parser[Any]) -> BeforeValidator:
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
        description="Capacity guard, percent (DCGM GPU utilisation): above it, no scale-down; "
        "it never scales up on its own.",
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

    @_model_validator(mode="after")
    def _check_across_keys(self) -> Annotations:
        problems = tuple(p for check in _CROSS_RULES for p in check.check(self))
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
    return _PARSERS[name].show(raw)


def _bounds(a: Annotations) -> list[Problem]:
    if a.min_replicas <= a.max_replicas:
        return []
    rule = f"must be <= {PREFIX}max-replicas ({a.max_replicas})"
    return [Problem(PREFIX + "min-replicas", _value("min-replicas", a), rule)]


def _targets(a: Annotations) -> list[Problem]:
    if a.target_qps_per_replica is not None or a.target_queue_per_replica is not None:
        return []
    rule = f"required unless {PREFIX}target-queue-per-replica is set"
    return [Problem(PREFIX + "target-qps-per-replica", None, rule)]


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


_CROSS_RULES = (
    _CrossRule("`min-replicas` ≤ `max-replicas`.", _bounds),
    _CrossRule(
        "At least one of `target-qps-per-replica`, `target-queue-per-replica`; with both, the "
        "larger replica count wins.",
        _targets,
    ),
    _CrossRule(
        "`metric-*` keys only with `server: custom`. With `custom`: `metric-requests` when "
        "`target-qps-per-replica` is set, `metric-queue` when `target-queue-per-replica` is "
        "set, `metric-errors` and `metric-latency` when `traffic-router` is not `none`.",
        _custom_metrics,
    ),
    _CrossRule("`warmup-port` only with `warmup-path`.", _warmup),
    _CrossRule("`placement: mig` or `shared` needs `model-memory`.", _placement),
)


def _parser_of(field_name: str) -> _Parser[Any]:
    for meta in Annotations.model_fields[field_name].metadata:
        if isinstance(meta, BeforeValidator) and isinstance(meta.func, _Parser):
            return meta.func
    raise AssertionError(f"field {field_name} has no annotation parser")


def _alias_of(field_name: str) -> str:
    alias = Annotations.model_fields[field_name].alias
    assert alias is not None
    return alias


_PARSERS: dict[str, _Parser[Any]] = {name: _parser_of(name) for name in Annotations.model_fields}
_FIELD_BY_KEY: dict[str, str] = {_alias_of(name): name for name in Annotations.model_fields}
SETTING_KEYS: tuple[str, ...] = tuple(PREFIX + key for key in _FIELD_BY_KEY)
"""Every key a service owner may set, in the order of the reference table."""
RULES: Mapping[str, str] = {
    PREFIX + key: _PARSERS[name].rule for key, name in _FIELD_BY_KEY.items()
}
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
    placement: Placement
    model_memory_mib: int | None
    project: str


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
            rule = _PARSERS[_FIELD_BY_KEY[short]].rule
            problems.append(Problem(key, None, f"required; {rule}"))
            continue
        raw = settings.get(short)
        value = raw if isinstance(raw, str) else None
        problems.append(Problem(key, value, str(detail["msg"])))
    return problems


def _service(a: Annotations, *, namespace: str) -> ServiceConfig:
    build = policy.default if a.policy is PolicyName.DEFAULT else policy.seed
    paused = a.paused or a.paused_replicas is not None
    config = build(
        pause=model.Pause(replicas=a.paused_replicas) if paused else None,
        max_replicas=a.max_replicas,
        min_replicas=a.min_replicas,
        target_load_per_replica=a.target_qps_per_replica,
        target_queue_per_replica=a.target_queue_per_replica,
        target_gpu_utilization_pct=a.target_gpu_utilization_pct,
        deadband_ratio=a.deadband_ratio,
        scale_up_cooldown_s=a.scale_up_cooldown_s,
        scale_down_cooldown_s=a.scale_down_cooldown_s,
        scale_down_max_ratio=a.scale_down_max_ratio,
    )
    if a.forecast is Forecast.OFF:
        config = dataclasses.replace(config, forecast=None)
    metrics = _metric_names(a)
    return ServiceConfig(
        enabled=a.enabled,
        mode=a.mode,
        policy_name=a.policy,
        policy=config,
        window_s=a.window_s,
        half_life_s=a.half_life_s,
        server=a.server,
        metrics=metrics,
        traffic=TrafficConfig(
            router=a.traffic_router,
            steps_pct=a.traffic_steps_pct,
            step_interval_s=a.traffic_step_interval_s,
            max_error_rate=a.max_error_rate,
            max_p95_latency_s=a.max_p95_latency_s,
            max_p95_ratio=a.max_p95_ratio,
        ),
        warmup=WarmupConfig(
            path=a.warmup_path,
            port=a.warmup_port,
            requests=a.warmup_requests,
            deadline_s=a.warmup_deadline_s,
        ),
        placement=a.placement,
        model_memory_mib=a.model_memory_mib,
        project=a.project if a.project is not None else namespace,
    )


# ---------------------------------------------------------------------------------------------
# The reference in docs/annotations.md


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default_text(name: str) -> str:
    info = Annotations.model_fields[name]
    if info.is_required():
        return "required"
    if name == "project":
        return "the namespace"
    if info.default is None:
        return "—"
    return f"`{_PARSERS[name].show(info.default)}`"


def _names_text(*names: str | None, label: str | None = None, values: Sequence[str] = ()) -> str:
    shown = [f"`{name}`" for name in names if name is not None]
    if label is not None and len(shown) == 1:
        alternatives = "|".join(values)
        shown = [f'`{names[0]}{{{label}=~"{alternatives}"}}`']
    return " + ".join(shown) if shown else "—"


def reference_markdown() -> str:
    """The annotation reference (docs/annotations.md), from `Annotations` and the presets."""
    lines = [
        f"All keys take the prefix `{PREFIX}`; values are strings (quote numbers and booleans "
        "in YAML). An invalid value skips the service with a Warning Event `InvalidConfig` "
        "that names the key, the value and the rule. Check manifests offline with "
        "`autoscaler validate -f deploy.yaml`.",
        "",
        "| key | meaning | default | rule |",
        "|---|---|---|---|",
    ]
    for name, info in Annotations.model_fields.items():
        key = f"`{_alias_of(name)}`"
        meaning = info.description or ""
        rule = _PARSERS[name].rule
        lines.append(f"| {key} | {_cell(meaning)} | {_cell(_default_text(name))} | {_cell(rule)} |")
    lines += ["", "Rules across keys:", ""]
    lines += [f"- {rule.summary}" for rule in _CROSS_RULES]
    lines += [
        "",
        "Metric presets (`server`), checked against each server's metric sources:",
        "",
        "| server | requests (counter) | errors (counter) | queue (gauge) | latency |",
        "|---|---|---|---|---|",
    ]
    for server, names in metricnames.PRESETS.items():
        latency = "—" if names.latency is None else f"`{names.latency}` (histogram, s)"
        row = (
            server,
            _names_text(names.requests),
            _names_text(names.errors, label=names.error_label, values=names.error_values),
            _names_text(names.queue),
            latency,
        )
        lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    lines += [
        "",
        f"The controller writes `{STATUS_KEY}` (its last decision, JSON), `{STATE_KEY}` "
        f"(cooldowns, for restarts) and `{RAMP_KEY}` (the traffic ramp's progress); they are "
        f"not settings. When `{STATE_KEY}` or `{RAMP_KEY}` cannot be read (over its size "
        "limit, nested deeper than 8, or a number no float holds), a Warning Event "
        f"`{CORRUPT_STATE}` names the key, the value and the rule, and the state is rebuilt as "
        "for a new service.",
        "",
        "A Deployment has one owner of `spec.replicas`: one that a HorizontalPodAutoscaler or a "
        "KEDA ScaledObject also scales (its `scaleTargetRef` names it) is not managed, whatever "
        "its annotations; the controller writes nothing to it and posts a Warning Event "
        "`InvalidConfig` naming the other autoscaler.",
        "",
        f'While `{PREFIX}paused` is `"true"` or `{PREFIX}paused-replicas` is set, each decision '
        "is a hold with the reason `paused` (in the status annotation, `autoscaler explain`, a "
        "`ScaleHeld` Event and the logs), and the gauge `autoscaler_paused` is 1; the one "
        "exception is the change to `paused-replicas`, made once. The warm-up gate, the traffic "
        "ramp and a scale-down already draining its victims go on: pods already created finish "
        "their ramp rather than stay at 0 % of the traffic.",
    ]
    return "\n".join(lines) + "\n"


def replace_section(document: str, section: str) -> str | None:
    """`document` with the text between the reference markers replaced; None without markers."""
    begin, end = document.find(REFERENCE_BEGIN), document.find(REFERENCE_END)
    if begin < 0 or end < begin:
        return None
    head = document[: begin + len(REFERENCE_BEGIN)]
    return head + "\n" + section + document[end:]


def section_of(document: str) -> str | None:
    """The text between the reference markers, without the newline after the first; None without."""
    begin, end = document.find(REFERENCE_BEGIN), document.find(REFERENCE_END)
    if begin < 0 or end < begin:
        return None
    return document[begin + len(REFERENCE_BEGIN) : end].removeprefix("\n")


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m autoscaler.annotations [--update FILE]`: print the reference, or splice it
    into FILE (docs/annotations.md) between the markers."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        sys.stdout.write(reference_markdown())
        return 0
    if len(args) != 2 or args[0] != "--update":
        sys.stderr.write("usage: python -m autoscaler.annotations [--update docs/annotations.md]\n")
        return 2
    path = args[1]
    with open(path, encoding="utf-8") as f:
        document = f.read()
    updated = replace_section(document, reference_markdown())
    if updated is None:
        sys.stderr.write(f"{path}: add the lines {REFERENCE_BEGIN} and {REFERENCE_END} first\n")
        return 2
    with open(path, "w", encoding="utf-8") as f:
        f.write(updated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
