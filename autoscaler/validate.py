"""`autoscaler validate -f FILE`: lint the autoscaler annotations in Kubernetes manifests offline.

For service owners' CI: reads multi-document YAML (and `kind: List`), parses every apps/v1
Deployment that opts in with `annotations.parse`, and reports one problem per line as
`SOURCE: Deployment NAMESPACE/NAME: <problem>`. It also catches what `parse` cannot see from one
Deployment's annotations: unquoted values (Kubernetes rejects non-string annotations), keys on
the pod template or on other kinds (where they do nothing), settings without the `enabled`
switch (most often a misspelt switch), and a HorizontalPodAutoscaler or KEDA ScaledObject that
scales the same Deployment (DESIGN §7: one owner of `replicas`).

No cluster access. Every name or value taken from a manifest reaches the output through
`annotations.quote` or a plain-name check, never raw.
"""

import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import yaml

from autoscaler import annotations

_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_KIND = re.compile(r"[A-Za-z][A-Za-z0-9]{0,62}")
_SCALERS = {
    "HorizontalPodAutoscaler": "autoscaling/",
    "ScaledObject": "keda.sh/",
}


@dataclass(frozen=True, slots=True)
class _Object:
    """One Kubernetes object found in a manifest."""

    source: str
    kind: str
    api_version: str
    namespace: str
    name: str
    body: Mapping[Any, Any]

    @property
    def title(self) -> str:
        return f"{_show_kind(self.kind)} {_show_name(self.namespace)}/{_show_name(self.name)}"

    def line(self, problem: str) -> str:
        return f"{self.source}: {self.title}: {problem}"


@dataclass(slots=True)
class _Report:
    lines: list[str] = field(default_factory=list)
    managed: list[_Object] = field(default_factory=list)
    """Deployments that opt in, valid or not, for the scaler conflict check."""
    scalers: list[_Object] = field(default_factory=list)


def validate_text(text: str, *, source: str) -> list[str]:
    """Problems in one manifest text, one line each; an empty list means it is valid."""
    report = _Report()
    _lint_text(text, source=_show_source(source), report=report)
    return report.lines + _conflicts(report)


def main(paths: Sequence[str], stdout: TextIO, stderr: TextIO) -> int:
    """Lint every file (`-` is standard input): 0 valid, 1 problems found, 2 unreadable input."""
    if not paths:
        stderr.write("autoscaler validate: no manifest given (-f FILE)\n")
        return 2
    report = _Report()
    unreadable = False
    for path in paths:
        shown = _show_source(path)
        try:
            text = _read(path)
        except OSError as e:
            stderr.write(f"{shown}: cannot read: {e.strerror or e.__class__.__name__}\n")
            unreadable = True
            continue
        except UnicodeDecodeError:
            stderr.write(f"{shown}: cannot read: not UTF-8 text\n")
            unreadable = True
            continue
        _lint_text(text, source=shown, report=report)
    lines = report.lines + _conflicts(report)
    for line in lines:
        stdout.write(line + "\n")
    if unreadable:
        return 2
    if lines:
        return 1
    count = len(report.managed)
    files = len(paths)
    stdout.write(
        f"OK: {count} autoscaled Deployment{'s' if count != 1 else ''} "
        f"in {files} file{'s' if files != 1 else ''}, no problems\n"
    )
    return 0


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8") as f:
        return f.read()


def _lint_text(text: str, *, source: str, report: _Report) -> None:
    try:
        for index, document in enumerate(yaml.safe_load_all(text), start=1):
            _lint_document(document, source=source, index=index, report=report)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        what = e.problem or e.context or "unreadable YAML"
        report.lines.append(f"{where}: YAML syntax error: {annotations.escape(what, limit=200)}")
    except yaml.YAMLError as e:
        report.lines.append(f"{source}: YAML syntax error: {annotations.escape(str(e), limit=200)}")
    except RecursionError:
        report.lines.append(f"{source}: YAML nested too deeply to be a manifest")


def _lint_document(document: object, *, source: str, index: int, report: _Report) -> None:
    if document is None:
        return
    if not isinstance(document, dict):
        report.lines.append(f"{source}: document {index}: not a Kubernetes object (a mapping)")
        return
    for obj in _objects(document, source=source):
        if obj.kind == "Deployment" and obj.api_version == "apps/v1":
            report.lines += _lint_deployment(obj, report)
        else:
            report.lines += _lint_other(obj)
            prefix = _SCALERS.get(obj.kind)
            if prefix is not None and obj.api_version.startswith(prefix):
                report.scalers.append(obj)


def _objects(document: Mapping[Any, Any], *, source: str) -> Iterator[_Object]:
    items = document.get("items")
    kind = document.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and isinstance(items, list):
        for item in items:
            if isinstance(item, dict):
                yield from _objects(item, source=source)
        return
    metadata = document.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    yield _Object(
        source=source,
        kind=kind if isinstance(kind, str) else "",
        api_version=_str(document.get("apiVersion")),
        namespace=_str(metadata.get("namespace")) or "default",
        name=_str(metadata.get("name")),
        body=document,
    )


def _lint_deployment(obj: _Object, report: _Report) -> list[str]:
    lines: list[str] = []
    raw = _mapping(obj.body, "metadata", "annotations")
    if raw is None:
        return [obj.line("metadata.annotations must be a mapping of strings")]
    ours, quoting = _ours(raw)
    lines += [obj.line(p) for p in quoting]
    template = _mapping(obj.body, "spec", "template", "metadata", "annotations") or {}
    for key in template:
        if isinstance(key, str) and key.startswith(annotations.PREFIX):
            where = "spec.template.metadata.annotations"
            lines.append(
                obj.line(
                    f"{annotations.show_key(key)} in {where} has no effect; "
                    "put it in the Deployment's metadata.annotations"
                )
            )
    settings = {k: v for k, v in ours.items() if k not in annotations.CONTROLLER_KEYS}
    if not settings:
        return lines
    enabled = settings.get(annotations.ENABLED_KEY)
    if enabled == "false":
        return lines  # Switched off on purpose; its settings wait for the switch.
    if enabled is None:
        # Settings without the switch are most often a forgotten or misspelt `enabled`: say
        # so, with the unknown-key suggestions that catch the misspelling.
        lines += [obj.line(p.message) for p in annotations.unknown_keys(settings)]
        lines.append(
            obj.line(
                f"{annotations.ENABLED_KEY} is missing, so the autoscaler ignores the "
                f"{annotations.PREFIX} annotations here"
            )
        )
        return lines
    if enabled == "true":
        report.managed.append(obj)
    result = annotations.parse(settings, namespace=obj.namespace)
    if isinstance(result, annotations.Invalid):
        lines += [obj.line(p.message) for p in result.problems]
    return lines


def _lint_other(obj: _Object) -> list[str]:
    raw = _mapping(obj.body, "metadata", "annotations") or {}
    keys = [k for k in raw if isinstance(k, str) and k.startswith(annotations.PREFIX)]
    if not keys:
        return []
    hint = (
        "the autoscaler manages apps/v1 Deployments only"
        if obj.kind == "Deployment"
        else "they only take effect on an apps/v1 Deployment"
    )
    shown = ", ".join(annotations.show_key(k) for k in keys[:3])
    more = f" and {len(keys) - 3} more" if len(keys) > 3 else ""
    return [obj.line(f"{shown}{more}: {hint}")]


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


def _conflicts(report: _Report) -> list[str]:
    lines = []
    for deployment in report.managed:
        for scaler in report.scalers:
            target = _mapping(scaler.body, "spec", "scaleTargetRef") or {}
            kind = target.get("kind", "Deployment")
            if (
                scaler.namespace == deployment.namespace
                and kind == "Deployment"
                and target.get("name") == deployment.name
            ):
                lines.append(
                    deployment.line(
                        f"{scaler.title} also scales it; the autoscaler refuses a Deployment "
                        f"with two owners of replicas: remove one of them"
                    )
                )
    return lines


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
