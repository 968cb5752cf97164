"""The series the alerts and dashboards may read, and the metric names a PromQL text reads.

The controller's own series come from a fresh `Telemetry` registry (so a renamed metric breaks
these tests, not a dashboard in production); the model servers' from the metric presets; the
GPU's from DCGM's exporter.
"""

from __future__ import annotations

import re

from autoscaler import metricnames, telemetry

DCGM = frozenset({"DCGM_FI_DEV_GPU_UTIL"})
SCRAPE = frozenset({"up"})
"""What Prometheus itself records per target."""

_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}
_OWN = re.compile(r"\bautoscaler_[a-z_]+")
_BY_NAME = re.compile(r'__name__=~"([^"]+)"')
_SELECTED = re.compile(r"(?<![\w:.$])([A-Za-z_:][\w:]*)\s*(?=\{|\[)")
_NOT_METRICS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})


def controller() -> frozenset[str]:
    """Every series name the controller's registry can export."""
    names = set()
    for family in telemetry.Telemetry().registry.collect():
        names.update(family.name + suffix for suffix in _SUFFIXES[family.type])
    return frozenset(names)


def servers() -> frozenset[str]:
    """The request counters and queue gauges of every model-server preset."""
    return frozenset(
        name
        for preset in metricnames.PRESETS.values()
        for name in (preset.requests, preset.queue)
        if name is not None
    )


def read_by(promql: str) -> set[str]:
    """Metric names a PromQL text selects: `name{...}`, `name[...]`, `{__name__=~"a|b"}`, and
    every `autoscaler_` name wherever it stands."""
    names = {m for m in _SELECTED.findall(promql) if m not in _NOT_METRICS}
    names.update(_OWN.findall(promql))
    for alternatives in _BY_NAME.findall(promql):
        names.update(alternatives.split("|"))
    return names
