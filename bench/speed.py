"""How fast the simulator runs: simulated seconds per wall-clock (and CPU) second.

`python -m bench.speed [--days 7]` replays the bundled trace with each policy, a
synthetic multi-day trace with the default policy, and the same synthetic trace through the
world alone (no loop), and prints one line per run. `--tokens` times the token mode instead:
the bundled hour per request (its prompt and output tokens) at four times its rate, through the
loop and through the world alone, beside the same hour in request mode, and through the loop
with ours reading the token signals (`bench.tokens`' targets). Timings are printed,
never asserted (docs/benchmark.md). Like the CLI, it sets logging to warnings so the loop's
per-decision lines are not what gets measured.

It must not write files or change what it measures: it only times `run.simulate`.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gzip
import time
from collections.abc import Callable
from importlib import resources

import numpy as np
import numpy.typing as npt

from autoscaler import logs
from autoscaler.experiment import run, trace
from autoscaler.sim import tokens, world
from autoscaler.sim.params import SimParams
from bench import tokens as bench_tokens

FloatArray = npt.NDArray[np.float64]

BUNDLED = "azure_llm_2023_conv.requests.csv.gz"
_DAY_S = 86_400


def bundled_trace() -> FloatArray:
    """The bundled trace as requests per second (its `t_seconds,requests` rows summed)."""
    path = resources.files("autoscaler.experiment") / "traces" / BUNDLED
    with gzip.open(str(path), "rt") as f:
        table = np.loadtxt(f, delimiter=",", skiprows=1, ndmin=2)
    seconds = table[:, 0].astype(np.int64)
    arrivals = np.zeros(int(seconds.max()) + 1)
    np.add.at(arrivals, seconds, table[:, 1])
    return arrivals


def synthetic_trace(*, days: float, mean_rps: float = 20.0, seed: int = 0) -> FloatArray:
    """A diurnal load with quieter weekends, a few 10-minute bursts and Poisson noise."""
    rng = np.random.default_rng(seed)
    n = round(days * _DAY_S)
    t = np.arange(n)
    daily = 1.0 + 0.6 * np.sin(2 * np.pi * t / _DAY_S - np.pi / 2)
    weekend = np.where((t // _DAY_S) % 7 >= 5, 0.7, 1.0)
    rate = mean_rps * daily * weekend
    for start in rng.integers(0, max(1, n - 600), size=max(1, round(days * 2))):
        rate[start : start + 600] *= 3.0
    return rng.poisson(rate).astype(np.float64)


@dataclasses.dataclass(frozen=True, slots=True)
class Timing:
    label: str
    simulated_s: float
    wall_s: float
    cpu_s: float

    def line(self) -> str:
        return (
            f"{self.label:<34} {self.simulated_s:>9.0f} sim-s  {self.wall_s:>8.2f} wall-s  "
            f"{self.simulated_s / self.wall_s:>8.0f} sim-s/wall-s  "
            f"{self.simulated_s / self.cpu_s:>8.0f} sim-s/cpu-s"
        )


def timed(label: str, simulated_s: float, work: Callable[[], object]) -> Timing:
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return Timing(label, simulated_s, time.perf_counter() - wall, time.process_time() - cpu)


def world_only(
    arrivals: FloatArray, params: SimParams, token_mix: tokens.TokenMix | None = None
) -> None:
    """The simulator's own share: the world moved second by second, nobody deciding."""
    sim = world.World(params)
    sim.add_service("bench/inference", arrivals, params, token_mix=token_mix)
    for _ in range(len(arrivals)):
        sim.advance(1.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.speed", description=__doc__)
    parser.add_argument("--days", type=float, default=7.0, help="synthetic trace length")
    parser.add_argument("--tokens", action="store_true", help="time the token mode")
    args = parser.parse_args(argv)
    logs.configure(json=True, level="warning")

    if args.tokens:
        return _time_tokens()
    base = SimParams()
    bundled = bundled_trace()
    synthetic = synthetic_trace(days=args.days)
    runs = [
        (f"bundled ({BUNDLED[:-7]}) seed", bundled, dataclasses.replace(base, policy="seed")),
        (f"bundled ({BUNDLED[:-7]}) default", bundled, base),
        (f"synthetic {args.days:g} days, default", synthetic, base),
    ]
    for label, arrivals, params in runs:
        timing = timed(label, len(arrivals), functools.partial(run.simulate, arrivals, params))
        print(timing.line(), flush=True)
    timing = timed(
        f"synthetic {args.days:g} days, world only",
        len(synthetic),
        functools.partial(world_only, synthetic, base),
    )
    print(timing.line(), flush=True)
    return 0


TOKEN_RATE_SCALE = 4.0
"""The bundled hour at four times its rate: a peak of about 35 replicas in token mode."""
TOKEN_MU_RPS = 3.74
"""What one replica serves on the Azure mix within the TTFT SLO (docs/simulator.md)."""


def _time_tokens() -> int:
    summed = trace.per_second(trace.load_per_request(trace.bundled_per_request()))
    scale = TOKEN_RATE_SCALE
    arrivals = summed.requests * scale
    mix = tokens.TokenMix(summed.prompt_tokens * scale, summed.output_tokens * scale)
    requests = SimParams(replica_capacity_rps=TOKEN_MU_RPS, max_replicas=100)
    token_mode = dataclasses.replace(requests, tokens=tokens.TokenConfig())
    label = "azure x4"
    for mode, params, token_mix in (
        ("requests", requests, None),
        ("tokens", token_mode, mix),
    ):
        loop = functools.partial(run.simulate, arrivals, params, token_mix=token_mix)
        print(timed(f"{label}, {mode}, loop", len(arrivals), loop).line(), flush=True)
        alone = functools.partial(world_only, arrivals, params, token_mix)
        print(timed(f"{label}, {mode}, world only", len(arrivals), alone).line(), flush=True)
    # The token signals are read only for a service that sets a token target: ours with the
    # targets of bench.tokens, so that their sampling and smoothing are timed too.
    bench_tokens.register_tokens_policy(TOKEN_CAPACITY)
    signals = dataclasses.replace(token_mode, policy=bench_tokens.TOKENS_POLICY)
    loop = functools.partial(run.simulate, arrivals, signals, token_mix=mix)
    print(timed(f"{label}, tokens with token signals, loop", len(arrivals), loop).line())
    return 0


TOKEN_CAPACITY = bench_tokens.Capacity(
    TOKEN_MU_RPS, 7.63, tokens_per_s=780.0, prompt_tokens_per_s=4306.0, kv_usage_ratio=0.8
)
"""One replica on the Azure mix, as `bench.tokens.measure_capacity` finds it."""


if __name__ == "__main__":
    raise SystemExit(main())
