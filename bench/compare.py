"""Two benchmark runs side by side: the equal-SLO view of each, per scenario, start-up and policy.

    python -m bench.compare BEFORE/results.json AFTER/results.json

Prints one Markdown table: each policy's equal-SLO GPU-hours (with the target reached) and its
ratio to the oracle, before and after, and the signal the after run's baseline scaled on (for
HPA and KEDA, the better of their two variants). Rows follow the after run's scenarios and
regimes; a policy or scenario missing from one run reads "—". A policy is matched by its family
(`hpa-conc` is `hpa`), so a run from before the variants existed lines up.

It only reads the two `results.json` files.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autoscaler.experiment import variants

FAMILIES = ("seed", "default", "hpa", "keda", "kpa", "oracle")
COLUMNS = (
    "scenario",
    "start-up",
    "policy",
    "before GPU-h (target)",
    "before \N{MULTIPLICATION SIGN}oracle",
    "after GPU-h (target)",
    "after \N{MULTIPLICATION SIGN}oracle",
    "after: runs on",
)
_LEFT = {0, 1, 2, 7}
_BASELINE_SIGNALS = {"rate", "concurrency"}

Key = tuple[str, str, str]


def by_family(results: Mapping[str, Any]) -> dict[Key, Mapping[str, Any]]:
    """The outcomes of one `results.json` by (scenario, regime, family)."""
    return {
        (o["scenario"], o["regime"], variants.family(o["policy"])): o for o in results["outcomes"]
    }


def _cells(outcome: Mapping[str, Any] | None) -> tuple[str, str]:
    if outcome is None:
        return "—", "—"
    best = outcome["equal_slo"]
    if best is None:
        return "none", "n/a"
    ratio = outcome["equal_slo_vs_oracle"]
    return (
        f"{best['gpu_hours']:.1f} ({best['utilisation']:.2f})",
        "n/a" if ratio is None else f"{ratio:.2f}",
    )


def table(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    """The side-by-side Markdown table."""
    old, new = by_family(before), by_family(after)
    rows: list[list[str]] = []
    for scenario in after["config"]["scenarios"]:
        for regime in after["config"]["regimes"]:
            for i, name in enumerate(FAMILIES):
                now = new.get((scenario, regime, name))
                signal = variants.signal(now["policy"]) if now is not None else ""
                rows.append(
                    [
                        scenario if i == 0 else "",
                        regime if i == 0 else "",
                        name,
                        *_cells(old.get((scenario, regime, name))),
                        *_cells(now),
                        signal if signal in _BASELINE_SIGNALS else "",
                    ]
                )
    widths = [max(len(r[i]) for r in [list(COLUMNS), *rows]) for i in range(len(COLUMNS))]

    def line(cells: Sequence[str]) -> str:
        padded = [
            c.ljust(w) if i in _LEFT else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join(
        "-" * (w + 2) if i in _LEFT else "-" * (w + 1) + ":" for i, w in enumerate(widths)
    )
    return "\n".join([line(COLUMNS), rule + "|", *(line(r) for r in rows)])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.compare",
        description="Print the equal-SLO view of two benchmark runs side by side.",
    )
    parser.add_argument("before", type=Path, help="the earlier run's results.json")
    parser.add_argument("after", type=Path, help="the later run's results.json")
    args = parser.parse_args(argv)
    before = json.loads(args.before.read_text(encoding="utf-8"))
    after = json.loads(args.after.read_text(encoding="utf-8"))
    print(table(before, after))
    return 0


if __name__ == "__main__":
    sys.exit(main())
