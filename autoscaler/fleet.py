"""`autoscaler list`: one line per managed Deployment, like `kubectl get hpa`, for SREs.

Reads the Deployments the CLI listed (through `app`) and what the controller wrote on them: the
`status` annotation (desired and current replicas, the last decision's kind and reason), the
`state` annotation (when it last scaled) and the `ramp` annotation (the traffic ramp's phase and
weight), plus the tier Deployments the placement ladder made (their tier label and controlling
owner). A row per Deployment that opts in; the tier siblings are folded into their owner's row.

Annotations are text anyone allowed to edit the Deployment can write: the controller's are read
through `codec.document` (and the ramp's codec), only typed values reach the output (a kind or
reason must be one the controller knows, a count a whole number), and a value that cannot be
read shows as `?`, with the key and the rule it breaks in `problems` (`-o wide`, `-o json`),
never a traceback. Owners' names come from the API server, which admits DNS names only.

`rows` and the renderers are pure: the time is an argument, and there is no cluster access here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TextIO

from autoscaler import untrusted
from autoscaler.contract import annotations as contract
from autoscaler.contract import codec
from autoscaler.core import model, ramp

TIER_LABEL: Final = contract.PREFIX + "tier"
"""The label the placement ladder puts on the tier Deployments it creates (`mig-<profile>`,
`shared`); the owner's Deployment is the `whole` tier."""
WHOLE: Final = "whole"
UNKNOWN: Final = "?"
NONE: Final = "-"

_KINDS: Final = frozenset(kind.value for kind in model.Kind)
_REASONS: Final = frozenset(reason.value for reason in model.Reason)


@dataclass(frozen=True, slots=True)
class Row:
    """One managed Deployment. None is "not known yet"; a value that could not be read is None
    too, with a problem naming it."""

    namespace: str
    name: str
    desired: int | None = None
    current: int | None = None
    serving: int | None = None
    kind: str | None = None
    reason: str | None = None
    decided_at: str | None = None
    last_scale_s: float | None = None
    ramp_phase: str | None = None
    ramp_weight_pct: int | None = None
    tiers: Mapping[str, int] = field(default_factory=dict)
    mode: str | None = None
    policy: str | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None
    targets: Mapping[str, float] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    corrupt: frozenset[str] = frozenset()
    """The controller annotations (`status`, `state`, `ramp`) that could not be read."""


def rows(deployments: Iterable[Mapping[str, Any]]) -> list[Row]:
    """A row per Deployment that opts in, sorted by namespace and name."""
    listed = [d for d in deployments if isinstance(d, Mapping)]
    siblings: dict[str, dict[str, Mapping[str, Any]]] = {}
    for deployment in listed:
        tier = _labels(deployment).get(TIER_LABEL)
        owner = _controller_uid(deployment)
        if isinstance(tier, str) and tier != WHOLE and owner is not None:
            siblings.setdefault(owner, {})[tier] = deployment
    found = [
        _row(d, siblings.get(str(_meta(d).get("uid")), {}))
        for d in listed
        if contract.opted_in(codec.annotations_of(d))
    ]
    return sorted(found, key=lambda row: (row.namespace, row.name))


def _row(deployment: Mapping[str, Any], siblings: Mapping[str, Mapping[str, Any]]) -> Row:
    metadata = _meta(deployment)
    namespace, name = str(metadata.get("namespace", "")), str(metadata.get("name", ""))
    notes = codec.annotations_of(deployment)
    problems: list[str] = []
    corrupt: set[str] = set()
    values: dict[str, Any] = {}

    config = contract.parse(notes, namespace=namespace)
    if isinstance(config, contract.Invalid):
        problems += [problem.message for problem in config.problems]
    else:
        policy = config.policy
        values.update(
            mode=config.mode.value,
            policy=config.policy_name.value,
            min_replicas=policy.min_replicas,
            max_replicas=policy.max_replicas,
            targets=_targets(policy),
        )

    status_text = notes.get(contract.STATUS_KEY)
    if status_text is not None:
        status = codec.document(contract.STATUS_KEY, status_text, contract.STATUS_LIMIT_BYTES)
        if isinstance(status, contract.Problem):
            problems.append(status.message)
            corrupt.add(contract.STATUS_KEY)
        else:
            read, wrong = _decision(status)
            values.update(read)
            if wrong:
                problems += [f"{contract.STATUS_KEY}: {rule}" for rule in wrong]
                corrupt.add(contract.STATUS_KEY)

    state_text = notes.get(contract.STATE_KEY)
    if state_text is not None:
        state = codec.document(contract.STATE_KEY, state_text, contract.STATE_LIMIT_BYTES)
        at = None if isinstance(state, contract.Problem) else state.get("lastScaleChange")
        if isinstance(state, contract.Problem):
            problems.append(state.message)
            corrupt.add(contract.STATE_KEY)
        elif at is not None and not codec.finite(at):
            problems.append(f"{contract.STATE_KEY}: lastScaleChange is not a number")
            corrupt.add(contract.STATE_KEY)
        elif at is not None:
            values["last_scale_s"] = float(at)

    ramp_text = notes.get(contract.RAMP_KEY)
    if ramp_text is not None:
        try:
            saved = ramp.loads(ramp_text)
        except ValueError as e:
            problems.append(contract.Problem(contract.RAMP_KEY, ramp_text, str(e)).message)
            corrupt.add(contract.RAMP_KEY)
        else:
            if saved.phase is not ramp.Phase.IDLE:
                values.update(ramp_phase=saved.phase.value, ramp_weight_pct=saved.weight_pct)

    tiers = {}
    if siblings:
        tiers = {WHOLE: _spec_replicas(deployment)}
        tiers.update({tier: _spec_replicas(d) for tier, d in sorted(siblings.items())})
    serving = [_ready(d) for d in (deployment, *siblings.values())]
    return Row(
        namespace=namespace,
        name=name,
        serving=None if None in serving else sum(s for s in serving if s is not None),
        tiers=tiers,
        problems=tuple(problems),
        corrupt=frozenset(corrupt),
        **values,
    )


def _decision(status: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """What `list` shows of a status document, and the rules the values it needs break."""
    read: dict[str, Any] = {}
    wrong: list[str] = []
    for key in ("desired", "current"):
        value = status.get(key)
        if codec.count(value):
            read[key] = value
        else:
            wrong.append(f"{key} {untrusted.excerpt(value)} is not a whole number >= 0")
    for key, known in (("kind", _KINDS), ("reason", _REASONS)):
        value = status.get(key)
        if isinstance(value, str) and value in known:
            read[key] = value
        else:
            wrong.append(f"{key} {untrusted.excerpt(value)} is not one the controller writes")
    when = status.get("time")
    if isinstance(when, str):
        read["decided_at"] = contract.escape(when, limit=40)
    return read, wrong


def _targets(policy: model.PolicyConfig) -> dict[str, float]:
    targets = {
        "loadPerReplica": policy.target_load_per_replica,
        "queuePerReplica": policy.target_queue_per_replica,
        "gpuUtilizationPercent": policy.target_gpu_utilization_pct,
    }
    return {k: v for k, v in targets.items() if v is not None}


# -- output -----------------------------------------------------------------------------------


def write_table(
    found: Sequence[Row], out: TextIO, *, now_s: float, namespaces: bool, wide: bool
) -> None:
    """The rows as aligned columns, like `kubectl get`; `namespaces` adds NAMESPACE first."""
    header = ["NAME", "DESIRED", "CURRENT", "SERVING", "REASON", "LAST SCALE", "RAMP", "TIER"]
    if wide:
        header += ["TARGETS", "MIN", "MAX", "POLICY", "MODE", "PROBLEMS"]
    if namespaces:
        header.insert(0, "NAMESPACE")
    table = [header]
    for row in found:
        cells = [
            row.name,
            _cell(row.desired, row, contract.STATUS_KEY),
            _cell(row.current, row, contract.STATUS_KEY),
            _cell(row.serving, row, None),
            _reason(row),
            _age(row, now_s),
            _ramp(row),
            ",".join(f"{tier}={count}" for tier, count in row.tiers.items()) or NONE,
        ]
        if wide:
            known = row.mode is not None
            cells += [
                ",".join(f"{k}={v:g}" for k, v in row.targets.items()) if known else UNKNOWN,
                _cell(row.min_replicas, row, None, missing=UNKNOWN),
                _cell(row.max_replicas, row, None, missing=UNKNOWN),
                row.policy or UNKNOWN,
                row.mode or UNKNOWN,
                "; ".join(row.problems) or NONE,
            ]
        if namespaces:
            cells.insert(0, row.namespace)
        table.append(cells)
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for line in table:
        text = "   ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
        out.write(text.rstrip() + "\n")


def document(found: Sequence[Row], *, now_s: float) -> list[dict[str, Any]]:
    """The rows as the `-o json` document: a list of objects (keys in docs/operations.md)."""
    return [
        {
            "namespace": row.namespace,
            "name": row.name,
            "desired": row.desired,
            "current": row.current,
            "serving": row.serving,
            "kind": row.kind,
            "reason": row.reason,
            "decidedAt": row.decided_at,
            "lastScale": None
            if row.last_scale_s is None
            else codec.readable_time(row.last_scale_s),
            "lastScaleAgeSeconds": (
                None if row.last_scale_s is None else max(0.0, round(now_s - row.last_scale_s))
            ),
            "ramp": (
                None
                if row.ramp_phase is None
                else {"phase": row.ramp_phase, "weightPercent": row.ramp_weight_pct}
            ),
            "tiers": dict(row.tiers),
            "mode": row.mode,
            "policy": row.policy,
            "minReplicas": row.min_replicas,
            "maxReplicas": row.max_replicas,
            "targets": dict(row.targets),
            "problems": list(row.problems),
        }
        for row in found
    ]


def write_json(found: Sequence[Row], out: TextIO, *, now_s: float) -> None:
    json.dump(document(found, now_s=now_s), out, indent=2, sort_keys=True)
    out.write("\n")


def age(seconds: float) -> str:
    """A duration as kubectl prints an age: `45s`, `5m30s`, `2h`, `3d4h`, `400d`."""
    s = max(0, int(seconds))
    minutes, hours, days = s // 60, s // 3600, s // 86400
    if s < 120:
        return f"{s}s"
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{days}d" if hours % 24 == 0 else f"{days}d{hours % 24}h"
    if days < 365 * 2:
        return f"{days}d"
    years = days // 365
    if years < 8:
        return f"{years}y" if days % 365 == 0 else f"{years}y{days % 365}d"
    return f"{years}y"


def _cell(value: int | None, row: Row, key: str | None, *, missing: str = NONE) -> str:
    if value is not None:
        return str(value)
    return UNKNOWN if key is not None and key in row.corrupt else missing


def _reason(row: Row) -> str:
    if row.kind is not None and row.reason is not None:
        return f"{row.kind}/{row.reason}"
    return UNKNOWN if contract.STATUS_KEY in row.corrupt else NONE


def _age(row: Row, now_s: float) -> str:
    if row.last_scale_s is not None:
        return age(now_s - row.last_scale_s)
    return UNKNOWN if contract.STATE_KEY in row.corrupt else NONE


def _ramp(row: Row) -> str:
    if contract.RAMP_KEY in row.corrupt:
        return UNKNOWN
    if row.ramp_phase is None:
        return NONE
    if row.ramp_phase in (ramp.Phase.RAMPING.value, ramp.Phase.PROMOTING.value):
        return f"{row.ramp_weight_pct}%"
    return row.ramp_phase


# -- reading the objects -------------------------------------------------------------------------


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, Mapping) else {}


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    labels = _meta(obj).get("labels")
    return labels if isinstance(labels, Mapping) else {}


def _controller_uid(obj: Mapping[str, Any]) -> str | None:
    for owner in _meta(obj).get("ownerReferences") or ():
        if isinstance(owner, Mapping) and owner.get("controller") and owner.get("uid"):
            return str(owner["uid"])
    return None


def _spec_replicas(obj: Mapping[str, Any]) -> int:
    spec = obj.get("spec")
    replicas = spec.get("replicas", 1) if isinstance(spec, Mapping) else 1
    return replicas if codec.count(replicas) else 1


def _ready(obj: Mapping[str, Any]) -> int | None:
    """Ready pods (`status.readyReplicas`, absent when none); None before the first status."""
    status = obj.get("status")
    if not isinstance(status, Mapping) or not status:
        return None
    ready = status.get("readyReplicas", 0)
    return ready if codec.count(ready) else None
