"""The ramp state as text on the Deployment: `dumps` writes it, `loads` reads it back.

`loads` reads text a tenant can edit: through `untrusted.loads`, so any bad text is a
`ValueError` naming the problem.

Pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from autoscaler import untrusted
from autoscaler.core.ramp.state import Drain, Phase, RampState, Stage, Victim

VERSION = 1
"""The version of the persisted state's layout; `loads` refuses any other."""
LIMIT_BYTES = 256 * 1024
"""Longest text `loads` reads: what Kubernetes allows for all of an object's annotations
together. A ramp of thousands of pods writes tens of kB, so no tighter bound is safe."""

_DEFAULTS = RampState()
_DRAIN_FIELDS = ("replicas", "victims", "started_s", "scaled_s")


def dumps(state: RampState) -> str:
    """The state as compact JSON with a version field; fields at their default are left out.

    `probe_after` stays in memory: it changes with every probe, and a restarted controller
    that probes a warming pod a little early loses nothing. So does `asked_s`: it changes with
    every health request, and a restarted controller has lost the answer it awaited. So does
    `released`: it lasts until the caches show a write, and a new leader reads its pods afresh.
    """
    doc: dict[str, Any] = {"v": VERSION, "phase": state.phase.value}
    for name in _PERSISTED:
        value = getattr(state, name)
        if value != getattr(_DEFAULTS, name):
            doc[name] = _encode(value)
    return json.dumps(doc, separators=(",", ":"), sort_keys=True, allow_nan=False)


def _encode(value: object) -> object:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Drain):
        return {
            "replicas": value.replicas,
            "victims": [[v.name, v.warm, v.stable] for v in value.victims],
            "started_s": value.started_s,
            "scaled_s": value.scaled_s,
        }
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


def loads(text: str) -> RampState:
    """The state `dumps` wrote; `ValueError` naming the problem for anything else."""
    try:
        doc = untrusted.loads(text, limit_bytes=LIMIT_BYTES)
    except untrusted.UntrustedJsonError as e:
        raise ValueError(f"ramp state {e.rule}") from None
    if not isinstance(doc, dict):
        raise ValueError("ramp state is not a JSON object")
    unknown = sorted(set(doc) - {"v", *_PERSISTED})
    if unknown:
        raise ValueError(f"ramp state has unknown fields: {untrusted.excerpt(', '.join(unknown))}")
    if doc.get("v") != VERSION or isinstance(doc.get("v"), bool):
        raise ValueError(f"ramp state version {untrusted.excerpt(doc.get('v'))} is not {VERSION}")
    values = {name: read(doc[name], name) for name, read in _PERSISTED.items() if name in doc}
    values["phase"] = _phase(doc.get("phase"), "phase")
    state = dataclasses.replace(_DEFAULTS, **values)
    if state.weight_pct > 100:
        raise ValueError(f"ramp state weight_pct {state.weight_pct} is above 100")
    if (state.phase is Phase.PROMOTING) != (state.stage is not None):
        raise ValueError("ramp state has a promotion stage exactly when promoting")
    return state


def _phase(value: object, name: str) -> Phase:
    member: Phase = _member(Phase, value, name)
    return member


def _stage(value: object, name: str) -> Stage | None:
    if value is None:
        return None
    member: Stage = _member(Stage, value, name)
    return member


def _member(kind: type[enum.Enum], value: object, name: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        raise ValueError(
            f"ramp state {name} {untrusted.excerpt(value)} is not one of the known values"
        ) from None


def _drain(value: object, name: str) -> Drain | None:
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != set(_DRAIN_FIELDS):
        raise ValueError("ramp state drain must have replicas, victims, started_s and scaled_s")
    victims_doc = value["victims"]
    if not isinstance(victims_doc, list):
        raise ValueError("ramp state drain victims must be a list")
    victims = []
    for item in victims_doc:
        if (
            not isinstance(item, list)
            or len(item) != 3
            or not isinstance(item[0], str)
            or not isinstance(item[1], bool)
            or not isinstance(item[2], bool)
        ):
            raise ValueError("ramp state drain victim must be [name, warm, stable]")
        victims.append(Victim(item[0], warm=item[1], stable=item[2]))
    return Drain(
        replicas=_count(value["replicas"], f"{name}.replicas"),
        victims=tuple(victims),
        started_s=_time(value["started_s"], f"{name}.started_s"),
        scaled_s=_time(value["scaled_s"], f"{name}.scaled_s"),
    )


def _count(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            f"ramp state {name} must be a whole number >= 0, not {untrusted.excerpt(value)}"
        )
    return value


def _time(value: object, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(
            f"ramp state {name} must be a finite number, not {untrusted.excerpt(value)}"
        )
    return float(value)


def _times(value: object, name: str) -> dict[str, float]:
    if not isinstance(value, dict):
        raise ValueError(f"ramp state {name} must be an object of times")
    out = {}
    for key, item in value.items():
        when = _time(item, f"{name}.{key}")
        if when is None:
            raise ValueError(f"ramp state {name}.{key} must be a finite number")
        out[key] = when
    return out


def _names(value: object, name: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"ramp state {name} must be a list of pod names")
    return tuple(value)


def _text(value: object, name: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"ramp state {name} must be text")
    return value


_PERSISTED: Mapping[str, Callable[[object, str], Any]] = {
    "phase": _phase,  # always written, and read even when missing
    "cohort": _names,
    "step": _count,
    "step_started_s": _time,
    "settle_since_s": _time,
    "stage": _stage,
    "weight_pct": _count,
    "checks": _count,
    "deadlines": _times,
    "passed": _names,
    "joined": _names,
    "failures": _count,
    "hold_reason": _text,
    "held_config": _text,
    "drain": _drain,
    "standby": _count,
    "pool": _names,
}
"""Each persisted field of `RampState` and how `loads` reads it; `dumps` writes these alone
(all but `probe_after`, `asked_s` and `released`)."""
