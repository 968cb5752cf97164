"""Fixtures for the fault suite: the e2e harness (controllers on the emulator, the session's
Prometheus, a stepped clock) and the `figures` recorder.

Every test collected below this folder is marked `faults`, which the default run deselects.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e.conftest import _fresh_logging, clock, cluster
from e2e.support import CallLog
from e2e.wedged import wedged
from prom.fixtures import prometheus_binary, prometheus_stack, stack, unique

from .figures import Figures, markdown

__all__ = [
    "_fresh_logging",
    "clock",
    "cluster",
    "prometheus_binary",
    "prometheus_stack",
    "stack",
    "unique",
    "wedged",
]

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in item.path.parents:
            item.add_marker(pytest.mark.faults)


@pytest.fixture
def api_calls() -> CallLog:
    """The API calls of this test's controllers (the RBAC test reads only the e2e suite's)."""
    return CallLog()


@pytest.fixture(scope="session")
def figures() -> Iterator[Figures]:
    """Where the tests record what they measured; written to `faults-out/` at the end."""
    recorded = Figures()
    yield recorded
    if recorded.tables():
        recorded.write()
        for table, rows in recorded.tables().items():
            print("\n" + markdown(table, rows))
