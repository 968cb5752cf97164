"""The comparison's outputs: the Markdown table, the JSON of every run and the plots.

`table` renders one table (a row per scenario, start-up regime and policy, both views);
`markdown` puts a short preamble and the scenarios' descriptions around it. `write` puts that in
`results.md`, every run in `results.json` (`as_json`), and draws `<scenario>.png` (`plot`): each
policy's serving replicas over time against the load, at default targets, one panel per regime.
`plot_together` is the one plot of `autoscaler bench --trace`: every policy at the setting the
table recommends, on shared axes, replicas above and SLO misses below. Plots are drawn on
matplotlib's Agg canvas (no pyplot).

It does not simulate: it only formats `sweep.Results`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from autoscaler.experiment import equal_slo, variants
from autoscaler.experiment import scenario as scenario_
from autoscaler.experiment.sweep import DEFAULT_UTILISATION, REGIMES, Outcome, Results, Run

TIMES = "\N{MULTIPLICATION SIGN}"
COLUMNS = (
    "scenario",
    "start-up",
    "policy",
    "equal-SLO GPU-h (target)",
    f"{TIMES}oracle",
    "default target",
    "SLO misses",
    "GPU-h",
    f"{TIMES}oracle",
    "scale events",
    "time to capacity",
    "p95",
)
"""The table's header: the equal-SLO view, then the default-target view."""
_LEFT_ALIGNED = 3
_COLOURS = {
    "seed": "tab:orange",
    "default": "tab:red",
    "hpa": "tab:blue",
    "hpa-conc": "tab:blue",
    "keda": "tab:cyan",
    "keda-conc": "tab:cyan",
    "kpa": "tab:purple",
    "oracle": "black",
}


def markdown(results: Results) -> str:
    """The preamble, the table and the scenario list, as Markdown."""
    config = results.config
    base = config.base
    grid = config.grid
    limit = equal_slo.SLO_MISS_LIMIT_PCT
    regimes = ", ".join(
        f"{name} (~{REGIMES[name].startup_s:g} s, {REGIMES[name].about})" for name in config.regimes
    )
    quick = (
        " **Quick run**: fewer scenarios, traces cut short, one regime and a coarser sweep; "
        "run `make bench` for the full comparison."
        if config.quick
        else ""
    )
    defaults = ", ".join(f"{p} {DEFAULT_UTILISATION[p]:.2f}" for p in config.policies)
    lines = [
        "## Policy quality: GPU-hours at equal SLO",
        "",
        f"Every policy ran the real control loop on the same simulated cluster, traces and seed: "
        f"a replica completes {base.replica_capacity_rps:g} request/s, a request takes "
        f"{base.service_time_s:g} s unqueued, misses the SLO past {base.slo_latency_s:g} s and "
        f"is dropped after waiting {base.queue_timeout_s:g} s; pods start in a log-normal time "
        f"(sigma {base.startup_sigma:g}) around the regime's median, then warm up for "
        f"{base.warmup_s:g} s; {base.min_replicas} to {base.max_replicas} replicas. "
        f"Start-up regimes: {regimes}.{quick}",
        "",
        *_draws_note(config.seeds),
        f"**Equal SLO**: each policy's utilisation target (load per replica as a fraction of "
        f"its capacity) searched over {grid[0]:.2f} to {grid[-1]:.2f}; the cheapest setting with "
        f'at most {limit:g} % of requests over the SLO or dropped, "none" when no setting '
        f"qualifies; {TIMES}oracle divides by the oracle's equal-SLO GPU-hours.",
        "",
        f"**Default target**: each policy as shipped ({defaults}; KPA runs on concurrency, gets "
        f"a fully busy replica's concurrency as its target and applies its own 0.7 "
        f"target-utilization); {TIMES}oracle divides by the "
        "oracle's GPU-hours at its default. Time to capacity: from the step until serving "
        'capacity covers the raised load ("never": not while it lasts).',
        "",
        "**Signals**: HPA and KEDA ran on the request rate and on the concurrency (running plus "
        "waiting requests per pod); each row keeps the better of the two (the one meeting the "
        "SLO limit for fewer GPU-hours, else fewer misses at the default target) and names it: "
        "`hpa (rate)`, `hpa (conc)`. KPA runs on concurrency, Knative's default metric.",
        "",
        table(results),
        "",
        "Scenarios:",
        "",
    ]
    for name, scenario in results.scenarios.items():
        lines.append(f"- `{name}`: {scenario.description}.")
    return "\n".join(lines) + "\n"


def _draws_note(seeds: int) -> list[str]:
    """With several draws, what every figure of the table is; nothing for one."""
    if seeds == 1:
        return []
    return [
        f"**{seeds} draws**: every scenario ran as {seeds} independent draws of its noise "
        "(draw 0 the scenario as it is alone); each setting ran on all of them and every figure "
        "is over them together: SLO misses pooled (requests missed over requests), GPU-hours, "
        "scale events and time to capacity the mean. The plots show draw 0.",
        "",
    ]


def table(results: Results) -> str:
    """One Markdown table, a row per outcome; the scenario and regime only where they change."""
    rows: list[list[str]] = []
    previous: tuple[str, str] | None = None
    for outcome in results.outcomes:
        group = (outcome.scenario, outcome.regime)
        first = group != previous
        previous = group
        has_step = results.scenarios[outcome.scenario].step_window() is not None
        regime = REGIMES[outcome.regime]
        rows.append(
            [
                outcome.scenario if first else "",
                f"{regime.name} {regime.startup_s:g} s" if first else "",
                variants.label(outcome.policy),
                _equal_slo_cell(outcome.equal_slo),
                _ratio(outcome.equal_slo_vs_oracle),
                f"{outcome.default.utilisation:.2f}",
                f"{outcome.default.slo_miss_pct:.2f} %",
                f"{outcome.default.gpu_hours:.1f}",
                _ratio(outcome.default_vs_oracle),
                str(outcome.default.scale_events),
                _time_to_capacity(outcome.default, has_step=has_step),
                _seconds(outcome.default.p95_latency_s, digits=1),
            ]
        )
    widths = [max(len(r[i]) for r in [list(COLUMNS), *rows]) for i in range(len(COLUMNS))]

    def line(cells: Sequence[str]) -> str:
        padded = [
            c.ljust(w) if i < _LEFT_ALIGNED else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join(
        "-" * (w + 2) if i < _LEFT_ALIGNED else "-" * (w + 1) + ":" for i, w in enumerate(widths)
    )
    return "\n".join([line(COLUMNS), rule + "|", *(line(r) for r in rows)])


def _equal_slo_cell(run: Run | None) -> str:
    if run is None:
        return "none"
    return f"{run.gpu_hours:.1f} ({run.utilisation:.2f})"


def _seconds(value: float | None, *, digits: int) -> str:
    return "n/a" if value is None else f"{value:.{digits}f} s"


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _time_to_capacity(run: Run, *, has_step: bool) -> str:
    if not has_step:
        return "—"
    if run.time_to_capacity_s is None:
        return "never"
    return f"{run.time_to_capacity_s:.0f} s"


# --- files -------------------------------------------------------------------------------------


def write(results: Results, out_dir: Path, *, markdown: str) -> None:
    """`results.md`, `results.json` and a plot per scenario into `out_dir` (created)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.md").write_text(markdown, encoding="utf-8")
    text = json.dumps(as_json(results), indent=1, allow_nan=False)
    (out_dir / "results.json").write_text(text + "\n", encoding="utf-8")
    for name in results.scenarios:
        plot(results, name, out_dir / f"{name}.png")


def as_json(results: Results) -> dict[str, Any]:
    """Everything measured, in plain JSON values: the settings, the scenarios, and per policy,
    scenario and regime both views and every run of the search."""
    config = results.config
    return {
        "config": {
            "scenarios": list(config.scenarios),
            "regimes": {name: REGIMES[name].startup_s for name in config.regimes},
            "policies": list(config.policies),
            "grid": list(config.grid),
            "duration_s": config.duration_s,
            "quick": config.quick,
            "slo_miss_limit_pct": equal_slo.SLO_MISS_LIMIT_PCT,
            "default_utilisation": {p: DEFAULT_UTILISATION[p] for p in config.policies},
            "params": config.base.as_dict(),
            "seeds": config.seeds,
            "per_draw": config.per_draw,
        },
        "scenarios": {
            name: {
                "description": s.description,
                "duration_s": s.duration_s,
                "requests": float(np.sum(s.arrivals)),
                "step_at_s": s.step_at_s,
                "step_s": s.step_s,
                "opening_rps": s.opening_rps,
            }
            for name, s in results.scenarios.items()
        },
        "outcomes": [_outcome_json(o) for o in results.outcomes],
        "set_aside": [_outcome_json(o) for o in results.set_aside],
    }


def _outcome_json(o: Outcome) -> dict[str, Any]:
    """One outcome; `family` and `signal` say which peer it is and what it scaled on; with
    several draws searched apart, `draws` holds each draw's own outcome."""
    document: dict[str, Any] = {
        "scenario": o.scenario,
        "regime": o.regime,
        "policy": o.policy,
        "family": variants.family(o.policy),
        "signal": variants.signal(o.policy),
        "default": _run_json(o.default),
        "equal_slo": None if o.equal_slo is None else _run_json(o.equal_slo),
        "default_vs_oracle": o.default_vs_oracle,
        "equal_slo_vs_oracle": o.equal_slo_vs_oracle,
        "runs": [_run_json(r) for r in o.runs],
    }
    if o.draws:
        document["draws"] = [{"seed": d.default.seed, **_outcome_json(d)} for d in o.draws]
    return document


def _run_json(run: Run) -> dict[str, Any]:
    """One run; pooled over several draws (`sweep.pooled`), `draws` holds the run on each."""
    document: dict[str, Any] = {
        "utilisation": run.utilisation,
        "slo_miss_pct": run.slo_miss_pct,
        "dropped_pct": run.dropped_pct,
        "gpu_hours": run.gpu_hours,
        "scale_events": run.scale_events,
        "time_to_capacity_s": run.time_to_capacity_s,
        "p95_latency_s": run.p95_latency_s,
        "mean_replicas": run.mean_replicas,
        "requests": run.requests,
    }
    if run.draws:
        document["draws"] = [{"seed": d.seed, **_run_json(d)} for d in run.draws]
    return document


def plot(results: Results, scenario_name: str, path: Path) -> None:
    """Serving replicas of every policy at its default target against the load, one panel per
    regime."""
    scenario = results.scenarios[scenario_name]
    base = results.config.base
    regimes = results.config.regimes
    n = scenario.duration_s
    unit_s, unit = _time_unit(n)
    size = scenario_.bin_s(n)
    t = scenario_.binned(np.arange(n, dtype=np.float64), size) / unit_s
    busy = scenario_.binned(scenario.arrivals / base.replica_capacity_rps, size)
    at_target = busy / base.target_utilisation

    fig = Figure(figsize=(14.0, 4.2 * len(regimes) + 0.8), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(regimes), 1, sharex=True, squeeze=False)[:, 0]
    for ax, regime_name in zip(axes, regimes, strict=True):
        regime = REGIMES[regime_name]
        ax.fill_between(t, busy, color="0.85", linewidth=0, label="load (replicas fully busy)")
        ax.plot(
            t,
            at_target,
            color="0.55",
            linewidth=0.8,
            linestyle="--",
            label=f"load at {base.target_utilisation:.0%} per replica",
        )
        for outcome in results.outcomes:
            if (outcome.scenario, outcome.regime) != (scenario_name, regime_name):
                continue
            serving = outcome.default.serving
            if serving is None:
                continue
            ax.plot(
                t,
                serving,
                color=_COLOURS.get(outcome.policy),
                linewidth=1.6 if outcome.policy == "default" else 1.0,
                label=f"{variants.label(outcome.policy)}"
                f" (target {outcome.default.utilisation:.2f})",
            )
        title = f"{regime.name} start-up (~{regime.startup_s:g} s, {regime.about})"
        ax.set_title(title, loc="left")
        ax.set_ylabel("replicas" + (f" (mean per {size} s)" if size > 1 else ""))
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.margins(x=0)
        ax.legend(loc="upper left", ncols=4, fontsize="small", frameon=False)
    axes[-1].set_xlabel(f"simulated time ({unit})")
    fig.suptitle(f"{scenario_name}: serving replicas at default targets\n{scenario.description}")
    fig.savefig(path, format="png", dpi=100)


def plot_together(results: Results, path: Path, *, title: str) -> None:
    """Every policy of the first scenario and regime on shared axes: serving replicas against the
    load above, SLO misses below, each at its equal-SLO setting (its default target where no
    setting met the SLO, said in the legend)."""
    scenario_name = results.config.scenarios[0]
    regime_name = results.config.regimes[0]
    scenario = results.scenarios[scenario_name]
    base = results.config.base
    n = scenario.duration_s
    unit_s, unit = _time_unit(n)
    size = scenario_.bin_s(n)
    t = scenario_.binned(np.arange(n, dtype=np.float64), size) / unit_s
    busy = scenario_.binned(scenario.arrivals / base.replica_capacity_rps, size)

    fig = Figure(figsize=(14.0, 9.0), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    replicas, misses = fig.subplots(2, 1, sharex=True, height_ratios=(2.0, 1.0))
    replicas.fill_between(t, busy, color="0.85", linewidth=0, label="load (replicas fully busy)")
    for outcome in results.outcomes:
        if (outcome.scenario, outcome.regime) != (scenario_name, regime_name):
            continue
        run = recommended(outcome)
        if run.serving is None or run.misses is None:
            continue
        style = {
            "color": _COLOURS.get(outcome.policy),
            "linewidth": 1.6 if outcome.policy == "default" else 1.0,
            "linestyle": "-" if outcome.equal_slo is not None else ":",
        }
        replicas.plot(t, run.serving, label=_legend_label(outcome, run), **style)
        misses.plot(t, run.misses, **style)
    regime = REGIMES[regime_name]
    replicas.set_title(
        f"serving replicas; {regime.name} start-up (~{regime.startup_s:g} s, {regime.about})",
        loc="left",
    )
    replicas.set_ylabel("replicas" + (f" (mean per {size} s)" if size > 1 else ""))
    misses.set_title("requests over the SLO or dropped", loc="left")
    misses.set_ylabel("per second" + (f" (mean per {size} s)" if size > 1 else ""))
    misses.set_xlabel(f"simulated time ({unit})")
    for ax in (replicas, misses):
        _tidy(ax)
    replicas.legend(loc="upper left", ncols=2, fontsize="small", frameon=False)
    limit = equal_slo.SLO_MISS_LIMIT_PCT
    fig.suptitle(
        f"{title}: each policy at its cheapest target with at most {limit:g} % SLO misses "
        "(dotted: none qualified, its default target)"
    )
    fig.savefig(path, format="png", dpi=100)


def recommended(outcome: Outcome) -> Run:
    """The run the comparison recommends: the equal-SLO setting, else the default target."""
    return outcome.default if outcome.equal_slo is None else outcome.equal_slo


def _legend_label(outcome: Outcome, run: Run) -> str:
    chosen = "" if outcome.equal_slo is not None else ", none met the SLO"
    return (
        f"{outcome.policy} (target {run.utilisation:.2f}{chosen}): {run.gpu_hours:.1f} GPU-h, "
        f"{run.slo_miss_pct:.2f} % misses"
    )


def _tidy(ax: Axes) -> None:
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.margins(x=0)


def _time_unit(duration_s: int) -> tuple[float, str]:
    """Minutes up to two hours, hours beyond."""
    return (60.0, "min") if duration_s <= 2 * 3600 else (3600.0, "h")


def progress_line(outcome: Outcome, finished: int, total: int) -> str:
    """One finished outcome, for the progress shown while the others run."""
    best = outcome.equal_slo
    chosen = "none" if best is None else f"{best.gpu_hours:.1f} GPU-h at {best.utilisation:.2f}"
    return (
        f"[{finished}/{total}] {outcome.scenario} {outcome.regime} {outcome.policy}: "
        f"default {outcome.default.slo_miss_pct:.2f} % misses, "
        f"{outcome.default.gpu_hours:.1f} GPU-h; equal SLO {chosen} ({len(outcome.runs)} runs)"
    )
