"""A warm-up endpoint that accepts connections, reads the requests and answers none until told.

A model server wedged in its warm-up: the TCP handshake succeeds, the request goes out, and no
byte comes back. `release()` makes it answer every request held and every later one with 200,
as a server that got unstuck. It counts what it saw, and waits for it without polling.

`wedged` is the pytest fixture (registered by the e2e and fault conftests, imported by the
loop's probe tests); `run_beside_wedged_pods` is the scenario the e2e and fault tests share:
wedged new pods of one service, a neighbour that must scale, and a controller ticking on the
stepped clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator

import pytest
from kube.emulator import Kube
from kube.kubelet import POD_IP, FakeCluster
from prom.fixtures import Stack

from autoscaler.ramp_driver import PROBE_CONCURRENCY

from .support import (
    DEPLOYMENTS,
    Controllers,
    Service,
    deployment,
    ensure_namespace,
    managed,
    wait_for_load,
)

WARMING = "autoscaler.dsec.io/warming"
WARM = "autoscaler.dsec.io/warm"
_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nwarm\n"


class WedgedEndpoint:
    def __init__(self) -> None:
        self.port = 0
        self.requests = 0
        """Requests received (answered or not)."""
        self.held = 0
        """Requests received and not answered now (their client still waiting)."""
        self.max_held = 0
        """The most requests held at once."""
        self._released = asyncio.Event()
        self._seen = asyncio.Condition()
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[object]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    def release(self) -> None:
        """Answer from now on, the requests held included."""
        self._released.set()

    async def wait_requests(self, count: int) -> None:
        """Until at least `count` requests have arrived."""
        async with self._seen:
            await self._seen.wait_for(lambda: self.requests >= count)

    async def stop(self) -> None:
        """Close every connection and the listener, and wait for the handlers to end."""
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._writers.add(writer)
        try:
            while True:
                try:
                    await reader.readuntil(b"\r\n\r\n")  # a GET has no body
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                async with self._seen:
                    self.requests += 1
                    self._seen.notify_all()
                closed = asyncio.ensure_future(reader.read())  # EOF: the client gave up
                released = asyncio.ensure_future(self._released.wait())
                self.held += 1
                self.max_held = max(self.max_held, self.held)
                try:
                    await asyncio.wait([closed, released], return_when=asyncio.FIRST_COMPLETED)
                finally:
                    self.held -= 1
                if closed.done() or not released.done():
                    released.cancel()
                    closed.cancel()
                    await asyncio.gather(closed, released, return_exceptions=True)
                    return
                closed.cancel()
                await asyncio.gather(closed, return_exceptions=True)
                writer.write(_ANSWER)
                await writer.drain()
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            self._handlers.discard(task)


async def run_beside_wedged_pods(
    *,
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    namespace: str,
    endpoint: WedgedEndpoint,
    pods: int,
    warmup_requests: int,
    seconds: int,
) -> Beside:
    """`pods` new pods of one service probed at `endpoint` (gate only), a neighbour service
    whose load wants 4 replicas instead of 2, and a controller ticking `seconds` one by one
    while no probe answers."""
    kubelet.add_node("gpu-wedged", gpus=pods + 8)
    notes = managed(
        **{
            "min-replicas": str(pods),
            "max-replicas": str(pods),
            "traffic-router": "none",
            "warmup-path": "/warm",
            "warmup-requests": str(warmup_requests),
        }
    )
    body = deployment("stuck", replicas=pods, annotations=notes)
    template = body["spec"]["template"]
    template["metadata"]["labels"][WARMING] = "true"
    template["metadata"]["annotations"] = {POD_IP: "127.0.0.1"}
    template["spec"]["readinessGates"] = [{"conditionType": WARM}]
    template["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": endpoint.port}]
    ensure_namespace(kube, namespace)
    kube.store.create(DEPLOYMENTS, body, namespace=namespace)
    neighbour = await Service.create(kube, kubelet, stack.upper, namespace, "neighbour")
    neighbour.serve(rate_per_s=17.5)  # 35 req/s on 2 replicas, target 10 each: 4 wanted
    await wait_for_load(stack.prometheus, neighbour, 35.0)

    # The clock must not wait for probes that never end: the point is that ticks do not.
    running = await cluster.start(wait_probes=False)
    controller = running.controller
    await endpoint.wait_requests(min(pods, PROBE_CONCURRENCY))
    before = controller.ticks
    delayed = 0
    for _ in range(seconds):
        ticks = controller.ticks
        await cluster.clock.advance(1.0)  # a tick awaiting a probe times this out
        delayed += controller.ticks != ticks + 1
        await kubelet.settle()
    ramps = controller.ramps
    assert ramps is not None
    return Beside(
        ticks=controller.ticks - before,
        ticks_delayed=delayed,
        probes_in_flight=ramps.probes_in_flight,
        neighbour_replicas=neighbour.replicas,
    )


@dataclasses.dataclass(frozen=True)
class Beside:
    ticks: int
    """Ticks run while the wedged pods' probes were in flight."""
    ticks_delayed: int
    """Seconds after which the tick due had not returned."""
    probes_in_flight: int
    neighbour_replicas: int


@pytest.fixture
async def wedged() -> AsyncIterator[WedgedEndpoint]:
    endpoint = WedgedEndpoint()
    await endpoint.start()
    try:
        yield endpoint
    finally:
        await endpoint.stop()
