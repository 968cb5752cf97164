"""An auth gateway for tests: a reverse proxy in front of the real Prometheus that asks for a
bearer token and a tenant header (`X-Scope-OrgID`), as oauth2-proxy or the gateway in front of
Mimir, Cortex or Thanos do. Prometheus itself checks neither."""

from __future__ import annotations

import aiohttp
from aiohttp import web


class Gate:
    """A reverse proxy that asks for a bearer token and a tenant, as an auth gateway in front of
    Mimir or Thanos does, and forwards what passes to the real Prometheus."""

    def __init__(self, upstream: str, *, token: str, tenant: str) -> None:
        self.upstream = upstream
        self.tenant = tenant
        self.token = token
        """The one bearer token let through; a test changes it to rotate the credentials."""
        self.url = ""
        self.passed = 0
        """Queries let through so far."""
        self._runner = web.AppRunner(web.Application())
        self._runner.app.router.add_get("/api/v1/query", self._query)
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self._session = aiohttp.ClientSession()
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"

    async def stop(self) -> None:
        await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _query(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.Response(status=401, text="invalid bearer token")
        if request.headers.get("X-Scope-OrgID") != self.tenant:
            return web.Response(status=403, text="no org id")
        assert self._session is not None
        self.passed += 1
        url = f"{self.upstream}/api/v1/query"
        async with self._session.get(url, params=request.query) as answer:
            return web.Response(
                status=answer.status, body=await answer.read(), content_type=answer.content_type
            )
