"""pytest fixtures for tests that talk to Kubernetes: `kube`, `kubelet`, `kube_clock`.

- `kube`: the API emulator on a free 127.0.0.1 port for one test. `kube.url`,
  `kube.api_client()` (a configured kubernetes-asyncio `ApiClient`, closed at teardown),
  `kube.kubeconfig` (a file for code that loads one), `kube.requests` (the request log),
  `kube.expire_next_watch()`, `kube.fail(...)`, `kube.compact()`, `kube.store` (in-process).
- `kubelet`: the fake controllers and kubelet over the same store; `await kubelet.reconcile()`.
- `kube_clock`: the simulated clock both of them read; only the test advances it.
- `api`, `core`, `apps`: a kubernetes-asyncio client on `kube` (one per test: building one costs
  an SSL context) and its CoreV1 and AppsV1 APIs.

Registered for every test by the root conftest.
"""

import asyncio
import pathlib
from collections.abc import AsyncIterator
from typing import TypeVar

import pytest
from kubernetes_asyncio import client

from .emulator import Emulator, Kube, serve
from .kubelet import FakeClock, FakeCluster
from .store import Store

T = TypeVar("T")


@pytest.fixture
def kube_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def kube(tmp_path: pathlib.Path, kube_clock: FakeClock) -> AsyncIterator[Kube]:
    # strict: an exception inside the emulator fails the test at teardown.
    emulator = Emulator(store=Store(now=kube_clock.datetime), strict=True)
    async with serve(emulator, kubeconfig=tmp_path / "kubeconfig") as running:
        yield running


@pytest.fixture
def kubelet(kube: Kube, kube_clock: FakeClock) -> FakeCluster:
    return FakeCluster(kube.store, clock=kube_clock)


@pytest.fixture
async def api(kube: Kube) -> client.ApiClient:
    return kube.api_client()


@pytest.fixture
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def apps(api: client.ApiClient) -> client.AppsV1Api:
    return client.AppsV1Api(api)


async def wait_next(events: AsyncIterator[T], *, timeout_s: float = 5.0) -> T:
    """The next item of an async iterator (a watch), or TimeoutError after `timeout_s`."""
    async with asyncio.timeout(timeout_s):
        return await anext(events)
