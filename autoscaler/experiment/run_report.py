"""What a simulation leaves behind: `timeseries.csv`, `summary.json` and `plot.png`
(docs/simulator.md), and the summary table the CLI prints.

`write` renders all three into a temporary directory and moves them into place only when every
one of them succeeded, so a failed run never leaves a partial or mismatched set behind. The plot
is drawn on matplotlib's Agg canvas (no display, no pyplot global state).

How the SLO misses are counted. `slo_misses` (and `slo_miss_pct`, over every request that
arrived) adds up the requests served later than the SLO allows, those dropped after
`queue_timeout_s`, those answered with an error or rejected, and the requests still waiting when
the trace ends that can no longer meet the SLO (`queued_at_end` says how many were waiting). The
last are found by serving the queue on, in order, at the capacity of the run's last second with
nothing else arriving: a request misses when its wait would exceed the SLO's, which covers one
that has already waited too long and one stuck behind too many others; with no capacity at the
end, every waiting request misses. A waiting request that would still be served in time is not
a miss. `timeseries.csv` has no row past the end, so its per-second misses do not include them.

It does not simulate and does not log: it only formats a `SimResult`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from autoscaler import outputs
from autoscaler.sim.params import TIMESERIES_COLUMNS, SimResult

FloatArray = npt.NDArray[np.float64]

TIMESERIES_NAME = "timeseries.csv"
SUMMARY_NAME = "summary.json"
PLOT_NAME = "plot.png"

_PLOT_SIZE_IN = (14.0, 9.0)
_PLOT_DPI = 100  # 1400 x 900 px
_PLOT_MAX_POINTS = 1400
"""Longer series are drawn as bins (mean per bin; the latency panel shows the bin's maximum)."""
_CSV_CHUNK_ROWS = 65_536


@dataclass(frozen=True, slots=True)
class Paths:
    """Where `write` put the outputs."""

    directory: Path
    timeseries: Path
    summary: Path
    plot: Path


def write(result: SimResult, out_dir: Path, *, trace: str | None = None) -> Paths:
    """Write the three outputs into `out_dir` (created if needed), all or nothing.

    `trace` names the replayed trace in the plot title and in `summary.json`. Raises
    `ConfigError` when `out_dir` exists but is not a directory; I/O errors propagate and leave
    `out_dir` as it was.
    """
    out_dir = Path(out_dir)
    outputs.write_all(
        out_dir,
        {
            TIMESERIES_NAME: lambda path: _write_timeseries(result, path),
            SUMMARY_NAME: lambda path: _write_summary(result, path, trace=trace),
            PLOT_NAME: lambda path: _write_plot(result, path, trace=trace),
        },
    )
    return Paths(
        directory=out_dir,
        timeseries=out_dir / TIMESERIES_NAME,
        summary=out_dir / SUMMARY_NAME,
        plot=out_dir / PLOT_NAME,
    )


# --- the summary table -------------------------------------------------------------------------


def _count(value: float) -> str:
    return f"{value:,.0f}"


_TABLE_ROWS: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("requests", "requests", _count),
    ("SLO misses", "slo_miss_pct", lambda v: f"{v:.2f} %"),
    ("dropped", "dropped", _count),
    ("p95 latency", "p95_latency_s", lambda v: f"{v:.2f} s"),
    ("GPU-hours", "gpu_hours", lambda v: f"{v:,.2f}"),
    ("scale events", "scale_events", _count),
    ("mean replicas", "mean_replicas", lambda v: f"{v:.1f}"),
    ("max replicas", "max_replicas_seen", _count),
)
_PLACEMENT_ROWS: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("core-hours", "core_hours", lambda v: f"{v:,.1f}"),
    ("pending replica-s", "pending_replica_s", _count),
)
"""Rows added when a result ran on a cluster described by GPU tier (`SimParams.nodes`)."""
_COLD_START_ROWS: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("cache hits", "cold_start.cache_hit_ratio", lambda v: f"{100 * v:.0f} %"),
    ("standby GPU-hours", "cold_start.standby_gpu_hours", lambda v: f"{v:,.2f}"),
    ("standby promoted", "cold_start.standby_promoted", _count),
)
"""Rows added when a result ran with node caches or a standby pool (`SimParams.cache`,
`SimParams.standby`); a key `a.b` is `b` within the summary's `a`."""


def summary_table(*results: SimResult) -> str:
    """A Markdown table of the headline numbers, one column per result (headed by its policy)."""
    header = ["policy", *(r.params.policy for r in results)]
    rows = _TABLE_ROWS
    if any(r.params.nodes for r in results):
        rows += _PLACEMENT_ROWS
    if any(r.params.cache is not None or r.params.standby is not None for r in results):
        rows += _COLD_START_ROWS
    body = [
        [label, *(_cell(_at(r.summary, key), fmt) for r in results)] for label, key, fmt in rows
    ]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        padded = [
            cells[0].ljust(widths[0]),
            *(c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)),
        ]
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join(["-" * (widths[0] + 2), *("-" * (w + 1) + ":" for w in widths[1:])]) + "|"
    return "\n".join([line(header), rule, *(line(row) for row in body)])


def _at(summary: Mapping[str, Any], key: str) -> object:
    """The summary's value at `key`, `a.b` within a nested `a`; None where there is none."""
    found: object = summary
    for part in key.split("."):
        found = found.get(part) if isinstance(found, Mapping) else None
    return found


def _cell(value: object, fmt: Callable[[float], str]) -> str:
    if isinstance(value, int | float | np.integer | np.floating) and math.isfinite(value):
        return fmt(float(value))
    return "n/a"


# --- timeseries.csv ----------------------------------------------------------------------------


def _write_timeseries(result: SimResult, path: Path) -> None:
    columns = [np.asarray(result.timeseries[name], dtype=np.float64) for name in TIMESERIES_COLUMNS]
    n = len(columns[0])
    if any(len(c) != n for c in columns):
        raise ValueError("timeseries columns differ in length")
    # Whole-number columns (time, replica counts) print as integers; the rest with 6 significant
    # digits, which is plenty for rates and latencies and keeps a week-long file small.
    row_format = ",".join(_column_format(c) for c in columns) + "\n"
    with path.open("w", encoding="utf-8", newline="") as f:
        f.write(",".join(TIMESERIES_COLUMNS) + "\n")
        for start in range(0, n, _CSV_CHUNK_ROWS):
            chunk = zip(
                *(c[start : start + _CSV_CHUNK_ROWS].tolist() for c in columns), strict=True
            )
            f.write("".join(row_format % row for row in chunk))


def _column_format(values: FloatArray) -> str:
    whole = np.all(np.isfinite(values)) and np.all(values == np.round(values))
    return "%d" if whole and (len(values) == 0 or np.max(np.abs(values)) < 2**53) else "%.6g"


# --- summary.json ------------------------------------------------------------------------------


def _write_summary(result: SimResult, path: Path, *, trace: str | None) -> None:
    summary: dict[str, Any] = dict(result.summary)
    summary.setdefault("params", result.params.as_dict())
    if trace is not None:
        summary.setdefault("trace", trace)
    text = json.dumps(_jsonable(summary), indent=2, sort_keys=True, allow_nan=False)
    path.write_text(text + "\n", encoding="utf-8")


def _jsonable(value: object) -> object:
    """Plain JSON values: numpy scalars and arrays unwrapped, NaN and infinities as null."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    return value


# --- plot.png ----------------------------------------------------------------------------------


def _write_plot(result: SimResult, path: Path, *, trace: str | None) -> None:
    ts = {
        name: np.asarray(result.timeseries[name], dtype=np.float64) for name in TIMESERIES_COLUMNS
    }
    t_s = ts["t_s"]
    span_s = float(t_s[-1] - t_s[0]) if len(t_s) else 0.0
    unit_s, unit = (60.0, "min") if span_s <= 2 * 3600 else (3600.0, "h")
    bin_size = max(1, math.ceil(len(t_s) / _PLOT_MAX_POINTS))

    def mean(name: str) -> FloatArray:
        return _binned(ts[name], bin_size, peak=False)

    x = _binned(t_s, bin_size, peak=False) / unit_s

    fig = Figure(figsize=_PLOT_SIZE_IN, dpi=_PLOT_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    load_ax, replicas_ax, latency_ax = fig.subplots(
        3, 1, sharex=True, gridspec_kw={"height_ratios": [3, 2, 2]}
    )
    averaged = f" (mean per {bin_size} s)" if bin_size > 1 else ""

    arrivals = mean("arrivals")
    load_ax.fill_between(x, arrivals, color="0.8", linewidth=0, label="arrivals")
    load_ax.plot(x, mean("served"), color="tab:green", linewidth=0.7, label="served")
    load_ax.plot(x, mean("capacity_rps"), color="tab:blue", linewidth=1.4, label="serving capacity")
    dropped = ts["dropped"]
    if np.any(dropped > 0):
        load_ax.plot(x, mean("dropped"), color="tab:red", linewidth=0.8, label="dropped")
    load_ax.set_ylabel("requests / s" + averaged)
    load_ax.set_ylim(bottom=0)
    _legend(load_ax)

    replicas_ax.fill_between(
        x, mean("replicas_serving"), step="mid", color="tab:blue", alpha=0.2, label="serving"
    )
    replicas_ax.plot(
        x,
        mean("replicas_total"),
        color="tab:blue",
        linewidth=1.2,
        drawstyle="steps-mid",
        label="total (incl. starting)",
    )
    replicas_ax.plot(
        x,
        mean("replicas_desired"),
        color="black",
        linewidth=1.0,
        linestyle="--",
        drawstyle="steps-mid",
        label="desired",
    )
    ups = [(t, after) for t, before, after in result.scale_events if after > before]
    downs = [(t, after) for t, before, after in result.scale_events if after < before]
    for events, marker, color, label in (
        (ups, "^", "tab:green", "scale up"),
        (downs, "v", "tab:red", "scale down"),
    ):
        if events:
            et, er = zip(*events, strict=True)
            replicas_ax.scatter(
                np.asarray(et) / unit_s,
                er,
                marker=marker,
                color=color,
                s=28,
                zorder=3,
                label=f"{label} ({len(events)})",
            )
    replicas_ax.set_ylabel("replicas")
    replicas_ax.set_ylim(bottom=0)
    _legend(replicas_ax)

    slo_s = result.params.slo_latency_s
    p95 = _binned(ts["p95_latency_s"], bin_size, peak=True)
    latency_ax.plot(x, p95, color="tab:purple", linewidth=0.9, label="p95 latency")
    latency_ax.axhline(
        slo_s, color="tab:red", linestyle="--", linewidth=1.0, label=f"SLO {slo_s:g} s"
    )
    top = float(np.nanmax(p95)) if np.any(np.isfinite(p95)) else 0.0
    latency_ax.set_ylim(0, max(2 * slo_s, 1.05 * top))
    latency_ax.set_ylabel("seconds" + (" (max per bin)" if bin_size > 1 else ""))
    _legend(latency_ax)
    latency_ax.set_xlabel(f"simulated time ({unit})")

    for ax in (load_ax, replicas_ax, latency_ax):
        ax.grid(True, alpha=0.3)
        ax.margins(x=0)

    summary = result.summary
    numbers = ", ".join(
        f"{label} {fmt(float(summary[key]))}"
        for label, key, fmt in _TABLE_ROWS
        if key in ("slo_miss_pct", "gpu_hours", "scale_events")
        and isinstance(summary.get(key), int | float)
    )
    title = f"{trace or 'trace'}: policy {result.params.policy}"
    fig.suptitle(title + (f"\n{numbers}" if numbers else ""), fontsize="large")
    fig.savefig(path, format="png", dpi=_PLOT_DPI)


def _legend(ax: Axes) -> None:
    """One row above the panel, where it never hides the data."""
    ax.legend(loc="lower left", bbox_to_anchor=(0, 1), ncols=6, fontsize="small", frameon=False)


def _binned(values: FloatArray, size: int, *, peak: bool) -> FloatArray:
    """Values reduced to one per `size` samples: the mean of the finite ones, or the maximum."""
    if size == 1:
        return values
    pad = -len(values) % size
    bins = np.concatenate([values, np.full(pad, np.nan)]).reshape(-1, size)
    if peak:
        peaks: FloatArray = np.fmax.reduce(bins, axis=1)
        return peaks
    finite = np.isfinite(bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        result: FloatArray = np.where(finite, bins, 0.0).sum(axis=1) / finite.sum(axis=1)
    return result
