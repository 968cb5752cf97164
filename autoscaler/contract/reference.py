"""The annotation reference in docs/md, generated from the model and the presets.

`python -m autoscaler.contract.reference [--update docs/md]` prints it, or splices it
between the markers; a test fails when the document and the model disagree.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from autoscaler import metricnames
from autoscaler.contract.annotations import (
    CORRUPT_STATE,
    CROSS_RULES,
    PARSERS,
    PREFIX,
    RAMP_KEY,
    REFERENCE_BEGIN,
    REFERENCE_END,
    STATE_KEY,
    STATUS_KEY,
    Annotations,
    alias_of,
)


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
    return f"`{PARSERS[name].show(info.default)}`"


def _names_text(*names: str | None, label: str | None = None, values: Sequence[str] = ()) -> str:
    shown = [f"`{name}`" for name in names if name is not None]
    if label is not None and len(shown) == 1:
        alternatives = "|".join(values)
        shown = [f'`{names[0]}{{{label}=~"{alternatives}"}}`']
    return " + ".join(shown) if shown else "—"


def reference_markdown() -> str:
    """The annotation reference (docs/md), from `Annotations` and the presets."""
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
        key = f"`{alias_of(name)}`"
        meaning = info.description or ""
        rule = PARSERS[name].rule
        lines.append(f"| {key} | {_cell(meaning)} | {_cell(_default_text(name))} | {_cell(rule)} |")
    lines += ["", "Rules across keys:", ""]
    lines += [f"- {rule.summary}" for rule in CROSS_RULES]
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
    begin, end = (
        document.find(REFERENCE_BEGIN),
        document.find(REFERENCE_END),
    )
    if begin < 0 or end < begin:
        return None
    head = document[: begin + len(REFERENCE_BEGIN)]
    return head + "\n" + section + document[end:]


def section_of(document: str) -> str | None:
    """The text between the reference markers, without the newline after the first; None without."""
    begin, end = (
        document.find(REFERENCE_BEGIN),
        document.find(REFERENCE_END),
    )
    if begin < 0 or end < begin:
        return None
    return document[begin + len(REFERENCE_BEGIN) : end].removeprefix("\n")


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m autoscaler.contract.reference [--update FILE]`: print the reference, or splice it
    into FILE (docs/md) between the markers."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        sys.stdout.write(reference_markdown())
        return 0
    if len(args) != 2 or args[0] != "--update":
        sys.stderr.write("usage: python -m autoscaler.contract.reference [--update docs/md]\n")
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
