"""Policy quality (docs/benchmark.md): ours against HPA, KEDA, Knative KPA and a perfect-foresight
oracle.

    python -m bench.run [--quick] [--scenarios a,b] [--policies p,q] [--regimes warm,cold]
                        [--seeds N [--per-draw]] [--jobs N] [--out DIR] [--duration-s S]
                        [--quiet]

Every scenario (`bench.scenarios`) runs under two start-up regimes with every policy; the rules
(default targets, the equal-SLO search, the opening size, the bounds) are those of
`autoscaler.experiment.sweep`, which `autoscaler bench --trace` applies to a user's own trace.

Runs go to a pool of `--jobs` processes (default: the CPUs available). Results do not depend on
the number of jobs or the order in which runs finish. Output (`--out`, default `bench-out`):
`results.md` (the table, also printed), `results.json` (every run) and `<scenario>.png` per
scenario.

`--quick` runs in about a minute on two cores: four scenarios (Azure, step, spike, on/off; no
ServeGen, diurnal or hover), each cut to its first 30 minutes, the cold regime only, and a grid
of 0.1 steps instead of 0.05.

`--seeds N` runs every scenario as N independent draws of its noise (`bench.scenarios.build`'s
`draw`: draw 0 is the scenario as it always was, and `--seeds 1`, the default, is the bench as it
always was): each target of the equal-SLO search runs on every draw and is judged on them together,
the misses pooled (requests missed over requests) and the GPU-hours their mean. `--per-draw` also
searches each draw's own setting, so `results.json` shows how far a cell moves from one draw to
the next (`python -m bench.compare --spread POLICY results.json`). Each draw costs one more run
per target.

It must not change the simulator or the policies: it only chooses their inputs and reads their
results.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from autoscaler.experiment import sweep
from autoscaler.experiment.scenario import Scenario
from autoscaler.experiment.sweep import Config
from bench import common, scenarios

QUICK_SCENARIOS = ("azure-conv", "step-5x", "spike-60s", "on-off")
QUICK_REGIMES = ("cold",)
QUICK_DURATION_S = 1800

DEFAULT_OUT = Path("bench-out")
QUICK_OUT = DEFAULT_OUT / "quick"


def full_config(**overrides: object) -> Config:
    """Every scenario, regime and policy, with `overrides`."""
    fields: dict[str, object] = {"scenarios": scenarios.NAMES}
    fields.update(overrides)
    return Config(**fields)  # type: ignore[arg-type]


def quick_config(**overrides: object) -> Config:
    """The `--quick` settings (see the module docstring), with `overrides`."""
    fields: dict[str, object] = {
        "scenarios": QUICK_SCENARIOS,
        "regimes": QUICK_REGIMES,
        "grid": sweep.QUICK_GRID,
        "duration_s": QUICK_DURATION_S,
        "quick": True,
    }
    fields.update(overrides)
    return Config(**fields)  # type: ignore[arg-type]


def build_scenarios(config: Config) -> dict[str, Scenario]:
    """The configured scenarios (draw 0), each cut to `config.duration_s` when set."""
    return {name: draws[0] for name, draws in build_draws(config, seeds=1).items()}


def build_draws(config: Config, *, seeds: int | None = None) -> dict[str, tuple[Scenario, ...]]:
    """Draws 0 to `seeds` - 1 (default `config.seeds`) of each configured scenario, each cut to
    `config.duration_s` when set."""
    count = config.seeds if seeds is None else seeds
    built = {
        name: tuple(scenarios.build(name, config.base, draw) for draw in range(count))
        for name in config.scenarios
    }
    if config.duration_s is None:
        return built
    cut = config.duration_s
    return {name: tuple(s.truncated(cut) for s in draws) for name, draws in built.items()}


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
    overrides["seeds"] = args.seeds
    overrides["per_draw"] = args.per_draw
    config = quick_config(**overrides) if args.quick else full_config(**overrides)
    out: Path = args.out or (QUICK_OUT if args.quick else DEFAULT_OUT)
    jobs: int = args.jobs or sweep.available_cpus()

    sweep.quiet_logs()
    started = time.perf_counter()
    drawn = build_draws(config)
    built = {name: draws[0] for name, draws in drawn.items()}
    show = None if args.quiet else _show_progress
    results = sweep.run(config, built, jobs=jobs, progress=show, draws=drawn)

    from autoscaler.experiment import report  # matplotlib: only once the runs are done

    table = report.markdown(results)
    report.write(results, out, markdown=table)
    elapsed = time.perf_counter() - started
    print(table)
    if not args.quiet:
        runs = sum(_simulated(o) for o in results.outcomes)
        print(
            f"{runs} runs in {elapsed:.0f} s with {jobs} jobs; wrote {out}/results.md, "
            f"results.json and {len(results.scenarios)} plots",
            file=sys.stderr,
        )
    return 0


def _simulated(outcome: sweep.Outcome) -> int:
    """The simulations behind one outcome: a run a target and draw."""
    if outcome.draws:
        return sum(len(d.runs) for d in outcome.draws)
    return sum(max(1, len(r.draws)) for r in outcome.runs)


def _show_progress(outcome: sweep.Outcome, finished: int, total: int) -> None:
    from autoscaler.experiment import report

    print(report.progress_line(outcome, finished, total), file=sys.stderr, flush=True)


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
        type=_names(sweep.POLICIES, "policy"),
        metavar="P,Q",
        help=f"comma-separated (default: {','.join(sweep.POLICIES)})",
    )
    parser.add_argument(
        "--regimes",
        type=_names(tuple(sweep.REGIMES), "regime"),
        metavar="R,S",
        help="start-up regimes: "
        + ", ".join(f"{r.name} (~{r.startup_s:g} s, {r.about})" for r in sweep.REGIMES.values()),
    )
    parser.add_argument(
        "--seeds",
        type=common.positive_int,
        default=1,
        metavar="N",
        help="run every scenario as N independent draws of its noise and judge each target on "
        "them together: misses pooled, GPU-hours the mean (default: 1, draw 0 alone)",
    )
    parser.add_argument(
        "--per-draw",
        action="store_true",
        help="with --seeds, also search each draw's own equal-SLO setting (the spread between "
        "draws, in results.json)",
    )
    common.add_sweep_arguments(parser, DEFAULT_OUT, QUICK_OUT)
    return parser


if __name__ == "__main__":
    sys.exit(main())
