"""The placement ladder on a fragmented cluster (docs/architecture.md, "The placement ladder" and
"Accounting"; docs/benchmark.md): what it saves against whole cards alone, and what it costs.

    python -m bench.placement [--duration-s S] [--model-memory-gib G] [--out DIR] [--quiet]

The bundled Azure LLM conversation trace (real, 1 h, rate-scaled so its busiest minute needs 40
replicas' worth at the load target) runs on `sim.params.FRAGMENTED`: 24 free whole A100-40GB
cards, one A800-80GB node with 8 free 3g.40gb MIG slices, and 16 time-sliced RTX 4090s with 8
GiB and two shares free each. The model needs 6 GiB (`--model-memory-gib`), so each RTX 4090
holds one copy. Two runs on the same trace, policy, capacity model and seed: `ladder` (the
`placement: auto` annotation: whole cards, then MIG, then shares) and `whole` (whole cards only;
what does not fit waits). At the busiest minute the ladder runs out of whole cards, then of
slices, and puts the rest on shares.

Per run: SLO misses (late or dropped requests), pending replica-seconds (pods created but
waiting for a GPU), core-hours (GPU time weighted by card product and the part of a card held:
docs/architecture.md, "Accounting"), GPU-hours (pod-hours holding any GPU resource) and pod-hours
per tier. A MIG slice or a share serves in proportion to the part of the card it holds
(`SimParams.tier_speeds` changes that). Prints a Markdown table; writes `results.json` to `--out`.

It must not change the simulator or the policies: it only chooses their inputs and reads their
results.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoscaler import logs
from autoscaler.experiment import run as sim_run
from autoscaler.sim.params import FRAGMENTED, GIB, SimParams
from bench import common, scenarios

MODEL_MEMORY_GIB = 6.0
BASE = SimParams(max_replicas=100, nodes=FRAGMENTED, model_memory_mib=int(MODEL_MEMORY_GIB * GIB))
"""The capacity model, policy, bounds, cluster and seed of every run."""
DURATION_S = 3600
DEFAULT_OUT = Path("bench-out") / "placement"
RUNS = ("ladder", "whole")
"""The `SimParams.placement` of each run, in the table's order."""

COLUMNS = (
    "placement",
    "SLO misses",
    "missed",
    "pending replica-s",
    "core-h",
    "GPU-h",
    "mean replicas",
    "pod-h per tier",
)


@dataclass(frozen=True, slots=True)
class Config:
    duration_s: int = DURATION_S
    base: SimParams = BASE


@dataclass(frozen=True, slots=True)
class Row:
    """What one run measured."""

    placement: str
    requests: float
    slo_misses: float
    slo_miss_pct: float
    pending_replica_s: float
    core_hours: float
    gpu_hours: float
    mean_replicas: float
    tier_pod_hours: dict[str, float]
    p95_latency_s: float | None


def scenario(config: Config) -> scenarios.Scenario:
    """The Azure trace, cut to `config.duration_s`."""
    return scenarios.azure_conv(config.base).truncated(config.duration_s)


def evaluate(placement: str, trace: scenarios.Scenario, config: Config) -> Row:
    """Simulate one placement on the fragmented cluster, and measure it."""
    params = dataclasses.replace(config.base, placement=placement)
    summary = sim_run.simulate(trace.arrivals, params).summary
    tiers: dict[str, float] = summary["placement"]["tier_replica_s"]
    p95 = summary["p95_latency_s"]
    return Row(
        placement=placement,
        requests=float(summary["requests"]),
        slo_misses=float(summary["slo_misses"]),
        slo_miss_pct=float(summary["slo_miss_pct"]),
        pending_replica_s=float(summary["pending_replica_s"]),
        core_hours=float(summary["core_hours"]),
        gpu_hours=float(summary["gpu_hours"]),
        mean_replicas=float(summary["mean_replicas"]),
        tier_pod_hours={tier: seconds / 3600.0 for tier, seconds in tiers.items()},
        p95_latency_s=None if p95 is None else float(p95),
    )


def run(config: Config) -> list[Row]:
    """The ladder and whole cards alone, on the same trace."""
    trace = scenario(config)
    return [evaluate(placement, trace, config) for placement in RUNS]


def markdown(rows: Sequence[Row]) -> str:
    lines = [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join([":--"] + ["--:"] * (len(COLUMNS) - 2) + [":--"]) + "|",
    ]
    for row in rows:
        tiers = ", ".join(f"{tier} {hours:.1f}" for tier, hours in row.tier_pod_hours.items())
        cells = (
            row.placement,
            f"{row.slo_miss_pct:.2f} %",
            f"{row.slo_misses:.0f}",
            f"{row.pending_replica_s:.0f}",
            f"{row.core_hours:.0f}",
            f"{row.gpu_hours:.1f}",
            f"{row.mean_replicas:.1f}",
            tiers or "-",
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write(rows: Sequence[Row], config: Config, out: Path, trace: scenarios.Scenario) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    document: dict[str, Any] = {
        "scenario": {
            "name": trace.name,
            "description": trace.description,
            "duration_s": trace.duration_s,
        },
        "params": config.base.as_dict(),
        "runs": [dataclasses.asdict(row) for row in rows],
    }
    return common.write_json(out / "results.json", document)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    base = dataclasses.replace(BASE, model_memory_mib=round(args.model_memory_gib * GIB))
    config = Config(duration_s=args.duration_s, base=base)
    logs.configure(json=True, level="warning")
    rows = run(config)
    path = write(rows, config, args.out, scenario(config))
    print(markdown(rows), end="")
    if not args.quiet:
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.placement",
        description="The placement ladder against whole cards alone on a fragmented cluster, "
        "under the bundled Azure trace: a Markdown table on stdout, results.json in --out.",
    )
    parser.add_argument(
        "--duration-s",
        type=common.positive_int,
        default=DURATION_S,
        metavar="S",
        help="simulated seconds of the trace (default: all of it, %(default)s)",
    )
    parser.add_argument(
        "--model-memory-gib",
        type=common.positive_float,
        default=MODEL_MEMORY_GIB,
        metavar="G",
        help="GPU memory the model needs, GiB (default: %(default)s)",
    )
    common.add_output_arguments(parser, DEFAULT_OUT)
    return parser


if __name__ == "__main__":
    sys.exit(main())
