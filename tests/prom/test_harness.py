"""The test harness itself: the Prometheus binary, its start and stop, the exporters' format."""

from __future__ import annotations

import os
import urllib.error
import urllib.request

import pytest

from prom import exporter, server


def test_ci_has_the_prometheus_binary() -> None:
    """CI fails here when the Prometheus binary is missing, instead of skipping its tests."""
    if server.find_binary() is None and os.environ.get("CI") != "true":
        pytest.skip("no Prometheus binary; only CI (CI=true) requires it")
    assert server.find_binary() is not None, (
        f"CI=true but no Prometheus binary at {server.DEBIAN_BINARY} or on PATH: "
        "the Prometheus-backed tests would all be skipped; install Debian's `prometheus` package"
    )


def test_prometheus_gets_ready_and_stops_cleanly(lone_prometheus: server.Prometheus) -> None:
    """A started Prometheus answers its API on loopback and exits 0 when stopped."""
    assert lone_prometheus.url.startswith("http://127.0.0.1:")
    assert lone_prometheus.values("vector(1)") == {"{}": 1.0}

    assert lone_prometheus.stop() == 0
    with pytest.raises(urllib.error.URLError, match="refused"):
        urllib.request.urlopen(f"{lone_prometheus.url}/-/ready", timeout=1)


def test_exporter_serves_text_format_with_colons_even_when_openmetrics_is_asked() -> None:
    """The exporter answers text format 0.0.4 with vLLM's colon names whatever Accept says."""
    with exporter.serving(["hostname"]) as (served,):
        served.set_vllm("ns-a", "pod-0", waiting=3, running=2, rate_per_s=1.0)
        served.set_gpu("ns-a", "pod-0", 55.0)
        request = urllib.request.Request(
            f"http://{served.target}/metrics",
            headers={"Accept": "application/openmetrics-text;version=1.0.0,*/*;q=0.1"},
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            content_type = response.headers["Content-Type"]
            text = response.read().decode()

    assert content_type == exporter.CONTENT_TYPE
    assert 'vllm:num_requests_waiting{engine="0",model_name="test-model",namespace="ns-a",' in text
    assert "vllm:request_success_total{" in text
    assert "vllm:e2e_request_latency_seconds_bucket{" in text
    assert 'DCGM_FI_DEV_GPU_UTIL{UUID="GPU-' in text
    assert 'hostname="gpu-node-1"' in text
    assert "vllm_num_requests_waiting" not in text
    assert "# EOF" not in text  # the OpenMetrics terminator
