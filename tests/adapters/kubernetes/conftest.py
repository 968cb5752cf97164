"""The Kubernetes adapter tests' cluster factory."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client

from autoscaler.adapters.kubernetes import cluster
from autoscaler.clock import ManualClock

from .support import WALL_S, MakeCluster, running


@pytest.fixture
async def make_cluster(api: client.ApiClient) -> AsyncIterator[MakeCluster]:
    """Builds running, synced clusters on the emulator; stops them at the end of the test."""
    stack = contextlib.AsyncExitStack()

    async def make(**kwargs: Any) -> cluster.KubeCluster:
        options: dict[str, Any] = {
            "identity": "autoscaler-0",
            "clock": ManualClock(),
            "wall_now": lambda: WALL_S,
            "rng": random.Random(7),
        }
        options.update(kwargs)
        made = cluster.KubeCluster(api, **options)
        await stack.enter_async_context(running(made.run()))
        async with asyncio.timeout(5):
            await made.wait_synced()
        return made

    async with stack:
        yield make
