"""The forecast refresh bench's histories: held as the Prometheus adapter holds them."""

from __future__ import annotations

import math

import numpy as np

from autoscaler.core import forecast, model
from bench import forecast_refresh


def test_the_histories_hold_the_stretches_read_in_float32_and_backtest_alike() -> None:
    """A week and seven hours of steps, only the stretches `forecast.reads` names (with a
    refresh of lead) held, in float32, some with gaps; backtested together or one by one, the
    same, most of them on."""
    config = model.ForecastConfig()
    made = forecast_refresh.histories(12, seed=7, holed=0.5, config=config)
    size = round(config.span_s / config.step_s)
    reads = forecast.reads(config, lead_s=config.refresh_s)
    wanted = [(max(0, size + lo), size + hi) for lo, hi in reads if size + hi > 0]
    for history in made:
        assert history.size == size
        assert history.pieces is not None
        assert [(first, first + len(v)) for first, v in history.pieces] == wanted
        assert all(v.dtype == np.float32 for _, v in history.pieces)
    assert any(not np.isfinite(v).all() for h in made for _, v in h.held.pieces)
    now_s = made[0].end_s
    ahead_s = forecast.horizon_s(config, None)
    together = forecast.backtests([(config, h, ahead_s) for h in made], now_s=now_s)
    alone = [
        forecast.backtest(config, forecast_refresh.fresh(h), now_s=now_s, horizon_s=ahead_s)
        for h in made
    ]
    assert together == alone
    assert sum(s.on for s in together) >= len(made) / 2
    assert not math.isnan(together[0].forecast_error_ratio)
