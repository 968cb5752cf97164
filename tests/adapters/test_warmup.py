"""`HttpProber` against a real aiohttp server on loopback, its latencies on a stepped timer."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from autoscaler import ports
from autoscaler.adapters import warmup


class SteppedTimer:
    """A `perf_counter` stand-in that moves only when the server says a request took time."""

    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


@dataclass
class Model:
    """A model server's warm-up endpoints; each advances the timer by the time it 'takes'."""

    timer: SteppedTimer
    port: int = 0
    peers: list[tuple[str, int]] = field(default_factory=list)
    flaky_calls: int = 0
    raw_paths: list[str] = field(default_factory=list)
    released: asyncio.Event = field(default_factory=asyncio.Event)

    def _answer(self, request: web.Request, took_s: float, status: int = 200) -> web.Response:
        assert request.transport is not None
        self.peers.append(request.transport.get_extra_info("peername")[:2])
        self.timer.now_s += took_s
        return web.Response(status=status, text="ok")

    async def fast(self, request: web.Request) -> web.Response:
        return self._answer(request, 0.05)

    async def named(self, request: web.Request) -> web.Response:
        self.raw_paths.append(request.raw_path)
        return self._answer(request, 0.05)

    async def slow(self, request: web.Request) -> web.Response:
        return self._answer(request, 2.5)

    async def failing(self, request: web.Request) -> web.Response:
        return self._answer(request, 0.01, status=500)

    async def flaky(self, request: web.Request) -> web.Response:
        self.flaky_calls += 1
        return self._answer(request, 0.2, status=200 if self.flaky_calls % 2 else 503)

    async def moved(self, request: web.Request) -> web.Response:
        raise web.HTTPFound("/fast")

    async def hanging(self, request: web.Request) -> web.Response:
        await self.released.wait()
        return self._answer(request, 0.0)


@pytest.fixture
def timer() -> SteppedTimer:
    return SteppedTimer()


@pytest.fixture
async def model(timer: SteppedTimer) -> AsyncIterator[Model]:
    served = Model(timer)
    app = web.Application()
    app.router.add_get("/fast", served.fast)
    app.router.add_get("/v1/{name}", served.named)
    app.router.add_get("/slow", served.slow)
    app.router.add_get("/failing", served.failing)
    app.router.add_get("/flaky", served.flaky)
    app.router.add_get("/moved", served.moved)
    app.router.add_get("/hanging", served.hanging)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    served.port = runner.addresses[0][1]
    try:
        yield served
    finally:
        served.released.set()
        await runner.cleanup()


@pytest.fixture
async def prober(timer: SteppedTimer) -> AsyncIterator[warmup.HttpProber]:
    made = warmup.HttpProber(timer=timer)
    yield made
    await made.close()


async def test_answered_probes_report_their_latencies(
    model: Model, prober: warmup.HttpProber
) -> None:
    """Three quick answers: three latencies, measured on the timer, over one connection."""
    result = await prober.probe("127.0.0.1", model.port, "/fast", 3, 1.0)

    assert (result.ok, result.failed) == (3, 0)
    assert result.latencies_s == pytest.approx((0.05, 0.05, 0.05))
    assert len(model.peers) == 3
    assert len(set(model.peers)) == 1  # the session keeps the connection


async def test_a_slow_model_answers_with_its_latency(
    model: Model, prober: warmup.HttpProber
) -> None:
    """A model still warming up answers slowly: the latencies say so."""
    result = await prober.probe("127.0.0.1", model.port, "/slow", 2, 10.0)

    assert result.latencies_s == pytest.approx((2.5, 2.5))


async def test_error_statuses_and_redirects_count_as_failed(
    model: Model, prober: warmup.HttpProber
) -> None:
    """A 5xx, or a redirect (never followed), fails; only 2xx answers bring a latency."""
    failing = await prober.probe("127.0.0.1", model.port, "/failing", 2, 1.0)
    flaky = await prober.probe("127.0.0.1", model.port, "/flaky", 4, 1.0)
    moved = await prober.probe("127.0.0.1", model.port, "/moved", 1, 1.0)

    assert (failing.ok, failing.failed, failing.latencies_s) == (0, 2, ())
    assert (flaky.ok, flaky.failed) == (2, 2)
    assert flaky.latencies_s == pytest.approx((0.2, 0.2))
    assert (moved.ok, moved.failed) == (0, 1)
    assert len(model.peers) == 2 + 4  # the redirect's target was never asked


async def test_an_encoded_path_reaches_the_server_as_written(
    model: Model, prober: warmup.HttpProber
) -> None:
    """The path goes out as the annotation has it, %-escapes and all."""
    result = await prober.probe("127.0.0.1", model.port, "/v1/warm%20up", 1, 1.0)

    assert result.ok == 1
    assert model.raw_paths == ["/v1/warm%20up"]


async def test_refused_connections_and_timeouts_count_as_failed(
    model: Model, prober: warmup.HttpProber
) -> None:
    """Nothing listening, or no answer within the timeout: failed, and the probe goes on."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    refused = await prober.probe("127.0.0.1", port, "/fast", 2, 1.0)
    silent = await prober.probe("127.0.0.1", model.port, "/hanging", 1, 0.05)

    assert (refused.ok, refused.failed) == (0, 2)
    assert (silent.ok, silent.failed) == (0, 1)


async def test_no_requests_sends_nothing(model: Model, prober: warmup.HttpProber) -> None:
    """Zero probe requests is an empty result and no traffic."""
    result = await prober.probe("127.0.0.1", model.port, "/fast", 0, 1.0)

    assert result == ports.ProbeResult(ok=0, failed=0, latencies_s=())
    assert model.peers == []


async def test_a_closed_prober_opens_a_new_session_when_used_again(
    model: Model, prober: warmup.HttpProber
) -> None:
    """`close()` ends the shared session; a later probe works on a fresh one."""
    await prober.probe("127.0.0.1", model.port, "/fast", 1, 1.0)
    await prober.close()
    await prober.close()

    result = await prober.probe("127.0.0.1", model.port, "/fast", 1, 1.0)

    assert result.ok == 1
    assert len(set(model.peers)) == 2


@pytest.mark.parametrize(
    ("ip", "port", "path", "requests", "timeout_s", "problem"),
    [
        ("pod.example", 8000, "/warm", 1, 1.0, "not an IP address"),
        ("10.0.0.1:80", 8000, "/warm", 1, 1.0, "not an IP address"),
        ("10.0.0.1", 0, "/warm", 1, 1.0, "not a port number"),
        ("10.0.0.1", 65536, "/warm", 1, 1.0, "not a port number"),
        ("10.0.0.1", 8000, "warm", 1, 1.0, "not an absolute URL path"),
        ("10.0.0.1", 8000, "//evil.example/warm", 1, 1.0, "not an absolute URL path"),
        ("10.0.0.1", 8000, "/warm?x=1", 1, 1.0, "not an absolute URL path"),
        ("10.0.0.1", 8000, "/warm up", 1, 1.0, "not an absolute URL path"),
        ("10.0.0.1", 8000, "/warm", -1, 1.0, "requests must be"),
        ("10.0.0.1", 8000, "/warm", 1, 0.0, "timeout_s must be"),
        ("10.0.0.1", 8000, "/warm", 1, float("inf"), "timeout_s must be"),
    ],
)
async def test_bad_input_is_refused_before_any_request(
    prober: warmup.HttpProber,
    ip: str,
    port: int,
    path: str,
    requests: int,
    timeout_s: float,
    problem: str,
) -> None:
    """An address, port, path, count or timeout that makes no sense raises ValueError."""
    with pytest.raises(ValueError, match=problem):
        await prober.probe(ip, port, path, requests, timeout_s)


def test_ipv6_addresses_are_bracketed() -> None:
    """An IPv6 pod address is written in brackets, as URLs need."""
    assert warmup.probe_url("fd00::a", 8000, "/warm") == "http://[fd00::a]:8000/warm"
    assert warmup.probe_url("10.1.2.3", 80, "/") == "http://10.1.2.3:80/"
