"""Names the simulator can offer for `--policy`, and one factory that builds each baseline.

`make("hpa", target=0.75)` returns a fresh `ports.Policy`; options past the common ones go to the
baseline's constructor (`hpa.Hpa`, `keda.Keda`, `kpa.Kpa`, `oracle.Oracle`):

- `hpa`: `metric`, `not_serving`, `config`.
- `keda`: `metric`, `use_cached_metrics`, `polling_interval_s`, `ignore_null_values`, `config`.
- `kpa`: `metric`, `config`.
- `oracle`: needs `arrivals` (per-second arrival rates, already rate-scaled), `mu` and
  `startup_s` (start-up plus warm-up); `target / mu` is its target utilisation; takes `hold_s`,
  `margin_ratio`, `start_s`.

Pure: building a policy reads nothing and starts nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import numpy.typing as npt

from autoscaler import ports
from autoscaler.baselines import hpa, keda, kpa, oracle

Builder = Callable[..., ports.Policy]


def make(
    name: str,
    *,
    target: float,
    arrivals: npt.ArrayLike | None = None,
    mu: float | None = None,
    startup_s: float | None = None,
    **options: Any,
) -> ports.Policy:
    """A fresh baseline `name` whose target is `target` per replica, in its metric's unit
    (requests per second, or requests in flight with `metric=Metric.CONCURRENCY`)."""
    builder = REGISTRY.get(name)
    if builder is None:
        raise ValueError(f"unknown baseline {name!r}; known: {', '.join(REGISTRY)}")
    return builder(target=target, arrivals=arrivals, mu=mu, startup_s=startup_s, **options)


def _hpa(
    *, target: float, arrivals: object, mu: object, startup_s: object, **options: Any
) -> ports.Policy:
    return hpa.Hpa(target=target, **options)


def _keda(
    *, target: float, arrivals: object, mu: object, startup_s: object, **options: Any
) -> ports.Policy:
    return keda.Keda(target=target, **options)


def _kpa(
    *, target: float, arrivals: object, mu: object, startup_s: object, **options: Any
) -> ports.Policy:
    return kpa.Kpa(target=target, **options)


def _oracle(
    *,
    target: float,
    arrivals: npt.ArrayLike | None,
    mu: float | None,
    startup_s: float | None,
    **options: Any,
) -> ports.Policy:
    if arrivals is None or mu is None or startup_s is None:
        raise ValueError("the oracle needs arrivals, mu and startup_s")
    return oracle.Oracle(
        arrivals, mu=mu, target_utilisation=target / mu, startup_s=startup_s, **options
    )


REGISTRY: Mapping[str, Builder] = MappingProxyType(
    {"hpa": _hpa, "keda": _keda, "kpa": _kpa, "oracle": _oracle}
)
"""Baseline name -> builder taking `target`, `arrivals`, `mu`, `startup_s` and options."""
