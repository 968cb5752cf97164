"""`autoscaler validate -f PATH`: lint the autoscaler annotations in Kubernetes manifests offline.

For service owners' CI: reads files, directories (every `*.yaml`, `*.yml` and `*.json` below,
in sorted order) and standard input (`-`); YAML may hold several documents and `kind: List`s,
`.json` files are read as JSON. Every apps/v1 Deployment that opts in is parsed with
`annotations.parse`, as is every other workload the controller scales (`contract.targets`: a
StatefulSet, a LeaderWorkerSet, an Argo Rollout), and each finding is one line,
`SOURCE: document N: Deployment NAMESPACE/NAME: <finding>`, naming the field or key, its value
and the rule. It also catches what `parse` cannot see from one Deployment's annotations:
- unquoted values (Kubernetes rejects non-string annotations), keys on the pod template or on
  other kinds (where they do nothing), settings without the `enabled` switch (most often a
  misspelt switch);
- a traffic router without the readiness gate `autoscaler.dsec.io/warm` and the
  `autoscaler.dsec.io/warming: "true"` label in the pod template (without both the controller
  neither gates nor ramps the new pods), and a ramp label in a Deployment's or a Service's
  selector (the controller relabels pods as they warm);
- a standby pool (`standby-replicas`) without that readiness gate and label (its pods wait
  warm behind the closed gate);
- a HorizontalPodAutoscaler or KEDA ScaledObject that scales the same workload (one owner of
  `replicas`);
- on a workload other than a Deployment, what only Deployments have (`targets.unsupported`:
  placement tiers, the warm-up gate);
- as a warning only, `spec.replicas` in a managed Deployment: each `kubectl apply` of the
  manifest resets the count the controller chose;
- as a warning only, a `model` annotation (cache-aware placement) on a Deployment whose pod
  template does not prefer the nodes warm for that model: the finding gives the node affinity
  term to add (docs/operations.md, "Cache-aware placement").

A clean run ends with one line that counts the workloads that opt in, by kind (`OK: 4 autoscaled
workloads (3 Deployments, 1 StatefulSet) in 2 files, no problems`).

Exit codes (`EXIT_*`): 0 no problem (warnings alone are printed and still exit 0, unless
`strict`), 1 problems found, 2 an input that cannot be read or parsed (stderr; the rest is still
linted). No cluster access. Every name or value taken from a manifest reaches the output
through `annotations.quote` or a plain-name check, never raw.
"""

import enum
import json
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TextIO

import yaml

from autoscaler.contract import annotations, modelid, targets

EXIT_OK: Final = 0
EXIT_PROBLEMS: Final = 1
"""Problems found (or, with `strict`, warnings)."""
EXIT_UNREADABLE: Final = 2
"""An input could not be read, or is not YAML (or JSON); also no input at all."""

STDIN: Final = "-"
EXTENSIONS: Final = (".yaml", ".yml", ".json")
"""The files read from a directory, as `kubectl apply -f DIR` reads them."""

_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_KIND = re.compile(r"[A-Za-z][A-Za-z0-9]{0,62}")
_SCALERS = {
    "HorizontalPodAutoscaler": "autoscaling/",
    "ScaledObject": "keda.sh/",
}
_ROUTER_KEY = annotations.PREFIX + "traffic-router"
_MODE_KEY = annotations.PREFIX + "mode"
_RAMP_LABELS = (annotations.WARMING_LABEL, annotations.STABLE_LABEL)
_SELECTOR_RULE = (
    "must not be in a selector: the controller relabels pods as they warm up, and a pod whose "
    "labels leave the selector is orphaned"
)


class Severity(enum.Enum):
    PROBLEM = "problem"
    WARNING = "warning"
    UNREADABLE = "unreadable"
    """Printed on stderr: the input (or part of it) could not be read at all."""


@dataclass(frozen=True, slots=True)
class Finding:
    severity: Severity
    text: str


@dataclass(frozen=True, slots=True)
class _Object:
    """One Kubernetes object found in a manifest."""

    place: str
    """Where it is: `SOURCE: document N` (and `item M` within a List)."""
    kind: str
    api_version: str
    namespace: str
    name: str
    body: Mapping[Any, Any]

    @property
    def title(self) -> str:
        return f"{_show_kind(self.kind)} {_show_name(self.namespace)}/{_show_name(self.name)}"

    def problem(self, text: str) -> Finding:
        return Finding(Severity.PROBLEM, f"{self.place}: {self.title}: {text}")

    def warning(self, text: str) -> Finding:
        return Finding(Severity.WARNING, f"{self.place}: {self.title}: warning: {text}")


@dataclass(slots=True)
class _Report:
    findings: list[Finding] = field(default_factory=list)
    managed: list[_Object] = field(default_factory=list)
    """Deployments that opt in, valid or not, for the scaler conflict check."""
    scalers: list[_Object] = field(default_factory=list)
    files: int = 0

    def unreadable(self, text: str) -> None:
        self.findings.append(Finding(Severity.UNREADABLE, text))


def validate_text(text: str, *, source: str) -> list[str]:
    """Every finding in one manifest text (unreadable parts, problems, then conflicts and
    warnings in the order found), one line each; an empty list means it is valid."""
    return [finding.text for finding in lint_text(text, source=source)]


def lint_text(text: str, *, source: str) -> list[Finding]:
    """The findings of one manifest text (YAML, or JSON when `source` ends in `.json`)."""
    report = _Report()
    _lint_text(text, source=_show_source(source), report=report)
    return report.findings + _conflicts(report)


def main(paths: Sequence[str], stdout: TextIO, stderr: TextIO, *, strict: bool = False) -> int:
    """Lint every file, directory and `-` (standard input); returns one of the `EXIT_*` codes."""
    if not paths:
        stderr.write("autoscaler validate: no manifest given (-f FILE)\n")
        return EXIT_UNREADABLE
    report = _Report()
    for path in paths:
        for file in _files(path, report):
            _lint_file(file, report)
    findings = report.findings + _conflicts(report)
    counts = dict.fromkeys(Severity, 0)
    for finding in findings:
        counts[finding.severity] += 1
        out = stderr if finding.severity is Severity.UNREADABLE else stdout
        out.write(finding.text + "\n")
    if counts[Severity.UNREADABLE]:
        return EXIT_UNREADABLE
    warnings = counts[Severity.WARNING]
    if counts[Severity.PROBLEM] or (strict and warnings):
        return EXIT_PROBLEMS
    stdout.write(
        f"OK: {_managed_summary(report.managed)} in {_plural(report.files, 'file')}, "
        f"no problems{', ' + _plural(warnings, 'warning') if warnings else ''}\n"
    )
    return EXIT_OK


def _managed_summary(managed: Sequence[_Object]) -> str:
    """The workloads that opt in, by kind in the order of `targets.KINDS`: `1 autoscaled
    Deployment`, or `4 autoscaled workloads (3 Deployments, 1 StatefulSet)` across kinds."""
    by_kind = dict.fromkeys((kind.kind for kind in targets.KINDS.values()), 0)
    for obj in managed:
        by_kind[obj.kind] += 1
    found = [(kind, count) for kind, count in by_kind.items() if count]
    if not found:
        return "no autoscaled workload"
    if len(found) == 1:
        ((kind, count),) = found
        return _plural(count, f"autoscaled {kind}")
    kinds = ", ".join(_plural(count, kind) for kind, count in found)
    return f"{_plural(len(managed), 'autoscaled workload')} ({kinds})"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'s' if count != 1 else ''}"


def _files(path: str, report: _Report) -> list[str]:
    """`path` itself, or for a directory every manifest below it, sorted by path."""
    if path == STDIN or not os.path.isdir(path):
        return [path]
    errors: list[OSError] = []
    found = [
        os.path.join(root, name)
        for root, _, names in os.walk(path, onerror=errors.append)
        for name in names
        if name.endswith(EXTENSIONS)
    ]
    for e in errors:
        report.unreadable(f"{_show_source(str(e.filename or path))}: cannot read: {_why(e)}")
    if not found and not errors:
        report.unreadable(
            f"{_show_source(path)}: cannot read: no {', '.join('*' + e for e in EXTENSIONS)} "
            "file in this directory or below"
        )
    return sorted(found, key=lambda p: Path(p).parts)


def _lint_file(path: str, report: _Report) -> None:
    shown = _show_source("<stdin>" if path == STDIN else path)
    try:
        text = _read(path)
    except OSError as e:
        report.unreadable(f"{shown}: cannot read: {_why(e)}")
        return
    except UnicodeDecodeError:
        report.unreadable(f"{shown}: cannot read: not UTF-8 text")
        return
    report.files += 1
    _lint_text(text, source=shown, report=report)


def _why(e: OSError) -> str:
    return e.strerror or e.__class__.__name__


def _read(path: str) -> str:
    if path == STDIN:
        return sys.stdin.read()
    with open(path, encoding="utf-8") as f:
        return f.read()


def _lint_text(text: str, *, source: str, report: _Report) -> None:
    try:
        if source.endswith(".json"):
            _lint_json(text, source=source, report=report)
            return
        for index, document in enumerate(yaml.safe_load_all(text), start=1):
            _lint_document(document, source=source, index=index, report=report)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        what = e.problem or e.context or "unreadable YAML"
        report.unreadable(f"{where}: YAML syntax error: {annotations.escape(what, limit=200)}")
    except yaml.YAMLError as e:
        report.unreadable(f"{source}: YAML syntax error: {annotations.escape(str(e), limit=200)}")
    except RecursionError:
        report.unreadable(f"{source}: nested too deeply to be a manifest")


def _lint_json(text: str, *, source: str, report: _Report) -> None:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as e:
        report.unreadable(f"{source}:{e.lineno}: JSON syntax error: {annotations.escape(e.msg)}")
        return
    _lint_document(document, source=source, index=1, report=report)


def _lint_document(document: object, *, source: str, index: int, report: _Report) -> None:
    if document is None:
        return
    place = f"{source}: document {index}"
    if not isinstance(document, dict):
        report.findings.append(
            Finding(Severity.PROBLEM, f"{place}: not a Kubernetes object (a mapping)")
        )
        return
    for obj in _objects(document, place=place):
        kind = targets.of(obj.api_version, obj.kind)
        if kind is not None and obj.api_version == kind.api_version:
            report.findings += _lint_deployment(obj, report, kind)
            continue
        report.findings += _lint_other(obj)
        if obj.kind == "Service" and obj.api_version == "v1":
            report.findings += _lint_service(obj)
        prefix = _SCALERS.get(obj.kind)
        if prefix is not None and obj.api_version.startswith(prefix):
            report.scalers.append(obj)


def _objects(document: Mapping[Any, Any], *, place: str) -> Iterator[_Object]:
    items = document.get("items")
    kind = document.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and isinstance(items, list):
        for number, item in enumerate(items, start=1):
            if isinstance(item, dict):
                yield from _objects(item, place=f"{place} item {number}")
        return
    metadata = document.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    yield _Object(
        place=place,
        kind=kind if isinstance(kind, str) else "",
        api_version=_str(document.get("apiVersion")),
        namespace=_str(metadata.get("namespace")) or "default",
        name=_str(metadata.get("name")),
        body=document,
    )


def _lint_deployment(obj: _Object, report: _Report, kind: targets.TargetKind) -> list[Finding]:
    """A Deployment, or another workload the controller scales (`kind`)."""
    findings: list[Finding] = []
    raw = _mapping(obj.body, "metadata", "annotations")
    if raw is None:
        return [obj.problem("metadata.annotations must be a mapping of strings")]
    ours, quoting = _ours(raw)
    findings += [obj.problem(p) for p in quoting]
    for path in kind.template_paths:
        template = _mapping(obj.body, *path, "metadata", "annotations") or {}
        for key in template:
            if isinstance(key, str) and key.startswith(annotations.PREFIX):
                where = ".".join(path) + ".metadata.annotations"
                findings.append(
                    obj.problem(
                        f"{annotations.show_key(key)} in {where} has no effect; "
                        f"put it in the {kind.kind}'s metadata.annotations"
                    )
                )
    settings = {k: v for k, v in ours.items() if k not in annotations.CONTROLLER_KEYS}
    if not settings:
        return findings
    enabled = settings.get(annotations.ENABLED_KEY)
    if enabled == "false":
        return findings  # Switched off on purpose; its settings wait for the switch.
    if enabled is None:
        # Settings without the switch are most often a forgotten or misspelt `enabled`: say
        # so, with the unknown-key suggestions that catch the misspelling.
        findings += [obj.problem(p.message) for p in annotations.unknown_keys(settings)]
        findings.append(
            obj.problem(
                f"{annotations.ENABLED_KEY} is missing, so the autoscaler ignores the "
                f"{annotations.PREFIX} annotations here"
            )
        )
        return findings
    result = annotations.parse(settings, namespace=obj.namespace)
    if isinstance(result, annotations.Invalid):
        findings += [obj.problem(p.message) for p in result.problems]
    if enabled == "true":
        report.managed.append(obj)
        if kind.is_deployment:
            findings += _selector(obj)
            findings += _ramp_gate(obj, settings.get(_ROUTER_KEY))
        else:
            findings += [
                obj.problem(p.message) for p in targets.unsupported(kind, obj.body, settings)
            ]
        if isinstance(result, annotations.ServiceConfig) and result.standby.fixed != 0:
            findings += _standby_gate(obj, settings.get(annotations.STANDBY_KEY))
        findings += _replicas(obj, settings.get(_MODE_KEY))
        if isinstance(result, annotations.ServiceConfig):
            findings += _cache_affinity(obj, result)
    return findings


def _selector(obj: _Object) -> list[Finding]:
    """The ramp's labels in the Deployment's selector: each relabelled pod would be orphaned."""
    findings = []
    selector = _mapping(obj.body, "spec", "selector") or {}
    match_labels = selector.get("matchLabels")
    if isinstance(match_labels, dict):
        for key in _RAMP_LABELS:
            if key in match_labels:
                where = f"spec.selector.matchLabels[{annotations.quote(key)}]"
                value = annotations.quote(_yaml_text(match_labels[key]))
                findings.append(obj.problem(f"{where}={value}: {_SELECTOR_RULE}"))
    expressions = selector.get("matchExpressions")
    for number, expression in enumerate(expressions if isinstance(expressions, list) else []):
        named = expression.get("key") if isinstance(expression, dict) else None
        if named in _RAMP_LABELS:
            where = f"spec.selector.matchExpressions[{number}].key"
            findings.append(obj.problem(f"{where}={annotations.quote(named)}: {_SELECTOR_RULE}"))
    return findings


def _ramp_gate(obj: _Object, router_text: str | None) -> list[Finding]:
    """With a traffic router, the pod template needs both the readiness gate and the warming
    label: the controller ramps only gated pods, and moves only warming ones in steps."""
    try:
        router = annotations.TrafficRouter(router_text)
    except ValueError:
        return []  # Absent (`none`), or invalid and reported by `parse` already.
    if router is annotations.TrafficRouter.NONE:
        return []
    setting = f"{_ROUTER_KEY}={annotations.quote(router.value)}"
    gates = (_mapping(obj.body, "spec", "template", "spec") or {}).get("readinessGates")
    gated = isinstance(gates, list) and any(
        isinstance(g, dict) and g.get("conditionType") == annotations.WARM_GATE for g in gates
    )
    labels = _mapping(obj.body, "spec", "template", "metadata", "labels") or {}
    label = labels.get(annotations.WARMING_LABEL)
    gate_field = "spec.template.spec.readinessGates"
    label_field = "spec.template.metadata.labels"
    wanted_label = f'{annotations.WARMING_LABEL}: "true"'
    if not gated and label is None:
        return [
            obj.problem(
                f"{setting}: the pod template has neither the readiness gate "
                f"{annotations.WARM_GATE} ({gate_field}) nor the label {wanted_label} "
                f"({label_field}), so the controller never gates or ramps its new pods and "
                "the traffic router does nothing: add both"
            )
        ]
    findings = []
    if not gated:
        findings.append(
            obj.problem(
                f"{gate_field}: no conditionType {annotations.WARM_GATE}; {setting} needs it, "
                "or new pods take the Service's traffic before they are warm"
            )
        )
    if label is None:
        findings.append(
            obj.problem(
                f"{label_field}: no {wanted_label}; {setting} needs it, or new pods never join "
                "the ramp's warming set and get no traffic in steps"
            )
        )
    elif label != "true":
        where = f"{label_field}[{annotations.quote(annotations.WARMING_LABEL)}]"
        text = _yaml_text(label)
        rule = (
            'must be "true" (a string)'
            if isinstance(label, str)
            else f'YAML reads {annotations.escape(text)} as {_yaml_kind(label)}; write "true" in '
            "quotes"
        )
        findings.append(obj.problem(f"{where}={annotations.quote(text)}: {rule}"))
    return findings


def _cache_affinity(obj: _Object, config: annotations.ServiceConfig) -> list[Finding]:
    """A service that names its model for cache-aware placement, whose pods do not prefer the
    nodes warm for it: the term to add, once."""
    template = _mapping(obj.body, "spec", "template") or {}
    if config.model is None:
        return []
    served = modelid.model_of(template, annotated=config.model, size_gib=config.model_size_gib)
    if served is None or modelid.prefers(template, served.label):
        return []
    term = json.dumps(modelid.preference(served.label), separators=(", ", ": "))
    return [
        obj.warning(
            f"{annotations.show_key(annotations.PREFIX + 'model')} is set but "
            "spec.template.spec.affinity.nodeAffinity does not prefer the nodes warm for it, so "
            "new pods start cold on any node: add to "
            f"preferredDuringSchedulingIgnoredDuringExecution the term {term}"
        )
    ]


def _standby_gate(obj: _Object, value: str | None) -> list[Finding]:
    """A standby pool needs the readiness gate and the warming label: its pods wait warm with
    the gate closed, and would serve as soon as Ready without it."""
    gates = (_mapping(obj.body, "spec", "template", "spec") or {}).get("readinessGates")
    gated = isinstance(gates, list) and any(
        isinstance(g, dict) and g.get("conditionType") == annotations.WARM_GATE for g in gates
    )
    labels = _mapping(obj.body, "spec", "template", "metadata", "labels") or {}
    if gated and labels.get(annotations.WARMING_LABEL) == "true":
        return []
    return [
        obj.problem(
            f"{annotations.STANDBY_KEY}={annotations.quote(value or '')}: needs the readiness "
            f"gate {annotations.WARM_GATE} and the label {annotations.WARMING_LABEL}: "
            '"true" in the pod template, or the controller keeps no pool'
        )
    ]


def _replicas(obj: _Object, mode: str | None) -> list[Finding]:
    """`spec.replicas` in a managed manifest: each apply resets the controller's count."""
    spec = _mapping(obj.body, "spec") or {}
    if "replicas" not in spec or mode == annotations.Mode.DRY_RUN.value:
        return []  # In dry-run the controller writes nothing: the manifest's count stands.
    value = annotations.escape(_yaml_text(spec["replicas"]))
    return [
        obj.warning(
            f"spec.replicas={value}: the controller owns replicas; every kubectl apply of this "
            f"manifest resets them to {value}: leave spec.replicas out"
        )
    ]


def _lint_service(obj: _Object) -> list[Finding]:
    selector = _mapping(obj.body, "spec", "selector") or {}
    findings = []
    for key in _RAMP_LABELS:
        if key in selector:
            where = f"spec.selector[{annotations.quote(key)}]"
            value = annotations.quote(_yaml_text(selector[key]))
            findings.append(
                obj.problem(
                    f"{where}={value}: must not be in a selector: the controller relabels pods "
                    "as they warm up, and the Service would drop or gain them as it does"
                )
            )
    return findings


def _lint_other(obj: _Object) -> list[Finding]:
    raw = _mapping(obj.body, "metadata", "annotations") or {}
    keys = [k for k in raw if isinstance(k, str) and k.startswith(annotations.PREFIX)]
    if not keys:
        return []
    known = [kind for kind in targets.KINDS.values() if kind.kind == obj.kind]
    hint = (
        f"the autoscaler manages {known[0].api_version} {known[0].kind}s only"
        if known
        else "they only take effect on a Deployment, StatefulSet, LeaderWorkerSet or Rollout"
    )
    shown = ", ".join(annotations.show_key(k) for k in keys[:3])
    more = f" and {len(keys) - 3} more" if len(keys) > 3 else ""
    return [obj.problem(f"{shown}{more}: {hint}")]


def _ours(raw: Mapping[Any, Any]) -> tuple[dict[str, str], list[str]]:
    """Our annotations as text, and a problem for each value YAML did not read as a string."""
    ours: dict[str, str] = {}
    quoting: list[str] = []
    for key, value in raw.items():
        if not isinstance(key, str) or not key.startswith(annotations.PREFIX):
            continue
        if isinstance(value, str):
            ours[key] = value
            continue
        text = _yaml_text(value)
        quoting.append(
            f"{annotations.show_key(key)}: YAML reads {annotations.escape(text)} as "
            f"{_yaml_kind(value)}; annotations must be strings: write {annotations.quote(text)} "
            "in quotes"
        )
        # Parse the text as well, so one run reports what is wrong beyond the quotes.
        ours[key] = text
    return ours, quoting


def _conflicts(report: _Report) -> list[Finding]:
    findings = []
    for deployment in report.managed:
        for scaler in report.scalers:
            if _scales(scaler, deployment):
                findings.append(
                    deployment.problem(
                        f"{scaler.title} ({scaler.place.replace(': ', ', ')}) also scales it "
                        f"through spec.scaleTargetRef; the autoscaler refuses a {deployment.kind} "
                        "with two owners of replicas: remove one of them"
                    )
                )
    return findings


def _scales(scaler: _Object, deployment: _Object) -> bool:
    """Whether an HPA's or a ScaledObject's `scaleTargetRef` names the workload. Its kind
    defaults to Deployment (KEDA's default; an HPA requires it) and its apiVersion to apps/v1."""
    target = _mapping(scaler.body, "spec", "scaleTargetRef") or {}
    api_version, kind = target.get("apiVersion") or "apps/v1", target.get("kind", "Deployment")
    return (
        scaler.namespace == deployment.namespace
        and isinstance(api_version, str)
        and isinstance(kind, str)
        and targets.of(api_version, kind) is not None
        and targets.of(api_version, kind) is targets.of(deployment.api_version, deployment.kind)
        and target.get("name") == deployment.name
    )


def _mapping(body: Mapping[Any, Any], *path: str) -> Mapping[Any, Any] | None:
    node: object = body
    for step in path:
        if not isinstance(node, dict):
            return None
        node = node.get(step)
        if node is None:
            return {}
    return node if isinstance(node, dict) else None


def _yaml_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    return str(value)


def _yaml_kind(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if value is None:
        return "null"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return "a " + type(value).__name__


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _show_name(name: str) -> str:
    if not name:
        return "(unnamed)"
    return name if _NAME.fullmatch(name) else annotations.quote(name, limit=63)


def _show_kind(kind: str) -> str:
    if not kind:
        return "(no kind)"
    return kind if _KIND.fullmatch(kind) else annotations.quote(kind, limit=63)


def _show_source(source: str) -> str:
    return source if source.isprintable() and len(source) <= 4096 else annotations.quote(source)
