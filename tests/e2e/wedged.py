"""A warm-up endpoint that accepts connections, reads the requests and answers none until told.

A model server wedged in its warm-up: the TCP handshake succeeds, the request goes out, and no
byte comes back. `release()` makes it answer every request held and every later one with 200,
as a server that got unstuck. It counts what it saw, and waits for it without polling.
"""

from __future__ import annotations

import asyncio
import contextlib

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
