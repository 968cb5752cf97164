"""The warm-up probe (docs/architecture.md, "The warm-up gate and the traffic ramp"): HTTP requests
to a new pod's warm-up endpoint, in sequence.

`HttpProber` implements `ports.WarmupProber` with one aiohttp `ClientSession` shared by every
probe (opened by the first, on the running loop; `close()` ends it, and a later probe opens a
new one). Each request is a GET of `http://<ip>:<port><path>` bounded by `timeout_s`. A 2xx
answer counts as answered, its latency measured on the injected timer from sending the request
to the end of its body; anything else (another status, a redirect, a refused or reset
connection, a timeout) counts as failed. Redirects are not followed, environment proxies are
not used and cookies are not kept: a probe reaches the pod and nothing else.

It decides nothing: whether the latencies are back to the serving pods' level is the ramp
driver's to judge.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import aiohttp

from autoscaler import ports

USER_AGENT: Final = "inference-autoscaler-warmup"
_CHUNK_BYTES: Final = 64 * 1024


def probe_url(ip: str, port: int, path: str) -> str:
    """The URL of a pod's warm-up endpoint; `ValueError` for an address, port or path that is
    not one (the path as the annotation contract accepts it: absolute, already %-encoded)."""
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        raise ValueError(f"not an IP address: {ip!r}") from None
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"not a port number: {port!r}")
    if (
        not path.startswith("/")
        or path.startswith("//")
        or any(not ch.isprintable() or ch.isspace() or ch in "?#\\" for ch in path)
    ):
        raise ValueError(f"not an absolute URL path: {path!r}")
    host = f"[{address.compressed}]" if address.version == 6 else address.compressed
    return f"http://{host}:{port}{path}"


class HttpProber:
    """`ports.WarmupProber` over HTTP; see the module docstring."""

    def __init__(self, *, timer: Callable[[], float] = time.perf_counter) -> None:
        """`timer` reads seconds for latencies (a monotonic, high-resolution clock)."""
        self._timer = timer
        self._session: aiohttp.ClientSession | None = None

    async def probe(
        self, ip: str, port: int, path: str, requests: int, timeout_s: float
    ) -> ports.ProbeResult:
        """Send `requests` GETs one after another, each bounded by `timeout_s`."""
        url = probe_url(ip, port, path)
        if isinstance(requests, bool) or not isinstance(requests, int) or requests < 0:
            raise ValueError(f"requests must be a whole number >= 0, not {requests!r}")
        if not (timeout_s > 0 and math.isfinite(timeout_s)):
            raise ValueError(f"timeout_s must be > 0 and finite, not {timeout_s!r}")
        session = self._open()
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        latencies: list[float] = []
        failed = 0
        for _ in range(requests):
            started = self._timer()
            try:
                async with session.get(url, timeout=timeout, allow_redirects=False) as response:
                    async for _chunk in response.content.iter_chunked(_CHUNK_BYTES):
                        pass  # the answer is over when its body is; its content is not needed
                    answered = 200 <= response.status <= 299
            except (aiohttp.ClientError, TimeoutError):
                answered = False
            if answered:
                latencies.append(self._timer() - started)
            else:
                failed += 1
        return ports.ProbeResult(ok=len(latencies), failed=failed, latencies_s=tuple(latencies))

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                headers={"User-Agent": USER_AGENT},
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
            )
        return self._session

    async def close(self) -> None:
        """Close the shared session (and its connections); idempotent."""
        if self._session is not None:
            await self._session.close()
            self._session = None


if TYPE_CHECKING:

    def _implements_the_port(prober: HttpProber) -> ports.WarmupProber:
        return prober  # mypy checks the structural type here
