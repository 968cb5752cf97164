"""The GPU health rules: which nodes' GPUs placement leaves out, and what changed."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.core import gpuhealth
from autoscaler.core.gpuhealth import Reading, Reason

RULES = gpuhealth.Rules()


@pytest.mark.parametrize(
    ("reading", "expected"),
    [
        (Reading(xid_error=79.0), {Reason.XID_ERRORS}),
        (Reading(xid_error=0.0), set()),
        (Reading(memory_ratio=0.96), {Reason.MEMORY_FULL}),
        (Reading(memory_ratio=0.95), set()),  # above the ratio, not at it
        (Reading(xid_error=13.0, memory_ratio=0.99), {Reason.XID_ERRORS, Reason.MEMORY_FULL}),
        (Reading(), set()),
        (Reading(xid_error=math.nan, memory_ratio=math.nan), set()),
    ],
)
def test_reasons_follow_the_two_rules(reading: Reading, expected: set[Reason]) -> None:
    """A non-zero XID code or a card full over the window excludes; no data excludes nothing."""
    assert gpuhealth.reasons(reading, RULES) == expected


def test_only_nodes_with_a_reason_are_excluded() -> None:
    """Healthy and silent nodes stay out of the exclusions."""
    readings = {
        "a": Reading(xid_error=48.0),
        "b": Reading(xid_error=0.0, memory_ratio=0.5),
        "c": Reading(),
        "d": Reading(memory_ratio=0.999),
    }
    assert gpuhealth.exclusions(readings, RULES) == {
        "a": frozenset({Reason.XID_ERRORS}),
        "d": frozenset({Reason.MEMORY_FULL}),
    }


def test_a_custom_memory_ratio_moves_the_threshold() -> None:
    """The memory rule uses the configured share."""
    rules = gpuhealth.Rules(memory_ratio=0.8)
    assert gpuhealth.reasons(Reading(memory_ratio=0.85), rules) == {Reason.MEMORY_FULL}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"xid_window_s": 0.0},
        {"memory_ratio": 0.0},
        {"memory_ratio": 1.5},
        {"memory_window_s": math.inf},
    ],
)
def test_rules_refuse_values_outside_their_range(kwargs: dict[str, float]) -> None:
    """A window that is not positive and finite, or a share outside (0, 1], is an error."""
    with pytest.raises(ValueError, match="must be"):
        gpuhealth.Rules(**kwargs)


def test_compare_names_what_was_raised_and_what_cleared() -> None:
    """New (node, reason) pairs are raised and vanished ones cleared, sorted; kept ones neither."""
    before = {"a": frozenset({Reason.XID_ERRORS}), "b": frozenset({Reason.MEMORY_FULL})}
    after = {
        "a": frozenset({Reason.XID_ERRORS, Reason.MEMORY_FULL}),
        "c": frozenset({Reason.XID_ERRORS}),
    }

    change = gpuhealth.compare(before, after)

    assert change.raised == (("a", Reason.MEMORY_FULL), ("c", Reason.XID_ERRORS))
    assert change.cleared == (("b", Reason.MEMORY_FULL),)


readings = st.dictionaries(
    st.sampled_from(["a", "b", "c", "d"]),
    st.builds(
        Reading,
        xid_error=st.none() | st.floats(allow_nan=True),
        memory_ratio=st.none() | st.floats(min_value=0, max_value=1),
    ),
)


@given(readings)
def test_missing_data_never_excludes(found: dict[str, Reading]) -> None:
    """Dropping a node's reading, or any of its fields, never adds an exclusion."""
    full = gpuhealth.exclusions(found, RULES)
    for node, reading in found.items():
        for partial in (
            Reading(xid_error=reading.xid_error),
            Reading(memory_ratio=reading.memory_ratio),
        ):
            assert gpuhealth.reasons(partial, RULES) <= full.get(node, frozenset())
    assert gpuhealth.compare(full, full) == gpuhealth.Change((), ())
