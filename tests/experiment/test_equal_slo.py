"""The equal-SLO search: which targets it tries and which setting it keeps."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from autoscaler.experiment import equal_slo
from autoscaler.experiment.equal_slo import Trial

GRID = tuple(round(0.45 + 0.05 * i, 2) for i in range(12))


def test_cheapest_keeps_the_fewest_gpu_hours_within_the_limit() -> None:
    """A cheaper setting over the limit loses to the cheapest one within it."""
    trials = [
        Trial(0.60, slo_miss_pct=0.0, gpu_hours=30.0),
        Trial(0.75, slo_miss_pct=0.4, gpu_hours=24.0),
        Trial(0.85, slo_miss_pct=1.0, gpu_hours=21.0),
        Trial(0.95, slo_miss_pct=3.2, gpu_hours=18.0),
    ]
    assert equal_slo.cheapest(trials) == trials[2]


def test_cheapest_is_none_when_nothing_qualifies() -> None:
    """Without a setting within the limit there is no equal-SLO result."""
    trials = [Trial(0.45, 1.01, 40.0), Trial(0.75, 20.0, 20.0)]
    assert equal_slo.cheapest(trials) is None
    assert equal_slo.cheapest([]) is None


def test_cheapest_prefers_the_higher_target_on_a_tie() -> None:
    """Two qualifying settings with the same GPU-hours resolve to the leaner target."""
    trials = [Trial(0.80, 0.0, 20.0), Trial(0.90, 0.5, 20.0), Trial(0.70, 0.0, 22.0)]
    assert equal_slo.cheapest(trials) == trials[1]


def test_cheapest_takes_a_cheaper_lower_target_when_the_policy_misbehaves() -> None:
    """GPU-hours need not fall with the target: the cheapest qualifying run wins regardless."""
    trials = [Trial(0.70, 0.2, 19.0), Trial(0.80, 0.6, 23.0)]
    assert equal_slo.cheapest(trials) == trials[0]


def test_search_goes_up_from_a_qualifying_default() -> None:
    """From a default within the limit, the next target is halfway up the rest of the grid."""
    assert equal_slo.next_target(GRID, [Trial(0.75, 0.1, 20.0)]) == 0.9


def test_search_goes_down_from_a_failing_default() -> None:
    """From a default over the limit, the next target is halfway down."""
    assert equal_slo.next_target(GRID, [Trial(0.75, 5.0, 20.0)]) == 0.55


def test_search_stops_when_the_lowest_target_fails() -> None:
    """Once the lowest target misses too much, nothing is left to try: the result is none."""
    trials = [Trial(0.75, 5.0, 20.0), Trial(0.55, 3.0, 25.0), Trial(0.45, 2.0, 30.0)]
    assert equal_slo.next_target(GRID, trials) is None
    assert equal_slo.cheapest(trials) is None


def test_search_stops_when_the_highest_target_qualifies() -> None:
    """A policy within the limit at the top of the grid needs no further run."""
    assert equal_slo.next_target(GRID, [Trial(0.75, 0.0, 20.0), Trial(1.0, 0.9, 15.0)]) is None


def test_search_tries_a_default_off_the_grid_as_one_of_its_points() -> None:
    """A default between grid points is bisected around like any other point."""
    grid = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
    assert equal_slo.next_target(grid, [Trial(0.75, 0.0, 20.0)]) == 0.9
    assert equal_slo.next_target(grid, [Trial(0.75, 2.0, 20.0)]) == 0.6


@given(
    threshold=st.floats(min_value=0.4, max_value=1.05),
    default=st.sampled_from(GRID),
)
def test_search_finds_the_highest_qualifying_target(threshold: float, default: float) -> None:
    """With misses rising in the target, the search ends on the boundary in a few runs."""

    def simulate(u: float) -> Trial:
        return Trial(u, slo_miss_pct=0.0 if u <= threshold else 5.0, gpu_hours=10.0 / u)

    trials = [simulate(default)]
    while (target := equal_slo.next_target(GRID, trials)) is not None:
        assert target not in {t.utilisation for t in trials}
        trials.append(simulate(target))

    best = equal_slo.cheapest(trials)
    qualifying = [u for u in GRID if u <= threshold]
    if qualifying:
        assert best is not None
        assert best.utilisation == max(qualifying)
    else:
        assert best is None
    assert len(trials) <= 1 + math.ceil(math.log2(len(GRID)))
