"""Logging setup and the environment settings."""

from __future__ import annotations

import io
import json

import pydantic
import pytest
import structlog

from autoscaler import logs, settings


def test_json_lines_carry_event_level_and_values() -> None:
    """With JSON on, each event is one JSON object with its name, level, time and values."""
    stream = io.StringIO()
    logs.configure(json=True, level="info", stream=stream)
    structlog.get_logger().info(logs.SIMULATION_FINISHED, policy="seed", requests=12)
    record = json.loads(stream.getvalue())
    assert record["event"] == "simulation.finished"
    assert (record["level"], record["policy"], record["requests"]) == ("info", "seed", 12)
    assert "timestamp" in record


def test_level_filters_lower_events() -> None:
    """Events below the configured level are dropped."""
    stream = io.StringIO()
    logs.configure(json=True, level="warning", stream=stream)
    structlog.get_logger().info("decision.made")
    structlog.get_logger().warning("metrics.stale")
    assert [json.loads(line)["event"] for line in stream.getvalue().splitlines()] == [
        "metrics.stale"
    ]


def test_automatic_format_is_json_off_a_terminal() -> None:
    """Unless told, a stream that is not a terminal gets JSON; console rendering is opt-in."""
    auto, console = io.StringIO(), io.StringIO()
    logs.configure(json=None, level="info", stream=auto)
    structlog.get_logger().info("decision.made", service="a/b")
    logs.configure(json=False, level="info", stream=console)
    structlog.get_logger().info("decision.made", service="a/b")
    assert json.loads(auto.getvalue())["service"] == "a/b"
    assert "decision.made" in console.getvalue()
    with pytest.raises(json.JSONDecodeError):
        json.loads(console.getvalue())


def test_unknown_level_is_refused() -> None:
    """A level name that does not exist raises ValueError."""
    with pytest.raises(ValueError, match="unknown log level"):
        logs.configure(json=True, level="loud")


def test_settings_default_without_environment() -> None:
    """With no AUTOSCALER_ variables the documented defaults apply."""
    config = settings.Settings()
    assert config.loop.tick_s == 1.0
    assert (config.smoothing.window_s, config.smoothing.half_life_s) == (300.0, 30.0)
    assert (config.log.level, config.log.json_lines) == ("info", None)


def test_settings_read_nested_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Variables use the AUTOSCALER_ prefix and `__` between group and field."""
    monkeypatch.setenv("AUTOSCALER_LOG__LEVEL", "debug")
    monkeypatch.setenv("AUTOSCALER_LOG__JSON", "true")
    monkeypatch.setenv("AUTOSCALER_SMOOTHING__HALF_LIFE_S", "inf")
    config = settings.Settings()
    assert (config.log.level, config.log.json_lines) == ("debug", True)
    assert config.smoothing.half_life_s == float("inf")
    assert config.log.model_fields_set == {"level", "json_lines"}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("AUTOSCALER_SMOOTHING__WINDOW_S", "0.5"),
        ("AUTOSCALER_LOOP__TICK_S", "0"),
        ("AUTOSCALER_SMOOTHING__HALF_LIFE_S", "-3"),
        ("AUTOSCALER_LOG__LEVEL", "loud"),
        ("AUTOSCALER_LOOP__TICKS", "2"),
    ],
)
def test_settings_refuse_bad_values(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    """Out-of-range values, a window shorter than a tick and misspelt fields are refused."""
    monkeypatch.setenv(name, value)
    with pytest.raises(pydantic.ValidationError):
        settings.Settings()


def test_settings_are_frozen() -> None:
    """Settings cannot be changed after they are read."""
    config = settings.Settings()
    with pytest.raises(pydantic.ValidationError):
        config.log.level = "debug"  # type: ignore[misc]
