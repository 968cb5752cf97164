"""Leader election on a coordination.k8s.io/v1 Lease, after client-go's `leaderelection`.

A candidate reads the Lease and takes it when it is free (no holder) or expired, by a replace
that carries the resourceVersion it read: of two candidates racing, the second gets 409 and
stays a follower. The leader renews every `renew_interval_s`; when it cannot renew for
`renew_deadline_s` (shorter than the lease) it steps down before anyone else may take over.

Expiry is judged as client-go judges it: by this process's own clock, from the moment it
first saw the Lease's current record, plus `leaseDurationSeconds`, never by comparing the
holder's wall-clock `renewTime` with ours, so clock skew between nodes cannot elect two
leaders. `renewTime` and `acquireTime` are still written in wall time, for people reading
the Lease. A follower that sees the Lease held tries again at the next retry or at the moment
that record expires, whichever is sooner: after a holder dies, its successor takes over
within `leaseDurationSeconds` plus one (jittered) retry of the holder's last renewal.

On cancellation the leader releases the Lease (clears the holder) so that a successor takes
over at its next retry instead of after the lease expires.

`BucketLeases` runs one elector per bucket Lease (`core.shards`), as Knative's autoscaler does:
this replica campaigns for every bucket and acts on the services of those it leads, and evens
the split out with the others by `core.shards.split`, from the holders its electors last read
(a holder with one Lease seen expired counts as dead) and the replicas that asked to be counted:

- A bucket that comes free (released, or expired) goes first to a replica that leads none: one
  that leads `k > 0` but fewer than its share's ceiling waits, before taking it, one jittered
  retry (longer than the followers' polls can be apart, so an idle replica that saw it at the
  same time always comes first) plus a share of a retry per further bucket
  (`retry_interval_s * (1.2 + (k - 1) / buckets)`, under 2.2 retries); one at or above its
  ceiling waits `lease_duration_s` less a jittered retry, so that the replicas under their
  share come first and the bucket is still never free for longer than a lease. While it waits
  it reads the Lease again every jittered retry, so that it sees who takes it. A dead holder's
  buckets therefore move within `lease_duration_s` plus one retry of polling plus that wait.
- A replica that leads none while every bucket is held asks to be counted: it writes its
  identity in the annotation `ASK_ANNOTATION` of a Lease of the replica that leads the most;
  that replica reads it at its next renewal, counts the asker as live for `lease_duration_s`
  and drops the annotation with the renewal's write. The asker writes it again at its polls
  while the need lasts.
- A replica that leads more than its share's ceiling while every bucket is held (or leads the
  ceiling while another leads less than the floor) gives up one bucket, the first of
  `Split.surplus`, right after that bucket's next renewal: its elector stops leading first
  (the write fence refuses that bucket's services from then on), waits for the work already
  under way to end (`wait_quiet`: the tick in progress, the Events on their way), and only
  then clears the Lease's holder, for a replica under its share to take at its next poll. The
  next bucket goes only once that one is held again, so the split converges one bucket at a
  time and no service ever has two writers.

Replicas that start together first try the buckets they prefer (`core.shards.preference`),
the rest a fraction of a retry apart. A replica that starts when every bucket is held asks
to be counted and is handed its share, one bucket at a time.

It must not do anything with leadership but report it: `is_leader`, `leads`, the `leading`
and `lost` events, and the callbacks.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import os
import random
import secrets
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

import structlog
from kubernetes_asyncio import client

from autoscaler import clock as clock_
from autoscaler.adapters.kubernetes import _api
from autoscaler.adapters.kubernetes._api import Obj
from autoscaler.core import shards

log = structlog.get_logger(__name__)

JITTER_RATIO: Final = 0.2
"""Retries wait up to this much longer than `retry_interval_s` (client-go's JitterFactor)."""


_EXPIRY_SLACK_S: Final = 1e-6

ASK_ANNOTATION: Final = "autoscaler.dsec.io/counts-me"
"""On a bucket Lease: the identity of a replica that leads no bucket and asks the holder to
count it in the split (read and dropped by the holder at its next renewal)."""


def default_identity(env: Mapping[str, str] | None = None) -> str:
    """This replica's holder identity: the pod name (or host name) and a random suffix."""
    env = os.environ if env is None else env
    base = env.get("POD_NAME") or env.get("HOSTNAME") or socket.gethostname()
    return f"{base}-{secrets.token_hex(3)}"


class _Outcome(enum.Enum):
    HELD = "held"
    """This candidate holds the Lease now."""
    TAKEN = "taken"
    """Another candidate holds a Lease that has not expired."""
    CONFLICT = "conflict"
    """Someone wrote the Lease between our read and our write (409)."""
    FAILED = "failed"
    """The API did not answer usefully."""
    DEFERRED = "deferred"
    """The Lease is free or expired: wait `defer_s()` and read it again before taking it."""


class LeaderElector:
    """One candidate for one Lease; see the module docstring."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        name: str,
        namespace: str,
        identity: str,
        clock: clock_.Clock,
        wall_now: Callable[[], float] = time.time,
        lease_duration_s: float = 15.0,
        renew_interval_s: float = 5.0,
        renew_deadline_s: float = 10.0,
        retry_interval_s: float = 2.0,
        release_on_cancel: bool = True,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
        on_api_error: _api.ErrorCallback = _api.ignore_error,
        request_timeout_s: float = 5.0,
        rng: random.Random | None = None,
        first_delay_s: float = 0.0,
        defer_s: Callable[[], float] | None = None,
        give_up: Callable[[], bool] | None = None,
        wait_quiet: Callable[[], Awaitable[None]] | None = None,
        ask: Callable[[], bool] | None = None,
        on_asked: Callable[[str], None] | None = None,
    ) -> None:
        """A candidate `identity` for the Lease `namespace/name`.

        `clock` paces the retries and judges expiry (monotonic); `wall_now` (Unix seconds)
        stamps `renewTime` and `acquireTime`. Needs renew < deadline < lease duration.
        `first_delay_s` is waited before the first attempt; when the Lease is found free or
        expired, `defer_s()` seconds are waited once before taking it, and it is read again
        (bucket Leases: the least loaded candidate comes first).

        Bucket Leases also pass: `give_up()`, asked after each renewal, true to hand the Lease
        over (stop leading, await `wait_quiet()`, then clear the holder); `ask()`, asked when
        another holds the Lease, true to write this candidate's identity in `ASK_ANNOTATION`;
        `on_asked(identity)`, told of the identity found there by the holder's renewal.
        """
        if not 0 < renew_interval_s < renew_deadline_s < lease_duration_s:
            raise ValueError("need 0 < renew_interval_s < renew_deadline_s < lease_duration_s")
        if retry_interval_s <= 0:
            raise ValueError("retry_interval_s must be > 0")
        self._leases = client.CoordinationV1Api(api)
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.clock = clock
        self._wall_now = wall_now
        self.lease_duration_s = lease_duration_s
        self.renew_interval_s = renew_interval_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_interval_s = retry_interval_s
        self.release_on_cancel = release_on_cancel
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        # Not fenced: taking and renewing the Lease is what makes this replica the leader.
        self._calls = _api.Caller(on_error=on_api_error, request_timeout_s=request_timeout_s)
        self._rng = rng or random.Random()
        self._first_delay_s = first_delay_s
        self._defer_s = defer_s
        self._deferred_for: tuple[str, str] | None = None  # the record waited on
        self._deferred_s = 0.0
        self._defer_until_s = 0.0
        self._give_up = give_up
        self._wait_quiet = wait_quiet
        self._ask = ask
        self._on_asked = on_asked
        self._handing_over = False
        self.leading = asyncio.Event()
        """Set while this candidate leads (it became leader)."""
        self.lost = asyncio.Event()
        """Set when this candidate stopped leading; cleared when it leads again."""
        self.holder: str | None = None
        """The holder seen at the last read of the Lease."""
        self._renewed_s = -float("inf")
        # (holder, renewTime), as client-go compares records: not the resourceVersion, which
        # an asker's annotation also moves and which must not keep a dead holder's Lease alive.
        self._observed: tuple[str, str] | None = None
        self._observed_s = 0.0
        self._expires_s = 0.0  # when the record last seen expires, by our clock

    @property
    def is_leader(self) -> bool:
        """Whether this candidate leads: false as soon as its renew deadline has passed."""
        return self.leading.is_set() and (
            self.clock.now() - self._renewed_s < self.renew_deadline_s
        )

    def live_holder(self) -> str | None:
        """The holder at the last read, this candidate while it leads; None when free, or when
        the Lease still names this candidate though it no longer leads (handing it over)."""
        if self.leading.is_set():
            return self.identity
        return self.holder if self.holder != self.identity else None

    def expired(self) -> bool:
        """Whether another's hold on the Lease, as last read, has expired by this clock."""
        return (
            self.holder is not None
            and self.holder != self.identity
            and self.clock.now() >= self._expires_s - _EXPIRY_SLACK_S
        )

    async def wait_leading(self) -> None:
        await self.leading.wait()

    async def wait_lost(self) -> None:
        await self.lost.wait()

    async def run(self) -> None:
        """Campaign, lead and campaign again until cancelled; release the Lease on the way out."""
        try:
            if self._first_delay_s > 0:
                await self.clock.sleep(self._first_delay_s)
            while True:
                await self._acquire()
                await self._renew()
        finally:
            if self.leading.is_set():
                if self.release_on_cancel:
                    await self.release()
                else:
                    self._step_down("stopped")
            elif self._handing_over and self.release_on_cancel:
                await self._clear_holder()  # stopped while handing over: it leads no more

    async def release(self) -> None:
        """Give the Lease up if held (clear the holder) and stop leading."""
        if not self.leading.is_set():
            return
        try:
            await self._clear_holder()
        finally:
            self._step_down("released")

    async def _hand_over(self) -> None:
        """Stop leading, let the work begun under this Lease end, then clear its holder: nothing
        is written for its services once another may hold it."""
        self._handing_over = True
        try:
            self._step_down("handed_over")
            if self._wait_quiet is not None:
                await self._wait_quiet()
            await self._clear_holder()
        finally:
            self._handing_over = False

    async def _clear_holder(self) -> None:
        """Clear the holder of the Lease if it is this candidate."""
        try:
            lease = await self._call("leases.get", self._leases.read_namespaced_lease)
            if lease is not None and _holder(lease) == self.identity:
                now = _api.format_micro_time(self._wall_now())
                spec = {
                    **_spec(lease),
                    "holderIdentity": None,
                    "leaseDurationSeconds": 1,
                    "renewTime": now,
                    "acquireTime": now,
                }
                await self._call(
                    "leases.update",
                    self._leases.replace_namespaced_lease,
                    {**self._answered(lease), "spec": spec},
                )
        except (_ConflictError, _FailedError):
            pass  # someone else wrote it, or it will expire: stepping down is what matters

    # -- the campaign ------------------------------------------------------------------------------

    async def _acquire(self) -> None:
        while True:
            outcome = await self._attempt()
            if outcome is _Outcome.DEFERRED:
                await self.clock.sleep(self._deferred_s)
                continue
            if outcome is _Outcome.HELD:
                self.leading.set()
                self.lost.clear()
                log.info("leader.elected", lease=self._lease_name, identity=self.identity)
                if self._on_started is not None:
                    self._on_started()
                return
            delay_s = self._poll_s()
            if outcome is _Outcome.TAKEN:
                # Try again the moment the holder's lease runs out rather than up to a retry
                # later: a takeover then comes within the lease and one retry of the holder's
                # last renewal.
                delay_s = min(delay_s, max(0.0, self._expires_s - self.clock.now()))
            await self.clock.sleep(delay_s)

    async def _renew(self) -> None:
        while True:
            await self.clock.sleep(self.renew_interval_s)
            while True:
                outcome = await self._attempt()
                if outcome is _Outcome.HELD:
                    break
                if outcome is _Outcome.TAKEN:
                    self._step_down("taken")
                    return
                if self.clock.now() - self._renewed_s >= self.renew_deadline_s:
                    self._step_down("renew_deadline")
                    return
                await self.clock.sleep(self.retry_interval_s)
            # Right after a renewal: the Lease stays ours for a whole lease while the work
            # under it ends, and an ask the renewal just read already counts.
            if self._give_up is not None and self._give_up():
                await self._hand_over()
                return

    def _step_down(self, why: str) -> None:
        if not self.leading.is_set():
            return
        self.leading.clear()
        self.lost.set()
        # Giving the Lease up on the way out, or to even the split, is the clean path.
        report = log.info if why in ("released", "handed_over") else log.warning
        report("leader.lost", lease=self._lease_name, identity=self.identity, why=why)
        if self._on_stopped is not None:
            self._on_stopped()

    async def _attempt(self) -> _Outcome:
        """Read the Lease and take or renew it if it is ours to take."""
        now_s = self.clock.now()
        try:
            lease = await self._call("leases.get", self._leases.read_namespaced_lease)
        except _FailedError:
            return _Outcome.FAILED
        if lease is None:
            return await self._create(now_s)
        # Seen now, after the read came back: never earlier than the record was written.
        seen_s = self.clock.now()
        self._observe(lease, seen_s)
        holder = _holder(lease)
        if holder and holder != self.identity and not self._expired(lease, seen_s):
            if self._ask is not None and self._ask():
                await self._ask_to_be_counted(lease)
            return _Outcome.TAKEN
        if holder != self.identity and self._defers():
            return _Outcome.DEFERRED
        wall = _api.format_micro_time(self._wall_now())
        spec = dict(_spec(lease))
        if holder != self.identity:
            spec["acquireTime"] = wall
            spec["leaseTransitions"] = _whole(spec.get("leaseTransitions")) + 1
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=round(self.lease_duration_s),
            renewTime=wall,
        )
        try:
            updated = await self._call(
                "leases.update",
                self._leases.replace_namespaced_lease,
                {**self._answered(lease), "spec": spec},
            )
        except _ConflictError:
            return _Outcome.CONFLICT
        except _FailedError:
            return _Outcome.FAILED
        assert updated is not None
        return self._held(updated, now_s)

    async def _create(self, now_s: float) -> _Outcome:
        wall = _api.format_micro_time(self._wall_now())
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": round(self.lease_duration_s),
                "acquireTime": wall,
                "renewTime": wall,
                "leaseTransitions": 0,
            },
        }
        try:
            created = await self._call(
                "leases.create", self._leases.create_namespaced_lease, body, named=False
            )
        except _ConflictError:  # another candidate created it first
            return _Outcome.CONFLICT
        except _FailedError:
            return _Outcome.FAILED
        assert created is not None
        return self._held(created, now_s)

    async def _ask_to_be_counted(self, lease: Obj) -> None:
        """Write this candidate's identity in the Lease's `ASK_ANNOTATION`, unless it is there;
        a conflict or a failure is left for the next poll."""
        metadata = lease.get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        if annotations.get(ASK_ANNOTATION) == self.identity:
            return
        asked = {
            **lease,
            "metadata": {**metadata, "annotations": {**annotations, ASK_ANNOTATION: self.identity}},
        }
        try:
            await self._call("leases.update", self._leases.replace_namespaced_lease, asked)
        except (_ConflictError, _FailedError):
            return
        log.info("lease.asked", lease=self._lease_name, identity=self.identity)

    def _answered(self, lease: Obj) -> Obj:
        """The Lease without `ASK_ANNOTATION`, whose asker (if another) `on_asked` is told of."""
        metadata = lease.get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        if ASK_ANNOTATION not in annotations:
            return lease
        asker = annotations[ASK_ANNOTATION]
        if isinstance(asker, str) and asker != self.identity and self._on_asked is not None:
            self._on_asked(asker)
        kept = {k: v for k, v in annotations.items() if k != ASK_ANNOTATION}
        return {**lease, "metadata": {**metadata, "annotations": kept}}

    def _defers(self) -> bool:
        """Whether to wait before taking the free or expired record just read: until
        `defer_s()` (asked when the record is first seen) has passed, reading it again at
        least every jittered retry, so that a long wait still sees who takes it meanwhile."""
        if self._defer_s is None:
            return False
        now_s = self.clock.now()
        if self._observed != self._deferred_for:
            self._deferred_for = self._observed
            self._defer_until_s = now_s + self._defer_s()
        left_s = self._defer_until_s - now_s
        if left_s <= _EXPIRY_SLACK_S:
            return False
        self._deferred_s = min(left_s, self._poll_s())
        return True

    def _poll_s(self) -> float:
        return self.retry_interval_s * (1 + JITTER_RATIO * self._rng.random())

    def _held(self, lease: Obj, now_s: float) -> _Outcome:
        self._observe(lease, now_s)
        self._renewed_s = now_s
        return _Outcome.HELD

    def _observe(self, lease: Obj, now_s: float) -> None:
        renewed = _spec(lease).get("renewTime")
        record = (_holder(lease), str(renewed))
        self.holder = record[0] or None
        if record != self._observed:
            self._observed, self._observed_s = record, now_s

    def _expired(self, lease: Obj, now_s: float) -> bool:
        duration = _spec(lease).get("leaseDurationSeconds")
        duration_s = float(duration) if isinstance(duration, int | float) else self.lease_duration_s
        self._expires_s = self._observed_s + duration_s
        # The slack absorbs the rounding of a sleep timed to end exactly at the expiry.
        return now_s >= self._expires_s - _EXPIRY_SLACK_S

    @property
    def _lease_name(self) -> str:
        return f"{self.namespace}/{self.name}"

    async def _call(
        self, operation: str, method: Callable[..., Any], *body: Obj, named: bool = True
    ) -> Obj | None:
        """Call the API on the Lease: None for a 404 read; raise `_ConflictError` on 409."""
        args = (self.name, self.namespace, *body) if named else (self.namespace, *body)
        allow = (404,) if operation == "leases.get" else ()
        try:
            return await self._calls.call_allowing(
                allow, operation, self._lease_name, method, *args
            )
        except _api.KubeApiError as e:
            if e.status == 409:
                raise _ConflictError from e
            log.warning("lease.failed", operation=operation, status=e.status, error=str(e))
            raise _FailedError from e


class BucketLeases:
    """One `LeaderElector` per bucket Lease, all campaigning; see the module docstring."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        buckets: shards.Buckets,
        namespace: str,
        identity: str,
        clock: clock_.Clock,
        retry_interval_s: float = 2.0,
        lease_duration_s: float = 15.0,
        on_changed: Callable[[], None] | None = None,
        wait_quiet: Callable[[], Awaitable[None]] | None = None,
        **elector: Any,
    ) -> None:
        """Electors for every name of `buckets` in `namespace`; `elector` holds the other
        `LeaderElector` settings, shared by all. `on_changed` is told whenever a bucket is won
        or lost; `wait_quiet()` is awaited between stepping down from a bucket given up to
        even the split and clearing its Lease (the work begun for its services ends)."""
        self.buckets = buckets
        self.identity = identity
        self.clock = clock
        self._on_changed = on_changed
        self._retry_interval_s = retry_interval_s
        self._lease_duration_s = lease_duration_s
        self._asked_s: dict[str, float] = {}
        """Replicas that lead none and asked to be counted, and when that was last read."""
        self._owned_now: tuple[frozenset[int], Callable[[str], bool]] | None = None
        """The buckets of the last `owned_now` and the function it gave."""
        count = len(buckets)
        # Far enough apart that a replica's first choice is held before its second is tried.
        stagger_s = retry_interval_s / count
        self._preferred = shards.preference(identity, buckets.names)
        ranks = {index: rank for rank, index in enumerate(self._preferred)}
        self.electors: tuple[LeaderElector, ...] = tuple(
            LeaderElector(
                api,
                name=name,
                namespace=namespace,
                identity=identity,
                clock=clock,
                retry_interval_s=retry_interval_s,
                lease_duration_s=lease_duration_s,
                first_delay_s=ranks[index] * stagger_s,
                defer_s=self._defer_s,
                give_up=functools.partial(self._gives_up, index),
                wait_quiet=wait_quiet,
                ask=functools.partial(self._asks, index),
                on_asked=self._asked,
                on_started_leading=self._changed,
                on_stopped_leading=self._changed,
                **elector,
            )
            for index, name in enumerate(buckets.names)
        )

    @property
    def release_on_cancel(self) -> bool:
        return all(e.release_on_cancel for e in self.electors)

    @release_on_cancel.setter
    def release_on_cancel(self, release: bool) -> None:
        for elector in self.electors:
            elector.release_on_cancel = release

    def leading(self) -> frozenset[int]:
        """The buckets in a term of leadership (won and not yet lost)."""
        return frozenset(i for i, e in enumerate(self.electors) if e.leading.is_set())

    def led(self) -> frozenset[int]:
        """The buckets this replica may act on now: leading, renew deadline not passed."""
        return frozenset(i for i, e in enumerate(self.electors) if e.is_leader)

    def leads(self, service: str) -> bool:
        """Whether this replica may write for `service` (`namespace/name`) now: it leads the
        service's bucket and that Lease's renew deadline has not passed."""
        return self.electors[self.buckets.of(service)].is_leader

    def owned_now(self) -> Callable[[str], bool]:
        """`leads` for the buckets led at this moment, judged once (a tick's filter over
        thousands of services); the write fence asks `leads` again before each write. The
        same function object while the same buckets are led, so that a caller can tell that
        none moved (`KubeCluster.workloads` then looks at no service of another bucket)."""
        led = self.led()
        if self._owned_now is None or self._owned_now[0] != led:
            of = self.buckets.of
            self._owned_now = (led, lambda service: of(service) in led)
        return self._owned_now[1]

    def holders(self) -> Sequence[str | None]:
        """The holder of each bucket Lease at its last read."""
        return [e.holder for e in self.electors]

    async def run(self) -> None:
        """Campaign for every bucket until cancelled; each elector releases its Lease."""
        async with asyncio.TaskGroup() as group:
            for elector in self.electors:
                group.create_task(elector.run(), name=f"lease {elector.name}")

    def live_holders(self) -> list[str | None]:
        """Each bucket's live holder as this replica's electors last read it: None for a free
        Lease, and for every Lease of a holder one of whose Leases was seen expired (dead)."""
        dead = {e.holder for e in self.electors if e.expired()}
        return [None if h in dead else h for h in (e.live_holder() for e in self.electors)]

    def split(self) -> shards.Split:
        """This replica's plan for the split, from the Leases as last read."""
        now_s = self.clock.now()
        for asker, seen_s in list(self._asked_s.items()):
            if now_s - seen_s >= self._lease_duration_s:
                del self._asked_s[asker]
        return shards.split(
            self.identity,
            self.live_holders(),
            candidates=self._asked_s.keys(),
            preferred=self._preferred,
        )

    def _defer_s(self) -> float:
        """How long to wait before taking a free bucket: nothing while leading none; under the
        share's ceiling, past any idle replica's poll, then a share of a retry per further
        bucket led; else a lease less a jittered retry, for the others to come first."""
        plan = self.split()
        if plan.led == 0:
            return 0.0
        poll_s = self._retry_interval_s * (1 + JITTER_RATIO)
        if plan.eager:
            return poll_s + self._retry_interval_s * (plan.led - 1) / len(self.buckets)
        return max(self._lease_duration_s - poll_s, poll_s + self._retry_interval_s)

    def _gives_up(self, index: int) -> bool:
        """Whether the bucket `index` is the one to give up now: the first of the surplus."""
        plan = self.split()
        if not plan.surplus or plan.surplus[0] != index:
            return False
        log.info(
            "lease.handing_over",
            lease=self.buckets.names[index],
            identity=self.identity,
            led=plan.led,
            replicas=plan.replicas,
            ceiling=plan.ceiling,
        )
        return True

    def _asks(self, index: int) -> bool:
        return self.split().ask == index

    def _asked(self, asker: str) -> None:
        self._asked_s[asker] = self.clock.now()

    def _changed(self) -> None:
        if self._on_changed is not None:
            self._on_changed()


class _ConflictError(Exception):
    """The Lease changed between our read and our write, or was created by someone else."""


class _FailedError(Exception):
    """The API did not answer usefully; the attempt counts as failed."""


def _spec(lease: Obj) -> Obj:
    return _api.spec(lease)


def _holder(lease: Obj) -> str:
    holder = _spec(lease).get("holderIdentity")
    return holder if isinstance(holder, str) else ""


def _whole(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
