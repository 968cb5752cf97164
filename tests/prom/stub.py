"""Broken Prometheus stand-ins for error paths the real server will not produce on demand.

`answering` serves one fixed HTTP answer to every request; `silent` accepts connections and never
answers, so a client's read timeout fires.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator, Iterator

from aiohttp import web


@contextlib.asynccontextmanager
async def answering(status: int, body: str, content_type: str) -> AsyncIterator[str]:
    """The URL of a server on the running loop that answers every request the same."""

    async def handle(request: web.Request) -> web.Response:
        return web.Response(status=status, text=body, content_type=content_type)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@contextlib.contextmanager
def silent() -> Iterator[str]:
    """The URL of a listening socket that never accepts: the kernel completes connections
    into its backlog, and no byte ever comes back."""
    with socket.create_server(("127.0.0.1", 0), backlog=16) as server:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
