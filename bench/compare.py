"""Two benchmark runs side by side: the equal-SLO view of each, per scenario, start-up and policy.

    python -m bench.compare BEFORE/results.json AFTER/results.json
    python -m bench.compare --keep default BEFORE/results.json AFTER/results.json
    python -m bench.compare --spread default RESULTS.json

Prints one Markdown table: each policy's equal-SLO GPU-hours (with the target reached) and its
ratio to the oracle, before and after, and the signal the after run's baseline scaled on (for
HPA and KEDA, the better of their two variants). Rows follow the after run's scenarios and
regimes; a policy or scenario missing from one run reads "—". A policy is matched by its family
(`hpa-conc` is `hpa`), so a run from before the variants existed lines up.

`--keep POLICY` prints instead what a policy change is judged on (docs/benchmark.md, "How a
policy change is judged"): that policy's equal-SLO GPU-hours per cell before and after, the
total over the cells with a setting in both runs, the cells that lost or won a setting, and the
leave-one-scenario-out check, the same total with each scenario left out in turn, and how many
of those folds came out dearer, the cells whose misses at the default target rose by more than
a point, and the keep rule's verdict. When both runs were made with `--per-draw`, each cell's
line also gives the change on each draw searched alone, in draw order: a change that holds on
every draw is the rule's, one that flips sign between draws is the noise's.

Two runs are compared only on the same number of draws (`bench.run --seeds N`; a run from before
the draws existed had one): a figure pooled over three draws and one from a single draw differ by
the noise the draws average out, not by the change. `--spread POLICY` reads one run made with
`--seeds N --per-draw` and prints, per cell, that policy's equal-SLO GPU-hours on each draw
searched alone, their range (the change in that cell that one draw cannot tell from noise) and
the figure pooled over the draws.

It only reads the two `results.json` files.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
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

MISSES_UP_PCT = 1.0
"""A change may raise a cell's SLO misses at the default target by at most this many points: the
equal-SLO search judges each cell at its own best setting, and a rule that pays for a cheaper
setting with many more late requests at the shipped target is worse for whoever keeps it."""


class SeedsDifferError(ValueError):
    """The two runs were made on different numbers of draws."""


def seeds(results: Mapping[str, Any]) -> int:
    """The draws a run was made on (`bench.run --seeds`); 1 for a run from before they existed."""
    return int(results["config"].get("seeds", 1))


def same_seeds(before: Mapping[str, Any], after: Mapping[str, Any]) -> None:
    """`SeedsDifferError`, saying what to do, unless the two runs have the same number of draws."""
    b, a = seeds(before), seeds(after)
    if b != a:
        raise SeedsDifferError(
            f"the runs were made on different numbers of draws (before --seeds {b}, after "
            f"--seeds {a}): their figures differ by the noise the draws average out, not only "
            "by the change; run both with the same --seeds"
        )


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


@dataclass(frozen=True, slots=True)
class Judged:
    """A policy's equal-SLO GPU-hours in two runs, seen as a policy change is judged."""

    cells: dict[tuple[str, str], tuple[float | None, float | None]]
    """(scenario, regime) -> GPU-hours before and after, None where no setting met the SLO."""
    draws: dict[tuple[str, str], tuple[tuple[float | None, float | None], ...]] = field(
        default_factory=dict
    )
    """With both runs made with `--per-draw`: each draw's own GPU-hours before and after, in
    draw order, per cell; empty otherwise."""
    default_misses: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)
    """(scenario, regime) -> SLO misses at the default target before and after, in percent,
    for the cells both runs report them."""

    @property
    def both(self) -> list[tuple[str, str]]:
        """The cells with a setting in both runs, the ones the totals add up."""
        return [k for k, (b, a) in self.cells.items() if b is not None and a is not None]

    @property
    def lost(self) -> list[tuple[str, str]]:
        return [k for k, (b, a) in self.cells.items() if b is not None and a is None]

    @property
    def won(self) -> list[tuple[str, str]]:
        return [k for k, (b, a) in self.cells.items() if b is None and a is not None]

    def total(self, *, without: str | None = None) -> tuple[float, float]:
        """Before and after, over the cells with a setting in both, less one scenario's."""
        kept = [self.cells[k] for k in self.both if k[0] != without]
        return sum(b or 0.0 for b, _ in kept), sum(a or 0.0 for _, a in kept)

    def folds(self) -> list[tuple[str, float, float]]:
        """Leave one scenario out: (scenario left out, total before, total after)."""
        return [(s, *self.total(without=s)) for s in sorted({k[0] for k in self.both})]

    @property
    def misses_up(self) -> list[tuple[str, str]]:
        """The cells whose misses at the default target rose by more than `MISSES_UP_PCT`."""
        return [k for k, (b, a) in self.default_misses.items() if a - b > MISSES_UP_PCT + 1e-9]

    def refusals(self) -> list[str]:
        """Why the keep rule refuses the change; empty when it keeps it."""
        b, a = self.total()
        folds = self.folds()
        dearer = sum(fa > fb + 1e-9 for _, fb, fa in folds)
        reasons = []
        if not a < b - 1e-9:
            reasons.append("the total is not cheaper")
        if folds and 2 * dearer >= len(folds):
            reasons.append(f"{dearer} of {len(folds)} folds dearer")
        if self.lost:
            reasons.append("a cell lost its setting")
        if self.misses_up:
            reasons.append(f"misses at the default target up more than {MISSES_UP_PCT:g} point")
        return reasons


def judged(before: Mapping[str, Any], after: Mapping[str, Any], family: str) -> Judged:
    """`family`'s cells of the two runs, in the after run's order, present in both."""
    old, new = by_family(before), by_family(after)

    def gpu_hours(outcome: Mapping[str, Any]) -> float | None:
        best = outcome["equal_slo"]
        return None if best is None else float(best["gpu_hours"])

    cells: dict[tuple[str, str], tuple[float | None, float | None]] = {}
    misses: dict[tuple[str, str], tuple[float, float]] = {}
    draws: dict[tuple[str, str], tuple[tuple[float | None, float | None], ...]] = {}
    for scenario in after["config"]["scenarios"]:
        for regime in after["config"]["regimes"]:
            b, a = old.get((scenario, regime, family)), new.get((scenario, regime, family))
            if b is not None and a is not None:
                cells[scenario, regime] = (gpu_hours(b), gpu_hours(a))
                if b.get("default") and a.get("default"):
                    misses[scenario, regime] = (
                        float(b["default"]["slo_miss_pct"]),
                        float(a["default"]["slo_miss_pct"]),
                    )
                if b.get("draws") and a.get("draws"):
                    draws[scenario, regime] = tuple(
                        (gpu_hours(x), gpu_hours(y))
                        for x, y in zip(b["draws"], a["draws"], strict=True)
                    )
    return Judged(cells, draws, misses)


def keep_report(result: Judged) -> str:
    """The per-cell lines, the total, the settings lost or won and the folds, as text."""

    def shown(value: float | None) -> str:
        return "none" if value is None else f"{value:.1f}"

    def changed(b: float | None, a: float | None) -> str:
        if b is None:
            return "none" if a is None else "won"
        return "lost" if a is None else f"{a - b:+.1f}"

    head = f"{'cell':<28}{'before':>10}{'after':>10}{'change':>9}"
    lines = [head + ("   each draw alone: change" if result.draws else "")]
    for key, (b, a) in result.cells.items():
        change = "" if b is None or a is None else f"{a - b:+.1f}"
        line = f"{key[0] + ' ' + key[1]:<28}{shown(b):>10}{shown(a):>10}{change:>9}"
        if key in result.draws:
            line += "   " + " ".join(f"{changed(x, y):>6}" for x, y in result.draws[key])
        lines.append(line)
    b, a = result.total()
    lines.append(f"total over {len(result.both)} cells with a setting in both: {b:.1f} -> {a:.1f}")
    for name, cells in (("lost a setting", result.lost), ("won a setting", result.won)):
        if cells:
            lines.append(f"{name}: " + ", ".join(f"{s} {r}" for s, r in cells))
    folds = result.folds()
    dearer = 0
    for scenario, b, a in folds:
        worse = a > b + 1e-9
        dearer += worse
        lines.append(f"  without {scenario:<16}{b:9.1f} -> {a:9.1f}{'  dearer' if worse else ''}")
    lines.append(f"folds dearer: {dearer} of {len(folds)}")
    for key in result.misses_up:
        b, a = result.default_misses[key]
        lines.append(f"misses at the default target up: {key[0]} {key[1]} {b:.2f} % -> {a:.2f} %")
    refusals = result.refusals()
    lines.append(
        "keep rule: " + ("kept" if not refusals else "not kept (" + "; ".join(refusals) + ")")
    )
    return "\n".join(lines)


def spread(results: Mapping[str, Any], family: str) -> dict[tuple[str, str], Spread]:
    """`family`'s cells of a run made with `--seeds N --per-draw`: each draw's own equal-SLO
    GPU-hours and the pooled figure; `ValueError` when the run has no draws searched apart."""
    cells: dict[tuple[str, str], Spread] = {}
    for outcome in results["outcomes"]:
        if variants.family(outcome["policy"]) != family:
            continue
        draws = outcome.get("draws")
        if not draws:
            raise ValueError(
                "the run has no draws searched apart: make it with bench.run --seeds N --per-draw"
            )
        cells[outcome["scenario"], outcome["regime"]] = Spread(
            tuple(_gpu_hours(d) for d in draws), _gpu_hours(outcome)
        )
    return cells


@dataclass(frozen=True, slots=True)
class Spread:
    """One cell's equal-SLO GPU-hours on each draw searched alone, and pooled over them (None:
    no setting met the SLO)."""

    draws: tuple[float | None, ...]
    pooled: float | None

    @property
    def range(self) -> float | None:
        """Highest less lowest draw; None unless every draw has a setting."""
        if any(d is None for d in self.draws):
            return None
        values = [d for d in self.draws if d is not None]
        return max(values) - min(values)


def _gpu_hours(outcome: Mapping[str, Any]) -> float | None:
    best = outcome["equal_slo"]
    return None if best is None else float(best["gpu_hours"])


def spread_report(cells: Mapping[tuple[str, str], Spread]) -> str:
    """One line a cell: each draw, the range, the pooled figure; then the ranges' median and
    largest."""

    def shown(value: float | None) -> str:
        return "none" if value is None else f"{value:.1f}"

    count = max((len(c.draws) for c in cells.values()), default=0)
    head = "".join(f"{'draw ' + str(i):>9}" for i in range(count))
    lines = [f"{'cell':<28}{head}{'range':>8}{'pooled':>9}"]
    for (scenario, regime), cell in cells.items():
        each = "".join(f"{shown(d):>9}" for d in cell.draws)
        lines.append(
            f"{scenario + ' ' + regime:<28}{each}{shown(cell.range):>8}{shown(cell.pooled):>9}"
        )
    ranges = [c.range for c in cells.values() if c.range is not None]
    if ranges:
        lines.append(
            f"range over the {len(ranges)} cells with a setting on every draw: median "
            f"{statistics.median(ranges):.1f}, largest {max(ranges):.1f} GPU-hours"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.compare",
        description="Print the equal-SLO view of two benchmark runs side by side.",
    )
    parser.add_argument("before", type=Path, help="the earlier run's results.json")
    parser.add_argument(
        "after", type=Path, nargs="?", help="the later run's results.json (not with --spread)"
    )
    parser.add_argument(
        "--keep",
        metavar="POLICY",
        help="judge one policy's change instead: per cell, the total, settings lost or won, "
        "and the leave-one-scenario-out folds",
    )
    parser.add_argument(
        "--spread",
        metavar="POLICY",
        help="read one run made with --seeds N --per-draw: each cell's equal-SLO GPU-hours on "
        "each draw alone, their range and the pooled figure",
    )
    args = parser.parse_args(argv)
    before = json.loads(args.before.read_text(encoding="utf-8"))
    if args.spread is not None:
        if args.after is not None or args.keep is not None:
            parser.error("--spread reads one run: give one results.json and no --keep")
        try:
            print(spread_report(spread(before, args.spread)))
        except ValueError as e:
            parser.error(str(e))
        return 0
    if args.after is None:
        parser.error("give the before and the after results.json")
    after = json.loads(args.after.read_text(encoding="utf-8"))
    try:
        same_seeds(before, after)
    except SeedsDifferError as e:
        parser.error(str(e))
    if args.keep is not None:
        print(keep_report(judged(before, after, args.keep)))
    else:
        print(table(before, after))
    return 0


if __name__ == "__main__":
    sys.exit(main())
