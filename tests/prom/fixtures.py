"""pytest fixtures for the real Prometheus; conftest files import the ones their tests use.

The scraping stack is one per session: a Prometheus takes about 5 s to its first scrape, so the
tests share it and keep apart by using namespaces of their own (`unique`), and each test's series
are dropped when it ends.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from prom import exporter, server

FIRST_SCRAPE_TIMEOUT_S = 30.0
_serial = itertools.count()


@dataclass(frozen=True)
class Stack:
    """A Prometheus scraping two exporters every second."""

    prometheus: server.Prometheus
    upper: exporter.Exporter
    """Labels DCGM's node `Hostname`."""
    lower: exporter.Exporter
    """Labels DCGM's node `hostname`."""
    first_scrape_after_s: float
    """Seconds from Prometheus's start until both exporters had been scraped."""


@pytest.fixture(scope="session")
def prometheus_binary() -> str:
    """The Prometheus binary; skips the test when it is not installed."""
    binary = server.find_binary()
    if binary is None:
        pytest.skip(
            f"no Prometheus binary ({server.DEBIAN_BINARY} or on PATH): install Debian's "
            "`prometheus` package (`make prometheus`)"
        )
    return binary


@pytest.fixture(scope="session")
def prometheus_stack(
    prometheus_binary: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """The session's Prometheus and exporters, running from the first test that asks for them."""
    with exporter.serving(["Hostname", "hostname"]) as (upper, lower):
        work_dir = tmp_path_factory.mktemp("prometheus")
        targets = [upper.target, lower.target]
        with server.running(prometheus_binary, work_dir, targets=targets) as prometheus:
            first = prometheus.wait_until_scraped(targets, timeout_s=FIRST_SCRAPE_TIMEOUT_S)
            yield Stack(prometheus, upper, lower, first)


@pytest.fixture
def stack(prometheus_stack: Stack) -> Iterator[Stack]:
    """The session's stack; the series this test set are dropped after it."""
    yield prometheus_stack
    prometheus_stack.upper.clear()
    prometheus_stack.lower.clear()


@pytest.fixture
def unique() -> str:
    """A prefix no other test uses, for namespaces (a valid DNS-1123 label start)."""
    return f"t{next(_serial)}"


@pytest.fixture
def lone_prometheus(prometheus_binary: str, tmp_path: Path) -> Iterator[server.Prometheus]:
    """A Prometheus of this test's own, scraping nothing, stopped after it."""
    with server.running(prometheus_binary, tmp_path) as prometheus:
        yield prometheus
