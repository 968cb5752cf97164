"""Fixtures for the end-to-end tests: the session's Prometheus, a stepped clock, controllers.

The RBAC test (marked `after_e2e`) runs after every other test and reads the API calls the
controllers made in all of them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import structlog
from kube.emulator import Kube
from prom.fixtures import Stack, prometheus_binary, prometheus_stack, stack, unique

from .support import CallLog, Controllers, SteppedClock, controllers
from .wedged import wedged

__all__ = ["prometheus_binary", "prometheus_stack", "stack", "unique", "wedged"]

_CALLS = pytest.StashKey[CallLog]()
_SCENARIOS = pytest.StashKey[set[str]]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "after_e2e: runs after every other test (it reads what they did)"
    )
    config.stash[_CALLS] = CallLog()
    config.stash[_SCENARIOS] = set()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    last = [item for item in items if item.get_closest_marker("after_e2e")]
    items[:] = [item for item in items if item not in last] + last
    here = Path(__file__).parent
    config.stash[_SCENARIOS] |= {
        item.nodeid
        for item in items
        if item.path.parent == here
        and "api_calls" in getattr(item, "fixturenames", ())
        and item not in last
    }
    collected = {item.path for item in items if item.path.parent == here}
    if collected != set(here.glob("test_*.py")):
        config.stash[_SCENARIOS].add("(an e2e module that was not collected)")


def pytest_deselected(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if item.path.parent == here and "api_calls" in getattr(item, "fixturenames", ()):
            item.config.stash[_SCENARIOS].add(item.nodeid)


@pytest.fixture(autouse=True)
def _fresh_logging() -> Iterator[None]:
    """Logging configured by a command (`explain`, `validate`) does not outlive its test."""
    yield
    structlog.reset_defaults()


@pytest.fixture
def clock() -> SteppedClock:
    return SteppedClock()


@pytest.fixture
def api_calls(request: pytest.FixtureRequest) -> CallLog:
    """The API calls the controllers made in the e2e tests of this session, so far."""
    return request.config.stash[_CALLS]


@pytest.fixture
def scenarios(request: pytest.FixtureRequest) -> set[str]:
    """The e2e tests that run controllers, collected or deselected in this session (and a
    placeholder when an e2e module was not collected at all)."""
    return request.config.stash[_SCENARIOS]


@pytest.fixture
async def cluster(
    kube: Kube,
    clock: SteppedClock,
    stack: Stack,
    api_calls: CallLog,
    request: pytest.FixtureRequest,
) -> AsyncIterator[Controllers]:
    """Starts controllers on the emulator, reading the session's Prometheus; stops them after."""
    async with controllers(
        kube,
        clock,
        prometheus_url=stack.prometheus.url,
        calls=api_calls,
        test_id=request.node.nodeid,
    ) as made:
        yield made
