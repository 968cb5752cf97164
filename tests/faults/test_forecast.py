"""The seasonal forecast's history gone wrong: hostile range answers, and a history source that
fails or lies while the loop runs. No crash, the forecast off whenever it cannot be trusted, and
the replica decisions carry on.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence

import numpy as np
from prom import stub

from autoscaler import errors, ports
from autoscaler.adapters import prometheus
from autoscaler.core import forecast, model
from autoscaler.experiment import run
from autoscaler.sim import world
from autoscaler.sim.params import SimParams

from .figures import Figures

SERVICE = model.ServiceId("ns/chat")
WALL_S = 1_800_000_000.0
DAY_S = 86_400
PARAMS = SimParams(startup_sigma=0.0, startup_s=60.0, warmup_s=5.0, max_replicas=64)
SEED = 20


def _matrix(values: list[list[object]]) -> str:
    result = [{"metric": {}, "values": values}]
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}})


HOSTILE: dict[str, tuple[int, str, str]] = {
    "html-200": (200, "<html>proxy</html>", "text/html"),
    "not-json": (200, "{", "application/json"),
    "no-result": (200, '{"status":"success","data":{}}', "application/json"),
    "result-not-list": (200, '{"status":"success","data":{"result":{}}}', "application/json"),
    "values-not-list": (200, _matrix([]).replace("[]", '"x"'), "application/json"),
    "bad-pairs": (200, _matrix([[1], ["a", "b"], [None, "1"]]), "application/json"),
    "nan-inf-negative": (
        200,
        _matrix([[WALL_S - 120, "NaN"], [WALL_S - 60, "+Inf"], [WALL_S, "-5"]]),
        "application/json",
    ),
    "off-grid-future": (
        200,
        _matrix([[WALL_S + 3600, "9"], [WALL_S - 1e9, "9"], [WALL_S - 7.5, "1e308"]]),
        "application/json",
    ),
    "503": (503, "unavailable", "text/plain"),
    "422": (422, '{"status":"error","errorType":"execution","error":"x"}', "application/json"),
}


def workloads() -> list[ports.Workload]:
    config = model.PolicyConfig(max_replicas=10, target_load_per_replica=1.0)
    return [
        ports.Workload(
            SERVICE,
            config,
            half_life_s=30.0,
            replicas=2,
            serving=2,
            namespace=SERVICE.split("/", 1)[0],
            deployment=SERVICE.split("/", 1)[1],
            metrics=prometheus.PRESETS["vllm"],
        )
    ]


async def test_hostile_range_answers_never_crash_nor_read_as_load(figures: Figures) -> None:
    """Every hostile answer is an `ObservationError` or a history of NaN and non-negative
    finite values; nothing else escapes."""
    crashes = 0
    for case, (status, body, content_type) in HOSTILE.items():
        async with stub.answering(status, body, content_type) as url:
            source = prometheus.LoadHistory(
                prometheus.Client(url, timeout_s=2.0), wall_now=lambda: WALL_S
            )
            outcome = "history"
            try:
                found = await source.load_history(workloads(), 0.0, span_s=3600.0, step_s=60.0)
            except errors.ObservationError:
                outcome = "observation-error"
            except Exception:  # what the promise is about: counted, then asserted zero
                crashes += 1
                outcome = "crash"
            else:
                values = found[SERVICE].load_per_s
                known = values[np.isfinite(values)]
                assert bool(np.all(known >= 0)), case
                assert float(np.max(known, initial=0.0)) <= prometheus.MAX_HISTORY_RATE, case
            finally:
                await source.client.close()
        figures.record("forecast_hostile_history", answer=case, outcome=outcome)
    assert crashes == 0


class Unreliable:
    """A history source that fails, lies or answers, by a seeded draw at each call."""

    def __init__(self, inner: ports.HistorySource, seed: int) -> None:
        self.inner = inner
        self.rng = np.random.default_rng(seed)
        self.counts = {"fail": 0, "nan": 0, "wrong-step": 0, "true": 0}
        self.draws: list[str] = []

    async def load_history(
        self, workloads: Sequence[ports.Workload], now_s: float, *, span_s: float, step_s: float
    ) -> Mapping[model.ServiceId, forecast.History]:
        draw = ("fail", "nan", "wrong-step", "true")[int(self.rng.integers(4))]
        self.counts[draw] += 1
        self.draws.append(draw)
        if draw == "fail":
            raise errors.ObservationError("Prometheus load history query failed: reset")
        found = await self.inner.load_history(workloads, now_s, span_s=span_s, step_s=step_s)
        if draw == "nan":
            return {
                s: forecast.History(h.start_s, h.step_s, h.load_per_s * np.nan)
                for s, h in found.items()
            }
        if draw == "wrong-step":
            return {
                s: forecast.History(h.start_s, 2 * h.step_s, h.load_per_s) for s, h in found.items()
            }
        return found


class Recording:
    def __init__(self) -> None:
        self.inner = ports.CorePolicy()
        self.decisions: list[model.Decision] = []

    def decide(
        self, workload: ports.Workload, observation: model.Observation, state: model.PolicyState
    ) -> tuple[model.Decision, model.PolicyState]:
        decision, state = self.inner.decide(workload, observation, state)
        self.decisions.append(decision)
        return decision, state


async def test_an_unreliable_history_keeps_the_loop_deciding(figures: Figures) -> None:
    """Over an hour of a daily load with the history failing or lying at random, every tick
    decides, every decision says whether the forecast votes, and a lying history never votes."""
    seconds = np.arange(DAY_S + 7 * 3600, dtype=np.float64)
    rng = np.random.default_rng(SEED)
    rate = 12.0 - 9.0 * np.cos(2 * np.pi * (seconds % DAY_S) / DAY_S)
    past = rng.poisson(rate).astype(np.float64)
    ahead = np.arange(DAY_S + 7 * 3600, DAY_S + 8 * 3600, dtype=np.float64)
    arrivals = rng.poisson(12.0 - 9.0 * np.cos(2 * np.pi * (ahead % DAY_S) / DAY_S))
    sim = world.World(PARAMS)
    sim.add_service(str(SERVICE), arrivals.astype(np.float64), PARAMS, past=past)
    source = Unreliable(sim.metrics, SEED)
    policy = Recording()
    controller = run.loop.Loop(
        cluster=sim.cluster, metrics=sim.metrics, clock=sim.clock, history=source, policy=policy
    )
    await controller.run(until_s=3600.0)
    votes = [d.forecast for d in policy.decisions]
    assert len(votes) == 3600
    assert all(v is not None for v in votes)
    on = sum(1 for v in votes if v is not None and v.on)
    bad = [v for v in votes if v is not None and v.on and not math.isfinite(v.load_per_s)]
    assert not bad
    refresh_s = int(model.ForecastConfig().refresh_s)
    assert len(source.draws) == 3600 // refresh_s
    for block, draw in enumerate(source.draws):
        within = votes[block * refresh_s : (block + 1) * refresh_s]
        if draw in ("nan", "wrong-step"):  # a lying history never votes
            assert not any(v is not None and v.on for v in within), (block, draw)
    figures.record(
        "forecast_unreliable_history",
        seed=SEED,
        ticks=len(votes),
        forecast_on_ticks=on,
        fetches=sum(source.counts.values()),
        failed=source.counts["fail"],
        nan=source.counts["nan"],
        wrong_step=source.counts["wrong-step"],
        crashes=0,
    )
