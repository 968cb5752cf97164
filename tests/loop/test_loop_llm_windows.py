"""The loop keeps windows for the LLM signals only for the services that set a target for one."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from autoscaler import clock, loop, ports
from autoscaler.core import model, smoothing

PLAIN_CONFIG = model.PolicyConfig(max_replicas=100, target_load_per_replica=10.0)
KV_CONFIG = model.PolicyConfig(
    max_replicas=100, target_load_per_replica=10.0, target_kv_cache_ratio=0.5
)
PLAIN, LLM = model.ServiceId("ns/plain"), model.ServiceId("ns/llm")
WINDOW = smoothing.SmoothingConfig(window_s=60.0)


class Services:
    """Services at five replicas each, with the policy given for each."""

    def __init__(self, configs: dict[model.ServiceId, model.PolicyConfig]) -> None:
        self.configs = configs

    def workloads(self) -> Sequence[ports.Workload]:
        return [
            ports.Workload(sid, config, half_life_s=math.inf, replicas=5, serving=5)
            for sid, config in self.configs.items()
        ]

    async def scale(self, service: model.ServiceId, replicas: int) -> None:
        return None

    async def publish(
        self, service: model.ServiceId, decision: model.Decision, state: model.PolicyState
    ) -> None:
        return None


class Busy:
    """Every service reports every signal: 20 requests/s and a KV cache 90 % full."""

    async def sample(
        self, workloads: Sequence[ports.Workload], now_s: float
    ) -> npt.NDArray[np.float64]:
        values = np.full((len(workloads), len(model.Signal)), 1.0)
        values[:, model.Signal.LOAD] = 20.0
        values[:, model.Signal.KV_CACHE] = 0.9
        return values


def make_loop(services: Services, the_clock: clock.ManualClock) -> loop.Loop:
    return loop.Loop(cluster=services, metrics=Busy(), clock=the_clock, smoothing_config=WINDOW)


def bytes_per_row(signals: int) -> int:
    """A row's ring: a float64 value and a one-byte mask per signal and slot."""
    return signals * WINDOW.slots * 9


async def test_a_service_without_token_targets_keeps_the_request_signals_windows_only() -> None:
    """A service with no token target holds windows for the three request signals alone, and
    its decision reads no LLM signal even when the server reports them."""
    the_clock = clock.ManualClock(0.0)
    the_loop = make_loop(Services({PLAIN: PLAIN_CONFIG}), the_clock)

    for _ in range(3):
        report = await the_loop.step()
        the_clock.advance(1.0)

    slot_ticks = WINDOW.slots * 8
    assert the_loop.windows_nbytes == bytes_per_row(len(model.BASE_SIGNALS)) + slot_ticks
    assert set(report.decisions[PLAIN].contributions) <= set(model.BASE_SIGNALS)


async def test_a_service_with_a_token_target_gets_its_llm_windows_and_votes() -> None:
    """A service with a KV-cache target gets windows for the LLM signals beside the others',
    and its KV-cache vote reaches the policy; the plain service beside it is unchanged."""
    the_clock = clock.ManualClock(0.0)
    the_loop = make_loop(Services({PLAIN: PLAIN_CONFIG, LLM: KV_CONFIG}), the_clock)

    for _ in range(3):
        report = await the_loop.step()
        the_clock.advance(1.0)

    slot_ticks = WINDOW.slots * 8
    base = 2 * bytes_per_row(len(model.BASE_SIGNALS)) + slot_ticks
    assert the_loop.windows_nbytes == base + bytes_per_row(len(model.LLM_SIGNALS)) + slot_ticks
    kv = report.decisions[LLM].contributions[model.Signal.KV_CACHE]
    assert kv.desired == math.ceil(5 * 0.9 / 0.5)
    assert model.Signal.KV_CACHE not in report.decisions[PLAIN].contributions


async def test_a_service_that_drops_its_token_target_gives_its_llm_row_back() -> None:
    """When the one service with a token target drops it, its LLM row is freed: another
    service that opts in later reuses it rather than growing the buffers."""
    the_clock = clock.ManualClock(0.0)
    services = Services({PLAIN: PLAIN_CONFIG, LLM: KV_CONFIG})
    the_loop = make_loop(services, the_clock)
    await the_loop.step()
    the_clock.advance(1.0)
    held = the_loop.windows_nbytes

    services.configs = {PLAIN: KV_CONFIG, LLM: PLAIN_CONFIG}
    report = await the_loop.step()

    assert the_loop.windows_nbytes == held
    assert report.decisions[PLAIN].contributions[model.Signal.KV_CACHE].desired == 9
    assert model.Signal.KV_CACHE not in report.decisions[LLM].contributions
