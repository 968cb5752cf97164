"""Fixtures for the operations tests: promtool, and the session's Prometheus stack."""

from __future__ import annotations

import os
import shutil

import pytest
from prom.fixtures import prometheus_binary, prometheus_stack, stack, unique

__all__ = ["prometheus_binary", "prometheus_stack", "stack", "unique"]

DEBIAN_PROMTOOL = "/usr/bin/promtool"


@pytest.fixture(scope="session")
def promtool() -> str:
    """The promtool binary (Debian's `prometheus` package); skips the test when it is missing."""
    if os.access(DEBIAN_PROMTOOL, os.X_OK):
        return DEBIAN_PROMTOOL
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("no promtool: install Debian's `prometheus` package (`make prometheus`)")
    return found
