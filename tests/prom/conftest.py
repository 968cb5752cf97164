"""Registers the Prometheus fixtures the harness's own tests use."""

from prom.fixtures import lone_prometheus, prometheus_binary

__all__ = ["lone_prometheus", "prometheus_binary"]
