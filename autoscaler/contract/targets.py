"""The workloads that carry the annotation contract: every kind the controller scales through its
`/scale` subresource, as a HorizontalPodAutoscaler's `scaleTargetRef` does.

A `TargetKind` says where a kind keeps what its `/scale` subresource serves (an `autoscaling/v1`
Scale: `spec.replicas`, `status.replicas`, `status.selector`), as a CRD's `subresources.scale`
declares it (`specReplicasPath`, `statusReplicasPath`, `labelSelectorPath`), and where its pod
templates are. `scale_of` reads a Scale from an object as the API server derives it, so that the
controller's caches of the objects answer what a `GET .../scale` would. The serving pods are the
pods of the workload's namespace that the Scale's selector selects (`Selector`), not the pods
found through ownerReferences: a LeaderWorkerSet's selector (`status.hpaPodSelector`) selects the
leader of each group only, so one replica is one group of pods.

Placement tiers (sibling Deployments) and the warm-up gate with its traffic ramp (which follows
pods through their ReplicaSet to a Deployment) are Deployment-only: `unsupported` says what
another kind asks for of them, as problems naming the key, the value and the rule.

Pure: no I/O. The Kubernetes adapter binds the kinds to API calls; the settings name them.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from autoscaler.contract import annotations as contract


@dataclasses.dataclass(frozen=True, slots=True)
class TargetKind:
    """One scalable kind, and where its objects keep what the `/scale` subresource serves."""

    name: str
    """Its name in the settings: the plural (`statefulsets`)."""
    kind: str
    group: str
    version: str
    custom: bool
    """Served by a CustomResourceDefinition that may not be installed."""
    selector_path: tuple[str, ...]
    """Where the pod selector is: a `LabelSelector` object (`spec.selector` of the built-in
    kinds) or its serialised text (a CRD's `labelSelectorPath`)."""
    template_paths: tuple[tuple[str, ...], ...]
    """Where its pod templates are."""
    spec_replicas_path: tuple[str, ...] = ("spec", "replicas")
    status_replicas_path: tuple[str, ...] = ("status", "replicas")

    @property
    def plural(self) -> str:
        return self.name

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def resource(self) -> str:
        """`plural.group`, as RBAC rules and API messages name it."""
        return f"{self.plural}.{self.group}"

    @property
    def is_deployment(self) -> bool:
        return self is DEPLOYMENTS


DEPLOYMENTS: Final = TargetKind(
    "deployments",
    "Deployment",
    "apps",
    "v1",
    custom=False,
    selector_path=("spec", "selector"),
    template_paths=(("spec", "template"),),
)
STATEFULSETS: Final = TargetKind(
    "statefulsets",
    "StatefulSet",
    "apps",
    "v1",
    custom=False,
    selector_path=("spec", "selector"),
    template_paths=(("spec", "template"),),
)
LEADER_WORKER_SETS: Final = TargetKind(
    "leaderworkersets",
    "LeaderWorkerSet",
    "leaderworkerset.x-k8s.io",
    "v1",
    custom=True,
    # The LeaderWorkerSet controller selects the leader pods only: one per group.
    selector_path=("status", "hpaPodSelector"),
    template_paths=(
        ("spec", "leaderWorkerTemplate", "leaderTemplate"),
        ("spec", "leaderWorkerTemplate", "workerTemplate"),
    ),
)
ROLLOUTS: Final = TargetKind(
    "rollouts",
    "Rollout",
    "argoproj.io",
    "v1alpha1",
    custom=True,
    selector_path=("status", "selector"),
    template_paths=(("spec", "template"),),
)

KINDS: Final[Mapping[str, TargetKind]] = {
    kind.name: kind for kind in (DEPLOYMENTS, STATEFULSETS, LEADER_WORKER_SETS, ROLLOUTS)
}
"""Every kind the controller can scale, by its name in the settings."""

DEFAULT_KINDS: Final = tuple(KINDS)
"""Watched by default; the custom ones only while their CRD is installed."""


def parse_kinds(names: Iterable[str]) -> tuple[TargetKind, ...]:
    """The kinds named, in the order of `KINDS`; a `ValueError` names an unknown one."""
    wanted = {name.strip().lower() for name in names if name.strip()}
    unknown = sorted(wanted - KINDS.keys())
    if unknown:
        raise ValueError(
            f"unknown workload kind {', '.join(map(repr, unknown))}: "
            f"expected some of {', '.join(KINDS)}"
        )
    if not wanted:
        raise ValueError(f"no workload kind: expected some of {', '.join(KINDS)}")
    return tuple(kind for name, kind in KINDS.items() if name in wanted)


def of(api_version: str, kind: str) -> TargetKind | None:
    """The scalable kind of an object's `apiVersion` (its group is enough) and `kind`."""
    group = api_version.partition("/")[0] if "/" in api_version else ""
    for target in KINDS.values():
        if (target.group, target.kind) == (group, kind):
            return target
    return None


# -- what only Deployments have --------------------------------------------------------------------

PLACEMENT_KEY: Final = contract.PREFIX + "placement"


def is_gated(template: Mapping[str, Any]) -> bool:
    """Whether a pod template opts into the warm-up gate: the `warm` readiness gate, or the
    `warming` label its new pods start with."""
    metadata = template.get("metadata")
    labels = (metadata.get("labels") if isinstance(metadata, Mapping) else None) or {}
    if isinstance(labels, Mapping) and labels.get(contract.WARMING_LABEL) == "true":
        return True
    spec = template.get("spec")
    gates = (spec.get("readinessGates") if isinstance(spec, Mapping) else None) or ()
    return isinstance(gates, list) and any(
        isinstance(g, Mapping) and g.get("conditionType") == contract.WARM_GATE for g in gates
    )


def unsupported(
    kind: TargetKind, obj: Mapping[str, Any], notes: Mapping[str, str]
) -> list[contract.Problem]:
    """What a workload other than a Deployment asks for and cannot have: placement tiers (a
    `placement` other than `whole`) and the warm-up gate in a pod template."""
    if kind.is_deployment:
        return []
    problems = []
    placed = notes.get(PLACEMENT_KEY)
    if placed is not None and placed != contract.Placement.WHOLE.value:
        rule = (
            f"placement tiers are Deployment-only: a {kind.kind} runs on what its pod template "
            "requests; set `whole` or remove the key"
        )
        problems.append(contract.Problem(PLACEMENT_KEY, placed, rule))
    if any(is_gated(template) for template in templates_of(kind, obj)):
        rule = (
            f"the warm-up gate and the traffic ramp are Deployment-only: remove the readiness "
            f"gate {contract.WARM_GATE} and the label {contract.WARMING_LABEL} from the "
            f"{kind.kind}'s pod template, or its pods never turn Ready"
        )
        problems.append(contract.Problem(contract.WARM_GATE, "readinessGates", rule))
    return problems


# -- the Scale -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Scale:
    """What a workload's `/scale` subresource serves."""

    spec_replicas: int
    status_replicas: int
    selector: str
    """The serialised label selector of its pods; "" when the object says none yet (a custom
    resource whose controller has not written its status)."""


def _at(obj: Mapping[str, Any], path: tuple[str, ...]) -> object:
    value: object = obj
    for step in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(step)
    return value


def _count(value: object, default: int) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return default


def scale_of(kind: TargetKind, obj: Mapping[str, Any]) -> Scale:
    """The Scale the API server derives from `obj`: an absent `spec.replicas` is 1 (the
    default of every kind in `KINDS`), an absent status count 0."""
    selector = _at(obj, kind.selector_path)
    if isinstance(selector, Mapping):
        text = format_selector(selector)
    else:
        text = selector if isinstance(selector, str) else ""
    return Scale(
        spec_replicas=_count(_at(obj, kind.spec_replicas_path), 1),
        status_replicas=_count(_at(obj, kind.status_replicas_path), 0),
        selector=text,
    )


def templates_of(kind: TargetKind, obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The kind's pod templates present on `obj`."""
    found = (_at(obj, path) for path in kind.template_paths)
    return [template for template in found if isinstance(template, dict)]


# -- label selectors -------------------------------------------------------------------------------

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_KEY = rf"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_NAME}"
_VALUE = rf"({_NAME})?"
_SET = re.compile(rf"(?P<key>{_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)")
_EQUALS = re.compile(rf"(?P<key>{_KEY})\s*(?P<op>==|=|!=)\s*(?P<value>{_VALUE})")
_EXISTS = re.compile(rf"(?P<neg>!?)\s*(?P<key>{_KEY})")
_VALUE_RE = re.compile(_VALUE)


@dataclasses.dataclass(frozen=True, slots=True)
class Requirement:
    """One clause of a label selector: `key in (values)`, `key notin (values)`, `key`, `!key`
    (`=`, `==` and `!=` are `in` and `notin` of one value)."""

    key: str
    operator: str
    """`in`, `notin`, `exists` or `!exists`."""
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        match self.operator:
            case "in":
                return labels.get(self.key) in self.values
            case "notin":
                return labels.get(self.key) not in self.values
            case "exists":
                return self.key in labels
            case _:
                return self.key not in labels


@dataclasses.dataclass(frozen=True, slots=True)
class Selector:
    """A label selector: every requirement holds. An empty one selects nothing here (a Scale
    without a selector names no pods), unlike the API's list filter."""

    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return bool(self.requirements) and all(r.matches(labels) for r in self.requirements)

    def narrowest(self) -> Requirement | None:
        """The `in` requirement of fewest values (`=` is one): every label set it selects
        carries one of them, so an index by label finds its candidates. None when it has none."""
        ins = [r for r in self.requirements if r.operator == "in"]
        return min(ins, key=lambda r: len(r.values)) if ins else None


def _clauses(text: str) -> list[str]:
    """`text` split at the commas outside parentheses."""
    clauses, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            clauses.append(text[start:i])
            start = i + 1
    clauses.append(text[start:])
    return [clause.strip() for clause in clauses]


def parse_selector(text: str) -> Selector:
    """A serialised label selector (a Scale's `status.selector`); `ValueError` when malformed."""
    if not text.strip():
        return Selector(())
    requirements = []
    for clause in _clauses(text):
        if (m := _SET.fullmatch(clause)) is not None:
            values = frozenset(v.strip() for v in m["values"].split(","))
            if not m["values"].strip() or any(not _VALUE_RE.fullmatch(v) for v in values):
                raise ValueError(f"label selector {text!r}: bad values in {clause!r}")
            requirements.append(Requirement(m["key"], m["op"], values))
        elif (m := _EQUALS.fullmatch(clause)) is not None:
            operator = "notin" if m["op"] == "!=" else "in"
            requirements.append(Requirement(m["key"], operator, frozenset({m["value"]})))
        elif (m := _EXISTS.fullmatch(clause)) is not None:
            operator = "!exists" if m["neg"] else "exists"
            requirements.append(Requirement(m["key"], operator))
        else:
            raise ValueError(f"label selector {text!r}: cannot read {clause!r}")
    return Selector(tuple(requirements))


def format_selector(selector: Mapping[str, Any]) -> str:
    """A `LabelSelector` object (`matchLabels`, `matchExpressions`) as the Scale serialises it."""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expression in selector.get("matchExpressions") or ():
        if not isinstance(expression, Mapping):
            continue
        key, operator = expression.get("key"), str(expression.get("operator", ""))
        values = ",".join(sorted(str(v) for v in expression.get("values") or ()))
        match operator:
            case "In":
                parts.append(f"{key} in ({values})")
            case "NotIn":
                parts.append(f"{key} notin ({values})")
            case "Exists":
                parts.append(f"{key}")
            case "DoesNotExist":
                parts.append(f"!{key}")
    return ",".join(parts)
