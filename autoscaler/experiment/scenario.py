"""A trace to replay: per-second arrivals, and where its load steps up, if it does.

`Scenario` is what `sweep` runs every policy on: the full benchmark builds several
(`bench/scenarios.py`), `autoscaler bench --trace` builds one from the user's trace. `binned`
reduces a per-second series to the plots' resolution (`bin_s`), so that a run keeps a few hundred
points rather than one per second of a long trace.

Pure: arrays in, arrays out; no simulation, no files.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Arrivals = npt.NDArray[np.float64]
FloatArray = npt.NDArray[np.float64]

_OPENING_S = 300
_OPENING_WINDOW_S = 60
PLOT_POINTS = 720
"""About how many points a plotted series keeps."""
_MIN_BIN_S = 10


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str
    arrivals: Arrivals
    step_at_s: float | None = None
    """When the load steps up, for the time-to-capacity metric."""
    step_s: float | None = None
    """How long the raised load lasts after `step_at_s`; None: until the end."""
    past: Arrivals | None = None
    """Arrivals per second before the trace begins, the last ending at second 0: what the
    service's load history holds (the seasonal forecast reads it), never replayed."""

    @property
    def duration_s(self) -> int:
        return len(self.arrivals)

    @property
    def opening_rps(self) -> float:
        """The busiest minute of the first five: what a service running before the trace
        started would already be sized for."""
        opening = self.arrivals[:_OPENING_S]
        window = min(_OPENING_WINDOW_S, len(opening))
        if window == 0:
            return 0.0
        return float(np.max(np.convolve(opening, np.ones(window) / window, mode="valid")))

    def step_need_rps(self) -> float | None:
        """The mean arrival rate while the raised load lasts; None without a step."""
        window = self.step_window()
        if window is None:
            return None
        start, end = window
        return float(np.mean(self.arrivals[start:end]))

    def step_window(self) -> tuple[int, int] | None:
        """The seconds [start, end) of the raised load; None without a step in the trace."""
        if self.step_at_s is None or self.step_at_s >= len(self.arrivals):
            return None
        start = int(self.step_at_s)
        end = len(self.arrivals) if self.step_s is None else start + int(self.step_s)
        return start, min(end, len(self.arrivals))

    def truncated(self, duration_s: int) -> Scenario:
        """The first `duration_s` seconds (the quick benchmark's shorter traces)."""
        if duration_s >= len(self.arrivals):
            return self
        minutes = f"{duration_s / 60:g} min"
        return dataclasses.replace(
            self,
            description=f"{self.description}; first {minutes} only",
            arrivals=self.arrivals[:duration_s].copy(),
        )


def bin_s(duration_s: int) -> int:
    """The plots' bin for a trace of `duration_s` seconds: at least 10 s, at most about
    `PLOT_POINTS` bins."""
    return max(_MIN_BIN_S, math.ceil(duration_s / PLOT_POINTS))


def binned(values: FloatArray, size: int) -> FloatArray:
    """The mean of each `size` values (the last bin may be shorter)."""
    if size <= 1:
        return values
    pad = -len(values) % size
    padded = np.concatenate([values, np.full(pad, np.nan)]).reshape(-1, size)
    means: FloatArray = np.nanmean(padded, axis=1)
    return means
