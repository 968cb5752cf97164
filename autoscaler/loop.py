"""The control loop: observe (one batched sample per tick) -> decide -> act (only on change).

This is the only module that schedules work. `Loop.step()` runs one tick and never sleeps: it
observes, decides, acts, publishes, lets the ramp driver advance, and ends with the loop's
`chores`, work of the adapters that must not overlap the tick's own writes (the placement
ladder's upkeep). `Loop.run()` repeats it every `tick_s` on the injected `Clock`, on a fixed
grid, for as long as its caller says it may (`active`, the term of leadership), skipping the
ticks whose slot comes while `may_step` says no (a leader whose renewal is late), and tells
each of `on_tick` what the tick did and how long it took (telemetry, the last-tick stamp of
`/healthz`). Nothing else decides when a tick or its upkeep runs.

A service with a warm standby pool (`Workload.ramp.standby`) is decided on its serving
replicas: the pool's replicas, as the ramp driver reports them, are taken off the count the
policy sees and added back on every scale write; `auto` pools are sized each tick from
`core.standby`, fed with the smoothed load estimate, the raw load and the observed start-up.

Each service has its own error boundary: an `AutoscalerError` while acting on one service is
logged and that service keeps its previous state, while the others go on. Anything unexpected
propagates and ends the process.
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, NamedTuple, TypeVar

import numpy as np
import numpy.typing as npt
import structlog

from autoscaler import clock as clock_
from autoscaler import errors, ports
from autoscaler.core import batch, forecast, model, policy, smoothing, standby

log = structlog.get_logger(__name__)

PUBLISH_CONCURRENCY = 16
"""Decisions published (status writes, Events) at once per tick."""
SCALE_CONCURRENCY = 32
"""Scale writes in flight at once. A first tick can scale most of a cluster; unbounded, its
writes took every connection of the client's pool, which the Lease renewals share, and a
renewal that waited past its deadline lost the Lease."""

UNCHANGED_PUBLISHES_PER_TICK = 500
"""Publishes per tick of decisions that set no new count (steady, held): their status and state
writes and Events. A new term's first tick over services that carry no status yet (a first
install) has one to write for every service, thousands at once, and the tick waited for all of
them (about 60 s at 10,000 services): the first tick publishes this many and each later tick
this many more, in the records' order from where the last tick's budget stopped (so that
services whose outcomes move every tick cannot keep the rest waiting), until every one is out.
A decision that sets a new count is always published in its tick, and a service left for later
is published with its decision of the tick that gets to it (the last one's is never written
after it)."""

HISTORY_WAIT_RATIO = 0.5
"""Share of a tick the loop waits for a load-history refresh before going on without it."""
BACKTESTS_PER_SLICE = 256
"""Backtests a history refresh makes between two returns to the event loop, together
(`forecast.backtests`): about 40 ms of work at the compact history's 150 us each."""

OUTAGE_QUIET_S = 10.0
"""How long a loop-wide metrics outage (the whole sample failed: Prometheus down or past its
deadline) goes unpublished per service. Every service holds for missing data from its first
tick, as always; only the status writes and Events wait, so that one slow query does not cost
two writes per service (the hold, then the return), and an outage that lasts is published."""

_PublishKey = tuple[int, model.Kind, model.Reason | None, tuple[int, int, int] | None]

Chore = Callable[[], Awaitable[None]]
"""Work that ends every tick, after the tick's writes. It logs and survives its own failures to
act (`ActuationError`); anything else it raises ends the process, as in the tick itself."""


def _always() -> bool:
    return True


# The base signals lead `Signal`'s order, so their columns are a view, not a copy per tick.
_BASE_COLUMNS = slice(0, len(model.BASE_SIGNALS))
assert tuple(model.Signal)[_BASE_COLUMNS] == model.BASE_SIGNALS
_LLM_COLUMNS = np.asarray(model.LLM_SIGNALS, dtype=np.intp)


def _joined(
    base: dict[model.Signal, model.SignalEstimate],
    llm: dict[model.Signal, model.SignalEstimate] | None,
) -> dict[model.Signal, model.SignalEstimate]:
    if llm is not None:
        base.update(llm)
    return base


@dataclass(frozen=True, slots=True)
class TickReport:
    """What one tick did: for tests, telemetry and the simulator's time series."""

    now_s: float
    decisions: Mapping[model.ServiceId, model.Decision]
    """Every service's decision (a `Decisions` from `Loop.step`: a decision the batch made is
    built when it is read; `brief` reads what every tick needs without building it)."""
    scaled: tuple[model.ServiceId, ...]
    failed: tuple[model.ServiceId, ...]
    metrics_error: str | None = None
    kinds: Counter[model.Kind] = field(default_factory=Counter)
    workloads: Sequence[ports.Workload] = ()
    """The services the tick observed (telemetry exports their settings and counts)."""


class Brief(NamedTuple):
    """What every tick reads of every decision (acting, publishing, telemetry), without the
    words: a decision the batch made is built only when something reads all of it."""

    current: int
    desired: int
    kind: model.Kind
    reason: model.Reason
    cooldown_until_s: float | None
    standby: model.Standby | None

    @classmethod
    def of(cls, decision: model.Decision) -> Brief:
        return cls(
            decision.current,
            decision.desired,
            decision.kind,
            decision.reason,
            decision.cooldown_until_s,
            decision.standby,
        )


def brief(
    decisions: Mapping[model.ServiceId, model.Decision], service: model.ServiceId
) -> Brief | None:
    """The service's decision in brief (None when it has none), built or not."""
    if isinstance(decisions, Decisions):
        return decisions.briefs().get(service)
    decision = decisions.get(service)
    return None if decision is None else Brief.of(decision)


def estimates(
    decisions: Mapping[model.ServiceId, model.Decision], service: model.ServiceId
) -> tuple[tuple[model.Signal, float], ...]:
    """Each vote's `Contribution.estimate` in the service's decision, in its order, built or
    not (nothing when it has no decision)."""
    if isinstance(decisions, Decisions):
        return decisions.estimates(service)
    decision = decisions.get(service)
    if decision is None:
        return ()
    return tuple((signal, vote.estimate) for signal, vote in decision.contributions.items())


def _none(value: float) -> float | None:
    return None if math.isnan(value) else value


_KIND_CODE = {kind: code for code, kind in enumerate(batch.KINDS)}
_REASON_CODE = {reason: code for code, reason in enumerate(batch.REASONS)}
_STEADY = _KIND_CODE[model.Kind.STEADY]
_MISSING_DATA = _REASON_CODE[model.Reason.MISSING_DATA]


class Codes(NamedTuple):
    """Every decision of a tick in a few arrays, one entry per record in their order: what
    every tick compares for every service (what to publish, how many of each kind), read
    without a `Brief` or a `Decision` per service."""

    desired: npt.NDArray[np.int64]
    kind: npt.NDArray[np.int8]
    """Codes into `batch.KINDS`."""
    reason: npt.NDArray[np.int8]
    """Codes into `batch.REASONS`."""
    pools: npt.NDArray[np.int64]
    """The standby pool's size, replicas and waiting pods (three columns), -1 without one."""

    def kinds(self) -> Counter[model.Kind]:
        counts = np.bincount(self.kind, minlength=len(batch.KINDS)).tolist()
        return Counter(
            {kind: count for kind, count in zip(batch.KINDS, counts, strict=True) if count}
        )

    def published(self) -> npt.NDArray[np.int64]:
        """What a publish compares with the last one published, a row per record: the desired
        count, the kind, the reason (-1 when steady: steady outcomes differ only in wording)
        and the pool's counts."""
        reason = np.where(self.kind == _STEADY, -1, self.reason)
        columns = (self.desired[:, None], self.kind[:, None], reason[:, None], self.pools)
        return np.concatenate(columns, axis=1, dtype=np.int64)


class Decisions(Mapping[model.ServiceId, model.Decision]):
    """One tick's decisions, in the order of its records.

    The per-service policy's decisions are held as they came; the batch's (`core.batch`) as its
    arrays, and a service's `Decision`, with its detail and contributions, is built by the
    policy's own steps (`policy.decide_voted`, from the votes the batch cast) on the same
    observation and state when it is first read (the batch decides exactly as `decide` does:
    tests/core/test_batch.py). A tick reads it for the services whose
    count or published outcome changes; `brief` serves the rest.
    """

    def __init__(
        self,
        workloads: Sequence[ports.Workload],
        index: Mapping[model.ServiceId, int],
        observe: Callable[[int], model.Observation],
        pools: Mapping[model.ServiceId, model.Standby],
    ) -> None:
        self._workloads = workloads
        self._index = index
        self._observe = observe
        self._pools = pools
        self._built: dict[model.ServiceId, model.Decision] = {}
        self._slot: list[int] = []
        """Per record: its entry in the batch's arrays, or -1."""
        self._slots: npt.NDArray[np.intp] | None = None
        """The same, as an array."""
        self._codes: Codes | None = None
        self._states: list[model.PolicyState] = []
        self._outcomes: batch.Outcomes | None = None
        self._current: list[int] = []
        self._voting: list[tuple[model.Signal, ...]] = []
        self._briefs: dict[model.ServiceId, Brief] | None = None
        self._voter: batch.Voter | None = None
        self._made = 0

    def add(self, service: model.ServiceId, decision: model.Decision) -> None:
        self._built[service] = decision

    @property
    def workloads(self) -> Sequence[ports.Workload]:
        """The tick's records, in their order."""
        return self._workloads

    @property
    def index(self) -> Mapping[model.ServiceId, int]:
        """Each record's place in `workloads`."""
        return self._index

    @property
    def built(self) -> int:
        """How many of the batch's decisions were built so far (they are built when read)."""
        return self._made

    def add_batch(
        self,
        rows: Sequence[int],
        outcomes: batch.Outcomes,
        *,
        current: Sequence[int],
        states: Sequence[model.PolicyState],
        voting: Sequence[tuple[model.Signal, ...]],
    ) -> None:
        """The batch's outcomes for the records `rows` (indices), decided from `states`."""
        slot = np.full(len(self._workloads), -1, dtype=np.intp)
        slot[np.asarray(rows, dtype=np.intp)] = np.arange(len(rows))
        self._slot, self._slots, self._outcomes = slot.tolist(), slot, outcomes
        self._current, self._states, self._voting = list(current), list(states), list(voting)

    def __getitem__(self, service: model.ServiceId) -> model.Decision:
        built = self._built.get(service)
        if built is not None:
            return built
        i = self._index[service]  # KeyError for a service the tick did not see
        workload, k = self._workloads[i], self._slot[i]
        if self._voter is None:
            assert self._outcomes is not None
            self._voter = batch.Voter(self._outcomes)
        votes = self._voter.votes(k)
        decision, _ = policy.decide_voted(workload.policy, self._observe(i), self._states[k], votes)
        pool = self._pools.get(service)
        if pool is not None:
            decision = dataclasses.replace(decision, standby=pool)
        self._built[service] = decision
        self._made += 1
        return decision

    # Every record of the tick has a decision, one way or the other.
    def __iter__(self) -> Iterator[model.ServiceId]:
        return (workload.id for workload in self._workloads)

    def __len__(self) -> int:
        return len(self._workloads)

    def __contains__(self, service: object) -> bool:
        return service in self._index

    def brief(self, service: model.ServiceId) -> Brief | None:
        return self.briefs().get(service)

    def briefs(self) -> dict[model.ServiceId, Brief]:
        """Every decision in brief, in the order of the records; made once per tick."""
        if self._briefs is not None:
            return self._briefs
        briefs: dict[model.ServiceId, Brief] = {}
        built, pools, out = self._built, self._pools, self._outcomes
        if out is None:
            for workload in self._workloads:
                briefs[workload.id] = Brief.of(built[workload.id])
            self._briefs = briefs
            return briefs
        kinds = [batch.KINDS[code] for code in out.kind.tolist()]
        reasons = [batch.REASONS[code] for code in out.reason.tolist()]
        until = [None if math.isnan(t) else t for t in out.cooldown_until_s.tolist()]
        desired, current, slot = out.desired.tolist(), self._current, self._slot
        if len(current) == len(self._workloads) and not pools:  # every record batched
            made = map(Brief._make, zip(current, desired, kinds, reasons, until, repeat(None)))
            briefs = dict(zip((w.id for w in self._workloads), made, strict=True))
            for service, done in built.items():  # in place: the order stays the records'
                briefs[service] = Brief.of(done)
            self._briefs = briefs
            return briefs
        for i, workload in enumerate(self._workloads):
            service = workload.id
            decision = built.get(service)
            if decision is not None:
                briefs[service] = Brief.of(decision)
                continue
            k = slot[i]
            pool = pools.get(service) if pools else None
            briefs[service] = Brief(current[k], desired[k], kinds[k], reasons[k], until[k], pool)
        self._briefs = briefs
        return briefs

    def codes(self) -> Codes:
        """Every record's outcome as arrays, in the order of the records; made once per tick."""
        if self._codes is not None:
            return self._codes
        n = len(self._workloads)
        desired = np.zeros(n, dtype=np.int64)
        kind = np.zeros(n, dtype=np.int8)
        reason = np.zeros(n, dtype=np.int8)
        out, slots = self._outcomes, self._slots
        if out is not None and slots is not None:
            batched = slots >= 0
            picked = slots[batched]
            desired[batched] = out.desired[picked]
            kind[batched] = out.kind[picked]
            reason[batched] = out.reason[picked]
        index = self._index
        for service, decision in self._built.items():
            i = index[service]
            desired[i] = decision.desired
            kind[i] = _KIND_CODE[decision.kind]
            reason[i] = _REASON_CODE[decision.reason]
        pools = np.full((n, 3), -1, dtype=np.int64)
        for service, pool in self._pools.items():
            at = index.get(service)
            if at is not None:
                pools[at] = (pool.size, pool.replicas, pool.waiting)
        self._codes = Codes(desired, kind, reason, pools)
        return self._codes

    def estimates(self, service: model.ServiceId) -> tuple[tuple[model.Signal, float], ...]:
        """See `estimates`: a batched service's from the batch's arrays."""
        decision = self._built.get(service)
        if decision is not None or self._outcomes is None:
            return estimates(self._built, service)
        i = self._index.get(service)
        if i is None:
            return ()
        k = self._slot[i]
        out = self._outcomes
        values = {
            model.Signal.LOAD: float(out.load_estimate[k]),
            model.Signal.SATURATION: float(out.queue_estimate[k]),
        }
        return tuple((signal, values[signal]) for signal in self._voting[k])


PATCHED_RATIO_DIVISOR = 4
"""The tick's columns are patched where records changed while at most one record in this many
did; past that, made anew (as cheap, and simpler)."""


def _patched(
    last: _Columns, workloads: Sequence[ports.Workload], changed: list[int]
) -> _Columns | None:
    """`last` with the records `changed` (indices) read again; None when a change moves what
    the columns are laid out by (a service's id at that index, whether the batch decides it,
    whether it opts into an LLM signal), and they must be made anew."""
    before = last.workloads
    reconfigured: list[int] = []
    for i in changed:
        was, now = before[i], workloads[i]
        if was.id != now.id:
            return None
        if was.policy is not now.policy:
            if batch.batchable(was.policy) != batch.batchable(now.policy):
                return None
            if bool(was.policy.llm_signals) != bool(now.policy.llm_signals):
                return None
            reconfigured.append(i)
    at = np.asarray(changed, dtype=np.intp)
    half_lives, windows = last.half_lives.copy(), last.windows.copy()
    half_lives[at] = [workloads[i].half_life_s for i in changed]
    windows[at] = [math.nan if (w := workloads[i].window_s) is None else w for i in changed]
    configs, records = last.configs, last.records
    # The changed records among the batched, and their entries in its order.
    slots = np.searchsorted(last.batched, at)
    inside = slots < len(last.batched)
    inside[inside] = last.batched[slots[inside]] == at[inside]
    if bool(inside.any()):
        picked = at[inside].tolist()
        records = records.put(slots[inside].tolist(), _Records.of([workloads[i] for i in picked]))
    if reconfigured:
        mine = np.asarray(reconfigured, dtype=np.intp)
        entries = np.searchsorted(last.batched, mine)
        kept = entries < len(last.batched)
        kept[kept] = last.batched[entries[kept]] == mine[kept]
        if bool(kept.any()):
            policies = [workloads[i].policy for i in mine[kept].tolist()]
            configs = configs.put(entries[kept], batch.Configs.of(policies))
    return _Columns(
        tuple(workloads),
        last.rows,
        half_lives,
        windows,
        last.index,
        last.batched,
        configs,
        records,
        last.opted,
    )


@dataclass(slots=True)
class _Held:
    """The policy states the batch reads, one entry per entry of `ids` (the batched records),
    kept from tick to tick: an entry is read again only when its service's state was written
    since, or while it has none of its own (its record's, or a new one, stands in)."""

    ids: tuple[model.ServiceId, ...]
    slot: dict[model.ServiceId, int]
    states: list[model.PolicyState]
    unknown: npt.NDArray[np.bool_]
    """No state of the loop's own yet."""
    paused: npt.NDArray[np.bool_]
    last_scale_up_s: npt.NDArray[np.float64]
    last_scale_change_s: npt.NDArray[np.float64]
    burst_until_s: npt.NDArray[np.float64]

    @classmethod
    def of(cls, ids: tuple[model.ServiceId, ...]) -> _Held:
        """Entries for `ids` with nothing read yet: the next `update` reads every one."""
        n = len(ids)
        return cls(
            ids,
            {service: k for k, service in enumerate(ids)},
            [model.PolicyState()] * n,
            np.ones(n, dtype=np.bool_),
            np.zeros(n, dtype=np.bool_),
            np.full(n, math.nan),
            np.full(n, math.nan),
            np.full(n, math.nan),
        )

    def update(
        self,
        written: Iterable[model.ServiceId],
        known: Mapping[model.ServiceId, model.PolicyState],
        workloads: Sequence[ports.Workload],
        rows: npt.NDArray[np.intp],
    ) -> None:
        """Read again the entries of the services `written` and those with no state of their
        own; `rows` are the records of the entries, in `workloads`."""
        slot = self.slot
        stale = {k for service in written if (k := slot.get(service)) is not None}
        stale.update(np.flatnonzero(self.unknown).tolist())
        for k in stale:
            found = known.get(self.ids[k])
            state = found or workloads[int(rows[k])].state or model.PolicyState()
            self.states[k] = state
            self.unknown[k] = found is None
            self.paused[k] = state.paused_s is not None
            self.last_scale_up_s[k] = _nan(state.last_scale_up_s)
            self.last_scale_change_s[k] = _nan(state.last_scale_change_s)
            self.burst_until_s[k] = _nan(state.burst_until_s)


def _nan(value: float | None) -> float:
    return math.nan if value is None else value


@dataclass(frozen=True, slots=True)
class _Published:
    """The last tick's outcomes as its publish compared them (`Codes.published`), and which of
    them stood published when it ended, for records laid out by `layout` (the tick's index)."""

    layout: Mapping[model.ServiceId, int]
    keys: npt.NDArray[np.int64]
    settled: npt.NDArray[np.bool_]


OnTick = Callable[[TickReport, float], None]
"""Told each tick's report and how long the tick took, in seconds of the loop's `timer`."""


@dataclass(slots=True)
class _Seasonal:
    """One service's load history, its backtest, and the vote for the current step."""

    history: forecast.History
    scored: forecast.Backtest
    key: tuple[int, int] | None = None
    vote: model.ForecastVote | None = None


@dataclass(slots=True)
class _Votes:
    """The last tick's forecast votes, one entry per record with a forecast (`configured`, in
    order), and what each vote's step is read from, so that a tick finds at once the few
    votes whose step or target step moved (`due`): a vote changes only then, or when its
    record, the histories or their error do."""

    configured: list[ports.Workload]
    seasonal: Mapping[model.ServiceId, _Seasonal]
    """The histories the votes were read from (the object, replaced by each refresh)."""
    error: str | None
    start_s: npt.NDArray[np.float64]
    """Each history's start; NaN for a record without one (its vote waits for a history)."""
    step_s: npt.NDArray[np.float64]
    size: npt.NDArray[np.float64]
    ahead_s: npt.NDArray[np.float64]
    key: npt.NDArray[np.float64]
    """Each vote's `_Seasonal.key`: its history's completed steps and its target step."""
    votes: dict[model.ServiceId, model.ForecastVote]

    @classmethod
    def of(
        cls,
        configured: list[ports.Workload],
        seasonal: Mapping[model.ServiceId, _Seasonal],
        error: str | None,
    ) -> _Votes:
        n = len(configured)
        return cls(
            configured,
            seasonal,
            error,
            np.full(n, math.nan),
            np.ones(n),
            np.zeros(n),
            np.zeros(n),
            np.full((n, 2), math.nan),
            {},
        )

    def due(self, now: float) -> list[int]:
        """The entries whose key (`Loop._votes_of`', the same arithmetic) is not the last."""
        start, step = self.start_s, self.step_s
        completed = np.clip(np.floor((now - start) / step + forecast._EPS), 0, self.size)
        target = np.floor((now + self.ahead_s - start) / step)
        moved = (completed != self.key[:, 0]) | (target != self.key[:, 1])
        moved &= ~np.isnan(start)
        return np.flatnonzero(moved).tolist()

    def put(
        self,
        k: int,
        workload: ports.Workload,
        voted: tuple[model.ForecastVote, forecast.History | None, float],
    ) -> None:
        vote, history, ahead = voted
        self.configured[k] = workload
        self.votes[workload.id] = vote
        if history is None:
            self.start_s[k] = math.nan
            return
        self.start_s[k], self.step_s[k] = history.start_s, history.step_s
        self.size[k], self.ahead_s[k] = history.size, ahead
        seasonal = self.seasonal[workload.id]
        self.key[k] = (math.nan, math.nan) if seasonal.key is None else seasonal.key


_Column = TypeVar("_Column", bound=np.ndarray[Any, Any])


def _put(column: _Column, at: npt.NDArray[np.intp], values: _Column) -> _Column:
    out = column.copy()
    out[at] = values
    return out


@dataclass(frozen=True, slots=True)
class _Records:
    """What the batch reads of the records it decides, one entry per record of `batched`."""

    replicas: npt.NDArray[np.int64]
    serving: npt.NDArray[np.int64]
    startup_s: npt.NDArray[np.float64]
    admissible: npt.NDArray[np.int64]
    no_placement: npt.NDArray[np.bool_]
    voting: tuple[tuple[model.Signal, ...], ...]
    """The signals that vote (those with a target), in the policy's order."""
    ids: tuple[model.ServiceId, ...]

    @classmethod
    def of(cls, workloads: Sequence[ports.Workload]) -> _Records:
        n = len(workloads)
        return cls(
            np.fromiter((w.replicas for w in workloads), np.int64, n),
            np.fromiter((w.serving for w in workloads), np.int64, n),
            np.fromiter(
                (math.nan if w.startup_s is None else w.startup_s for w in workloads), float, n
            ),
            np.fromiter(
                (-1 if w.admissible is None else w.admissible for w in workloads), np.int64, n
            ),
            np.fromiter(
                (w.admissible_reason is model.Reason.NO_PLACEMENT for w in workloads), np.bool_, n
            ),
            tuple(
                tuple(s for s in model.PRIMARY_SIGNALS if w.policy.target(s) is not None)
                for w in workloads
            ),
            tuple(w.id for w in workloads),
        )

    def put(self, at: Sequence[int], records: _Records) -> _Records:
        """A copy with the entries `at` replaced by those of `records`, in their order."""
        where = np.asarray(at, dtype=np.intp)
        voting = list(self.voting)
        for k, i in enumerate(at):
            voting[i] = records.voting[k]
        # The services stay the same ones (`_patched`): the same tuple, so that what is kept
        # per service from tick to tick (`_Held`) knows it still holds.
        assert all(self.ids[i] == records.ids[k] for k, i in enumerate(at))
        return _Records(
            _put(self.replicas, where, records.replicas),
            _put(self.serving, where, records.serving),
            _put(self.startup_s, where, records.startup_s),
            _put(self.admissible, where, records.admissible),
            _put(self.no_placement, where, records.no_placement),
            tuple(voting),
            self.ids,
        )

    def take(self, rows: npt.NDArray[np.intp]) -> _Records:
        return _Records(
            self.replicas[rows],
            self.serving[rows],
            self.startup_s[rows],
            self.admissible[rows],
            self.no_placement[rows],
            tuple(self.voting[k] for k in rows.tolist()),
            tuple(self.ids[k] for k in rows.tolist()),
        )


@dataclass(frozen=True, slots=True)
class _Columns:
    """What the smoothing reads of a tick's records, one entry per record, in their order."""

    workloads: tuple[ports.Workload, ...]
    rows: npt.NDArray[np.intp]
    half_lives: npt.NDArray[np.float64]
    windows: npt.NDArray[np.float64]
    """Seconds; NaN for the loop's own window."""
    index: dict[model.ServiceId, int]
    batched: npt.NDArray[np.intp]
    """The records whose configuration the batch decides (`batch.batchable`)."""
    configs: batch.Configs
    """Their configurations, in the order of `batched`."""
    records: _Records
    opted: tuple[int, ...]
    """The records that set a target for an LLM signal."""


class Loop:
    def __init__(
        self,
        *,
        cluster: ports.Cluster,
        metrics: ports.MetricsSource,
        clock: clock_.Clock,
        policy: ports.Policy | None = None,
        smoothing_config: smoothing.SmoothingConfig | None = None,
        ramps: ports.Ramps | None = None,
        history: ports.HistorySource | None = None,
        chores: Sequence[Chore] = (),
        on_tick: Sequence[OnTick] = (),
        timer: Callable[[], float] = time.perf_counter,
        outage_quiet_s: float = OUTAGE_QUIET_S,
        unchanged_publishes_per_tick: int = UNCHANGED_PUBLISHES_PER_TICK,
    ) -> None:
        """`chores` end every tick, in order; `on_tick` are told of every tick `run` runs, with
        its duration by `timer` (a high-resolution clock: the tick's cost, not policy time).
        `outage_quiet_s`: see `OUTAGE_QUIET_S`; `unchanged_publishes_per_tick`: see
        `UNCHANGED_PUBLISHES_PER_TICK`."""
        self.cluster = cluster
        self.metrics = metrics
        self.clock = clock
        self.ramps = ramps
        """The ramp driver: when set, it takes the scale writes (draining before a scale-down)
        and advances the warm-up gate and the traffic ramp at the end of every tick."""
        self.history = history
        """The load history for the seasonal forecast; without it the forecast is off."""
        self.policy: ports.Policy = policy or ports.CorePolicy()
        self.smoothing_config = smoothing_config or smoothing.SmoothingConfig()
        self._windows = smoothing.Windows(self.smoothing_config)
        # The LLM signals' windows hold rows only for services that set a target for one of
        # them, and exist only once one does: the others cost what they did without them.
        self._llm_windows: smoothing.Windows | None = None
        self._states: dict[model.ServiceId, model.PolicyState] = {}
        self._published: dict[model.ServiceId, _PublishKey] = {}
        self._publish_last: _Published | None = None
        self._publish_resume: model.ServiceId | None = None
        """The first service whose unchanged outcome the last tick's publish budget left out:
        the next tick's budget begins there (`UNCHANGED_PUBLISHES_PER_TICK`)."""
        self._held: _Held | None = None
        self._written: set[model.ServiceId] = set()
        """The services whose state was written (or dropped) since the batch last read them."""
        self._metrics_down_s: float | None = None
        """When the metrics outage under way began; None while they answer."""
        self.outage_quiet_s = outage_quiet_s
        self.unchanged_publishes_per_tick = max(1, unchanged_publishes_per_tick)
        self.chores = tuple(chores)
        self.on_tick = tuple(on_tick)
        self._timer = timer
        self._seasonal: dict[model.ServiceId, _Seasonal] = {}
        self._history_due_s: float | None = None
        self._refresh: asyncio.Future[None] | None = None
        self._first_refresh: tuple[Sequence[ports.Workload], float] | None = None
        """The history's first fetch, asked for by the first tick and started once that tick
        has published (`_await_history`)."""
        self._history_error: str | None = None
        self._votes: _Votes | None = None
        """The last tick's forecast votes, kept while the same services come back."""
        self._shortfalls: dict[model.ServiceId, standby.ShortfallTracker] = {}
        """How far the load outran the estimate within one start-up, per service whose pool
        is sized automatically."""
        self._last_columns: _Columns | None = None

    @property
    def tick_s(self) -> float:
        return self.smoothing_config.tick_s

    def state_of(self, service: model.ServiceId) -> model.PolicyState | None:
        return self._states.get(service)

    @property
    def windows_nbytes(self) -> int:
        """Bytes the smoothing windows hold, the LLM signals' included."""
        llm = self._llm_windows
        return self._windows.nbytes + (0 if llm is None else llm.nbytes)

    async def step(self) -> TickReport:
        """Run one tick: sample every managed service once, decide each, act on changes."""
        now = self.clock.now()
        workloads = self.cluster.workloads()
        columns = self._columns(workloads)
        rows = columns.rows

        metrics_error: str | None = None
        try:
            values = await self.metrics.sample(workloads, now)
        except errors.ObservationError as e:
            # Recorded as missing, never as zero: every service holds and says why.
            metrics_error = str(e)
            values = np.full((len(workloads), len(model.Signal)), np.nan)
            if self._metrics_down_s is None:  # once per outage, not once per tick
                log.warning("metrics.unavailable", error=metrics_error)
                self._metrics_down_s = now
        else:
            if self._metrics_down_s is not None:
                log.info("metrics.recovered")
            self._metrics_down_s = None
        quiet = (
            self._metrics_down_s is not None and now - self._metrics_down_s < self.outage_quiet_s
        )
        self._windows.record(now, rows, values[:, _BASE_COLUMNS])
        smoothed = self._windows.estimate(now, rows, columns.half_lives, columns.windows)
        estimates = smoothed.rows()
        llm_estimates = self._llm_estimates(
            workloads, now, values, columns.half_lives, columns.windows, columns.opted
        )
        forecasts = await self._forecasts(workloads, now)
        pools = self._pools(workloads, now, values, estimates)

        def observe(i: int) -> model.Observation:
            workload = workloads[i]
            pool = pools.get(workload.id)
            return model.Observation(
                now_s=now,
                # The policy decides the serving replicas; the pool is counted on top.
                replicas=workload.replicas - (0 if pool is None else pool.replicas),
                serving=workload.serving,
                signals=_joined(estimates[i], llm_estimates.get(i)),
                startup_s=workload.startup_s,
                admissible=workload.admissible,
                admissible_reason=workload.admissible_reason,
                forecast=forecasts.get(workload.id),
            )

        decisions = Decisions(workloads, columns.index, observe, pools)
        pending: dict[model.ServiceId, model.PolicyState] = {}
        rest = self._decide_batch(now, columns, smoothed, forecasts, pools, decisions, pending)
        for i in rest:
            workload = workloads[i]
            observation = observe(i)
            state = self._states.get(workload.id) or workload.state or model.PolicyState()
            decision, next_state = self.policy.decide(workload, observation, state)
            pool = pools.get(workload.id)
            if pool is not None:
                decision = dataclasses.replace(decision, standby=pool)
            decisions.add(workload.id, decision)
            if decision.changes:
                pending[workload.id] = next_state
            else:
                self._states[workload.id] = next_state
                self._written.add(workload.id)
        if rest and pending:  # the writes go out in the records' order, as they always have
            order = columns.index
            pending = {s: pending[s] for s in sorted(pending, key=order.__getitem__)}

        scaled, failed = await self._act(workloads, decisions, pending)
        await self._publish(decisions, failed, scaled=scaled, outage_quiet=quiet)
        if self.ramps is not None:
            sizes = {service: pool.size for service, pool in pools.items()}
            await self.ramps.reconcile(now, workloads, standby=sizes)
        for chore in self.chores:
            await chore()
        if self._first_refresh is not None:
            self._refresh = asyncio.ensure_future(self._refresh_history(*self._first_refresh))
            self._first_refresh = None
            await asyncio.sleep(0)  # under way before the tick ends, as a tick's start was
        kinds = decisions.codes().kinds()
        return TickReport(now, decisions, scaled, failed, metrics_error, kinds, workloads)

    def _decide_batch(
        self,
        now: float,
        columns: _Columns,
        smoothed: smoothing.Estimates,
        forecasts: Mapping[model.ServiceId, model.ForecastVote],
        pools: Mapping[model.ServiceId, model.Standby],
        decisions: Decisions,
        pending: dict[model.ServiceId, model.PolicyState],
    ) -> Sequence[int]:
        """Decide with `core.batch` every service it can decide exactly, into `decisions` and
        the states (as the per-service path does: `pending` while a change is written); return
        the indices of the records left to the per-service policy."""
        workloads = columns.workloads
        every = range(len(workloads))
        rows = columns.batched
        if type(self.policy) is not ports.CorePolicy or not len(rows):
            return every
        configs, records = columns.configs, columns.records
        ids = records.ids
        held = self._held
        if held is None or held.ids is not ids:
            held = self._held = _Held.of(ids)
        held.update(self._written, self._states, workloads, rows)
        self._written.clear()
        states = held.states
        unknown, up_s, change_s, burst_s = (
            held.unknown,
            held.last_scale_up_s,
            held.last_scale_change_s,
            held.burst_until_s,
        )
        usable = ~held.paused
        if forecasts:
            for k, service in enumerate(ids):
                vote = forecasts.get(service)
                if vote is not None and vote.on:
                    usable[k] = False
        if not bool(usable.all()):  # a pause ends, or a seasonal vote is on: `policy.decide` knows
            kept = np.flatnonzero(usable)
            rows, configs, records = rows[kept], configs.take(kept), records.take(kept)
            states = [states[k] for k in kept.tolist()]
            unknown, up_s, change_s, burst_s = (
                unknown[kept],
                up_s[kept],
                change_s[kept],
                burst_s[kept],
            )
        replicas = records.replicas
        if pools:
            replicas = replicas.copy()
            for k, i in enumerate(rows.tolist()):
                pool = pools.get(workloads[i].id)
                if pool is not None:
                    replicas[k] -= pool.replicas
        inputs = batch.Inputs(
            now_s=now,
            replicas=replicas,
            serving=records.serving,
            startup_s=records.startup_s,
            admissible=records.admissible,
            no_placement=records.no_placement,
            mean=smoothed.mean[rows],
            trend_per_s=smoothed.trend_per_s[rows],
            trend_stderr_per_s=smoothed.trend_stderr_per_s[rows],
            mean_age_s=smoothed.mean_age_s[rows],
            burst_mean=smoothed.burst_mean[rows],
            last=smoothed.last[rows],
            fresh=smoothed.fresh[rows],
            last_scale_up_s=up_s,
            last_scale_change_s=change_s,
            burst_until_s=burst_s,
        )
        out = batch.decide(configs, inputs)
        exact = out.exact
        decided = rows[exact]
        decisions.add_batch(
            rows.tolist(), out, current=replicas.tolist(), states=states, voting=records.voting
        )
        changes = out.desired != replicas
        touched = exact & (changes | out.changed_state | unknown)
        changed_state = out.changed_state.tolist()
        last_up, last_change = out.last_scale_up_s.tolist(), out.last_scale_change_s.tolist()
        burst_until, changes_list = out.burst_until_s.tolist(), changes.tolist()
        for k in np.flatnonzero(touched).tolist():
            service = workloads[int(rows[k])].id
            state = states[k]
            if changed_state[k]:
                state = dataclasses.replace(
                    state,
                    last_scale_up_s=_none(last_up[k]),
                    last_scale_change_s=_none(last_change[k]),
                    burst_until_s=_none(burst_until[k]),
                )
            if changes_list[k]:
                pending[service] = state
            else:
                self._states[service] = state
                self._written.add(service)
        if len(decided) == len(workloads):
            return ()
        left = np.ones(len(workloads), dtype=np.bool_)
        left[decided] = False
        return np.flatnonzero(left).tolist()

    async def run(
        self,
        *,
        until_s: float | None = None,
        active: Callable[[], bool] = _always,
        may_step: Callable[[], bool] = _always,
    ) -> None:
        """Tick every `tick_s` until `until_s` on the clock (forever when None), or until
        `active()` is false when a tick is due.

        Ticks are scheduled on a fixed grid, starting now: a slow tick shortens the next wait
        rather than shifting every later tick. A tick whose slot comes while `may_step()` is
        false is skipped, and the grid kept. After each tick, each of `on_tick` is told.
        """
        next_tick = self.clock.now()
        while (until_s is None or self.clock.now() < until_s) and active():
            if may_step():
                started = self._timer()
                report = await self.step()
                duration_s = self._timer() - started
                for hook in self.on_tick:
                    hook(report, duration_s)
            next_tick += self.tick_s
            now = self.clock.now()
            if next_tick < now:  # overran: skip the missed ticks, keep the grid
                next_tick += math.ceil((now - next_tick) / self.tick_s) * self.tick_s
            await self.clock.sleep(next_tick - now)

    async def _act(
        self,
        workloads: Sequence[ports.Workload],
        decisions: Mapping[model.ServiceId, model.Decision],
        pending: dict[model.ServiceId, model.PolicyState],
    ) -> tuple[tuple[model.ServiceId, ...], tuple[model.ServiceId, ...]]:
        failed: list[model.ServiceId] = []
        records = (  # the ramp driver's writes read the record
            {w.id: w for w in workloads if w.id in pending}
            if pending and self.ramps is not None
            else {}
        )

        slots = asyncio.Semaphore(SCALE_CONCURRENCY)

        async def scale(service: model.ServiceId) -> None:
            decision = decisions[service]
            try:
                async with slots:
                    if self.ramps is not None:
                        pool = decision.standby
                        await self.ramps.scale(
                            records[service],
                            decision.desired,
                            decision.current,
                            standby=None if pool is None else pool.size,
                        )
                    else:
                        await self.cluster.scale(service, decision.desired)
            except errors.ActuationError as e:
                # The policy state is not advanced: the next tick decides again.
                failed.append(service)
                log.warning("scale.failed", service=service, desired=decision.desired, error=str(e))
                return
            self._states[service] = pending[service]
            self._written.add(service)
            log.info(
                "scale.applied",
                service=service,
                replicas=decision.desired,
                previous=decision.current,
                reason=decision.reason.value,
            )

        if len(pending) == 1:
            await scale(next(iter(pending)))
        elif pending:
            async with asyncio.TaskGroup() as group:
                for service in pending:
                    group.create_task(scale(service))
        done = tuple(s for s in pending if s not in failed)
        return done, tuple(failed)

    async def _publish(
        self,
        decisions: Decisions,
        failed: Sequence[model.ServiceId],
        *,
        scaled: Collection[model.ServiceId] = (),
        outage_quiet: bool = False,
    ) -> None:
        """Publish the decisions whose outcome changed: every one that set a new count
        (`scaled`), and at most `unchanged_publishes_per_tick` of the others (see
        `UNCHANGED_PUBLISHES_PER_TICK`); with `outage_quiet`, not the holds for missing data
        (see `OUTAGE_QUIET_S`)."""
        # Steady outcomes differ only in wording (in the deadband, at the desired count):
        # flipping between them under noise is not news worth a write. Only the services whose
        # outcome moved since the last tick, or whose last one is not published yet, are looked
        # at one by one: the others' last publish stands.
        codes = decisions.codes()
        keys = codes.published()
        records = decisions.workloads
        last = self._publish_last
        if last is not None and last.layout is decisions.index:
            moved = ~last.settled | (keys != last.keys).any(axis=1)
            candidates: Sequence[int] = np.flatnonzero(moved).tolist()
            settled = last.settled.copy()
        else:
            candidates = range(len(records))
            settled = np.zeros(len(records), dtype=np.bool_)
        # The budget's turn goes round: the candidates are looked at from the first service
        # the budget left out last time, so services early in the order whose outcomes move
        # every tick cannot keep the later ones waiting.
        resume = self._publish_resume
        start = decisions.index.get(resume) if resume is not None else None
        if start:
            cut = bisect.bisect_left(candidates, start)
            candidates = [*candidates[cut:], *candidates[:cut]]
        self._publish_resume = None
        failing = set(failed)
        new_counts = set(scaled)
        published = self._published
        reasons = codes.reason
        changed: list[tuple[int, model.ServiceId, model.Decision, _PublishKey]] = []
        # Left unsettled, a service over the budget is a candidate again next tick.
        unchanged_left = self.unchanged_publishes_per_tick
        for i, (want, kind, reason, size, replicas, waiting) in zip(
            candidates, keys[candidates].tolist(), strict=True
        ):
            service = records[i].id
            key = (
                want,
                batch.KINDS[kind],
                None if reason < 0 else batch.REASONS[reason],
                None if size < 0 else (size, replicas, waiting),
            )
            if published.get(service) == key:
                settled[i] = True
                continue
            settled[i] = False
            if service in failing or (outage_quiet and reasons[i] == _MISSING_DATA):
                continue
            if service not in new_counts:
                if not unchanged_left:
                    if self._publish_resume is None:
                        self._publish_resume = service
                    continue
                unchanged_left -= 1
            changed.append((i, service, decisions[service], key))
        self._publish_last = _Published(decisions.index, keys, settled)
        if not changed:
            return
        # Writes go out a few at a time: one by one, a controller that takes over a thousand
        # services spends seconds on its first tick; all at once would flood the API server.
        slots = asyncio.Semaphore(PUBLISH_CONCURRENCY)

        async def publish(
            service: model.ServiceId, decision: model.Decision, key: _PublishKey
        ) -> None:
            async with slots:
                try:
                    await self.cluster.publish(service, decision, self._states[service])
                except errors.ActuationError as e:
                    log.warning("decision.unpublished", service=service, error=str(e))
                    return
            self._published[service] = key
            log.info(
                "decision.made",
                service=service,
                kind=decision.kind.value,
                reason=decision.reason.value,
                current=decision.current,
                desired=decision.desired,
                detail=decision.detail,
            )

        if len(changed) == 1:
            await publish(*changed[0][1:])
        else:
            async with asyncio.TaskGroup() as group:
                for _, service, decision, key in changed:
                    group.create_task(publish(service, decision, key))
        for i, service, _, key in changed:
            settled[i] = published.get(service) == key

    def _pools(
        self,
        workloads: Sequence[ports.Workload],
        now: float,
        values: np.ndarray[tuple[int, int], np.dtype[np.float64]],
        estimates: smoothing.Rows,
    ) -> dict[model.ServiceId, model.Standby]:
        """The standby pool of every service that has one (or had one: its pods still count),
        sized for this tick: a fixed count, or `core.standby`'s automatic size from the
        shortfall of the smoothed load estimate against the raw load within one start-up (the
        pool found kept while that history is too short to size it)."""
        if self.ramps is None:
            return {}
        pools: dict[model.ServiceId, model.Standby] = {}
        load = model.Signal.LOAD
        for i, workload in enumerate(workloads):
            target = workload.ramp
            if target is None:
                continue
            config = target.standby
            now_pool = self.ramps.standby(workload)
            if config.fixed == 0 and now_pool.replicas == 0 and now_pool.waiting == 0:
                continue
            tracker = None
            if config.fixed is None:
                startup_s = workload.startup_s or model.LookaheadConfig().default_startup_s
                tracker = self._shortfalls.get(workload.id)
                if tracker is None:
                    tracker = self._shortfalls[workload.id] = standby.ShortfallTracker(
                        startup_s=startup_s
                    )
                tracker.startup_s = startup_s
                tracker.record(
                    now, estimate=estimates[i][load].mean, load=float(values[i, int(load)])
                )
            else:
                self._shortfalls.pop(workload.id, None)
            capacity = workload.policy.target(load)
            size = standby.pool_size(
                config,
                tracker or standby.ShortfallTracker(startup_s=0.0),
                now_s=now,
                capacity_per_replica=math.nan if capacity is None else capacity,
            )
            replicas, why = size.replicas, size.why
            if tracker is not None and tracker.history_s(now) < config.min_history_s:
                # A new leader (or a restart) starts with no history: the pool it finds stays
                # until the history can size it, rather than be drained and grown back.
                kept = min(now_pool.replicas, config.cap)
                if kept > replicas:
                    replicas, why = kept, f"kept at {kept} while {why}"
            pools[workload.id] = dataclasses.replace(now_pool, size=replicas, why=why)
        return pools

    async def _forecasts(
        self, workloads: Sequence[ports.Workload], now: float
    ) -> dict[model.ServiceId, model.ForecastVote]:
        """The seasonal forecast's vote for every workload that has one configured. The history
        is fetched and backtested every `refresh_s`, not every tick."""
        configured = [w for w in workloads if w.policy.forecast is not None]
        if not configured:
            self._votes = None
            return {}
        if self.history is None:
            off = model.ForecastVote.off("no load history source")
            return {w.id: off for w in configured}
        await self._await_history(configured, now)
        last = self._votes
        if (
            last is not None
            and last.seasonal is self._seasonal
            and last.error == self._history_error
            and len(last.configured) == len(configured)
        ):
            changed = [
                k
                for k, (was, record) in enumerate(zip(last.configured, configured, strict=True))
                if was is not record
            ]
            if all(last.configured[k].id == configured[k].id for k in changed):
                # The same services in the same order: only the records made again and the
                # votes whose step, or target step, moved are looked at one by one.
                last.configured = configured
                due = sorted({*changed, *last.due(now)})
                made = self._votes_of([configured[k] for k in due], now)
                for k, voted in zip(due, made, strict=True):
                    last.put(k, configured[k], voted)
                return last.votes
        votes = _Votes.of(configured, self._seasonal, self._history_error)
        for k, (workload, voted) in enumerate(
            zip(configured, self._votes_of(configured, now), strict=True)
        ):
            votes.put(k, workload, voted)
        self._votes = votes
        return votes.votes

    def _votes_of(
        self, workloads: Sequence[ports.Workload], now: float
    ) -> list[tuple[model.ForecastVote, forecast.History | None, float]]:
        """The seasonal forecast's vote for each of `workloads`, the history it read (None
        without one) and how far ahead it looked. The votes whose step moved are made
        together (`forecast.votes`): every minute, that is every service whose forecast is
        on."""
        seasonals: list[tuple[_Seasonal, float] | None] = []
        due: list[tuple[_Seasonal, tuple[int, int]]] = []
        jobs: list[forecast.VoteJob] = []
        for workload in workloads:
            config = workload.policy.forecast
            assert config is not None
            seasonal = self._seasonal.get(workload.id)
            if seasonal is None:
                seasonals.append(None)
                continue
            ahead = forecast.horizon_s(config, workload.startup_s)
            history = seasonal.history
            # The vote changes only when the forecast's step or its target step does.
            key = (
                history.completed(now),
                math.floor((now + ahead - history.start_s) / history.step_s),
            )
            if seasonal.key != key or seasonal.vote is None:
                due.append((seasonal, key))
                jobs.append((config, history, seasonal.scored, ahead))
            seasonals.append((seasonal, ahead))
        for (seasonal, key), vote in zip(due, forecast.votes(jobs, now_s=now), strict=True):
            seasonal.vote, seasonal.key = vote, key
        out: list[tuple[model.ForecastVote, forecast.History | None, float]] = []
        for one in seasonals:
            if one is None:
                why = self._history_error or "no load history"
                out.append((model.ForecastVote.off(why), None, math.nan))
                continue
            seasonal, ahead = one
            assert seasonal.vote is not None
            out.append((seasonal.vote, seasonal.history, ahead))
        return out

    async def _await_history(self, workloads: Sequence[ports.Workload], now: float) -> None:
        """Start a refresh when one is due and wait for it at most `HISTORY_WAIT_RATIO` of a
        tick: days of history for many services can take seconds to fetch, and the tick must
        not wait for them (the votes use the last history meanwhile).

        The first fetch is not started by the first tick but once it has published: at
        thousands of services it is thousands of range queries, which took the event loop
        and Prometheus from the first tick's own queries and writes for tens of seconds, and
        it cannot be done within the wait anyway. The first tick votes without a history (as
        it would have while the fetch ran); the next one looks whether it has finished."""
        first = self._history_due_s is None
        due = self._history_due_s is None or now >= self._history_due_s
        if due and self._refresh is None:
            configs = [w.policy.forecast for w in workloads if w.policy.forecast is not None]
            self._history_due_s = now + min(c.refresh_s for c in configs)
            if first:
                self._first_refresh = (workloads, now)
                return
            self._refresh = asyncio.ensure_future(self._refresh_history(workloads, now))
            # Only the tick that starts it waits; later ones look whether it has finished.
            await asyncio.wait({self._refresh}, timeout=HISTORY_WAIT_RATIO * self.tick_s)
        if self._refresh is None:
            return
        if self._refresh.done():
            refresh, self._refresh = self._refresh, None
            refresh.result()  # anything unexpected ends the process, as in the tick itself

    async def _refresh_history(self, workloads: Sequence[ports.Workload], now: float) -> None:
        assert self.history is not None
        configs = [w.policy.forecast for w in workloads if w.policy.forecast is not None]
        try:
            histories = await self.history.load_history(
                workloads,
                now,
                span_s=max(c.span_s for c in configs),
                step_s=configs[0].step_s,
            )
        except errors.ObservationError as e:
            # The last history and its backtest stay: a day-old pattern is still a pattern.
            if self._history_error is None:
                log.warning("forecast.history_unavailable", error=str(e))
            self._history_error = f"load history unavailable: {e}"
            return
        self._history_error = None
        forecasted = [
            (workload.id, config, history, forecast.horizon_s(config, workload.startup_s))
            for workload in workloads
            if (config := workload.policy.forecast) is not None
            and (history := histories.get(workload.id)) is not None
        ]
        seasonal: dict[model.ServiceId, _Seasonal] = {}
        for at in range(0, len(forecasted), BACKTESTS_PER_SLICE):
            if at:
                # Thousands of backtests take a while on the loop's thread: the ticks go on
                # between slices, voting from the last backtests until these are all made.
                await asyncio.sleep(0)
            part = forecasted[at : at + BACKTESTS_PER_SLICE]
            jobs = [(config, history, ahead) for _, config, history, ahead in part]
            scored = forecast.backtests(jobs, now_s=now)
            for (service, _, history, _), one in zip(part, scored, strict=True):
                seasonal[service] = _Seasonal(history, one)
        self._seasonal = seasonal

    def _llm_estimates(
        self,
        workloads: Sequence[ports.Workload],
        now: float,
        values: npt.NDArray[np.float64],
        half_lives: npt.NDArray[np.float64],
        windows: npt.NDArray[np.float64],
        opted: Sequence[int],
    ) -> dict[int, dict[model.Signal, model.SignalEstimate]]:
        """The LLM signals' estimates of the services that set a target for one (`opted`, their
        indices in `workloads`), by that index; the windows of services that stopped doing so
        are dropped."""
        llm = self._llm_windows
        if llm is None:
            if not opted:
                return {}
            llm = self._llm_windows = smoothing.Windows(
                self.smoothing_config, signals=model.LLM_SIGNALS
            )
        ids = [workloads[i].id for i in opted]
        if stale := llm.known().difference(ids):
            llm.forget(stale)
        rows = llm.rows_for(ids)
        picked = np.asarray(opted, dtype=np.intp)
        llm.record(now, rows, values[np.ix_(picked, _LLM_COLUMNS)])
        estimates = llm.estimate(now, rows, half_lives[picked], windows[picked]).rows()
        return {i: estimates[k] for k, i in enumerate(opted)}

    def _columns(self, workloads: Sequence[ports.Workload]) -> _Columns:
        """The services' window rows, half-lives and windows, and what the batch reads of them:
        reused when every record is the last tick's (by identity), and made again only for the
        records that differ when the services are the same, in the same order (most ticks a few
        services scaled, if any)."""
        last = self._last_columns
        if last is not None and len(last.workloads) == len(workloads):
            changed = [
                i
                for i, (was, now) in enumerate(zip(last.workloads, workloads, strict=True))
                if was is not now
            ]
            if not changed:
                return last
            if len(changed) <= len(workloads) // PATCHED_RATIO_DIVISOR:
                patched = _patched(last, workloads, changed)
                if patched is not None:
                    self._last_columns = patched
                    return patched
        self._forget_gone(workloads)
        count = len(workloads)
        batched = [i for i, w in enumerate(workloads) if batch.batchable(w.policy)]
        picked = [workloads[i] for i in batched]
        columns = _Columns(
            tuple(workloads),
            self._windows.rows_for([w.id for w in workloads]),
            np.fromiter((w.half_life_s for w in workloads), float, count),
            np.fromiter(
                (math.nan if w.window_s is None else w.window_s for w in workloads), float, count
            ),
            {w.id: i for i, w in enumerate(workloads)},
            np.asarray(batched, dtype=np.intp),
            batch.Configs.of([w.policy for w in picked]),
            _Records.of(picked),
            tuple(i for i, w in enumerate(workloads) if w.policy.llm_signals),
        )
        self._last_columns = columns
        return columns

    def _forget_gone(self, workloads: Sequence[ports.Workload]) -> None:
        present = {w.id for w in workloads}
        gone = self._windows.known() - present
        if gone:
            self._windows.forget(gone)
            for service in gone:
                self._states.pop(service, None)
                self._written.add(service)
                self._published.pop(service, None)
                self._seasonal.pop(service, None)
                self._shortfalls.pop(service, None)
