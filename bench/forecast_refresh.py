"""One refresh's backtests of the seasonal forecast, at many services, in process CPU.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python -m bench.forecast_refresh [--services 1000]
        [--repeats 5] [--mode per-service|batched] [--votes per-service|batched]
        [--holed 0.1] [--seed 7]

Every `refresh_s` the loop backtests every service's fresh history (`Loop._refresh_history`).
This builds histories as `prometheus.LoadHistory` hands them out, with the default forecast
config: a week and seven hours of one-minute steps, only the stretches `forecast.reads` names
(with a refresh of lead) held, in float32, a daily pattern with noise and its own level per
service, a share of them (`--holed`) with a few hours of scattered minutes missing. Then it
times one refresh's backtests of all of them, `--repeats` times, each on fresh `History`
objects (a refresh makes new ones, and their cached sums go with them):

- `per-service`: `forecast.backtest` once per service, as the loop did;
- `batched`: `forecast.backtests` over all of them, as the loop does now (absent before it).

Then, as the first tick after a refresh does, each service's vote (a vote that is on reads
the history's `sums`, which the batched backtests keep and the per-service ones leave to be
made; with them kept, it is what every tick costs whose forecast step moved, once a minute):

- `--votes per-service`: `forecast.vote` once per service, as the loop did;
- `--votes batched`: `forecast.votes` over all of them, as the loop does now (absent before).

Printed: the least and the median process CPU seconds of a refresh's backtests, and of its
first votes, per service in microseconds, and how many backtests came out on. Figures are
printed, never asserted. `--mode per-service` runs on a tree without `forecast.backtests`
too (run this file as a script with that tree's root on `PYTHONPATH`), to time it before.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from autoscaler.core import forecast, model

STEP_S = 60.0
DAY_S = 86_400.0


def histories(
    services: int, *, seed: int, holed: float, config: model.ForecastConfig
) -> list[forecast.History]:
    """`services` histories of `config.span_s`, held as the adapter holds them."""
    size = round(config.span_s / config.step_s)
    stretches = [
        (max(0, size + lo), size + hi)
        for lo, hi in forecast.reads(config, lead_s=config.refresh_s)
        if size + hi > max(0, size + lo)
    ]
    steps = np.concatenate([np.arange(lo, hi) for lo, hi in stretches])
    rng = np.random.default_rng(seed)
    shape = 1.0 - 0.8 * np.cos(2 * np.pi * steps * config.step_s / DAY_S)
    level = 10.0 ** rng.uniform(0.0, 3.0, (services, 1))
    values = (level * shape * np.exp(rng.normal(0.0, 0.1, (services, len(steps))))).astype(
        np.float32
    )
    for row in np.flatnonzero(rng.random(services) < holed):
        for start in rng.integers(0, len(steps), 12):
            values[row, start : start + rng.integers(1, 40)] = np.nan
    out = []
    empty = np.empty(0, dtype=np.float32)
    for row in range(services):
        pieces, at = [], 0
        for lo, hi in stretches:
            pieces.append((lo, values[row, at : at + hi - lo]))
            at += hi - lo
        out.append(forecast.History(0.0, config.step_s, empty, pieces=tuple(pieces), length=size))
    return out


def fresh(history: forecast.History) -> forecast.History:
    """The same history in a new object (no cached sums), as each refresh hands out."""
    return forecast.History(
        history.start_s, history.step_s, history.load_per_s, history.pieces, history.length
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--mode", choices=("per-service", "batched"), default="batched")
    parser.add_argument("--votes", choices=("per-service", "batched"), default="batched")
    parser.add_argument("--holed", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    config = model.ForecastConfig()
    made = histories(args.services, seed=args.seed, holed=args.holed, config=config)
    now_s = made[0].end_s
    ahead_s = forecast.horizon_s(config, None)
    spent: list[float] = []
    voting: list[float] = []
    on = 0
    for _ in range(args.repeats):
        batch = [fresh(h) for h in made]
        started = time.process_time()
        if args.mode == "per-service":
            scored = [forecast.backtest(config, h, now_s=now_s, horizon_s=ahead_s) for h in batch]
        else:
            jobs = [(config, h, ahead_s) for h in batch]
            scored = forecast.backtests(jobs, now_s=now_s)
        spent.append(time.process_time() - started)
        started = time.process_time()
        if args.votes == "per-service":
            for history, one in zip(batch, scored, strict=True):
                forecast.vote(config, history, one, now_s=now_s, horizon_s=ahead_s)
        else:
            jobs_of = [(config, h, s, ahead_s) for h, s in zip(batch, scored, strict=True)]
            forecast.votes(jobs_of, now_s=now_s)
        voting.append(time.process_time() - started)
        on = sum(s.on for s in scored)
    print(
        f"{args.mode}, votes {args.votes}: {args.services} services, "
        f"{args.repeats} refreshes, {on} on"
    )
    for name, times in (("backtests", spent), ("first votes", voting)):
        least, median = min(times), statistics.median(times)
        print(
            f"  {name}: least {least:.3f} s, median {median:.3f} s of CPU "
            f"({least / args.services * 1e6:.0f} / {median / args.services * 1e6:.0f} us a "
            "service)"
        )


if __name__ == "__main__":
    main()
