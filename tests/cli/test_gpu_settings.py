"""The GPU settings: DCGM metric names, the health rules and the core-hour weights."""

from __future__ import annotations

import pydantic
import pytest

from autoscaler import settings
from autoscaler.core import placement


def test_gpu_settings_default_to_dcgm_names_and_the_seed_weights() -> None:
    """Unset, the DCGM exporter's names, the 95 % / 10 minute rules and today's table apply."""
    config = settings.Settings()
    prom, gpu = config.prometheus, config.gpu
    assert (prom.gpu_activity_metric, prom.gpu_utilization_metric) == (
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_DEV_GPU_UTIL",
    )
    assert (prom.gpu_xid_metric, prom.gpu_node_label) == ("DCGM_FI_DEV_XID_ERRORS", "Hostname")
    assert (gpu.health_enabled, gpu.memory_ratio, gpu.memory_window_s) == (True, 0.95, 600.0)
    assert gpu.core_weights == {"RTX 4090": 12.0, "A100-40GB": 30.0, "A800-80GB": 54.0}
    assert gpu.core_weight_per_gib == placement.DEFAULT_CORE_WEIGHT_PER_GIB


def test_core_weights_from_the_environment_extend_the_default_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """JSON rows are added to the default table, a row of the same name replaced."""
    monkeypatch.setenv("AUTOSCALER_GPU__CORE_WEIGHTS", '{"H100-80GB": 80, "RTX 4090": 10}')
    weights = settings.Settings().gpu.core_weights
    assert weights == {"RTX 4090": 10.0, "A100-40GB": 30.0, "A800-80GB": 54.0, "H100-80GB": 80.0}


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("AUTOSCALER_PROMETHEUS__GPU_XID_METRIC", "xid errors", "not a Prometheus metric name"),
        ("AUTOSCALER_PROMETHEUS__GPU_NODE_LABEL", "host-name", "not a Prometheus label name"),
        ("AUTOSCALER_GPU__MEMORY_RATIO", "95", "less than or equal to 1"),
        ("AUTOSCALER_GPU__CORE_WEIGHTS", '{"H100": -1}', "finite number >= 0"),
    ],
)
def test_bad_gpu_settings_stop_the_start_naming_the_rule(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    """A metric name, label, share or weight outside its rule is refused with that rule."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(pydantic.ValidationError, match=message):
        settings.Settings()


def test_an_empty_activity_metric_is_allowed_and_turns_the_ratio_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`AUTOSCALER_PROMETHEUS__GPU_ACTIVITY_METRIC=` leaves the percent metric alone."""
    monkeypatch.setenv("AUTOSCALER_PROMETHEUS__GPU_ACTIVITY_METRIC", "")
    assert settings.Settings().prometheus.gpu_activity_metric == ""
