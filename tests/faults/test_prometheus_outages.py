"""Prometheus down in seven shapes for 10 minutes of controller time: no scale-down meanwhile,
and the first tick after recovery decides on the data again.

A switchable proxy on loopback stands between the controller and the session's Prometheus and
plays each shape; `restart` stops the proxy's listener and starts a new one on the same port, as
a restarted Prometheus behind its Service looks to a client.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from e2e.support import Controllers, Service, SteppedClock, wait_for_load
from kube.emulator import Kube
from kube.kubelet import FakeCluster
from prom.fixtures import Stack

from .figures import Figures

OUTAGE_S = 600.0
STEP_S = 1.0
"""Clock step during the outage: one tick each, so the smoothing window empties as it would."""
HUNG_STEP_S = 30.0
"""For `hung`, whose every tick waits out the 2 s query deadline for real: one tick per step
(the loop skips the ticks it missed), so the window keeps older data and holds need not show."""
SHAPES = ["refused", "hung", "503", "html-200", "empty", "malformed", "restart"]


class Proxy:
    """Forwards queries to Prometheus, or answers in the shape of an outage."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.shape = "pass"
        self.released = asyncio.Event()
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._session = aiohttp.ClientSession()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0)
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await self._site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def switch(self, shape: str) -> None:
        if shape in ("refused", "restart"):
            await self.stop()
        elif self.shape in ("refused", "restart"):
            await self.start()
        if shape == "pass":
            self.released.set()
        else:
            self.released.clear()
        self.shape = shape

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        shape = self.shape
        if shape == "hung":
            await self.released.wait()
        elif shape == "503":
            return web.Response(status=503, text="Service Unavailable")
        elif shape == "html-200":
            return web.Response(text="<html><body>Sign in</body></html>", content_type="text/html")
        elif shape == "empty":
            return web.Response(body=b"", content_type="application/json")
        elif shape == "malformed":
            body = {"status": "success", "data": {"resultType": "vector", "result": [{"x": 1}]}}
            return web.Response(text=json.dumps(body), content_type="application/json")
        async with self._session.get(self.upstream + request.path, params=request.query) as answer:
            body = await answer.read()
            return web.Response(status=answer.status, body=body, content_type=answer.content_type)

    async def close(self) -> None:
        self.released.set()
        await self.stop()
        await self._session.close()


@pytest.fixture
async def proxy(stack: Stack) -> AsyncIterator[Proxy]:
    made = Proxy(stack.prometheus.url)
    await made.start()
    yield made
    await made.close()


@pytest.mark.parametrize("shape", SHAPES)
async def test_an_outage_never_scales_down_and_recovery_decides_again(
    shape: str,
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    proxy: Proxy,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
    figures: Figures,
) -> None:
    """During 10 minutes of outage the service holds at its size; after it, it decides again."""
    kubelet.add_node("gpu-1", gpus=16)
    chat = await Service.create(kube, kubelet, stack.upper, f"{unique}-o", "chat", replicas=4)
    chat.serve(rate_per_s=9.0)  # 36 req/s on 4 replicas, target 10 each: 4 wanted
    await wait_for_load(stack.prometheus, chat, 36.0)
    await cluster.start(prometheus_url=proxy.url)
    await clock.advance(5)
    status = chat.status()
    assert status is not None
    assert (status["kind"], chat.replicas) in {("steady", 4), ("hold", 4)}

    await proxy.switch(shape)
    chat.serve(rate_per_s=1.0)  # what Prometheus shows meanwhile: 2 replicas would do
    scale_downs = holds = 0
    lowest = chat.replicas
    seen: list[str] = []
    step_s = HUNG_STEP_S if shape == "hung" else STEP_S
    for _ in range(round(OUTAGE_S / step_s)):
        await clock.advance(step_s, step_s=step_s)
        status = chat.status()
        assert status is not None
        holds += status["kind"] == "hold"
        seen.append(f"{status['kind']}/{status['reason']}")
        if chat.replicas < lowest:
            scale_downs += 1
            lowest = chat.replicas

    await wait_for_load(stack.prometheus, chat, 4.0, timeout_s=30)
    await proxy.switch("pass")
    await clock.advance(1)
    after = chat.status()
    assert after is not None
    figures.record(
        "prometheus_outages",
        shape=shape,
        outage_s=OUTAGE_S,
        scale_downs=scale_downs,
        holds=holds,
        first_decision_after_recovery=f"{after['kind']}/{after['reason']}",
    )
    assert (scale_downs, lowest) == (0, 4)
    if shape != "hung":
        assert seen[-1] == "hold/missing-data", seen
    assert after["reason"] != "missing-data"
    assert after["kind"] == "scale-down"
