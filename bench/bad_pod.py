"""The bad-pod scenario (docs/architecture.md, "The warm-up gate and the traffic ramp";
docs/benchmark.md): what the warm-up gate and the traffic ramp save when a new pod is bad, and what
they cost.

    python -m bench.bad_pod [--traces rise,step] [--router ROUTER] [--duration-s S]
                            [--out DIR] [--quiet]

One service starts at 8 replicas' worth of load (Poisson counts around the rate, from a fixed
seed) and the policy scales it up as the load grows, on one of two traces:

- `rise`: the load climbs steadily to 16 replicas' worth between 5 and 25 minutes, then holds:
  the policy adds pods a few at a time, while the serving ones still have headroom;
- `step`: the load triples at 10 minutes: the new pods are needed at once, and every minute the
  ramp holds them back is a minute of overload.

The first pod created after the start is bad: `slow` (service time x3 and a third of the
throughput, so every request it takes misses the SLO) or `failing` (30 % of its requests fail,
warm-up probes included). Each case runs with the ramp (`--router`, Istio by default) and without
it (a new pod takes its full share as soon as it is warm); so does a case with no bad pod, for
the ramp's own cost. Every run has the same trace, capacity model, policy and seed. A replica
completes up to 10 requests/s here (a batching server), so a ramp step of 1 % of the traffic
still sees enough requests to judge.

Per run: SLO misses (late, dropped, failed or rejected requests, as a share and a count), failed
requests, time to capacity (seconds from the start of the rise until the serving pods' capacity
first covers the final load's mean rate; with the ramp a pod counts once promoted), GPU-hours,
pods reclaimed and ramp rollbacks. Prints a Markdown table; writes `results.json` to `--out`.

It must not change the simulator or the policies: it only chooses their inputs and reads their
results.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from autoscaler import logs
from autoscaler.core.ramp import RAMP_ROLLED_BACK, WARMUP_TIMED_OUT
from autoscaler.experiment import run as sim_run
from autoscaler.sim.params import RAMP_ROUTERS, PodFault, SimParams
from bench import common

FloatArray = npt.NDArray[np.float64]

CASES: dict[str, tuple[PodFault, ...]] = {
    "no bad pod": (),
    "slow": (PodFault(0, slow_factor=3.0),),
    "failing": (PodFault(0, error_ratio=0.3),),
}
"""The new pods' faults per case: the first pod created after the start is the bad one."""
OFF = "off"
"""The `ramp` of runs without the ramp."""

MU_RPS = 10.0
BASE = SimParams(
    max_replicas=100,
    replica_capacity_rps=MU_RPS,
    target_queue_per_replica=2.0 * MU_RPS,
)
"""The capacity model, policy, bounds and seed of every run: the simulator's defaults, with a
replica ten times as fast and the queue target scaled to match (two seconds of work each)."""
START_REPLICAS = 8.0
"""The opening load, in replicas' worth at the load target."""
DURATION_S = 1800
DEFAULT_ROUTER = "istio"
DEFAULT_OUT = Path("bench-out") / "bad-pod"
_TRACE_SEED = 7


@dataclass(frozen=True, slots=True)
class Trace:
    name: str
    description: str
    arrivals: FloatArray
    rise_at_s: int
    """When the load starts to grow."""
    final_from_s: int
    """When it reaches its final level (held to the end)."""

    @property
    def final_rps(self) -> float:
        """The mean arrival rate at the final level."""
        return float(np.mean(self.arrivals[self.final_from_s :]))

    def time_to_capacity(self, capacity_rps: FloatArray) -> float | None:
        """Seconds from the start of the rise until serving capacity first covers the final
        level's mean rate; None when it never does."""
        reached = np.flatnonzero(capacity_rps[self.rise_at_s :] >= self.final_rps - 1e-9)
        return float(reached[0]) if len(reached) else None


def _rise(t: FloatArray) -> tuple[FloatArray, int, int]:
    start, end = 300, 1500
    return np.clip(START_REPLICAS * (1.0 + (t - start) / (end - start)), 8.0, 16.0), start, end


def _step(t: FloatArray) -> tuple[FloatArray, int, int]:
    at = 600
    return np.where(t < at, START_REPLICAS, 3.0 * START_REPLICAS), at, at


SHAPES: dict[str, tuple[str, Callable[[FloatArray], tuple[FloatArray, int, int]]]] = {
    "rise": ("8 to 16 replicas' worth between 5 and 25 min", _rise),
    "step": ("8 replicas' worth, 3x from 10 min", _step),
}
TRACES = tuple(SHAPES)


@dataclass(frozen=True, slots=True)
class Config:
    traces: tuple[str, ...] = TRACES
    router: str = DEFAULT_ROUTER
    duration_s: int = DURATION_S
    base: SimParams = BASE


@dataclass(frozen=True, slots=True)
class Row:
    """What one run measured."""

    trace: str
    case: str
    ramp: str
    """The router, or `OFF`."""
    requests: float
    slo_misses: float
    slo_miss_pct: float
    failed: float
    rejected: float
    time_to_capacity_s: float | None
    """None when capacity never covered the final load."""
    gpu_hours: float
    pods_reclaimed: int
    rollbacks: int
    warmup_timeouts: int
    p95_latency_s: float | None


def build(name: str, config: Config) -> Trace:
    """The trace `name`, `config.duration_s` long; `ValueError` naming the known ones."""
    if name not in SHAPES:
        raise ValueError(f"unknown trace {name!r}; known: {', '.join(TRACES)}")
    description, shape = SHAPES[name]
    t = np.arange(config.duration_s, dtype=np.float64)
    replicas, rise_at, final_from = shape(t)
    if final_from >= config.duration_s:
        raise ValueError(f"trace {name} needs more than {final_from} s")
    rate = replicas * config.base.target_load_per_replica
    arrivals = np.random.default_rng(_TRACE_SEED).poisson(rate).astype(np.float64)
    minutes = f"{config.duration_s / 60:g} min"
    return Trace(name, f"{description}, for {minutes}", arrivals, rise_at, final_from)


def params_for(case: str, ramp: str, config: Config) -> SimParams:
    return dataclasses.replace(config.base, ramp=None if ramp == OFF else ramp, faults=CASES[case])


def evaluate(trace: Trace, case: str, ramp: str, config: Config) -> Row:
    """Simulate one case with or without the ramp, and measure it."""
    result = sim_run.simulate(trace.arrivals, params_for(case, ramp, config))
    summary = result.summary
    # Without a ramp or a fault the run is the plain model: nothing fails, nothing is rejected.
    ramp_summary: dict[str, Any] = summary.get("ramp") or {}
    events: dict[str, int] = ramp_summary.get("events", {})
    p95 = summary["p95_latency_s"]
    return Row(
        trace=trace.name,
        case=case,
        ramp=ramp,
        requests=float(summary["requests"]),
        slo_misses=float(summary["slo_misses"]),
        slo_miss_pct=float(summary["slo_miss_pct"]),
        failed=float(summary.get("failed", 0.0)),
        rejected=float(summary.get("rejected", 0.0)),
        time_to_capacity_s=trace.time_to_capacity(result.timeseries["capacity_rps"]),
        gpu_hours=float(summary["gpu_hours"]),
        pods_reclaimed=int(ramp_summary.get("pods_reclaimed", 0)),
        rollbacks=int(events.get(RAMP_ROLLED_BACK, 0)),
        warmup_timeouts=int(events.get(WARMUP_TIMED_OUT, 0)),
        p95_latency_s=None if p95 is None else float(p95),
    )


def run(config: Config) -> list[Row]:
    """Every trace and case, with the ramp and without."""
    rows = []
    for name in config.traces:
        trace = build(name, config)
        for case in CASES:
            for ramp in (config.router, OFF):
                rows.append(evaluate(trace, case, ramp, config))
    return rows


COLUMNS = (
    "trace",
    "bad pod",
    "ramp",
    "SLO misses",
    "missed",
    "failed",
    "time to capacity",
    "GPU-h",
    "reclaimed",
    "rollbacks",
)


def markdown(rows: Sequence[Row]) -> str:
    lines = [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join([":--"] * 3 + ["--:"] * (len(COLUMNS) - 3)) + "|",
    ]
    previous: tuple[str, str] | None = None
    for row in rows:
        ttc = "never" if row.time_to_capacity_s is None else f"{row.time_to_capacity_s:.0f} s"
        same_trace = previous is not None and previous[0] == row.trace
        cells = (
            "" if same_trace else row.trace,
            "" if same_trace and previous == (row.trace, row.case) else row.case,
            row.ramp,
            f"{row.slo_miss_pct:.2f} %",
            f"{row.slo_misses:.0f}",
            f"{row.failed:.0f}",
            ttc,
            f"{row.gpu_hours:.2f}",
            str(row.pods_reclaimed),
            str(row.rollbacks),
        )
        previous = (row.trace, row.case)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write(rows: Sequence[Row], config: Config, out: Path) -> Path:
    """`results.json` in `out`: the traces, the cases, the params and every run."""
    out.mkdir(parents=True, exist_ok=True)
    traces = {}
    for name in config.traces:
        trace = build(name, config)
        traces[name] = {
            "description": trace.description,
            "duration_s": len(trace.arrivals),
            "rise_at_s": trace.rise_at_s,
            "final_from_s": trace.final_from_s,
            "final_rps": trace.final_rps,
        }
    document: dict[str, Any] = {
        "traces": traces,
        "router": config.router,
        "cases": {name: [dataclasses.asdict(f) for f in faults] for name, faults in CASES.items()},
        "params": config.base.as_dict(),
        "runs": [dataclasses.asdict(row) for row in rows],
    }
    return common.write_json(out / "results.json", document)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    config = Config(traces=args.traces, router=args.router, duration_s=args.duration_s)
    try:
        for name in config.traces:
            build(name, config)
    except ValueError as e:
        print(f"python -m bench.bad_pod: {e}; raise --duration-s", file=sys.stderr)
        return 2
    # The simulated controller logs every decision and ramp step at info.
    logs.configure(json=True, level="error")
    rows = run(config)
    path = write(rows, config, args.out)
    print(markdown(rows), end="")
    if not args.quiet:
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _names(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in SHAPES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown trace {', '.join(unknown) or text!r}; known: {', '.join(TRACES)}"
        )
    return names


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.bad_pod",
        description="A bad new pod (slow, failing) while the load grows, with the warm-up "
        "gate and the traffic ramp and without: a Markdown table on stdout, results.json in "
        "--out.",
    )
    parser.add_argument(
        "--traces",
        type=_names,
        default=TRACES,
        metavar="A,B",
        help=f"comma-separated (default: {','.join(TRACES)})",
    )
    parser.add_argument(
        "--router",
        choices=[r for r in RAMP_ROUTERS if r != "none"],
        default=DEFAULT_ROUTER,
        help="the ramp's traffic router (default: %(default)s)",
    )
    parser.add_argument(
        "--duration-s",
        type=common.positive_int,
        default=DURATION_S,
        metavar="S",
        help="simulated seconds per run (default: %(default)s)",
    )
    common.add_output_arguments(parser, DEFAULT_OUT)
    return parser


if __name__ == "__main__":
    sys.exit(main())
