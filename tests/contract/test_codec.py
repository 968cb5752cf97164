"""The controller's status and state annotations as text, without a server."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import pytest
from adapters.kubernetes.support import WALL_S

from autoscaler.contract import codec
from autoscaler.core import model


def test_state_round_trips_with_the_replicas_last_set() -> None:
    """A state written as text reads back as the same state and replica count."""
    state = model.PolicyState(last_scale_up_s=WALL_S, last_scale_change_s=WALL_S + 1.5)
    text = codec.state_text(state, replicas=6)
    assert json.loads(text) == {
        "lastScaleUp": WALL_S,
        "lastScaleChange": WALL_S + 1.5,
        "replicas": 6,
    }
    assert codec.parse_state(text) == (state, 6)
    assert codec.parse_state(codec.state_text(model.PolicyState(), replicas=None)) == (
        model.PolicyState(),
        None,
    )


def test_state_ignores_keys_it_does_not_know() -> None:
    """Keys a newer controller may add are ignored rather than refused."""
    state, replicas = codec.parse_state('{"burstUntil": 12.0, "rampStep": 2}')
    assert state == model.PolicyState(burst_until_s=12.0)
    assert replicas is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "[]",
        '{"lastScaleUp": "yesterday"}',
        '{"lastScaleUp": true}',
        '{"lastScaleChange": NaN}',
        '{"burstUntil": Infinity}',
        '{"replicas": -1}',
        '{"replicas": 2.5}',
        '{"replicas": "3"}',
        '{"lastScaleUp": ' + "9" * 400 + "}",
        '{"replicas": ' + "9" * 400 + "}",
        '{"lastScaleUp": 1e400}',
        '{"lastScaleUp": [1]}',
        "[" * 100_000,
        '{"burstUntil": ' + "[" * 100_000,
        '{"lastScaleUp": 1, "lastScaleUp": 2}',
        '{"note": "' + "x" * 5000 + '"}',
    ],
)
def test_malformed_state_is_refused(text: str) -> None:
    """Text that is not a state object with numeric times raises ValueError."""
    with pytest.raises(ValueError, match=r"."):
        codec.parse_state(text)


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ('{"lastScaleUp": ' + "9" * 400 + "}", "has an integer beyond 2^53 (400 characters)"),
        ("[" * 4000, "nested deeper than 8 arrays or objects"),
        ("[" * 100_000, "longer than 4096 bytes"),
        ('{"lastScaleUp": NaN}', "has NaN, which is not a JSON number"),
        ('{"note": "' + "x" * 5000 + '"}', "longer than 4096 bytes"),
    ],
)
def test_a_hostile_state_names_the_rule_it_breaks(text: str, rule: str) -> None:
    """The error says which bound the text broke, for the CorruptState Event."""
    with pytest.raises(ValueError, match=re.escape(rule)) as caught:
        codec.parse_state(text)
    assert str(caught.value) == rule


@pytest.mark.parametrize(
    "text",
    [
        None,
        "oops",
        "[]",
        '{"desired": ' + "9" * 400 + "}",
        '{"desired": 1e400}',
        '{"desired": NaN}',
        "[" * 100_000,
        '{"detail": "' + "x" * 70_000 + '"}',
    ],
)
def test_an_unreadable_status_reads_as_none(text: str | None) -> None:
    """Status is only for people: whatever is wrong with it, it reads as absent."""
    assert codec.read_status(text) is None
    assert not codec.same_status(text, {"desired": 1})


def test_status_is_compact_json_and_its_time_is_not_a_change() -> None:
    """The status names the decision and its votes; only a change besides the time is a change."""
    vote = model.Contribution(ratio=math.nan, desired=None, estimator="missing")
    decision = model.Decision(
        current=3,
        desired=3,
        kind=model.Kind.HOLD,
        reason=model.Reason.COOLDOWN,
        detail="scale-up to 5 waits for the scale-up cooldown",
        contributions={model.Signal.SATURATION: vote},
        bound=model.Bound.MAX,
        cooldown_until_s=WALL_S + 60,
    )
    document = codec.status_document(decision, time_s=WALL_S)
    text = codec.dumps(document)
    assert " " not in text.replace(decision.detail, "")
    assert json.loads(text)["cooldownUntil"] == "2025-06-15T15:07:40Z"
    assert json.loads(text)["contributions"]["saturation"]["ratio"] is None
    assert json.loads(text)["bound"] == "max"

    later = codec.status_document(decision, time_s=WALL_S + 10)
    assert codec.same_status(text, later)
    assert not codec.same_status(text, {**later, "desired": 4})
    assert not codec.same_status(None, later)
    assert not codec.same_status("{", later)


def test_a_status_is_the_same_decision_whatever_its_readings() -> None:
    """Estimates, ratios, their words and a steady reason are readings; counts and kinds are not."""
    vote = model.Contribution(ratio=1.02, desired=3, estimator="mean", estimate=15.3)
    steady = model.Decision(
        current=3,
        desired=3,
        kind=model.Kind.STEADY,
        reason=model.Reason.IN_DEADBAND,
        detail="load ratio 1.02 in the deadband",
        contributions={model.Signal.LOAD: vote},
        forecast=model.ForecastVote(on=False, load_per_s=15.0, why="15.0/s expected"),
    )
    text = codec.dumps(codec.status_document(steady, time_s=WALL_S))
    moved = dataclasses.replace(
        steady,
        reason=model.Reason.AT_DESIRED,
        detail="3 replicas",
        contributions={model.Signal.LOAD: vote._replace(ratio=0.97, estimate=14.6)},
        forecast=model.ForecastVote(on=False, load_per_s=14.0, why="14.0/s expected"),
    )
    assert codec.same_status(text, codec.status_document(moved, time_s=WALL_S + 60))
    for changed in (
        dataclasses.replace(moved, desired=4, kind=model.Kind.SCALE_UP),
        dataclasses.replace(moved, current=2),
        dataclasses.replace(moved, kind=model.Kind.HOLD, reason=model.Reason.COOLDOWN),
        dataclasses.replace(moved, cooldown_until_s=WALL_S + 300),
        dataclasses.replace(moved, forecast=model.ForecastVote(on=True, load_per_s=14.0, why="")),
    ):
        assert not codec.same_status(text, codec.status_document(changed, time_s=WALL_S))
    hold = dataclasses.replace(steady, kind=model.Kind.HOLD, reason=model.Reason.COOLDOWN)
    held = codec.dumps(codec.status_document(hold, time_s=WALL_S))
    other = dataclasses.replace(hold, reason=model.Reason.CAPACITY_VETO)
    assert not codec.same_status(held, codec.status_document(other, time_s=WALL_S))


def test_status_carries_the_forecasts_vote() -> None:
    """The status says whether the seasonal forecast voted, what it expected and why."""
    vote = model.ForecastVote(on=True, load_per_s=12.345678, why="12.3/s expected in 120 s")
    decision = model.Decision(
        current=3,
        desired=5,
        kind=model.Kind.SCALE_UP,
        reason=model.Reason.SEASONAL,
        detail="load ratio 1.60 asks for 5",
        forecast=vote,
    )
    document = codec.status_document(decision, time_s=WALL_S)
    assert document["reason"] == "seasonal"
    assert document["forecast"] == {"on": True, "load": 12.3457, "why": vote.why}
    off = dataclasses.replace(decision, forecast=model.ForecastVote.off("no load history"))
    document = json.loads(codec.dumps(codec.status_document(off, time_s=WALL_S)))
    assert document["forecast"] == {"on": False, "load": None, "why": "no load history"}
    assert "forecast" not in codec.status_document(
        dataclasses.replace(decision, forecast=None), time_s=WALL_S
    )


def test_a_pause_round_trips_in_the_state() -> None:
    """When a pause began and the paused-replicas count it set read back as written."""
    state = model.PolicyState(paused_s=WALL_S, paused_replicas=0)
    text = codec.state_text(state, replicas=0)
    assert json.loads(text) == {"pausedSince": WALL_S, "pausedReplicas": 0, "replicas": 0}
    assert codec.parse_state(text) == (state, 0)


@pytest.mark.parametrize("count", ["-1", "1.5", "true", '"3"'])
def test_a_bad_paused_replicas_in_the_state_is_refused(count: str) -> None:
    """A `pausedReplicas` that is not a whole number >= 0 makes the state unreadable."""
    with pytest.raises(ValueError, match="pausedReplicas must be a whole number"):
        codec.parse_state(f'{{"pausedReplicas": {count}}}')
