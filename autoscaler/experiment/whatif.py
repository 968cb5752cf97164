"""`autoscaler bench --trace FILE`: every policy replayed on one's own traffic, before going live.

The trace (the `simulate --trace` CSV, scaled by `rate_scale`) becomes one scenario, run under one
start-up regime by every chosen policy with the full benchmark's rules (`sweep`): the same bounds
(2 to 100 replicas), the same opening size, the same equal-SLO search over the same grid. `compare`
runs it; `write` leaves `results.json` (every run, as the full benchmark's) and `plot.png` (every
policy on the same axes, `report.plot_together`) in the output directory, all or nothing.

It must not parse arguments or print: the command line (`autoscaler.cli`) does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from autoscaler import outputs
from autoscaler.experiment import sweep
from autoscaler.experiment.scenario import Scenario
from autoscaler.sim import params as sim_params

DEFAULT_REGIME = "cold"
RESULTS_NAME = "results.json"
PLOT_NAME = "plot.png"


@dataclass(frozen=True, slots=True)
class Paths:
    """Where `write` put the outputs."""

    directory: Path
    results: Path
    plot: Path


def rate_scale_for_mean_replicas(arrivals: npt.NDArray[np.float64], mean_replicas: float) -> float:
    """The scale at which the trace's mean load needs `mean_replicas` at the default target, on
    the comparison's capacity model; `ValueError` for a trace without arrivals."""
    return sim_params.rate_scale_for_mean_replicas(arrivals, mean_replicas, sweep.BASE)


def compare(
    arrivals: npt.NDArray[np.float64],
    *,
    name: str,
    rate_scale: float,
    regime: str,
    policies: Sequence[str],
    jobs: int,
    progress: sweep.Progress | None = None,
) -> sweep.Results:
    """Every policy's default run and equal-SLO search on `arrivals` x `rate_scale`."""
    scaled = np.asarray(arrivals, dtype=np.float64) * rate_scale
    scenario = Scenario(name, f"{name}, requests x{rate_scale:g}", scaled)
    config = sweep.Config(scenarios=(name,), regimes=(regime,), policies=tuple(policies))
    return sweep.run(config, {name: scenario}, jobs=jobs, progress=progress)


def as_json(results: sweep.Results, *, rate_scale: float) -> dict[str, Any]:
    """The full benchmark's JSON of every run, with the trace's scale."""
    from autoscaler.experiment import report

    return {"rate_scale": rate_scale, **report.as_json(results)}


def write(results: sweep.Results, out_dir: Path, *, rate_scale: float) -> Paths:
    """`results.json` and `plot.png` into `out_dir` (created if needed), all or nothing.

    Raises `ConfigError` when `out_dir` exists but is not a directory; I/O errors propagate and
    leave `out_dir` as it was.
    """
    from autoscaler.experiment import report  # matplotlib: only once the runs are done

    def write_results(path: Path) -> None:
        text = json.dumps(as_json(results, rate_scale=rate_scale), indent=1, allow_nan=False)
        path.write_text(text + "\n", encoding="utf-8")

    title = results.config.scenarios[0]
    outputs.write_all(
        out_dir,
        {
            RESULTS_NAME: write_results,
            PLOT_NAME: lambda path: report.plot_together(results, path, title=title),
        },
    )
    return Paths(out_dir, out_dir / RESULTS_NAME, out_dir / PLOT_NAME)
