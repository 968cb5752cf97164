"""The benchmark's scenarios: real traces, rate-scaled, and synthetic shapes.

Every scenario is a per-second arrivals array expressed so that the same capacity model serves
every policy. Synthetic shapes are drawn as Poisson counts around a rate curve, from a fixed seed,
so second-scale noise is realistic and runs are repeatable.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from autoscaler.sim import params as sim_params

Arrivals = npt.NDArray[np.float64]
HERE = Path(__file__).resolve().parent
TRACES = HERE / "traces"
AZURE = HERE.parent / "autoscaler" / "sim" / "traces" / "azure_llm_2023_conv.requests.csv.gz"
SERVEGEN = TRACES / "servegen_m-large_days0-6.requests.csv.gz"


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str
    arrivals: Arrivals
    step_at_s: float | None = None
    """When the load steps up, for the time-to-capacity metric."""


def _load(path: Path) -> Arrivals:
    with gzip.open(path, "rt") as f:
        data = np.loadtxt(f, delimiter=",", skiprows=1, dtype=np.float64)
    return np.asarray(data[:, 1], dtype=np.float64)


def _to_replicas(rate: Arrivals, peak_replicas: float, params: sim_params.SimParams) -> Arrivals:
    """Scale a rate curve so its 60 s peak needs `peak_replicas` at the load target."""
    window = min(60, len(rate))
    peak = float(np.max(np.convolve(rate, np.ones(window) / window, mode="valid")))
    return rate * (peak_replicas * params.target_load_per_replica / peak)


def _poisson(rate: Arrivals, seed: int) -> Arrivals:
    return np.random.default_rng(seed).poisson(np.maximum(rate, 0.0)).astype(np.float64)


def azure_conv(params: sim_params.SimParams, *, peak_replicas: float = 40) -> Scenario:
    rate = _load(AZURE)
    return Scenario(
        "azure-conv",
        "Azure LLM chat service, 1 h (real, rate-scaled)",
        _to_replicas(rate, peak_replicas, params),
    )


def servegen_day(params: sim_params.SimParams, *, peak_replicas: float = 40) -> Scenario:
    """Day 0 of the ServeGen trace. The source has one rate per 10 minutes, so Poisson noise is
    drawn around it; the day is replayed in full."""
    rate = _load(SERVEGEN)[: 24 * 3600]
    scaled = _to_replicas(rate, peak_replicas, params)
    return Scenario(
        "servegen-day", "ServeGen m-large, day 0 (real, rate-scaled)", _poisson(scaled, 1)
    )


def _synthetic(
    name: str, description: str, curve: Callable[[Arrivals], Arrivals], duration_s: int, **kw: float
) -> Callable[[sim_params.SimParams], Scenario]:
    def make(params: sim_params.SimParams) -> Scenario:
        t = np.arange(duration_s, dtype=np.float64)
        replicas = curve(t)
        rate = replicas * params.target_load_per_replica
        return Scenario(name, description, _poisson(rate, 7), **kw)  # type: ignore[arg-type]

    return make


def step_5x(params: sim_params.SimParams) -> Scenario:
    return _synthetic(
        "step-5x",
        "6 replicas' worth, then 5x at 15 min, for 45 min",
        lambda t: np.where(t < 900, 6.0, 30.0),
        3600,
        step_at_s=900.0,
    )(params)


def spike_60s(params: sim_params.SimParams) -> Scenario:
    return _synthetic(
        "spike-60s",
        "10 replicas' worth with a 60 s spike to 4x at 20 min",
        lambda t: np.where((t >= 1200) & (t < 1260), 40.0, 10.0),
        3600,
    )(params)


def diurnal_ramp(params: sim_params.SimParams) -> Scenario:
    return _synthetic(
        "diurnal",
        "a slow day-shaped ramp from 5 to 35 replicas and back over 2 h",
        lambda t: 5.0 + 30.0 * np.sin(np.pi * t / 7200.0) ** 2,
        7200,
    )(params)


def on_off(params: sim_params.SimParams) -> Scenario:
    return _synthetic(
        "on-off",
        "bursts: 5 min at 30 replicas' worth, 10 min at 6, for 1.5 h",
        lambda t: np.where((t % 900) < 300, 30.0, 6.0),
        5400,
    )(params)


def hover(params: sim_params.SimParams) -> Scenario:
    """Load that wanders within ±8 % of a level 20 replicas can carry at the target."""
    return _synthetic(
        "hover",
        "20 replicas' worth, wandering ±8 % with a 7-minute period, for 1 h",
        lambda t: 20.0 * (1.0 + 0.08 * np.sin(2 * np.pi * t / 420.0)),
        3600,
    )(params)


ALL: tuple[Callable[[sim_params.SimParams], Scenario], ...] = (
    azure_conv,
    servegen_day,
    step_5x,
    spike_60s,
    diurnal_ramp,
    on_off,
    hover,
)
