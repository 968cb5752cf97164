"""No mesh: the readiness gate alone keeps cold pods out of traffic (docs/architecture.md,
"The warm-up gate and the traffic ramp").

Every call is a no-op and `settled` is always True: a pod gets its share of the Service's
traffic as soon as it is Ready, which the warm-up gate decides. It touches nothing.
"""

from __future__ import annotations

from autoscaler import ports

__all__ = ["NoRouter"]


class NoRouter:
    """`ports.TrafficRouter` for `traffic-router: none`."""

    async def ensure(self, target: ports.RouteTarget) -> None:
        return None

    async def set_weights(self, target: ports.RouteTarget, warming_pct: int) -> None:
        return None

    async def settled(self, target: ports.RouteTarget) -> bool:
        return True

    async def release(self, target: ports.RouteTarget) -> None:
        return None
