"""Policy quality (DESIGN §8): ours against HPA, KEDA, Knative KPA and a perfect-foresight oracle.

    python -m bench.run [--quick] [--scenarios a,b] [--policies p,q] [--regimes warm,cold]
                        [--jobs N] [--out DIR] [--duration-s S] [--quiet]

Every scenario (`bench.scenarios`) runs under two start-up regimes (`warm`: ~8 s, weights in the
node's cache; `cold`: ~120 s, pulled from storage) with every policy, through the real loop on the
simulator, on the same capacity model, trace and seed. Two views:

- **Default targets**: each policy as a user would run it. Ours, HPA, KEDA and the oracle aim at
  75 % of mu per replica (`SimParams.target_utilisation`). KPA runs on concurrency and gets a
  fully busy replica's concurrency (mu x service time) as its `target` and applies its own
  default `target-utilization` of 0.7 on top: Knative's default way of keeping headroom, five
  points leaner than the others rather than 0.75 x 0.7. HPA and KEDA run twice, on the request
  rate and on the concurrency (`bench.variants`); the better of the two is kept.
- **Equal SLO** (the headline): each policy's utilisation target is searched on a grid
  (`bench.equal_slo`), starting from its default, and the cheapest setting with at most 1 % of
  requests over the SLO or dropped is kept. For KPA the swept knob is its `target-utilization`
  (target mu); for the others the per-replica load target. The oracle is swept too: its result
  is the floor every "x oracle" divides by. It sizes for the highest 30 s mean rate within its
  look-ahead (`autoscaler.sim.policies`), so it is a floor to within about a replica: on a flat
  load a fixed count can tie it, and "x oracle" can come out a hair under 1.

Each run starts with the replicas that the busiest minute of the trace's first five needs at its
target, all serving, as for a service that was running before the trace begins: a cold start-up
cannot meet an opening burst, and the misses it would cause say nothing about any policy. Bounds
are the same for everyone: at least 2 replicas (HPA's own default floor would be 1), at most 100.

Runs go to a pool of `--jobs` processes (default: the CPUs available); each sweep is sequential,
the sweeps run side by side, the longest traces first. Results do not depend on the number of
jobs or the order in which runs finish. Output (`--out`, default `bench-out`): `results.md` (the
table, also printed), `results.json` (every run) and `<scenario>.png` per scenario.

`--quick` runs in about a minute on two cores: four scenarios (Azure, step, spike, on/off; no
ServeGen, diurnal or hover), each cut to its first 30 minutes, the cold regime only, and a grid
of 0.1 steps instead of 0.05.

It must not change the simulator or the policies: it only chooses their inputs and reads their
results.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import heapq
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from autoscaler import baselines, logs, ports
from autoscaler.baselines import kpa
from autoscaler.sim import policies as sim_policies
from autoscaler.sim import run as sim_run
from autoscaler.sim.params import SimParams
from bench import common, equal_slo, scenarios, variants

IntArray = npt.NDArray[np.int32]


@dataclass(frozen=True, slots=True)
class Regime:
    name: str
    startup_s: float
    about: str


REGIMES: dict[str, Regime] = {
    "warm": Regime("warm", 8.0, "weights in the node's cache"),
    "cold": Regime("cold", 120.0, "weights pulled from storage"),
}
POLICIES = ("seed", "default", "hpa", "hpa-conc", "keda", "keda-conc", "kpa", "oracle")
DEFAULT_UTILISATION: dict[str, float] = {
    name: SimParams().target_utilisation for name in POLICIES if name != "kpa"
} | {"kpa": kpa.KpaConfig().target_utilization}
"""Each policy's own default load target per replica, as a fraction of mu."""

GRID = tuple(round(0.45 + 0.05 * i, 2) for i in range(12))
"""Utilisation targets the equal-SLO search may try: 0.45 to 1.00."""
QUICK_GRID = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
QUICK_SCENARIOS = ("azure-conv", "step-5x", "spike-60s", "on-off")
QUICK_REGIMES = ("cold",)
QUICK_DURATION_S = 1800

BASE = SimParams(min_replicas=2, max_replicas=100)
"""The capacity model, bounds and seed of every run; start-up and target vary per run."""

DEFAULT_OUT = Path("bench-out")
QUICK_OUT = DEFAULT_OUT / "quick"

_CEIL_SLACK = 1e-9


@dataclass(frozen=True, slots=True)
class Config:
    scenarios: tuple[str, ...] = scenarios.NAMES
    regimes: tuple[str, ...] = tuple(REGIMES)
    policies: tuple[str, ...] = POLICIES
    grid: tuple[float, ...] = GRID
    duration_s: int | None = None
    """Cut every trace to its first `duration_s` seconds; None: whole traces."""
    quick: bool = False
    base: SimParams = BASE


def quick_config(**overrides: object) -> Config:
    """The `--quick` settings (see the module docstring), with `overrides`."""
    fields: dict[str, object] = {
        "scenarios": QUICK_SCENARIOS,
        "regimes": QUICK_REGIMES,
        "grid": QUICK_GRID,
        "duration_s": QUICK_DURATION_S,
        "quick": True,
    }
    fields.update(overrides)
    return Config(**fields)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Task:
    """One simulation: a policy at one utilisation target on one scenario and regime."""

    scenario: str
    regime: str
    policy: str
    utilisation: float

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.scenario, self.regime, self.policy)

    @property
    def is_default(self) -> bool:
        return math.isclose(self.utilisation, DEFAULT_UTILISATION[self.policy])


@dataclass(frozen=True, slots=True)
class Run:
    """What one simulation measured."""

    scenario: str
    regime: str
    policy: str
    utilisation: float
    requests: float
    slo_miss_pct: float
    """Requests over the latency SLO or dropped, percent of all requests."""
    dropped_pct: float
    gpu_hours: float
    scale_events: int
    time_to_capacity_s: float | None
    """Seconds from the scenario's step until serving capacity first covered the raised load;
    None without a step, or when it never did while the raised load lasted."""
    p95_latency_s: float | None
    mean_replicas: float
    serving: IntArray | None = field(default=None, compare=False, repr=False)
    """Serving replicas per second; kept for default-target runs only (the plots)."""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.scenario, self.regime, self.policy)

    @property
    def trial(self) -> equal_slo.Trial:
        return equal_slo.Trial(self.utilisation, self.slo_miss_pct, self.gpu_hours)


@dataclass(frozen=True, slots=True)
class Outcome:
    """One policy on one scenario and regime: its default run and its equal-SLO setting."""

    scenario: str
    regime: str
    policy: str
    default: Run
    equal_slo: Run | None
    """The cheapest run with misses within the limit; None when none qualified."""
    runs: tuple[Run, ...]
    """Every run of the search, by target."""
    default_vs_oracle: float | None = None
    """Default-target GPU-hours over the oracle's default-target GPU-hours."""
    equal_slo_vs_oracle: float | None = None
    """Equal-SLO GPU-hours over the oracle's equal-SLO GPU-hours."""


@dataclass(frozen=True, slots=True)
class Results:
    config: Config
    scenarios: dict[str, scenarios.Scenario]
    outcomes: tuple[Outcome, ...]
    set_aside: tuple[Outcome, ...] = ()
    """The variants of HPA and KEDA that lost to their other signal (`bench.variants`)."""

    @property
    def runs(self) -> tuple[Run, ...]:
        return tuple(run for outcome in self.outcomes for run in outcome.runs)

    def outcome(self, scenario: str, regime: str, policy: str) -> Outcome | None:
        for outcome in self.outcomes:
            if (outcome.scenario, outcome.regime, outcome.policy) == (scenario, regime, policy):
                return outcome
        return None


# --- one run -----------------------------------------------------------------------------------


def params_for(task: Task, scenario: scenarios.Scenario, base: SimParams) -> SimParams:
    """The run's `SimParams`: the base with the task's start-up, target and policy, starting
    with the replicas the opening needs at that target."""
    target = task.utilisation * base.replica_capacity_rps
    opening = math.ceil(scenario.opening_rps / target - _CEIL_SLACK)
    return dataclasses.replace(
        base,
        policy=task.policy,
        startup_s=REGIMES[task.regime].startup_s,
        target_utilisation=task.utilisation,
        initial_replicas=min(base.max_replicas, max(base.min_replicas, opening)),
    )


def decider_for(task: Task, params: SimParams) -> ports.Policy | None:
    """KPA takes a fully busy replica's concurrency as its target and the swept utilisation as
    its own `target-utilization`; every other policy is the simulator's registered one (None)."""
    if task.policy == "kpa":
        config = kpa.KpaConfig(target_utilization=task.utilisation)
        target = sim_policies.concurrency_target(params, 1.0)
        return baselines.make("kpa", target=target, metric=baselines.CONCURRENCY, config=config)
    return None


def evaluate(task: Task, scenario: scenarios.Scenario, base: SimParams) -> Run:
    """Simulate one task and measure it."""
    params = params_for(task, scenario, base)
    result = sim_run.simulate(scenario.arrivals, params, policy=decider_for(task, params))
    summary = result.summary
    series = result.timeseries
    requests = float(summary["requests"])
    p95 = summary["p95_latency_s"]
    serving = series["replicas_serving"].astype(np.int32) if task.is_default else None
    return Run(
        scenario=task.scenario,
        regime=task.regime,
        policy=task.policy,
        utilisation=task.utilisation,
        requests=requests,
        slo_miss_pct=float(summary["slo_miss_pct"]),
        dropped_pct=100.0 * float(summary["dropped"]) / requests if requests > 0 else 0.0,
        gpu_hours=float(summary["gpu_hours"]),
        scale_events=int(summary["scale_events"]),
        time_to_capacity_s=time_to_capacity(scenario, series["capacity_rps"]),
        p95_latency_s=None if p95 is None else float(p95),
        mean_replicas=float(summary["mean_replicas"]),
        serving=serving,
    )


def time_to_capacity(
    scenario: scenarios.Scenario, capacity_rps: npt.NDArray[np.float64]
) -> float | None:
    """Seconds from the step until serving capacity first covers the raised load's mean rate;
    None without a step, or when capacity never gets there while the raised load lasts."""
    window = scenario.step_window()
    need = scenario.step_need_rps()
    if window is None or need is None:
        return None
    start, end = window
    reached = np.flatnonzero(capacity_rps[start:end] >= need - _CEIL_SLACK)
    return float(reached[0]) if len(reached) else None


# --- the pool ----------------------------------------------------------------------------------

_worker_scenarios: dict[str, scenarios.Scenario] = {}
_worker_base = BASE


def _start_worker(scenario_map: dict[str, scenarios.Scenario], base: SimParams) -> None:
    global _worker_base
    _worker_scenarios.update(scenario_map)
    _worker_base = base
    _quiet_logs()


def _work(task: Task) -> Run:
    return evaluate(task, _worker_scenarios[task.scenario], _worker_base)


def _quiet_logs() -> None:
    """The simulated controller logs every decision at info: keep warnings and worse only."""
    logs.configure(json=True, level="warning")


Progress = Callable[[Outcome, int, int], None]
"""Called with each finished outcome, the number finished and the total."""


def run(
    config: Config,
    scenario_map: Mapping[str, scenarios.Scenario],
    *,
    jobs: int = 1,
    progress: Progress | None = None,
) -> Results:
    """Every policy's default run and equal-SLO search on every scenario and regime.

    `jobs` > 1 runs them in that many worker processes; 1 runs them here, one after another.
    """
    chosen = {name: scenario_map[name] for name in config.scenarios}
    keys = [(s, r, p) for s in chosen for r in config.regimes for p in config.policies]
    done: dict[tuple[str, str, str], list[Run]] = {key: [] for key in keys}
    finished: dict[tuple[str, str, str], Outcome] = {}
    ready: list[tuple[int, int, Task]] = []
    order = 0

    def push(task: Task) -> None:
        nonlocal order
        # Longest traces first, so the last runs to finish are short ones.
        heapq.heappush(ready, (-chosen[task.scenario].duration_s, order, task))
        order += 1

    def record(result: Run) -> None:
        runs = done[result.key]
        runs.append(result)
        target = equal_slo.next_target(config.grid, [r.trial for r in runs])
        scenario, regime, policy = result.key
        if target is None:
            finished[result.key] = _outcome(result.key, runs)
            if progress is not None:
                progress(finished[result.key], len(finished), len(keys))
        else:
            push(Task(scenario, regime, policy, target))

    for scenario, regime, policy in keys:
        push(Task(scenario, regime, policy, DEFAULT_UTILISATION[policy]))

    if jobs <= 1:
        while ready:
            task = heapq.heappop(ready)[2]
            record(evaluate(task, chosen[task.scenario], config.base))
    else:
        with concurrent.futures.ProcessPoolExecutor(
            max_workers=jobs, initializer=_start_worker, initargs=(chosen, config.base)
        ) as pool:
            running: dict[concurrent.futures.Future[Run], Task] = {}
            while ready or running:
                while ready and len(running) < 2 * jobs:
                    task = heapq.heappop(ready)[2]
                    running[pool.submit(_work, task)] = task
                complete, _ = concurrent.futures.wait(
                    running, return_when=concurrent.futures.FIRST_COMPLETED
                )
                for future in complete:
                    del running[future]
                    record(future.result())

    outcomes = _against_oracle([finished[key] for key in keys])
    kept, aside = variants.best_of(outcomes)
    return Results(config=config, scenarios=chosen, outcomes=tuple(kept), set_aside=tuple(aside))


def _outcome(key: tuple[str, str, str], runs: Sequence[Run]) -> Outcome:
    by_target = sorted(runs, key=lambda r: r.utilisation)
    default = next(r for r in by_target if math.isclose(r.utilisation, DEFAULT_UTILISATION[key[2]]))
    best = equal_slo.cheapest(r.trial for r in by_target)
    chosen = None if best is None else next(r for r in by_target if r.trial == best)
    return Outcome(*key, default=default, equal_slo=chosen, runs=tuple(by_target))


def _against_oracle(outcomes: Sequence[Outcome]) -> list[Outcome]:
    """Each outcome with its GPU-hours over the oracle's, in both views (same scenario and
    regime); None without an oracle run or where either side has no qualifying setting."""
    oracles = {(o.scenario, o.regime): o for o in outcomes if o.policy == "oracle"}

    def ratio(run: Run | None, floor: Run | None) -> float | None:
        if run is None or floor is None or not floor.gpu_hours > 0:
            return None
        return run.gpu_hours / floor.gpu_hours

    compared = []
    for outcome in outcomes:
        oracle = oracles.get((outcome.scenario, outcome.regime))
        if oracle is None:
            compared.append(outcome)
            continue
        compared.append(
            dataclasses.replace(
                outcome,
                default_vs_oracle=ratio(outcome.default, oracle.default),
                equal_slo_vs_oracle=ratio(outcome.equal_slo, oracle.equal_slo),
            )
        )
    return compared


def build_scenarios(config: Config) -> dict[str, scenarios.Scenario]:
    """The configured scenarios, each cut to `config.duration_s` when set."""
    built = {name: scenarios.build(name, config.base) for name in config.scenarios}
    if config.duration_s is None:
        return built
    return {name: s.truncated(config.duration_s) for name, s in built.items()}


# --- the command -------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    overrides: dict[str, object] = {}
    if args.scenarios is not None:
        overrides["scenarios"] = args.scenarios
    if args.policies is not None:
        overrides["policies"] = args.policies
    if args.regimes is not None:
        overrides["regimes"] = args.regimes
    if args.duration_s is not None:
        overrides["duration_s"] = args.duration_s
    config = quick_config(**overrides) if args.quick else Config(**overrides)  # type: ignore[arg-type]
    out: Path = args.out or (QUICK_OUT if args.quick else DEFAULT_OUT)
    jobs: int = args.jobs or available_cpus()

    _quiet_logs()
    started = time.perf_counter()
    built = build_scenarios(config)
    show = None if args.quiet else _show_progress
    results = run(config, built, jobs=jobs, progress=show)

    from bench import report  # matplotlib: only once the runs are done

    table = report.markdown(results)
    report.write(results, out, markdown=table)
    elapsed = time.perf_counter() - started
    print(table)
    if not args.quiet:
        runs = len(results.runs)
        print(
            f"{runs} runs in {elapsed:.0f} s with {jobs} jobs; wrote {out}/results.md, "
            f"results.json and {len(results.scenarios)} plots",
            file=sys.stderr,
        )
    return 0


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _show_progress(outcome: Outcome, finished: int, total: int) -> None:
    best = outcome.equal_slo
    chosen = "none" if best is None else f"{best.gpu_hours:.1f} GPU-h at {best.utilisation:.2f}"
    print(
        f"[{finished}/{total}] {outcome.scenario} {outcome.regime} {outcome.policy}: "
        f"default {outcome.default.slo_miss_pct:.2f} % misses, "
        f"{outcome.default.gpu_hours:.1f} GPU-h; equal SLO {chosen} ({len(outcome.runs)} runs)",
        file=sys.stderr,
        flush=True,
    )


def _names(known: Sequence[str], what: str) -> Callable[[str], tuple[str, ...]]:
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(n.strip() for n in text.split(",") if n.strip())
        unknown = [n for n in names if n not in known]
        if unknown or not names:
            raise argparse.ArgumentTypeError(
                f"unknown {what} {', '.join(unknown) or text!r}; known: {', '.join(known)}"
            )
        return tuple(dict.fromkeys(names))

    return parse


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.run",
        description="Compare the autoscaling policies on the simulator: a Markdown table on "
        "stdout, results.md, results.json and one plot per scenario in --out.",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="about a minute on two cores: 4 scenarios cut to 30 min, cold start-up only, "
        "a coarser sweep",
    )
    parser.add_argument(
        "--scenarios",
        type=_names(scenarios.NAMES, "scenario"),
        metavar="A,B",
        help=f"comma-separated (default: all; {', '.join(scenarios.NAMES)})",
    )
    parser.add_argument(
        "--policies",
        type=_names(POLICIES, "policy"),
        metavar="P,Q",
        help=f"comma-separated (default: {','.join(POLICIES)})",
    )
    parser.add_argument(
        "--regimes",
        type=_names(tuple(REGIMES), "regime"),
        metavar="R,S",
        help="start-up regimes: "
        + ", ".join(f"{r.name} (~{r.startup_s:g} s, {r.about})" for r in REGIMES.values()),
    )
    parser.add_argument(
        "--duration-s",
        type=common.positive_int,
        metavar="S",
        help="cut every trace to its first S seconds",
    )
    parser.add_argument(
        "--jobs", type=common.positive_int, metavar="N", help="worker processes (default: the CPUs)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help=f"output directory (default: {DEFAULT_OUT}, or {QUICK_OUT} with --quick)",
    )
    parser.add_argument("--quiet", action="store_true", help="print the table only")
    return parser


if __name__ == "__main__":
    sys.exit(main())
