"""`simulate` and `demo`: one trace replayed through the real loop on the simulator, and the
bundled trace under both of the project's policies.

The command line (`autoscaler.cli`) parses the flags into `Options` and shows progress; this
module turns them into the simulator's parameters, runs, and writes the report. It must not
parse arguments or print.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import numpy as np
import numpy.typing as npt
import structlog

from autoscaler import errors, logs, settings
from autoscaler.experiment import run as sim_run
from autoscaler.experiment import trace
from autoscaler.sim import params as sim_params

if TYPE_CHECKING:
    # The report pulls in matplotlib: imported where used, once the runs are done.
    from autoscaler.experiment import run_report

log = structlog.get_logger(__name__)

DEFAULT_CLUSTER = "fragmented"
"""The cluster `simulate --placement` runs on without `--cluster`."""
DEFAULT_MODEL_MEMORY_GIB = 6.0
DEMO_MEAN_REPLICAS = 20.0
DEMO_POLICIES = ("default", "seed")
"""Ours first, then the plain policy (docs/architecture.md, "The replica count") for comparison."""
DEFAULTS = sim_params.SimParams()
CACHE_DEFAULTS: Final = sim_params.CacheConfig()
STANDBY_DEFAULTS: Final = sim_params.StandbyConfig()
AUTO: Final = "auto"
"""`--standby auto`: the pool sized by `core.standby` rather than fixed."""

ProgressFn = Callable[[float, float], None]
Tracker = Callable[[str, float], AbstractContextManager[ProgressFn | None]]
"""`track(label, total_s)`: a context around one run that gives its progress callback, if any."""


@dataclass(frozen=True, slots=True)
class Options:
    """What `simulate` was asked for; None keeps the simulator's default."""

    policy: str | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None
    startup_s: float | None = None
    seed: int | None = None
    ramp: str | None = None
    placement: str | None = None
    cluster: str | None = None
    model_memory_gib: float = DEFAULT_MODEL_MEMORY_GIB
    rate_scale: float | None = None
    target_mean_replicas: float | None = None
    gpus: int | None = None
    gpus_per_node: int | None = None
    # The node caches (`sim_params.CacheConfig`): any of them turns the cache model on.
    node_cache_gib: float | None = None
    model_size_gib: float | None = None
    warm_startup_s: float | None = None
    cache_retention_s: float | None = None
    cache_placement: str | None = None
    other_models: int | None = None
    other_loads_per_node_hour: float | None = None
    # The standby pool (`sim_params.StandbyConfig`): any of them turns the pool on.
    standby: int | Literal["auto"] | None = None
    """A fixed pool of that many pods, or `AUTO`."""
    standby_cap: int | None = None
    standby_quantile: float | None = None
    standby_min_history_s: float | None = None
    standby_horizon_s: float | None = None
    standby_promote_s: float | None = None


def params_for(
    options: Options,
    config: settings.Settings,
    arrivals: npt.NDArray[np.float64],
    *,
    trace_name: str,
) -> sim_params.SimParams:
    """SimParams from the options given (the rest keep their defaults), checked as a whole."""
    try:
        chosen: dict[str, Any] = {
            "policy": options.policy,
            "min_replicas": options.min_replicas,
            "max_replicas": options.max_replicas,
            "startup_s": options.startup_s,
            "seed": options.seed,
            "ramp": options.ramp,
            "gpus": options.gpus,
            "gpus_per_node": options.gpus_per_node,
            **_placement(options),
            **_cold_start(options),
        }
        base = sim_params.SimParams(
            half_life_s=config.smoothing.half_life_s,
            **{k: v for k, v in chosen.items() if v is not None},
        )
    except ValueError as e:  # the flags' parsers check each value: this is a combination
        raise errors.ConfigError(str(e)) from e
    max_flag = (
        "--max-replicas" if options.max_replicas is not None else "the default --max-replicas"
    )
    if base.min_replicas > base.max_replicas:
        raise errors.ConfigError(
            f"--min-replicas {base.min_replicas} is above {max_flag} {base.max_replicas}"
        )
    if options.target_mean_replicas is None:
        scale = 1.0 if options.rate_scale is None else options.rate_scale
    else:
        mean = options.target_mean_replicas
        if mean > base.max_replicas:
            raise errors.ConfigError(
                f"--target-mean-replicas {mean:g} is above {max_flag} {base.max_replicas}"
            )
        scale = rate_scale(arrivals, mean, base, trace_name=trace_name)
    return replace(base, rate_scale=scale)


def _placement(options: Options) -> dict[str, Any]:
    """`--placement` and `--cluster`: a cluster described by GPU tier (docs/architecture.md,
    "The placement ladder"); either option alone takes the other's default (`fragmented`,
    `whole`)."""
    if options.placement is None and options.cluster is None:
        return {}
    if options.gpus is not None:
        raise errors.ConfigError(
            "--gpus cannot run with --placement or --cluster: the cluster is described by tier"
        )
    return {
        "nodes": sim_params.CLUSTERS[options.cluster or DEFAULT_CLUSTER],
        "placement": options.placement or "whole",
        "model_memory_mib": round(options.model_memory_gib * sim_params.GIB),
    }


_CACHE_FLAGS: Final = {
    "node_cache_gib": ("--node-cache-gib", "node_cache_gib"),
    "model_size_gib": ("--model-size-gib", "model_size_gib"),
    "warm_startup_s": ("--warm-startup-s", "warm_startup_s"),
    "cache_retention_s": ("--cache-retention-s", "retention_s"),
    "cache_placement": ("--cache-placement", "placement"),
    "other_models": ("--other-models", "other_models"),
    "other_loads_per_node_hour": ("--other-loads-per-node-hour", "other_loads_per_node_hour"),
}
"""Each `Options` field of the node caches: its flag and its `CacheConfig` field."""
_STANDBY_FLAGS: Final = {
    "standby_cap": ("--standby-cap", "cap"),
    "standby_quantile": ("--standby-quantile", "quantile"),
    "standby_min_history_s": ("--standby-min-history-s", "min_history_s"),
    "standby_horizon_s": ("--standby-horizon-s", "horizon_s"),
    "standby_promote_s": ("--standby-promote-s", "promote_s"),
}
"""Each `Options` field of the standby pool but `standby`: its flag and its `StandbyConfig`
field."""


def _cold_start(options: Options) -> dict[str, Any]:
    """The node caches and the standby pool (docs/simulator.md, "Node caches" and "The standby
    pool"): any of a model's flags turns it on, the others keeping their defaults. The cache
    model needs `--gpus` (a fixed set of nodes, so never a cluster by tier: see `_placement`);
    the pool runs neither on a cluster by tier nor with the ramp."""
    found: dict[str, Any] = {}
    tiered = options.placement is not None or options.cluster is not None
    cache = {
        field: value
        for name, (_, field) in _CACHE_FLAGS.items()
        if (value := getattr(options, name)) is not None
    }
    if cache:
        flags = _given(options, _CACHE_FLAGS)
        if options.gpus is None:
            raise errors.ConfigError(
                f"{flags}: the node cache model needs a fixed cluster of whole cards: give --gpus N"
            )
        found["cache"] = sim_params.CacheConfig(**cache)
    standby = {
        field: value
        for name, (_, field) in _STANDBY_FLAGS.items()
        if (value := getattr(options, name)) is not None
    }
    if options.standby is not None or standby:
        flags = _given(options, {"standby": ("--standby", ""), **_STANDBY_FLAGS})
        if options.ramp is not None or tiered:
            raise errors.ConfigError(
                f"{flags}: the standby pool is modelled without --ramp, --placement and --cluster"
            )
        fixed = options.standby if isinstance(options.standby, int) else None
        found["standby"] = sim_params.StandbyConfig(fixed=fixed, **standby)
    return found


def _given(options: Options, flags: Mapping[str, tuple[str, str]]) -> str:
    """The flags of `flags` that were given, for an error message."""
    return ", ".join(
        flag for name, (flag, _) in flags.items() if getattr(options, name) is not None
    )


def rate_scale(
    arrivals: npt.NDArray[np.float64],
    mean_replicas: float,
    params: sim_params.SimParams,
    *,
    trace_name: str,
) -> float:
    """The factor on the trace's counts that makes its mean load need `mean_replicas`."""
    try:
        return sim_params.rate_scale_for_mean_replicas(arrivals, mean_replicas, params)
    except ValueError as e:
        raise errors.TraceError(trace_name, None, None, str(e)) from e


@dataclass(frozen=True, slots=True)
class Demo:
    """Both policies on the bundled trace, scaled to `DEMO_MEAN_REPLICAS` on average."""

    name: str
    arrivals: npt.NDArray[np.float64]
    base: sim_params.SimParams
    rate_scale: float
    results: tuple[sim_params.SimResult, ...]


def demo(
    config: settings.Settings,
    *,
    track: Tracker,
    arrivals: npt.NDArray[np.float64] | None = None,
) -> Demo:
    """Run `DEMO_POLICIES` on the bundled trace (or `arrivals` in its place) with the same seed."""
    name = trace.DEFAULT_BUNDLED
    if arrivals is None:
        arrivals = trace.load(trace.bundled(name))
    base = sim_params.SimParams(half_life_s=config.smoothing.half_life_s)
    scale = rate_scale(arrivals, DEMO_MEAN_REPLICAS, base, trace_name=name)
    results = tuple(
        run(
            arrivals,
            replace(base, policy=policy, rate_scale=scale),
            track=track,
            label=f"policy {policy}",
        )
        for policy in DEMO_POLICIES
    )
    return Demo(name, arrivals, base, scale, results)


def explanation(found: Demo) -> str:
    """What the demo ran, in a paragraph for people."""
    params = found.base
    what = (
        f"Replayed {len(found.arrivals) / 60:.0f} minutes of request arrivals from a real LLM "
        f"chat service, scaled x{found.rate_scale:.2f} so that the mean load needs "
        f"{DEMO_MEAN_REPLICAS:g} replicas. Both policies ran the real decision loop against the "
        f"same virtual GPU cluster, trace and seed: each replica serves up to "
        f"{params.replica_capacity_rps:g} request/s (load target "
        f"{params.target_utilisation:.0%} of that), a new pod takes ~{params.startup_s:g} s to "
        f"start and {params.warmup_s:g} s to warm up, and a request slower than "
        f"{params.slo_latency_s:g} s misses the SLO. `seed` is the plain policy (smoothed load, "
        "deadband, cooldowns); `default` adds a burst fast path and looks ahead by the pod "
        "start-up time."
    )
    return f"Trace: {trace.BUNDLED_ATTRIBUTION[found.name]}\n" + textwrap.fill(
        what, width=88, break_on_hyphens=False
    )


def run(
    arrivals: npt.NDArray[np.float64],
    params: sim_params.SimParams,
    *,
    track: Tracker,
    label: str,
) -> sim_params.SimResult:
    """One simulation, its progress reported through `track`."""
    log.debug(logs.SIMULATION_STARTED, policy=params.policy, seconds=len(arrivals))
    with track(label, float(len(arrivals))) as progress:
        result = sim_run.simulate(arrivals, params, progress=progress)
    summary = {k: v for k, v in result.summary.items() if isinstance(v, int | float | str)}
    log.debug(logs.SIMULATION_FINISHED, policy=params.policy, **summary)
    return result


def write(result: sim_params.SimResult, out_dir: Path, *, trace_name: str) -> run_report.Paths:
    """The run's time series, summary and plot, all or nothing."""
    from autoscaler.experiment import run_report

    paths = run_report.write(result, out_dir, trace=trace_name)
    log.debug(logs.REPORT_WRITTEN, directory=str(paths.directory))
    return paths


def summary_table(results: Sequence[sim_params.SimResult]) -> str:
    from autoscaler.experiment import run_report

    return run_report.summary_table(*results)


def warn_unused_settings(config: settings.Settings) -> None:
    """The simulator ticks on its own fixed grid: say so rather than ignore a setting silently."""
    fixed = sim_run.SMOOTHING
    for name, value, used in (
        ("AUTOSCALER_LOOP__TICK_S", config.loop.tick_s, fixed.tick_s),
        ("AUTOSCALER_SMOOTHING__WINDOW_S", config.smoothing.window_s, fixed.window_s),
    ):
        if value != used:
            log.warning(logs.SETTING_IGNORED, setting=name, value=value, simulator_uses=used)


def replace(params: sim_params.SimParams, **changes: object) -> sim_params.SimParams:
    return dataclasses.replace(params, **changes)  # type: ignore[arg-type]
