"""The ramp state as text (`core.ramp.codec`) and the settings it refuses (`core.ramp.config`)."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from autoscaler.core import ramp
from autoscaler.core.ramp import Phase, RampConfig, RampState


def test_a_state_in_every_field_survives_dumps_and_loads() -> None:
    """Every field round-trips through the persisted JSON."""
    state = RampState(
        phase=Phase.PROMOTING,
        cohort=("a", "b"),
        step=3,
        step_started_s=12.5,
        settle_since_s=13.0,
        stage=ramp.Stage.UNWEIGHTED,
        weight_pct=7,
        checks=2,
        deadlines={"c": 700.0},
        passed=("d",),
        joined=("a",),
        failures=2,
        hold_reason="because",
        held_config="abc",
        drain=ramp.Drain(3, (ramp.Victim("e", warm=True, stable=False),), 1.0, None),
    )
    text = ramp.dumps(state)
    assert json.loads(text)["v"] == ramp.VERSION
    assert ramp.loads(text) == state


def test_the_probe_throttle_is_not_saved() -> None:
    """`probe_after` changes with every probe; writing it each time would be churn."""
    state = RampState(phase=Phase.WARMING, deadlines={"a": 1.0}, probe_after={"a": 2.0})
    assert ramp.loads(ramp.dumps(state)) == dataclasses.replace(state, probe_after={})


def test_the_time_of_the_awaited_health_request_is_not_saved() -> None:
    """`asked_s` changes with every health request; a restart loses the answer anyway."""
    state = RampState(phase=Phase.RAMPING, cohort=("a",), asked_s=2.0)
    assert ramp.loads(ramp.dumps(state)) == dataclasses.replace(state, asked_s=None)


def test_an_idle_state_is_small() -> None:
    """Fields at their default are left out of the persisted text."""
    assert ramp.dumps(RampState()) == '{"phase":"idle","v":1}'


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "[]",
        '{"phase":"idle"}',
        '{"phase":"idle","v":2}',
        '{"phase":"idle","v":true}',
        '{"phase":"flying","v":1}',
        '{"phase":"idle","v":1,"step":-1}',
        '{"phase":"idle","v":1,"step":1.5}',
        '{"phase":"idle","v":1,"failures":true}',
        '{"phase":"idle","v":1,"weight_pct":101}',
        '{"phase":"idle","v":1,"cohort":"a"}',
        '{"phase":"idle","v":1,"joined":[1]}',
        '{"phase":"idle","v":1,"deadlines":{"a":"soon"}}',
        '{"phase":"idle","v":1,"step_started_s":1e999}',
        '{"phase":"idle","v":1,"extra":1}',
        '{"phase":"idle","v":1,"probe_after":{}}',
        '{"phase":"promoting","v":1}',
        '{"phase":"idle","v":1,"drain":{"replicas":1}}',
        '{"phase":"idle","v":1,"drain":{"replicas":1,"victims":[["a",1,0]],'
        '"started_s":null,"scaled_s":null}}',
        "[" * 100_000,
        '{"phase":"idle","v":1,"step_started_s":' + "9" * 400 + "}",
        '{"phase":"idle","v":1,"deadlines":{"a":' + "9" * 400 + "}}",
        '{"phase":"idle","v":1,"step":' + "9" * 400 + "}",
        '{"phase":"idle","v":1,"step_started_s":NaN}',
        '{"phase":"idle","v":1,"settle_since_s":-Infinity}',
        '{"phase":"idle","v":1,"deadlines":' + "{" * 100_000,
        '{"phase":"idle","v":1,"phase":"ramping"}',
        '{"phase":["idle"],"v":1}',
        '{"phase":"idle","v":1,"hold_reason":"' + "x" * 300_000 + '"}',
    ],
)
def test_junk_is_refused_with_a_value_error(text: str) -> None:
    """Anything `dumps` could not have written raises `ValueError`."""
    with pytest.raises(ValueError, match="ramp state"):
        ramp.loads(text)


def test_a_huge_value_in_the_ramp_state_is_not_repeated_in_the_error() -> None:
    """The error names the field and a short excerpt of its value, not 300 kB of it."""
    with pytest.raises(ValueError, match=r"ramp state phase 'xxx.*characters\) is not one") as e:
        ramp.loads('{"v":1,"phase":"' + "x" * 100_000 + '"}')
    assert len(str(e.value)) < 200


@pytest.mark.parametrize(
    "overrides",
    [
        {"steps_pct": ()},
        {"steps_pct": (10, 50)},
        {"steps_pct": (50, 30, 100)},
        {"steps_pct": (0, 100)},
        {"step_interval_s": 0.0},
        {"max_p95_latency_s": -1.0},
        {"max_failures": 0},
        {"drain_grace_s": math.nan},
        {"min_dwell_ratio": 0.0},
        {"min_dwell_ratio": 1.5},
        {"min_dwell_ratio": math.nan},
    ],
)
def test_a_config_that_cannot_work_is_refused(overrides: dict[str, object]) -> None:
    """Steps must rise to 100; times and counts must make sense."""
    with pytest.raises(ValueError, match="must"):
        RampConfig(**overrides)  # type: ignore[arg-type]
