"""The model a Deployment's pod template serves, and the preferred node affinity toward the
nodes warm for it (docs/operations.md, "Cache-aware placement").

`model_of` reads the containers of a pod template into `core.cache.identify`'s terms (the
`model` annotation, when set, wins); `preference` is the affinity term the tier Deployments
carry and the service owner adds once, `with_preference` adds it to a template and `prefers`
says whether a template has it.

Pure: plain JSON-like values in and out, no I/O, no Kubernetes client types.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from autoscaler.core import cache

DEFAULT_WEIGHT: Final = 50
"""The preferred node affinity term's weight (1 to 100) unless the settings say otherwise."""


def containers(template: Mapping[str, Any]) -> list[cache.Container]:
    """The containers of a pod template as the identity rules read them: image, `command` then
    `args`, and literal environment values."""
    spec = template.get("spec")
    found = []
    for raw in (spec.get("containers") if isinstance(spec, Mapping) else None) or ():
        if not isinstance(raw, Mapping):
            continue
        words = [*(raw.get("command") or ()), *(raw.get("args") or ())]
        env = {
            e["name"]: e["value"]
            for e in raw.get("env") or ()
            if isinstance(e, Mapping)
            and isinstance(e.get("name"), str)
            and isinstance(e.get("value"), str)
        }
        image = raw.get("image")
        found.append(
            cache.Container(image if isinstance(image, str) else "", tuple(map(str, words)), env)
        )
    return found


def model_of(
    template: Mapping[str, Any], *, annotated: str | None, size_gib: float | None
) -> cache.Model | None:
    """The model a pod template serves (`core.cache.identify`)."""
    return cache.identify(containers(template), annotated=annotated, size_gib=size_gib)


def preference(label: str, *, weight: int = DEFAULT_WEIGHT) -> dict[str, Any]:
    """The preferred node affinity term toward the nodes carrying `label`."""
    return {
        "weight": weight,
        "preference": {"matchExpressions": [{"key": label, "operator": "Exists"}]},
    }


def prefers(template: Mapping[str, Any], label: str) -> bool:
    """Whether a pod template already prefers the nodes carrying `label`."""
    spec = template.get("spec")
    affinity = spec.get("affinity") if isinstance(spec, Mapping) else None
    node = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    terms = node.get("preferredDuringSchedulingIgnoredDuringExecution") if node else None
    for term in terms if isinstance(terms, list) else ():
        chosen = term.get("preference") if isinstance(term, Mapping) else None
        expressions = chosen.get("matchExpressions") if isinstance(chosen, Mapping) else None
        for expression in expressions if isinstance(expressions, list) else ():
            if isinstance(expression, Mapping) and expression.get("key") == label:
                return True
    return False


def with_preference(template: dict[str, Any], term: Mapping[str, Any]) -> dict[str, Any]:
    """`template`, changed in place, with `term` among its preferred node affinity terms (once:
    a template that already prefers that label is left as it is)."""
    label = term["preference"]["matchExpressions"][0]["key"]
    if prefers(template, label):
        return template
    spec = template.setdefault("spec", {})
    node = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    node.setdefault("preferredDuringSchedulingIgnoredDuringExecution", []).append(dict(term))
    return template
