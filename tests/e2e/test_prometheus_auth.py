"""The controller reading a Prometheus behind an auth gateway: a bearer token from a mounted
file and a tenant header, from the settings to every query, never in a log line."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kube.emulator import Kube
from kube.kubelet import FakeCluster
from prom import gate as gate_
from prom.fixtures import Stack
from structlog.testing import capture_logs

from autoscaler import app

from .support import Controllers, Service, SteppedClock, advance_until, wait_for_load

TOKEN = "e2e-secret-token"


@pytest.fixture
async def gate(stack: Stack) -> AsyncIterator[gate_.Gate]:
    """A gate in front of the session's Prometheus asking for `TOKEN` and tenant `tenant-a`."""
    started = gate_.Gate(stack.prometheus.url, token=TOKEN, tenant="tenant-a")
    await started.start()
    yield started
    await started.stop()


async def test_the_controller_scales_through_an_auth_gateway_and_logs_no_secret(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    gate: gate_.Gate,
    unique: str,
    tmp_path: Path,
) -> None:
    """With a token file and a tenant header set, the one client of the metrics and the health
    queries passes the gate and the load scales up; the start log names the kind of credentials
    and the header, never the token."""
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    kubelet.add_node("gpu-1", gpus=8)
    chat = await Service.create(kube, kubelet, stack.upper, f"{unique}-a", "chat")
    chat.serve(rate_per_s=12.5)  # 25 req/s on 2 replicas, target 10 each: 3 wanted
    await wait_for_load(stack.prometheus, chat, 25.0)

    with capture_logs() as logs:
        await cluster.start(
            prometheus_url=gate.url,
            prometheus={"bearer_token_file": str(token), "headers": "X-Scope-OrgID=tenant-a"},
        )
        await advance_until(clock, lambda: chat.replicas == 3, limit_s=10, what="scale-up")

    assert gate.passed > 0
    (started,) = [e for e in logs if e["event"] == app.STARTED]
    assert "bearer" in started["prometheus_access"]
    assert "X-Scope-OrgID" in started["prometheus_access"]
    assert TOKEN not in repr(logs)
    controller = cluster.running[-1].controller
    assert controller.health.client is controller.metrics.client is controller.prometheus
