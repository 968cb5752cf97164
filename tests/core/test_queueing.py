"""Erlang C and the SLO sizing built on it."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.core import queueing


def test_erlang_c_matches_the_textbook_values() -> None:
    """C(1, 0.5) is 0.5, C(2, 1) is 1/3 and C(3, 1) is 1/11; a saturated count always waits."""
    waits = queueing.erlang_c(np.array([1.0, 2.0, 3.0]), 1.0)
    assert waits == pytest.approx([1.0, 1 / 3, 1 / 11])
    assert queueing.erlang_c(np.array([1.0]), 0.5)[0] == pytest.approx(0.5)


def test_erlang_c_stays_finite_for_thousands_of_servers() -> None:
    """Large counts do not overflow: 2,000 servers at 1,800 busy wait rarely but not never."""
    wait = queueing.erlang_c(np.array([2000.0]), 1800.0)[0]
    assert 0 < wait < 1e-3


def test_mean_queue_of_m_m_1_is_rho_squared_over_one_minus_rho() -> None:
    """One server at half load holds half a request waiting on average."""
    assert queueing.mean_queue(
        replicas=1, slots=1, arrival_rps=0.5, capacity_rps=1.0
    ) == pytest.approx(0.5)


def test_large_services_run_hotter_than_small_ones_at_the_same_slo() -> None:
    """Square-root staffing: the utilisation the SLO allows grows with the load."""

    def utilisation(arrival_rps: float) -> float:
        replicas = queueing.replicas_for_wait(
            slots=2,
            arrival_rps=arrival_rps,
            capacity_rps=1.0,
            burstiness=1.0,
            quantile=0.99,
            budget_s=3.0,
            most=1000,
        )
        assert replicas is not None
        return arrival_rps / replicas

    assert utilisation(3.0) < utilisation(30.0) < utilisation(300.0) < 1.0


def test_no_count_within_the_bound_is_none() -> None:
    """When even the most replicas allowed cannot keep the SLO the answer is None."""
    assert (
        queueing.replicas_for_wait(
            slots=1,
            arrival_rps=50.0,
            capacity_rps=1.0,
            burstiness=1.0,
            quantile=0.95,
            budget_s=1.0,
            most=20,
        )
        is None
    )


@settings(max_examples=60, deadline=None)
@given(
    arrival=st.floats(0.1, 500.0),
    more=st.floats(0.0, 100.0),
    burstiness=st.floats(0.5, 4.0),
    quantile=st.sampled_from([0.9, 0.95, 0.99]),
    budget_s=st.floats(0.1, 30.0),
)
def test_more_load_never_needs_fewer_replicas(
    arrival: float, more: float, burstiness: float, quantile: float, budget_s: float
) -> None:
    """The replicas the SLO needs are monotonic in the arrival rate."""

    def needed(rate: float) -> int:
        answer = queueing.replicas_for_wait(
            slots=2,
            arrival_rps=rate,
            capacity_rps=1.0,
            burstiness=burstiness,
            quantile=quantile,
            budget_s=budget_s,
            most=2000,
        )
        assert answer is not None
        return answer

    assert needed(arrival) <= needed(arrival + more)


def test_the_controller_loads_scipy_only_when_a_service_sizes_to_an_slo() -> None:
    """scipy.special (about 14 MB of the process) is imported by the first Erlang C, not by the
    controller's wiring: a fleet without a latency SLO never holds it."""
    script = (
        "import sys\n"
        "import autoscaler.app, autoscaler.cli, autoscaler.loop\n"
        "from autoscaler.core import policy, queueing\n"
        "assert not any(m.startswith('scipy') for m in sys.modules), 'imported'\n"
        "import numpy as np\n"
        "queueing.erlang_c(np.array([2.0]), 1.0)\n"
        "assert 'scipy.special' in sys.modules\n"
    )
    subprocess.run(
        [sys.executable, "-c", script],
        check=True,
        env={"PYTHONPATH": ":".join(sys.path)},
    )
