"""The controller's own annotations, as text: the last decision (`status`) and the state (`state`).

`status` is for people and `autoscaler explain`: compact JSON with the decision's numbers, its
per-signal votes and RFC 3339 times. `state` is for the next leader: the policy state with
Unix-second timestamps (the production clock is wall time, so they survive a change of
leader), plus the replica count the controller last set, to recognise a `kubectl scale` made
meanwhile. Unknown keys in `state` are ignored, so a newer controller may add some.

Both are read back from a Deployment a tenant can edit: through `untrusted.loads`, so bad text
of any size or shape is a `ValueError` naming the rule it breaks, never another exception.

The readers for people (`explain`, `list`) are here too: `document` gives the JSON object of a
controller annotation or the `Problem` with it, and `annotations_of`, `count`, `finite` and
`readable_time` read the plain parts of a Deployment as every reader does.

Pure functions: no I/O, no clock (times come in as arguments).
"""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Mapping
from typing import Any, Final

from autoscaler import untrusted
from autoscaler.contract import annotations as contract
from autoscaler.core import cache, model

TIME_KEY: Final = "time"
"""The status key that changes on every write; ignored when deciding whether status changed."""

_READINGS: Final = frozenset({TIME_KEY, "contributions", "detail"})
"""The status keys that hold the readings a decision was made on, not the decision (`outcome`)."""

_STATE_FIELDS: Final = {
    "lastScaleUp": "last_scale_up_s",
    "lastScaleChange": "last_scale_change_s",
    "burstUntil": "burst_until_s",
    "pausedSince": "paused_s",
}
_PAUSED_REPLICAS: Final = "pausedReplicas"
"""The `paused-replicas` count already set in the current pause (a whole number)."""


def _number(value: float, digits: int = 4) -> float | None:
    return round(value, digits) if math.isfinite(value) else None


def status_document(decision: model.Decision, *, time_s: float) -> dict[str, Any]:
    """The decision as the `status` annotation's JSON object; `time_s` is Unix seconds."""
    contributions = {
        signal.name.lower(): {
            "ratio": _number(vote.ratio),
            "desired": vote.desired,
            "estimator": vote.estimator,
            "estimate": _number(vote.estimate),
        }
        for signal, vote in decision.contributions.items()
    }
    document: dict[str, Any] = {
        "desired": decision.desired,
        "current": decision.current,
        "kind": decision.kind.value,
        "reason": decision.reason.value,
        "detail": decision.detail,
        "contributions": contributions,
    }
    if decision.bound is not None:
        document["bound"] = decision.bound.value
    if decision.forecast is not None:
        document["forecast"] = {
            "on": decision.forecast.on,
            "load": _number(decision.forecast.load_per_s),
            "why": decision.forecast.why,
        }
    if decision.standby is not None:
        pool = decision.standby
        counts: dict[str, Any] = {"size": pool.size, "replicas": pool.replicas}
        counts["waiting"] = pool.waiting
        if pool.why:
            counts["why"] = pool.why
        document["standby"] = counts
    if decision.cooldown_until_s is not None and math.isfinite(decision.cooldown_until_s):
        document["cooldownUntil"] = format_time(decision.cooldown_until_s)
    document[TIME_KEY] = format_time(time_s)
    return document


def startup_document(found: cache.StartupSplit) -> dict[str, Any]:
    """The observed start-up split by cache hit and miss, for the `status` annotation's
    `startup` key: the median seconds of each (null without a sample) and how many of each."""
    return {
        "hitSeconds": None if found.hit_s is None else _number(found.hit_s, 1),
        "missSeconds": None if found.miss_s is None else _number(found.miss_s, 1),
        "hits": found.hits,
        "misses": found.misses,
    }


def dumps(document: Mapping[str, Any]) -> str:
    """Compact JSON with sorted keys: equal content, equal text."""
    return json.dumps(document, separators=(",", ":"), sort_keys=True, allow_nan=False)


def same_status(text: str | None, document: Mapping[str, Any]) -> bool:
    """Whether the annotation `text` says what `document` says: the same decision (`outcome`),
    whatever the readings it was made on."""
    existing = read_status(text)
    return existing is not None and outcome(existing) == outcome(document)


def outcome(document: Mapping[str, Any]) -> dict[str, Any]:
    """What a status document says an operator acts on: the counts, the kind and reason (a
    steady one without its reason), the bound, the cooldown, the standby pool's counts, whether
    the forecast voted, the placement and the start-up split. Left out are the readings of the
    moment the decision was made on: the time, the votes' estimates and ratios, the words
    quoting them (`detail`, the forecast's and the pool's `why`). The loop publishes on the
    same terms (a new count, kind or unsteady reason), so a status is rewritten only when it
    would read differently, a takeover included."""
    kept = {k: v for k, v in document.items() if k not in _READINGS}
    if kept.get("kind") == model.Kind.STEADY.value:
        kept.pop("reason", None)
    forecast = kept.get("forecast")
    if isinstance(forecast, dict):
        kept["forecast"] = forecast.get("on")
    pool = kept.get("standby")
    if isinstance(pool, dict):
        kept["standby"] = {k: v for k, v in pool.items() if k != "why"}
    return kept


def read_status(text: str | None) -> dict[str, Any] | None:
    """The `status` annotation's JSON object; None when absent or unreadable (it is only ever
    shown to people, so bad text is ignored)."""
    if text is None:
        return None
    try:
        document = untrusted.loads(text, limit_bytes=contract.STATUS_LIMIT_BYTES)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


def state_text(state: model.PolicyState, *, replicas: int | None) -> str:
    """The `state` annotation for `state` and the replica count the controller last set."""
    document: dict[str, Any] = {}
    for key, field in _STATE_FIELDS.items():
        value = getattr(state, field)
        if value is not None and math.isfinite(value):
            document[key] = value
    if state.paused_replicas is not None:
        document[_PAUSED_REPLICAS] = state.paused_replicas
    if replicas is not None:
        document["replicas"] = replicas
    return dumps(document)


def parse_state(text: str) -> tuple[model.PolicyState, int | None]:
    """The policy state and last set replica count in a `state` annotation; ValueError if bad."""
    document = untrusted.loads(text, limit_bytes=contract.STATE_LIMIT_BYTES)
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    fields: dict[str, float | None] = {}
    for key, field in _STATE_FIELDS.items():
        value = document.get(key)
        if value is None:
            fields[field] = None
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{key} must be a number of Unix seconds")
        if not math.isfinite(value):
            raise ValueError(f"{key} must be finite")
        fields[field] = float(value)
    counts: dict[str, int | None] = {}
    for key in ("replicas", _PAUSED_REPLICAS):
        count = document.get(key)
        if count is not None and (
            isinstance(count, bool) or not isinstance(count, int) or count < 0
        ):
            raise ValueError(f"{key} must be a whole number >= 0")
        counts[key] = count
    state = model.PolicyState(
        last_scale_up_s=fields["last_scale_up_s"],
        last_scale_change_s=fields["last_scale_change_s"],
        burst_until_s=fields["burst_until_s"],
        paused_s=fields["paused_s"],
        paused_replicas=counts[_PAUSED_REPLICAS],
    )
    return state, counts["replicas"]


def format_time(unix_s: float) -> str:
    """RFC 3339 with second precision in UTC, as `metav1.Time` serialises."""
    moment = datetime.datetime.fromtimestamp(unix_s, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def readable_time(unix_s: float) -> str | None:
    """`format_time` for a number read from an annotation: None when no date has it."""
    try:
        return format_time(unix_s)
    except (OverflowError, OSError, ValueError):
        return None


def document(key: str, text: str, limit_bytes: int) -> dict[str, Any] | contract.Problem:
    """The JSON object in the controller annotation `key`, or the problem with it (the rule it
    breaks, as the `CorruptState` Event words it)."""
    try:
        found = untrusted.loads(text, limit_bytes=limit_bytes)
    except untrusted.UntrustedJsonError as e:
        return contract.Problem(key, text, e.rule)
    if not isinstance(found, dict):
        return contract.Problem(key, text, "not a JSON object")
    return found


def annotations_of(obj: Mapping[str, Any]) -> dict[str, str]:
    """The string annotations of an object read from a file or a list (anything else dropped)."""
    metadata = obj.get("metadata")
    notes = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    if not isinstance(notes, Mapping):
        return {}
    return {str(k): v for k, v in notes.items() if isinstance(v, str)}


def count(value: object) -> bool:
    """Whether a JSON value is a whole number >= 0 (a boolean is not)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def finite(value: object) -> bool:
    """Whether a JSON value is a finite number (a boolean is not)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
