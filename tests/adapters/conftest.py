"""Registers the Prometheus fixtures (from `tests/prom`) for the adapter tests."""

from prom.fixtures import lone_prometheus, prometheus_binary, prometheus_stack, stack, unique

__all__ = ["lone_prometheus", "prometheus_binary", "prometheus_stack", "stack", "unique"]
