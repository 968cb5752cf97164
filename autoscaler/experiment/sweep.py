"""Every policy on a set of scenarios: default targets, and the equal-SLO search.

Every scenario runs under a start-up regime (`warm`: ~8 s, weights in the node's cache; `cold`:
~120 s, pulled from storage) with every policy, through the real loop on the simulator, on the
same capacity model, trace and seed. Two views:

- **Default targets**: each policy as a user would run it. Ours, HPA, KEDA and the oracle aim at
  75 % of mu per replica (`SimParams.target_utilisation`). KPA runs on concurrency and gets a
  fully busy replica's concurrency (mu x service time) as its `target` and applies its own
  default `target-utilization` of 0.7 on top: Knative's default way of keeping headroom, five
  points leaner than the others rather than 0.75 x 0.7. HPA and KEDA run twice, on the request
  rate and on the concurrency (`variants`); the better of the two is kept.
- **Equal SLO** (the headline): each policy's utilisation target is searched on a grid
  (`equal_slo`), starting from its default, and the cheapest setting with at most 1 % of
  requests over the SLO or dropped is kept. For KPA the swept knob is its `target-utilization`
  (target mu); for the others the per-replica load target. The oracle is swept too: its result
  is the floor every "x oracle" divides by. It sizes for the highest 30 s mean rate within its
  look-ahead (`autoscaler.sim.policies`), so it is a floor to within about a replica: on a flat
  load a fixed count can tie it, and "x oracle" can come out a hair under 1.

Each run starts with the replicas that the busiest minute of the trace's first five needs at its
target, all serving, as for a service that was running before the trace begins: a cold start-up
cannot meet an opening burst, and the misses it would cause say nothing about any policy. Bounds
are the same for everyone: at least 2 replicas (HPA's own default floor would be 1), at most 100.

**Several draws** (`Config.seeds` > 1): each scenario comes as that many independent draws of its
noise (`run`'s `draws`), every target the search tries runs on each, and the search judges the
target by them together: the misses pooled (requests missed over requests, all draws) and the
GPU-hours their mean (`pooled`). With `Config.per_draw` each draw then also gets its own search,
continued from the targets tried, so the spread between draws can be read (`Outcome.draws`).
One draw (the default) is the search as it always was.

`run` sends the runs to a pool of `jobs` processes; each sweep is sequential, the sweeps run side
by side, the longest traces first. Results do not depend on the number of jobs or the order in
which runs finish. Every run keeps its serving replicas and SLO misses over time, binned for the
plots (`scenario.bin_s`).

It must not change the simulator or the policies: it only chooses their inputs and reads their
results.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import heapq
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from autoscaler import baselines, logs, ports
from autoscaler.baselines import kpa
from autoscaler.experiment import equal_slo, variants
from autoscaler.experiment import run as sim_run
from autoscaler.experiment import scenario as scenario_
from autoscaler.experiment.scenario import Scenario
from autoscaler.sim import policies as sim_policies
from autoscaler.sim.params import SimParams

FloatArray = npt.NDArray[np.float64]


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
"""A coarser grid, for quick runs."""

BASE = SimParams(min_replicas=2, max_replicas=100)
"""The capacity model, bounds and seed of every run; start-up and target vary per run."""

_CEIL_SLACK = 1e-9


@dataclass(frozen=True, slots=True)
class Config:
    scenarios: tuple[str, ...]
    regimes: tuple[str, ...] = tuple(REGIMES)
    policies: tuple[str, ...] = POLICIES
    grid: tuple[float, ...] = GRID
    duration_s: int | None = None
    """Cut every trace to its first `duration_s` seconds; None: whole traces."""
    quick: bool = False
    """Reported only: the runs were cut short or coarse, not a full comparison."""
    base: SimParams = BASE
    seeds: int = 1
    """Draws of each scenario's noise that every target runs on (`run`'s `draws`), 0 to
    seeds - 1; draw 0 is the scenario as built alone."""
    per_draw: bool = False
    """With several draws, also search each draw's own equal-SLO setting (`Outcome.draws`)."""


@dataclass(frozen=True, slots=True)
class Task:
    """One simulation: a policy at one utilisation target on one scenario and regime."""

    scenario: str
    regime: str
    policy: str
    utilisation: float
    seed: int = 0
    """The scenario's draw (`Config.seeds`)."""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.scenario, self.regime, self.policy)


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
    serving: FloatArray | None = field(default=None, compare=False, repr=False)
    """Serving replicas over time, the mean per `scenario.bin_s` seconds (the plots)."""
    misses: FloatArray | None = field(default=None, compare=False, repr=False)
    """Requests per second over the SLO or dropped, the mean per `scenario.bin_s` seconds."""
    seed: int = 0
    """The scenario's draw it ran on; a run pooled over draws (`pooled`) has the first's."""
    draws: tuple[Run, ...] = field(default=(), compare=False, repr=False)
    """A run pooled over several draws: the run on each, in draw order; () for a single run."""

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
    draws: tuple[Outcome, ...] = ()
    """With `Config.per_draw` and several draws: each draw's own search (its default run, its
    own equal-SLO setting, every target tried on it), in draw order; () otherwise."""


@dataclass(frozen=True, slots=True)
class Results:
    config: Config
    scenarios: dict[str, Scenario]
    outcomes: tuple[Outcome, ...]
    set_aside: tuple[Outcome, ...] = ()
    """The variants of HPA and KEDA that lost to their other signal (`variants`)."""

    @property
    def runs(self) -> tuple[Run, ...]:
        return tuple(run for outcome in self.outcomes for run in outcome.runs)

    def outcome(self, scenario: str, regime: str, policy: str) -> Outcome | None:
        for outcome in self.outcomes:
            if (outcome.scenario, outcome.regime, outcome.policy) == (scenario, regime, policy):
                return outcome
        return None


# --- one run -----------------------------------------------------------------------------------


def params_for(task: Task, scenario: Scenario, base: SimParams) -> SimParams:
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


def evaluate(task: Task, scenario: Scenario, base: SimParams) -> Run:
    """Simulate one task and measure it."""
    params = params_for(task, scenario, base)
    result = sim_run.simulate(
        scenario.arrivals, params, policy=decider_for(task, params), past=scenario.past
    )
    summary = result.summary
    series = result.timeseries
    requests = float(summary["requests"])
    p95 = summary["p95_latency_s"]
    size = scenario_.bin_s(scenario.duration_s)
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
        serving=scenario_.binned(series["replicas_serving"], size),
        misses=scenario_.binned(series["slo_misses"], size),
        seed=task.seed,
    )


def pooled(runs: Sequence[Run]) -> Run:
    """One target's runs on several draws, as the search judges them: misses and drops pooled
    (over all the draws' requests), GPU-hours, replicas and scale events (rounded) the mean,
    time to capacity the mean (None when a draw never got there), p95 the mean of the draws'
    p95s; the series (for the plots) the first draw's. A single run is returned as it is."""
    if len(runs) == 1:
        return runs[0]
    first = runs[0]
    n = len(runs)
    requests = sum(r.requests for r in runs)

    def share(pct: Callable[[Run], float]) -> float:
        if not requests > 0:
            return 0.0
        return sum(pct(r) * r.requests for r in runs) / requests

    reached = [r.time_to_capacity_s for r in runs]
    p95s = [r.p95_latency_s for r in runs if r.p95_latency_s is not None]
    return dataclasses.replace(
        first,
        requests=requests,
        slo_miss_pct=share(lambda r: r.slo_miss_pct),
        dropped_pct=share(lambda r: r.dropped_pct),
        gpu_hours=sum(r.gpu_hours for r in runs) / n,
        scale_events=round(sum(r.scale_events for r in runs) / n),
        time_to_capacity_s=(
            None if any(t is None for t in reached) else sum(t or 0.0 for t in reached) / n
        ),
        p95_latency_s=sum(p95s) / len(p95s) if p95s else None,
        mean_replicas=sum(r.mean_replicas for r in runs) / n,
        draws=tuple(runs),
    )


def time_to_capacity(scenario: Scenario, capacity_rps: npt.NDArray[np.float64]) -> float | None:
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

_worker_scenarios: dict[str, tuple[Scenario, ...]] = {}
_worker_base = BASE


def _start_worker(scenario_map: dict[str, tuple[Scenario, ...]], base: SimParams) -> None:
    global _worker_base
    _worker_scenarios.update(scenario_map)
    _worker_base = base
    quiet_logs()


def _work(task: Task) -> Run:
    return evaluate(task, _worker_scenarios[task.scenario][task.seed], _worker_base)


def quiet_logs() -> None:
    """The simulated controller logs every decision at info: keep warnings and worse only."""
    logs.configure(json=True, level="warning")


Progress = Callable[[Outcome, int, int], None]
"""Called with each finished outcome, the number finished and the total."""


def run(
    config: Config,
    scenario_map: Mapping[str, Scenario],
    *,
    jobs: int = 1,
    progress: Progress | None = None,
    draws: Mapping[str, Sequence[Scenario]] | None = None,
) -> Results:
    """Every policy's default run and equal-SLO search on every scenario and regime.

    `jobs` > 1 runs them in that many worker processes; 1 runs them here, one after another.
    `draws` gives each scenario's `config.seeds` draws, the first `scenario_map`'s own; None:
    `scenario_map`'s is the only one (then `config.seeds` must be 1).
    """
    chosen = {name: scenario_map[name] for name in config.scenarios}
    drawn = _draws(config, chosen, draws)
    keys = [(s, r, p) for s in chosen for r in config.regimes for p in config.policies]
    searches = {key: _Search(config) for key in keys}
    finished: dict[tuple[str, str, str], Outcome] = {}
    ready: list[tuple[int, int, Task]] = []
    order = 0

    def push(task: Task) -> None:
        nonlocal order
        # Longest traces first, so the last runs to finish are short ones.
        heapq.heappush(ready, (-chosen[task.scenario].duration_s, order, task))
        order += 1

    def record(result: Run) -> None:
        search = searches[result.key]
        scenario, regime, policy = result.key
        for seed, target in search.record(result):
            push(Task(scenario, regime, policy, target, seed))
        if search.done:
            finished[result.key] = search.outcome(result.key)
            if progress is not None:
                progress(finished[result.key], len(finished), len(keys))

    for scenario, regime, policy in keys:
        for seed in range(config.seeds):
            push(Task(scenario, regime, policy, DEFAULT_UTILISATION[policy], seed))

    if jobs <= 1:
        while ready:
            task = heapq.heappop(ready)[2]
            record(evaluate(task, drawn[task.scenario][task.seed], config.base))
    else:
        with concurrent.futures.ProcessPoolExecutor(
            max_workers=jobs, initializer=_start_worker, initargs=(drawn, config.base)
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


def _draws(
    config: Config, chosen: Mapping[str, Scenario], draws: Mapping[str, Sequence[Scenario]] | None
) -> dict[str, tuple[Scenario, ...]]:
    """Each chosen scenario's draws, checked against `config.seeds`."""
    if draws is None:
        if config.seeds != 1:
            raise ValueError(f"{config.seeds} seeds need each scenario's draws")
        return {name: (scenario,) for name, scenario in chosen.items()}
    drawn = {name: (scenario, *draws[name][1:]) for name, scenario in chosen.items()}
    wrong = [name for name, each in drawn.items() if len(each) != config.seeds]
    if wrong:
        raise ValueError(f"{config.seeds} seeds, but not as many draws of {', '.join(wrong)}")
    return drawn


class _Search:
    """One policy's equal-SLO search on one scenario and regime, over the scenario's draws.

    The pooled search first: each target runs on every draw and is judged once all are in, by
    the pooled run (`pooled`). Then, with `Config.per_draw` and several draws, each draw's own
    search, continued on that draw alone from every target the pooled search tried."""

    def __init__(self, config: Config) -> None:
        self._grid = config.grid
        self._seeds = config.seeds
        self._per_draw = config.per_draw and config.seeds > 1
        self._by_seed: list[dict[float, Run]] = [{} for _ in range(config.seeds)]
        self._pooled: list[Run] = []
        self._waiting: dict[float, int] = {}
        self._open: set[int] = set()
        self._pooling = True
        self.done = False

    def record(self, result: Run) -> list[tuple[int, float]]:
        """Take one run; the (seed, target) runs to do next."""
        target = result.utilisation
        self._by_seed[result.seed][target] = result
        if not self._pooling:
            step = self._next_for(result.seed)
            if step is None:
                self._open.discard(result.seed)
                self.done = not self._open
                return []
            return [(result.seed, step)]
        self._waiting[target] = self._waiting.get(target, self._seeds) - 1
        if self._waiting[target] > 0:
            return []
        self._pooled.append(pooled([self._by_seed[seed][target] for seed in range(self._seeds)]))
        step = equal_slo.next_target(self._grid, [r.trial for r in self._pooled])
        if step is not None:
            return [(seed, step) for seed in range(self._seeds)]
        self._pooling = False
        nexts = []
        if self._per_draw:
            for seed in range(self._seeds):
                step = self._next_for(seed)
                if step is not None:
                    self._open.add(seed)
                    nexts.append((seed, step))
        self.done = not self._open
        return nexts

    def _next_for(self, seed: int) -> float | None:
        return equal_slo.next_target(self._grid, [r.trial for r in self._by_seed[seed].values()])

    def outcome(self, key: tuple[str, str, str]) -> Outcome:
        found = _outcome(key, self._pooled)
        if not self._per_draw:
            return found
        each = tuple(_outcome(key, list(runs.values())) for runs in self._by_seed)
        return dataclasses.replace(found, draws=each)


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


def available_cpus() -> int:
    """The CPUs this process may run on: the default number of jobs."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
