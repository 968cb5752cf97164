"""The standby pool's size in a simulation, chosen as the controller chooses it (`core.standby`).

`PoolSizer` is fed by the world at every scrape with what the service was sized for (its
desired replicas times the load target per replica) and the load that arrived since the last
scrape (its mean rate: the raw load, which the served rate would hide once the replicas are
full). It keeps the `core.standby.ShortfallTracker` of one service, with the service's observed
start-up as the window (the configured one until a pod has been seen), and answers the pool size
`core.standby.pool_size` gives: a fixed count, or the shortfall's quantile in replicas within
`[0, cap]`.

It must not touch the cluster: the world applies the size it returns.
"""

from __future__ import annotations

from autoscaler.core import standby
from autoscaler.sim.params import StandbyConfig


class PoolSizer:
    """The standby pool size of one simulated service."""

    def __init__(
        self, config: StandbyConfig, *, startup_s: float, target_load_per_replica: float
    ) -> None:
        self.config = config
        self.pool = standby.PoolConfig(
            cap=config.cap,
            fixed=config.fixed,
            quantile=config.quantile,
            min_history_s=config.min_history_s,
        )
        self.tracker = standby.ShortfallTracker(startup_s=startup_s, horizon_s=config.horizon_s)
        self.target_load_per_replica = target_load_per_replica
        self.last = standby.PoolSize(0, float("nan"), "not sized yet")

    def size(
        self,
        now_s: float,
        *,
        desired_replicas: int,
        load_per_s: float,
        startup_s: float | None,
    ) -> int:
        """Records one observation and returns the pool size for now."""
        if startup_s is not None:
            self.tracker.startup_s = startup_s
        self.tracker.record(
            now_s,
            estimate=desired_replicas * self.target_load_per_replica,
            load=load_per_s,
        )
        self.last = standby.pool_size(
            self.pool,
            self.tracker,
            now_s=now_s,
            capacity_per_replica=self.target_load_per_replica,
        )
        return self.last.replicas
