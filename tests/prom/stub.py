"""Broken Prometheus stand-ins for error paths the real server will not produce on demand.

`answering` serves one fixed HTTP answer to every request; `silent` accepts connections and never
answers, so a client's read timeout fires; `dripping` sends its headers at once, then its body one
byte at a time, paced on the event loop, so a read timeout never fires and only a deadline does.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

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


@dataclass
class Drip:
    url: str
    bytes_sent: int = 0
    """Body bytes sent so far, over every connection."""


@contextlib.asynccontextmanager
async def dripping(*, byte_every_s: float) -> AsyncIterator[Drip]:
    """A server on the running loop that answers 200 with a 1 MB JSON body, one byte every
    `byte_every_s`, until the client goes away."""
    drip = Drip("")
    tasks: set[asyncio.Task[None]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tasks.add(asyncio.current_task())  # type: ignore[arg-type]
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: 1000000\r\n\r\n"
            )
            while True:
                writer.write(b" ")
                await writer.drain()
                drip.bytes_sent += 1
                await asyncio.sleep(byte_every_s)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    drip.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield drip
    finally:
        server.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()
