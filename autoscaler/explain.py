"""`autoscaler explain NAMESPACE/NAME`: the last decision on a Deployment and why, for people.

Reads what the controller wrote on the Deployment (the `status` annotation: desired and current
replicas, kind, reason, detail, each signal's ratio, estimate and vote, the cooldown end, the
seasonal forecast's vote and why it is on or off, the observed pod start-up split by cache hit
and miss under cache-aware placement, the warm standby pool; the `state` annotation: when it
last scaled) and the service owner's settings, and prints them as one block. A workload that
is missing, not opted in, or whose annotations do not parse (the problems are listed, as in the
`InvalidConfig` Event) exits 1.

Annotations are text anyone allowed to edit the Deployment can write: every value read from
them reaches the output through `contract.escape`, never raw, and the controller's own are read
through `codec.document`, so one that cannot be read is one line saying which rule it breaks
(as in the controller's `CorruptState` Event), never a traceback. No cluster access here (the
CLI reads the Deployment through `app`, or from a manifest: `deployments_in`).

`json_output` prints the same content as one JSON object (its keys are listed in
docs/operations.md): `found`, `managed` and `problems` always; the settings and the last
decision when managed. Values from the controller's annotations keep their JSON type when it is
the one the controller writes, and are null otherwise.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from typing import Any, TextIO

import yaml

from autoscaler.contract import annotations as contract
from autoscaler.contract import codec
from autoscaler.contract import targets as scale_targets
from autoscaler.core import cache

EXIT_OK = 0
EXIT_NOT_MANAGED = 1


def main(
    namespace: str,
    name: str,
    deployment: Mapping[str, Any] | None,
    stdout: TextIO,
    stderr: TextIO,
    *,
    json_output: bool = False,
) -> int:
    """Print the explanation of `deployment` (None: not found); 0, or 1 when not managed."""
    if json_output:
        found = _document(namespace, name, deployment)
        json.dump(found, stdout, indent=2, sort_keys=True)
        stdout.write("\n")
        return EXIT_OK if found["managed"] else EXIT_NOT_MANAGED
    title = f"{_kind_of(deployment)} {namespace}/{name}"
    if deployment is None:
        stderr.write(f"{title} not found\n")
        return EXIT_NOT_MANAGED
    notes = codec.annotations_of(deployment)
    if not contract.opted_in(notes):
        value = notes.get(contract.ENABLED_KEY)
        why = "is not set" if value is None else f'is {contract.quote(value)}, not "true"'
        stderr.write(f"{title} is not managed by the autoscaler: {contract.ENABLED_KEY} {why}\n")
        return EXIT_NOT_MANAGED
    config = contract.parse(notes, namespace=namespace)
    if isinstance(config, contract.Invalid):
        stdout.write(f"{title} is not managed: its annotations are invalid (InvalidConfig)\n")
        for problem in config.problems:
            stdout.write(f"  - {problem.message}\n")
        return EXIT_NOT_MANAGED
    stdout.write(_describe(title, deployment, config, notes))
    return EXIT_OK


def _describe(
    title: str,
    deployment: Mapping[str, Any],
    config: contract.ServiceConfig,
    notes: Mapping[str, str],
) -> str:
    policy = config.policy
    targets = []
    if policy.target_load_per_replica is not None:
        targets.append(f"{policy.target_load_per_replica:g} req/s")
    if policy.target_queue_per_replica is not None:
        targets.append(f"{policy.target_queue_per_replica:g} waiting")
    spec = deployment.get("spec")
    replicas = spec.get("replicas") if isinstance(spec, dict) else None
    lines = [
        title,
        f"  managed        mode {config.mode.value}, policy {config.policy_name.value}, "
        f"server {config.server.value}",
        f"  bounds         {policy.min_replicas}..{policy.max_replicas} replicas; target per "
        f"replica {' and '.join(targets)}",
        f"  spec.replicas  {replicas if isinstance(replicas, int) else '(unset)'}",
    ]
    if policy.pause is not None:
        at = "" if policy.pause.replicas is None else f" at {policy.pause.replicas} replicas"
        lines.append(f"  paused         yes{at}: the controller writes no replicas until resumed")
    if config.model is not None:
        served = cache.Model(config.model, config.model_size_gib)
        lines.append(
            f"  model          {contract.escape(config.model)}: warm nodes carry {served.label}"
        )
    status_text = notes.get(contract.STATUS_KEY)
    if status_text is None:
        lines.append("  no decision recorded yet (is the controller running, and leading?)")
        return "\n".join(lines) + "\n"
    status = codec.document(contract.STATUS_KEY, status_text, contract.STATUS_LIMIT_BYTES)
    if isinstance(status, contract.Problem):
        lines.append(f"  {status.message}; ignored")
        return "\n".join(lines) + "\n"
    lines += _decision(status)
    lines += _cooldowns(config, notes.get(contract.STATE_KEY))
    return "\n".join(lines) + "\n"


def _decision(status: Mapping[str, Any]) -> list[str]:
    kind = _text(status.get("kind"))
    lines = [
        f"Last decision ({_text(status.get('time'))})",
        f"  replicas       {_number(status.get('current'))} -> "
        f"{_number(status.get('desired'))} ({kind})",
        f"  reason         {_text(status.get('reason'))}",
    ]
    detail = status.get("detail")
    if detail:
        lines.append(f"  detail         {_text(detail)}")
    if "bound" in status:
        lines.append(f"  bound          {_text(status.get('bound'))} replicas")
    if "cooldownUntil" in status:
        lines.append(f"  cooldown until {_text(status.get('cooldownUntil'))}")
    forecast = status.get("forecast")
    if isinstance(forecast, dict):
        state = "on" if forecast.get("on") is True else "off"
        lines.append(f"  forecast       {state}: {_text(forecast.get('why'))}")
    startup = status.get("startup")
    if isinstance(startup, dict):
        lines.append(
            f"  start-up       cache hit {_seconds(startup.get('hitSeconds'))} "
            f"({_number(startup.get('hits'))} pods), miss {_seconds(startup.get('missSeconds'))} "
            f"({_number(startup.get('misses'))} pods), median of the recent ones"
        )
    pool = status.get("standby")
    if isinstance(pool, dict):
        lines.append(
            f"  standby        {_number(pool.get('waiting'))} warm of "
            f"{_number(pool.get('replicas'))} replicas with no traffic, on top of the serving "
            f"ones; size {_number(pool.get('size'))} ({_text(pool.get('why'))})"
        )
    contributions = status.get("contributions")
    if isinstance(contributions, dict) and contributions:
        lines.append("  signals        ratio    estimate  wants  estimator")
        for signal, vote in sorted(contributions.items(), key=lambda kv: str(kv[0])):
            vote = vote if isinstance(vote, dict) else {}
            lines.append(
                f"    {contract.escape(str(signal), limit=12):<12} "
                f"{_number(vote.get('ratio'), '.2f'):>6}  "
                f"{_number(vote.get('estimate'), '.2f'):>10}  "
                f"{_number(vote.get('desired')):>5}  {_text(vote.get('estimator'))}"
            )
    return lines


def _cooldowns(config: contract.ServiceConfig, state_text: str | None) -> list[str]:
    """When the last scale-up and scale change were, and when their cooldowns end."""
    if state_text is None:
        return []
    state = codec.document(contract.STATE_KEY, state_text, contract.STATE_LIMIT_BYTES)
    if isinstance(state, contract.Problem):
        return [f"  {state.message}; ignored, the controller rebuilds it"]
    lines = []
    for key, label, cooldown_s in (
        ("lastScaleUp", "last scale-up ", config.policy.scale_up_cooldown_s),
        ("lastScaleChange", "last change   ", config.policy.scale_down_cooldown_s),
    ):
        at = state.get(key)
        if isinstance(at, int | float) and not isinstance(at, bool) and math.isfinite(at):
            ends = "scale-up" if key == "lastScaleUp" else "scale-down"
            lines.append(f"  {label} {_time(at)}; {ends} cooldown ends {_time(at + cooldown_s)}")
    return lines


def _document(namespace: str, name: str, deployment: Mapping[str, Any] | None) -> dict[str, Any]:
    """The `-o json` object: what the text output says, with typed values."""
    found: dict[str, Any] = {
        "namespace": namespace,
        "name": name,
        "found": deployment is not None,
        "managed": False,
        "problems": [],
    }
    if deployment is None:
        return found
    notes = codec.annotations_of(deployment)
    if not contract.opted_in(notes):
        value = notes.get(contract.ENABLED_KEY)
        why = "is not set" if value is None else f'is {contract.quote(value)}, not "true"'
        found["problems"] = [f"{contract.ENABLED_KEY} {why}"]
        return found
    config = contract.parse(notes, namespace=namespace)
    if isinstance(config, contract.Invalid):
        found["problems"] = [problem.message for problem in config.problems]
        return found
    policy = config.policy
    spec = deployment.get("spec")
    replicas = spec.get("replicas") if isinstance(spec, dict) else None
    targets = {
        "loadPerReplica": policy.target_load_per_replica,
        "queuePerReplica": policy.target_queue_per_replica,
        "gpuUtilizationPercent": policy.target_gpu_utilization_pct,
    }
    found.update(
        managed=True,
        mode=config.mode.value,
        policy=config.policy_name.value,
        server=config.server.value,
        minReplicas=policy.min_replicas,
        maxReplicas=policy.max_replicas,
        targets={k: v for k, v in targets.items() if v is not None},
        specReplicas=replicas if _json_number(replicas) is not None else None,
        decision=None,
        lastScaleUp=None,
        lastChange=None,
    )
    status_text = notes.get(contract.STATUS_KEY)
    if status_text is not None:
        status = codec.document(contract.STATUS_KEY, status_text, contract.STATUS_LIMIT_BYTES)
        if isinstance(status, contract.Problem):
            found["problems"].append(f"{status.message}; ignored")
        else:
            found["decision"] = _decision_document(status)
    state_text = notes.get(contract.STATE_KEY)
    if state_text is not None:
        state = codec.document(contract.STATE_KEY, state_text, contract.STATE_LIMIT_BYTES)
        if isinstance(state, contract.Problem):
            found["problems"].append(f"{state.message}; ignored, the controller rebuilds it")
        else:
            for key, out, cooldown_s in (
                ("lastScaleUp", "lastScaleUp", policy.scale_up_cooldown_s),
                ("lastScaleChange", "lastChange", policy.scale_down_cooldown_s),
            ):
                at = _json_number(state.get(key))
                if at is not None:
                    found[out] = {
                        "at": codec.readable_time(at),
                        "cooldownEnds": codec.readable_time(at + cooldown_s),
                    }
    return found


def _decision_document(status: Mapping[str, Any]) -> dict[str, Any]:
    signals = {}
    contributions = status.get("contributions")
    if isinstance(contributions, dict):
        for signal, vote in sorted(contributions.items(), key=lambda kv: str(kv[0])):
            vote = vote if isinstance(vote, dict) else {}
            signals[contract.escape(str(signal), limit=40)] = {
                "ratio": _json_number(vote.get("ratio")),
                "estimate": _json_number(vote.get("estimate")),
                "desired": _json_number(vote.get("desired")),
                "estimator": _json_text(vote.get("estimator")),
            }
    return {
        "time": _json_text(status.get("time")),
        "current": _json_number(status.get("current")),
        "desired": _json_number(status.get("desired")),
        "kind": _json_text(status.get("kind")),
        "reason": _json_text(status.get("reason")),
        "detail": _json_text(status.get("detail")),
        "bound": _json_text(status.get("bound")),
        "cooldownUntil": _json_text(status.get("cooldownUntil")),
        "signals": signals,
        "forecast": _forecast_document(status.get("forecast")),
        "startup": _startup_document(status.get("startup")),
        "standby": _standby_document(status.get("standby")),
    }


def _startup_document(startup: object) -> dict[str, Any] | None:
    if not isinstance(startup, dict):
        return None
    return {
        key: _json_number(startup.get(key))
        for key in ("hitSeconds", "missSeconds", "hits", "misses")
    }


def _standby_document(pool: object) -> dict[str, Any] | None:
    if not isinstance(pool, dict):
        return None
    return {
        "size": _json_number(pool.get("size")),
        "replicas": _json_number(pool.get("replicas")),
        "waiting": _json_number(pool.get("waiting")),
        "why": _json_text(pool.get("why")),
    }


def _forecast_document(forecast: object) -> dict[str, Any] | None:
    if not isinstance(forecast, dict):
        return None
    return {
        "on": forecast.get("on") is True,
        "load": _json_number(forecast.get("load")),
        "why": _json_text(forecast.get("why")),
    }


def _json_number(value: object) -> float | int | None:
    return value if codec.finite(value) and isinstance(value, int | float) else None


def _json_text(value: object) -> str | None:
    """A string from an annotation, escaped and cut as in the text output; None otherwise."""
    return contract.escape(value) if isinstance(value, str) else None


def _kind_of(workload: Mapping[str, Any] | None) -> str:
    """The kind a workload says it is, when the controller scales that kind; else Deployment."""
    kind = None if workload is None else workload.get("kind")
    known = {target.kind for target in scale_targets.KINDS.values()}
    return kind if isinstance(kind, str) and kind in known else "Deployment"


def deployments_in(text: str) -> Iterator[Mapping[str, Any]]:
    """The workloads the controller scales (Deployments, StatefulSets, LeaderWorkerSets, Argo
    Rollouts) in manifest text: YAML documents (JSON is YAML), `kind: List` items included, as
    `kubectl get deploy -o yaml` prints them. `yaml.YAMLError` if it is not YAML."""
    for document in yaml.safe_load_all(text):
        if not isinstance(document, dict):
            continue
        items = document.get("items") if document.get("kind") == "List" else [document]
        for item in items if isinstance(items, list) else ():
            if not isinstance(item, dict):
                continue
            api_version, kind = item.get("apiVersion", "apps/v1"), item.get("kind")
            if not (isinstance(api_version, str) and isinstance(kind, str)):
                continue
            if scale_targets.of(api_version, kind) is not None:
                yield item


def _text(value: object) -> str:
    if value is None:
        return "-"
    return contract.escape(value if isinstance(value, str) else json.dumps(value))


def _number(value: object, spec: str = "") -> str:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return "-"
    return format(value, spec) if spec else str(value)


def _seconds(value: object) -> str:
    shown = _number(value, ".1f")
    return shown if shown == "-" else f"{shown} s"


def _time(unix_s: float) -> str:
    return codec.readable_time(unix_s) or "-"
