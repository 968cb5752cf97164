"""`autoscaler simulate` with the simulator's node caches and standby pool: the flags, what they
set, and the combinations refused."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from autoscaler import errors, settings
from autoscaler.experiment import simulate as simulation
from autoscaler.sim import params as sim_params

from .builders import assert_refused_in_one_line
from .conftest import Outcome

Run = Callable[..., Outcome]

CACHE_FLAGS = (
    "--node-cache-gib",
    "--model-size-gib",
    "--warm-startup-s",
    "--cache-retention-s",
    "--cache-placement",
    "--other-models",
    "--other-loads-per-node-hour",
)
STANDBY_FLAGS = (
    "--standby",
    "--standby-cap",
    "--standby-quantile",
    "--standby-min-history-s",
    "--standby-horizon-s",
    "--standby-promote-s",
)
ARRIVALS = np.full(60, 4.0)


def params(**options: object) -> sim_params.SimParams:
    chosen = simulation.Options(**options)  # type: ignore[arg-type]
    return simulation.params_for(chosen, settings.Settings(), ARRIVALS, trace_name="t.csv")


def test_every_flag_is_documented_in_the_help(run: Run) -> None:
    """`simulate --help` documents each node-cache and standby flag, with its default."""
    result = run("simulate", "--help")
    assert result.code == 0
    text = " ".join(result.out.split())
    for flag in (*CACHE_FLAGS, *STANDBY_FLAGS, "--gpus", "--gpus-per-node"):
        assert f" {flag} " in text
    assert "node caches: Nodes keep a cache of model weights" in text
    assert "(default: 64)" in text  # --node-cache-gib
    assert "most pods of the automatic pool (default: 4)" in text


def test_one_flag_turns_a_model_on_and_the_rest_keep_their_defaults() -> None:
    """A single cache flag gives the default caches but for it, `--standby-cap` alone an
    automatic pool, and without any flag there is neither."""
    found = params(gpus=64, cache_placement="cache-aware", standby_cap=8)

    assert found.cache == sim_params.CacheConfig(placement="cache-aware")
    assert found.standby == sim_params.StandbyConfig(fixed=None, cap=8)
    assert (found.gpus, found.gpus_per_node) == (64, 8)
    plain = params()
    assert (plain.cache, plain.standby, plain.gpus) == (None, None, None)
    assert params(standby=3).standby == sim_params.StandbyConfig(fixed=3)
    assert params(standby=simulation.AUTO).standby == sim_params.StandbyConfig()


def test_simulate_runs_node_caches_and_a_standby_pool_from_its_flags(
    run: Run, step_trace: Path, tmp_path: Path
) -> None:
    """Every flag reaches `summary.json`'s params, the run reports its cold starts, and the
    table shows the cache hits and the pool."""
    out = tmp_path / "out"
    result = run(
        "simulate", "--trace", step_trace, "--startup-s", "120", "--gpus", "48",
        "--gpus-per-node", "4", "--node-cache-gib", "32", "--model-size-gib", "8",
        "--warm-startup-s", "6", "--cache-retention-s", "1800", "--cache-placement",
        "cache-aware", "--other-models", "5", "--other-loads-per-node-hour", "2",
        "--standby", "auto", "--standby-cap", "6", "--standby-quantile", "0.9",
        "--standby-min-history-s", "60", "--standby-horizon-s", "1200",
        "--standby-promote-s", "5", "--out", out,
    )  # fmt: skip

    assert result.code == 0, result.err
    summary = json.loads((out / "summary.json").read_text())
    given = summary["params"]
    assert (given["gpus"], given["gpus_per_node"]) == (48, 4)
    assert given["cache"] == {
        "node_cache_gib": 32.0,
        "model_size_gib": 8.0,
        "warm_startup_s": 6.0,
        "retention_s": 1800.0,
        "placement": "cache-aware",
        "other_models": 5,
        "other_loads_per_node_hour": 2.0,
    }
    assert given["standby"] == {
        "fixed": None,
        "cap": 6,
        "quantile": 0.9,
        "min_history_s": 60.0,
        "horizon_s": 1200.0,
        "promote_s": 5.0,
    }
    cold = summary["cold_start"]
    assert cold["cache_hits"] + cold["cache_misses"] > 0
    for row in ("cache hits", "standby GPU-hours", "standby promoted"):
        assert f"| {row} " in result.out


REFUSED = [
    (["--node-cache-gib", "32"],
     "--node-cache-gib: the node cache model needs a fixed cluster of whole cards: give --gpus N"),
    (["--gpus", "8", "--cache-placement", "cache-aware", "--placement", "ladder"],
     "--gpus cannot run with --placement or --cluster"),
    (["--standby", "2", "--ramp", "istio"],
     "--standby: the standby pool is modelled without --ramp, --placement and --cluster"),
    (["--standby-cap", "2", "--standby-quantile", "0.9", "--cluster", "fragmented"],
     "--standby-cap, --standby-quantile: the standby pool is modelled without --ramp"),
    (["--standby", "some"], "argument --standby: expected a number of pods or auto"),
    (["--standby-quantile", "1.5"], "argument --standby-quantile: must be at most 1, got 1.5"),
    (["--gpus", "8", "--model-size-gib", "0"], "argument --model-size-gib: must be above 0"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "expected"), REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_a_combination_the_simulator_cannot_model_is_one_line(
    run: Run, step_trace: Path, tmp_path: Path, args: list[str], expected: str
) -> None:
    """A refused flag or combination exits 2 with one line naming the flags, and writes nothing."""
    assert_refused_in_one_line(run, step_trace, tmp_path / "out", args, expected)


def test_the_cache_flags_name_themselves_when_refused() -> None:
    """The error for caches without `--gpus` lists every cache flag given."""
    with pytest.raises(errors.ConfigError, match=r"^--node-cache-gib, --other-models: the node"):
        params(node_cache_gib=16.0, other_models=2)
