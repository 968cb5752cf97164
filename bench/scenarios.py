"""The benchmark's scenarios: real traces, rate-scaled, and synthetic shapes.

Every scenario is a per-second arrivals array expressed in "replicas' worth" of the default load
target (`SimParams.target_load_per_replica`, 75 % of mu), so that the same capacity model serves
every policy and the peak needs tens of replicas. Synthetic shapes are drawn as Poisson counts
around a rate curve, from a fixed seed, so second-scale noise is realistic and runs are
repeatable. Each is an `autoscaler.experiment.scenario.Scenario`. `build(name, params)` makes one
by name; `NAMES` lists them in the order the benchmark reports them.

`build(name, params, draw=k)` makes the scenario's draw `k` (`bench.run --seeds N` runs draws 0 to
N - 1): draw 0 is the scenario as it always was; a later draw redraws every random part from its
own stream (`draw_seed`), both the Poisson noise and the shape's own randomness (the Pareto
bursts' schedule, the code-assistant's minutes and spikes, the noisy day's knots, the workday's
levels). The Azure hour is real counts, with no rate curve to draw around: its later draws are
Poisson counts around the real trace's own local rate (`local_rate`), the scale at which the
real counts are themselves Poisson.

It only builds arrays: it runs no simulation and writes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from autoscaler.experiment import trace
from autoscaler.experiment.scenario import Scenario
from autoscaler.sim import params as sim_params

Arrivals = npt.NDArray[np.float64]
Seed = int | tuple[int, int]
"""A random seed as numpy takes it: a scenario's own seed, or (its seed, the draw)."""
HERE = Path(__file__).resolve().parent
TRACES = HERE / "traces"
AZURE = trace.bundled()
SERVEGEN = TRACES / "servegen_m-large_days0-6.requests.csv.gz"

PEAK_REPLICAS = 40.0
"""What the real traces' busiest minute needs at the default load target."""
SERVEGEN_SLICE_S = 6 * 3600
"""The ServeGen scenario replays the busiest 6 hours of day 0, not the whole day: a day per run
would take the full benchmark past its 10-minute budget on two cores."""
_SERVEGEN_BLOCK_S = 600
"""The ServeGen source gives one rate per 10 minutes."""


def _load(path: Path) -> Arrivals:
    """The trace's counts, under the same rules as `simulate --trace` (`TraceError` else)."""
    return trace.load(path)


def _to_replicas(rate: Arrivals, peak_replicas: float, params: sim_params.SimParams) -> Arrivals:
    """Scale a rate curve so its 60 s peak needs `peak_replicas` at the load target."""
    return rate * _scale(rate, peak_replicas, params)


def _scale(rate: Arrivals, peak_replicas: float, params: sim_params.SimParams) -> float:
    """The factor `_to_replicas` scales `rate` by."""
    window = min(60, len(rate))
    peak = float(np.max(np.convolve(rate, np.ones(window) / window, mode="valid")))
    return peak_replicas * params.target_load_per_replica / peak


def draw_seed(seed: int, draw: int) -> Seed:
    """The seed of a scenario's random part in draw `draw`: the part's own seed in draw 0 (the
    scenario as it always was), else the pair (seed, draw), an independent numpy stream."""
    return seed if draw == 0 else (seed, draw)


def _poisson(rate: Arrivals, seed: Seed) -> Arrivals:
    return np.random.default_rng(seed).poisson(np.maximum(rate, 0.0)).astype(np.float64)


def local_rate(counts: Arrivals, window_s: int) -> Arrivals:
    """Each second's mean count over the `window_s` seconds centred on it (odd; fewer at the
    trace's ends)."""
    half = window_s // 2
    sums = np.concatenate([[0.0], np.cumsum(counts)])
    n = len(counts)
    t = np.arange(n)
    lo, hi = np.maximum(t - half, 0), np.minimum(t + half + 1, n)
    rate: Arrivals = (sums[hi] - sums[lo]) / (hi - lo)
    return rate


AZURE_RATE_WINDOW_S = 11
"""The Azure hour's later draws are Poisson around its real counts' mean over this many seconds:
the real counts' spread around their 11 s mean is Poisson's (its variance over the mean, 1.00;
0.90 at 5 s, 1.07 at 31 s), so a draw keeps every real swing of about 10 s or longer and redraws
only the noise. A Poisson draw around the real counts themselves would double that noise (each
count's variance counted twice) and the SLO sizing reads it as burstiness."""
_AZURE_DRAW_SEED = 5
"""The seed of the Azure hour's later draws (draw 0 is the real trace and draws nothing)."""


def azure_conv(params: sim_params.SimParams, draw: int = 0) -> Scenario:
    """The real hour's counts, rate-scaled; a later draw is Poisson counts around the real
    counts' local rate (`AZURE_RATE_WINDOW_S`), scaled by the same factor."""
    real = _load(AZURE)
    if draw == 0:
        arrivals = _to_replicas(real, PEAK_REPLICAS, params)
    else:
        rate = local_rate(real, AZURE_RATE_WINDOW_S)
        drawn = _poisson(rate, draw_seed(_AZURE_DRAW_SEED, draw))
        arrivals = drawn * _scale(real, PEAK_REPLICAS, params)
    return Scenario(
        "azure-conv",
        f"Azure LLM chat service, 1 h (real, rate-scaled: peak minute {PEAK_REPLICAS:g} "
        "replicas' worth)",
        arrivals,
    )


def busiest_window(rate: Arrivals, *, window_s: int, block_s: int) -> int:
    """The start (a multiple of `block_s`) of the `window_s` seconds with the most requests."""
    blocks = len(rate) // block_s
    per_block = rate[: blocks * block_s].reshape(blocks, block_s).sum(axis=1)
    width = min(blocks, math.ceil(window_s / block_s))
    sums = np.convolve(per_block, np.ones(width), mode="valid")
    return int(np.argmax(sums)) * block_s


def servegen(params: sim_params.SimParams, draw: int = 0) -> Scenario:
    """The busiest 6 hours of ServeGen's day 0. The source has one rate per 10 minutes, so
    Poisson noise is drawn around it."""
    day = _load(SERVEGEN)[: 24 * 3600]
    start = busiest_window(day, window_s=SERVEGEN_SLICE_S, block_s=_SERVEGEN_BLOCK_S)
    rate = day[start : start + SERVEGEN_SLICE_S]
    scaled = _to_replicas(rate, PEAK_REPLICAS, params)
    clock = f"{start // 3600:02d}:{start % 3600 // 60:02d}"
    return Scenario(
        "servegen",
        f"ServeGen m-large, the busiest 6 h of day 0 (from {clock}; real, rate-scaled: peak "
        f"{PEAK_REPLICAS:g} replicas' worth); a 6 h slice because the whole day would not fit "
        "the time budget",
        _poisson(scaled, draw_seed(1, draw)),
    )


def _synthetic(
    name: str,
    description: str,
    curve: Callable[[Arrivals], Arrivals],
    duration_s: int,
    params: sim_params.SimParams,
    draw: int,
    *,
    step_at_s: float | None = None,
    step_s: float | None = None,
) -> Scenario:
    t = np.arange(duration_s, dtype=np.float64)
    rate = curve(t) * params.target_load_per_replica
    counts = _poisson(rate, draw_seed(7, draw))
    return Scenario(name, description, counts, step_at_s=step_at_s, step_s=step_s)


def step_5x(params: sim_params.SimParams, draw: int = 0) -> Scenario:
    return _synthetic(
        "step-5x",
        "6 replicas' worth, then 5x at 15 min, for 1 h",
        lambda t: np.where(t < 900, 6.0, 30.0),
        3600,
        params,
        draw,
        step_at_s=900.0,
    )


def spike_60s(params: sim_params.SimParams, draw: int = 0) -> Scenario:
    return _synthetic(
        "spike-60s",
        "10 replicas' worth with a 60 s spike to 4x at 20 min, for 1 h",
        lambda t: np.where((t >= 1200) & (t < 1260), 40.0, 10.0),
        3600,
        params,
        draw,
        step_at_s=1200.0,
        step_s=60.0,
    )


def diurnal(params: sim_params.SimParams, draw: int = 0) -> Scenario:
    return _synthetic(
        "diurnal",
        "a slow day-shaped ramp from 5 to 35 replicas' worth and back over 2 h",
        lambda t: 5.0 + 30.0 * np.sin(np.pi * t / 7200.0) ** 2,
        7200,
        params,
        draw,
    )


def on_off(params: sim_params.SimParams, draw: int = 0) -> Scenario:
    return _synthetic(
        "on-off",
        "bursts: 5 min at 30 replicas' worth, 10 min at 6, for 1.5 h",
        lambda t: np.where((t % 900) < 300, 30.0, 6.0),
        5400,
        params,
        draw,
        step_at_s=900.0,
        step_s=300.0,
    )


def hover(params: sim_params.SimParams, draw: int = 0) -> Scenario:
    """Load that wanders within ±8 % of a level 20 replicas can carry at the target."""
    return _synthetic(
        "hover",
        "20 replicas' worth, wandering ±8 % with a 7-minute period, for 1 h",
        lambda t: 20.0 * (1.0 + 0.08 * np.sin(2 * np.pi * t / 420.0)),
        3600,
        params,
        draw,
    )


DIURNAL_NOISE_S = 5400
"""The compressed day: 90 minutes from night to peak and back."""
NOISE_SIGMA = 0.15
"""Log-normal sigma of the day's per-minute multiplicative noise."""
BURSTS_BASE = 8.0
"""Replicas' worth under the heavy-tailed bursts."""
BURST_MEAN_GAP_S = 300.0
BURST_ALPHA = 1.5
"""Pareto shape of a burst's size: finite mean, infinite variance."""
BURST_MIN_EXTRA = 4.0
"""The smallest burst, in replicas' worth on top of the base (the Pareto scale)."""
BURST_MAX_EXTRA = 40.0
"""Bursts are capped here, so the peak stays within the 100-replica bound at any target."""
CODE_QUIET, CODE_BUSY = 4.0, 20.0
"""Replicas' worth in a quiet and a busy minute of the code-assistant mix."""
CODE_SWITCH = 0.3
"""Chance that the next minute is in the other state (quiet or busy)."""
CODE_SPIKES_PER_HOUR = 20
CODE_SPIKE_S = (5, 20)
"""A spike lasts 5 to 20 s..."""
CODE_SPIKE_FACTOR = (2.0, 3.0)
"""...at 2 to 3 times the minute's level."""


def diurnal_noise(params: sim_params.SimParams, draw: int = 0) -> Scenario:
    """A compressed day, night to peak to night, times per-minute log-normal noise (smoothly
    joined between minutes): it stresses tracking a slow swing without chasing the noise."""
    n = DIURNAL_NOISE_S
    t = np.arange(n, dtype=np.float64)
    day = 18.0 - 12.0 * np.cos(2 * np.pi * t / n)
    rng = np.random.default_rng(draw_seed(11, draw))
    knots = np.exp(rng.normal(0.0, NOISE_SIGMA, n // 60 + 2))
    noise = np.interp(t / 60.0, np.arange(len(knots), dtype=np.float64), knots)
    rate = day * noise * params.target_load_per_replica
    return Scenario(
        "diurnal-noise",
        f"a compressed day: 6 to 30 replicas' worth and back over {n // 60} min, times "
        f"per-minute log-normal noise (sigma {NOISE_SIGMA:g})",
        _poisson(rate, draw_seed(12, draw)),
    )


def burst_schedule(duration_s: int, seed: Seed) -> list[tuple[int, int, float]]:
    """The heavy-tailed bursts: (start s, length s, extra replicas' worth) each. Starts are a
    Poisson process (mean gap `BURST_MEAN_GAP_S`), lengths 30 to 180 s, sizes Pareto
    (`BURST_ALPHA`, from `BURST_MIN_EXTRA`) capped at `BURST_MAX_EXTRA`."""
    rng = np.random.default_rng(seed)
    bursts: list[tuple[int, int, float]] = []
    at = float(rng.exponential(BURST_MEAN_GAP_S))
    while at < duration_s:
        length = int(rng.integers(30, 181))
        extra = min(BURST_MAX_EXTRA, BURST_MIN_EXTRA * (1.0 + float(rng.pareto(BURST_ALPHA))))
        bursts.append((int(at), length, extra))
        at += length + float(rng.exponential(BURST_MEAN_GAP_S))
    return bursts


def pareto_bursts(params: sim_params.SimParams, draw: int = 0) -> Scenario:
    """Bursts of Pareto-distributed size at random times over a steady base: most are small,
    a few are several times the base, and none is announced."""
    n = 3600
    curve = np.full(n, BURSTS_BASE)
    for start, length, extra in burst_schedule(n, seed=draw_seed(48, draw)):
        curve[start : start + length] += extra
    return Scenario(
        "pareto-bursts",
        f"{BURSTS_BASE:g} replicas' worth plus bursts at random times (every "
        f"{BURST_MEAN_GAP_S / 60:g} min on average, 30-180 s long) of Pareto size "
        f"(alpha {BURST_ALPHA:g}, from {BURST_MIN_EXTRA:g} to {BURST_MAX_EXTRA:g} more), for 1 h",
        _poisson(curve * params.target_load_per_replica, draw_seed(22, draw)),
    )


def code_assist_curve(duration_s: int, seed: Seed) -> tuple[Arrivals, list[tuple[int, int]]]:
    """The code-assistant mix in replicas' worth, and its spikes as (start s, length s).

    Each minute is quiet or busy (a two-state chain that switches with `CODE_SWITCH`); on top,
    short spikes (`CODE_SPIKE_S`) at random seconds multiply the minute's level."""
    rng = np.random.default_rng(seed)
    minutes = math.ceil(duration_s / 60)
    busy = np.zeros(minutes, dtype=bool)
    for m in range(1, minutes):
        switch = rng.random() < CODE_SWITCH
        busy[m] = not busy[m - 1] if switch else busy[m - 1]
    level = np.where(busy, CODE_BUSY, CODE_QUIET)
    curve = np.repeat(level, 60)[:duration_s].astype(np.float64)
    spikes: list[tuple[int, int]] = []
    count = round(CODE_SPIKES_PER_HOUR * duration_s / 3600)
    for start in np.sort(rng.choice(duration_s, size=count, replace=False)):
        length = int(rng.integers(CODE_SPIKE_S[0], CODE_SPIKE_S[1] + 1))
        factor = float(rng.uniform(*CODE_SPIKE_FACTOR))
        end = min(duration_s, int(start) + length)
        curve[int(start) : end] *= factor
        spikes.append((int(start), end - int(start)))
    return curve, spikes


def code_assist(params: sim_params.SimParams, draw: int = 0) -> Scenario:
    """Developers' editors: quiet and busy minutes at random, with short spikes (a team's
    completions arriving together)."""
    curve, _ = code_assist_curve(3600, seed=draw_seed(31, draw))
    return Scenario(
        "code-assist",
        f"a code-assistant mix: minutes at {CODE_QUIET:g} or {CODE_BUSY:g} replicas' worth "
        f"switching at random (p {CODE_SWITCH:g} a minute), with {CODE_SPIKES_PER_HOUR} spikes "
        f"an hour of {CODE_SPIKE_S[0]}-{CODE_SPIKE_S[1]} s at "
        f"{CODE_SPIKE_FACTOR[0]:g}-{CODE_SPIKE_FACTOR[1]:g}x, for 1 h",
        _poisson(curve * params.target_load_per_replica, draw_seed(32, draw)),
    )


DAY_S = 86_400
WORKDAY_NIGHT, WORKDAY_DAY = 4.0, 32.0
"""Replicas' worth at night and through the working day."""
WORKDAY_PAST_DAYS = 2
WORKDAY_REPLAY_S = (7 * 3600, 10 * 3600)
"""The replay: 07:00 to 10:00 of the third day, the morning rise in the middle."""
WORKDAY_DAY_SIGMA = 0.05
"""Log-normal sigma of each day's own level."""


def workday_curve(days: int, seed: Seed) -> Arrivals:
    """Replicas' worth per second over `days` days of an office-hours service: quiet at night,
    a rise of about half an hour around 08:30 (10 to 90 % in 32 minutes), a lunch dip, a slower
    fall in the evening; each day at its own level, times per-minute log-normal noise."""
    t = np.arange(days * DAY_S, dtype=np.float64)
    hour = (t % DAY_S) / 3600.0
    up = 1.0 / (1.0 + np.exp(-(hour - 8.5) / 0.12))
    down = 1.0 / (1.0 + np.exp(-(hour - 18.0) / 0.4))
    lunch = 0.2 * np.exp(-(((hour - 12.5) / 0.5) ** 2))
    shape = WORKDAY_NIGHT + (WORKDAY_DAY - WORKDAY_NIGHT) * (up - down) * (1.0 - lunch)
    rng = np.random.default_rng(seed)
    level = np.repeat(np.exp(rng.normal(0.0, WORKDAY_DAY_SIGMA, days)), DAY_S)
    knots = np.exp(rng.normal(0.0, NOISE_SIGMA / 2, days * DAY_S // 60 + 2))
    noise = np.interp(t / 60.0, np.arange(len(knots), dtype=np.float64), knots)
    curve: Arrivals = shape * level * noise
    return curve


def workday(params: sim_params.SimParams, draw: int = 0) -> Scenario:
    """The morning of an office-hours service with two days of history before it: the load
    that a seasonal forecast can see coming, and a reactive policy only once it is there."""
    days = WORKDAY_PAST_DAYS + 1
    curve = workday_curve(days, seed=draw_seed(61, draw))
    counts = _poisson(curve * params.target_load_per_replica, draw_seed(62, draw))
    start, end = (WORKDAY_PAST_DAYS * DAY_S + s for s in WORKDAY_REPLAY_S)
    return Scenario(
        "workday",
        f"office hours: {WORKDAY_NIGHT:g} replicas' worth at night, {WORKDAY_DAY:g} by day "
        "after a half-hour rise around 08:30; 07:00 to 10:00 of the third day, with the two "
        "days before it (and the night) as the load history",
        counts[start:end],
        past=counts[:start],
    )


FACTORIES: dict[str, Callable[[sim_params.SimParams, int], Scenario]] = {
    "azure-conv": azure_conv,
    "servegen": servegen,
    "step-5x": step_5x,
    "spike-60s": spike_60s,
    "diurnal": diurnal,
    "on-off": on_off,
    "hover": hover,
    "diurnal-noise": diurnal_noise,
    "pareto-bursts": pareto_bursts,
    "code-assist": code_assist,
    "workday": workday,
}
NAMES = tuple(FACTORIES)


def build(name: str, params: sim_params.SimParams, draw: int = 0) -> Scenario:
    """The scenario `name`, its draw `draw` (0: as it always was); `ValueError` naming the known
    ones when there is none."""
    factory = FACTORIES.get(name)
    if factory is None:
        raise ValueError(f"unknown scenario {name!r}; known: {', '.join(NAMES)}")
    if draw < 0:
        raise ValueError(f"a draw is 0 or more, got {draw}")
    return factory(params, draw)
