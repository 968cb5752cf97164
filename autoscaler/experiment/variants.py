"""HPA and KEDA each run on two signals; the comparison keeps the better one.

A service owner points HPA or KEDA at whichever metric they like. For vLLM the two usual ones are
the request rate (`rate(vllm:request_success_total[...])`) and the concurrency
(`vllm:num_requests_running + vllm:num_requests_waiting`, per pod). The bench runs both variants
of each (`FAMILIES`: the simulator's policies `hpa`, `hpa-conc`, `keda`, `keda-conc`) and, per
scenario and start-up regime, keeps the better (`better`), so neither peer is judged on the
signal that suits it less. The Knative KPA runs on concurrency, its default metric, alone.

It does not simulate: it only chooses among outcomes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar

FAMILIES: dict[str, dict[str, str]] = {
    "hpa": {"rate": "hpa", "concurrency": "hpa-conc"},
    "keda": {"rate": "keda", "concurrency": "keda-conc"},
}
"""Family -> signal -> the simulator's policy name."""

_FAMILY_OF = {
    name: (fam, on) for fam, by_signal in FAMILIES.items() for on, name in by_signal.items()
}
_SIGNAL_OF_OTHERS = {"kpa": "concurrency", "seed": "ours", "default": "ours", "oracle": "trace"}


def family(policy: str) -> str:
    """The family a policy belongs to (`hpa-conc` -> `hpa`); itself when it has no variants."""
    return _FAMILY_OF.get(policy, (policy, ""))[0]


def signal(policy: str) -> str:
    """What the policy scales on: `rate` or `concurrency` for the baselines, `ours` for our
    policies (load, queue and utilisation), `trace` for the oracle."""
    found = _FAMILY_OF.get(policy)
    return found[1] if found is not None else _SIGNAL_OF_OTHERS.get(policy, "")


def label(policy: str) -> str:
    """How a table names the policy: a variant with its signal (`hpa (conc)`), others as is."""
    found = _FAMILY_OF.get(policy)
    if found is None:
        return policy
    name, on = found
    return f"{name} ({'conc' if on == 'concurrency' else on})"


class _Run(Protocol):
    @property
    def slo_miss_pct(self) -> float: ...
    @property
    def gpu_hours(self) -> float: ...


class _Outcome(Protocol):
    @property
    def scenario(self) -> str: ...
    @property
    def regime(self) -> str: ...
    @property
    def policy(self) -> str: ...
    @property
    def default(self) -> _Run: ...
    @property
    def equal_slo(self) -> _Run | None: ...


OutcomeT = TypeVar("OutcomeT", bound=_Outcome)


def rank(outcome: _Outcome) -> tuple[int, float, float, float]:
    """The sort key of `better`, smallest best: a setting that meets the SLO limit first, then
    its equal-SLO GPU-hours; without one, the fewer misses at the default target; then the
    default target's GPU-hours."""
    best = outcome.equal_slo
    default = outcome.default
    if best is not None:
        return (0, best.gpu_hours, default.slo_miss_pct, default.gpu_hours)
    return (1, 0.0, default.slo_miss_pct, default.gpu_hours)


def better(a: OutcomeT, b: OutcomeT) -> OutcomeT:
    """The better of two variants of one peer on one scenario and regime (`rank`); `a` on a tie."""
    return b if rank(b) < rank(a) else a


def best_of(outcomes: Iterable[OutcomeT]) -> tuple[list[OutcomeT], list[OutcomeT]]:
    """The outcomes with each family's variants on one scenario and regime reduced to the better,
    in place of the first of them, and the ones set aside."""
    listed = list(outcomes)
    winners: dict[tuple[str, str, str], OutcomeT] = {}
    for o in listed:
        if o.policy in _FAMILY_OF:
            key = (o.scenario, o.regime, family(o.policy))
            held = winners.get(key)
            winners[key] = o if held is None else better(held, o)
    kept: list[OutcomeT] = []
    aside: list[OutcomeT] = []
    placed: set[tuple[str, str, str]] = set()
    for o in listed:
        if o.policy not in _FAMILY_OF:
            kept.append(o)
            continue
        key = (o.scenario, o.regime, family(o.policy))
        if key not in placed:
            placed.add(key)
            kept.append(winners[key])
        if winners[key] is not o:
            aside.append(o)
    return kept, aside
