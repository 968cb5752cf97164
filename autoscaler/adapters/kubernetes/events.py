"""Kubernetes Events on the Deployments the controller manages, as `kubectl describe` shows them.

core/v1 Events with `involvedObject` the Deployment, `source.component` and
`reportingComponent` "inference-autoscaler", `reportingInstance` this replica.

Events are correlated as client-go's recorder does (`EventCorrelator` in
`tools/record/events_cache.go`), with its defaults:
- **Repeats**: an Event with the same object, type, reason and message as one this process
  posted recently is not posted again: its `count` goes up and its `lastTimestamp` moves (a
  PATCH); a new Event is created only when the old one has expired or been forgotten.
- **Similar Events**: once one object has had `aggregate_max_events` (10) Events of one type and
  reason with distinct messages within `aggregate_interval_s` (600 s) of each other, the next
  ones become a single Event "(combined from similar events): <latest message>" whose count
  goes up.
- **Spam filter**: a token bucket per object and type (a burst of 25, then one every 300 s)
  admits what would cost an API call; an Event past it is dropped. Unlike client-go, a repeat
  that merges into an Event still waiting to be sent takes no token, as it costs no call.

`record` never blocks and never raises. What it accepts waits in order, keyed as above, until
`run` sends it: an Event recorded again while its predecessor waits merges into it (the count
grows) and costs nothing. At most `max_pending` distinct Events wait; `run` sends them one at a
time, paced by a token bucket of `posts_per_s` after a burst of `post_burst`, so that a storm
(every service of a 10,000-Deployment fleet on its first tick) costs the API server a bounded
rate of calls instead of a burst of thousands. A failed call is logged and counted, never
propagated (an Event is worth less than a tick).

Nothing is lost uncounted: every Event `record` accepts ends in exactly one of `queued`,
`merged`, `rate_limited` and `dropped` (too many waiting), and every queued one in `created`,
`patched`, `failed` or `unsent` (leadership ended first); `aggregated` counts the Events
combined with similar ones. The counts are in `counts` and told to `on_outcome`. A drop and a
failed call are logged too, each kind at most once per `LOSS_LOG_INTERVAL_S`, with how many of
each since the last such line: a storm must not become a storm of log lines.

A recorder accepts nothing its fence refuses for the Deployment (`namespace/name`: a follower,
or a replica that does not lead the Deployment's bucket Lease), and sends nothing the fence
refuses by the time it is sent; nor does one in dry-run, but for the Events recorded
`despite_dry_run` (the warm-up gates it opens, `core.gates`).

It must not decide when something is worth an Event: its callers do.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any, Final, Generic, TypeVar

import structlog
from kubernetes_asyncio import client

from autoscaler import clock as clock_
from autoscaler.adapters.kubernetes import _api
from autoscaler.adapters.kubernetes._api import Obj
from autoscaler.contract import codec

log = structlog.get_logger(__name__)

COMPONENT: Final = "inference-autoscaler"
NORMAL: Final = "Normal"
WARNING: Final = "Warning"
MESSAGE_LIMIT: Final = 1024
"""Characters of a message kept (events.k8s.io rejects longer notes)."""

# client-go's defaults (tools/record/events_cache.go: defaultAggregateMaxEvents,
# defaultAggregateIntervalInSeconds, defaultSpamBurst, defaultSpamQPS).
AGGREGATE_MAX_EVENTS: Final = 10
AGGREGATE_INTERVAL_S: Final = 600.0
SPAM_BURST: Final = 25
SPAM_REFILL_PER_S: Final = 1.0 / 300.0
COMBINED_PREFIX: Final = "(combined from similar events): "
"""client-go's `EventAggregatorByReasonMessageFunc` prefix."""

REMEMBERED: Final = 16_384
"""Objects and Events each cache remembers. client-go keeps 4096 (`maxLruCacheEntries`); this
controller manages ten thousand Deployments, and forgetting one's spam bucket would reset its
limit."""
MAX_PENDING: Final = 16_384
"""Distinct Events that may wait to be sent; past it a new one is dropped (and counted)."""
POSTS_PER_S: Final = 50.0
POST_BURST: Final = 500
LOSS_LOG_INTERVAL_S: Final = 60.0

OUTCOMES: Final = (
    "queued",
    "merged",
    "aggregated",
    "rate_limited",
    "dropped",
    "created",
    "patched",
    "failed",
    "unsent",
)
"""What became of recorded Events; see the module docstring."""

OutcomeCallback = Callable[[str], None]
"""Told one outcome (of `OUTCOMES`) per Event and step."""

_Key = tuple[str, str, str, str, str]
"""(namespace, uid, type, reason, message): the Events counted as one."""


@dataclasses.dataclass(slots=True)
class _Pending:
    involved: Obj
    type: str
    reason: str
    message: str
    count: int
    first_s: float
    last_s: float
    despite_dry_run: bool


@dataclasses.dataclass(slots=True)
class _Posted:
    name: str
    count: int


@dataclasses.dataclass(slots=True)
class _Similar:
    messages: set[str]
    last_s: float


@dataclasses.dataclass(slots=True)
class _Bucket:
    tokens: float
    at_s: float

    def take(self, now_s: float, *, burst: float, refill_per_s: float) -> bool:
        """Refill for the time since the last take, then take one token if there is one."""
        self.tokens = min(burst, self.tokens + max(0.0, now_s - self.at_s) * refill_per_s)
        self.at_s = now_s
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


_K = TypeVar("_K")
_V = TypeVar("_V")


class _Lru(Generic[_K, _V]):
    """A dict that forgets its least recently used entries past `size`."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: collections.OrderedDict[_K, _V] = collections.OrderedDict()

    def get(self, key: _K) -> _V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: _K, value: _V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self._size:
            self._items.popitem(last=False)


def involved_object(deployment: Obj) -> Obj:
    """The `involvedObject` reference to a Deployment, or to the workload of the kind the
    object says (the caches stamp a StatefulSet, a LeaderWorkerSet or a Rollout with theirs)."""
    return {
        "apiVersion": str(deployment.get("apiVersion") or "apps/v1"),
        "kind": str(deployment.get("kind") or "Deployment"),
        "name": _api.name(deployment),
        "namespace": _api.namespace(deployment),
        "uid": _api.uid(deployment),
        "resourceVersion": _api.resource_version(deployment),
    }


def _service(involved: Obj) -> str:
    """The `namespace/name` of an Event's Deployment: the service whose Lease fences it (for a
    Node, `default/<node>`, so that one replica posts it)."""
    return f"{_event_namespace(involved)}/{involved['name']}"


NODE_EVENT_NAMESPACE: Final = "default"
"""Where Events about a Node go, as the kubelet posts them (`kubectl describe node` finds them)."""


def node_reference(node: Obj) -> Obj:
    """The `involvedObject` reference to a Node: cluster-scoped, so no namespace."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "name": _api.name(node),
        "uid": _api.uid(node),
        "resourceVersion": _api.resource_version(node),
    }


def _event_namespace(involved: Obj) -> str:
    return str(involved.get("namespace") or NODE_EVENT_NAMESPACE)


class EventRecorder:
    """Correlates Events and posts them in the background; see the module docstring."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        instance: str,
        calls: _api.Caller | None = None,
        component: str = COMPONENT,
        clock: clock_.Clock | None = None,
        wall_now: Callable[[], float] = time.time,
        dry_run: bool = False,
        on_outcome: OutcomeCallback | None = None,
        max_pending: int = MAX_PENDING,
        remembered: int = REMEMBERED,
        posts_per_s: float = POSTS_PER_S,
        post_burst: int = POST_BURST,
    ) -> None:
        """`calls` is the cluster's (its fence is also asked before an Event is accepted);
        `wall_now` (Unix seconds) stamps Events and times the correlation windows; `clock`
        paces the calls (`posts_per_s` after `post_burst`)."""
        if not (posts_per_s > 0 and post_burst >= 1 and max_pending >= 1):
            raise ValueError("posts_per_s must be > 0, post_burst and max_pending >= 1")
        self._api = api
        self._calls = calls or _api.Caller()
        self.instance = instance
        self.component = component
        self._clock = clock or clock_.LoopClock()
        self._wall_now = wall_now
        self._dry_run = dry_run
        self._on_outcome = on_outcome
        self._max_pending = max_pending
        self._posts_per_s = posts_per_s
        self._post_burst = post_burst
        self._pace: _Bucket | None = None  # made on the first post: `clock` may need the loop
        self._pending: collections.OrderedDict[_Key, _Pending] = collections.OrderedDict()
        self._waiting = asyncio.Event()
        """Set while an Event waits to be sent."""
        self._idle = asyncio.Event()
        """Set while nothing waits and nothing is being sent."""
        self._idle.set()
        self._posted: _Lru[_Key, _Posted] = _Lru(remembered)
        self._similar: _Lru[tuple[str, str, str, str], _Similar] = _Lru(remembered)
        self._spam: _Lru[tuple[str, str, str], _Bucket] = _Lru(remembered)
        self.counts: collections.Counter[str] = collections.Counter()
        """How many Events met each of `OUTCOMES` since start."""
        self._lost: collections.defaultdict[str, collections.Counter[str]] = (
            collections.defaultdict(collections.Counter)
        )
        """Outcomes per log event since that event's last line."""
        self._loss_logged_s: dict[str, float] = {}

    @property
    def pending(self) -> int:
        """Distinct Events waiting to be sent."""
        return len(self._pending)

    def record(
        self,
        deployment: Obj,
        type_: str,
        reason: str,
        message: str,
        *,
        despite_dry_run: bool = False,
    ) -> None:
        """Accept an Event on `deployment` for `run` to send; see the module docstring.

        In dry-run only an Event recorded `despite_dry_run` is accepted."""
        self._accept(involved_object(deployment), type_, reason, message, despite_dry_run)

    def record_node(self, node: Obj, type_: str, reason: str, message: str) -> None:
        """Accept an Event on a Node (in `NODE_EVENT_NAMESPACE`), as `record` does."""
        self._accept(node_reference(node), type_, reason, message, False)

    def _accept(
        self, involved: Obj, type_: str, reason: str, message: str, despite_dry_run: bool
    ) -> None:
        if not self._allowed(_service(involved), despite_dry_run):
            return
        if len(message) > MESSAGE_LIMIT:
            message = message[: MESSAGE_LIMIT - 3] + "..."
        now_s = self._wall_now()
        namespace, uid = _event_namespace(involved), str(involved["uid"])
        key: _Key = (namespace, uid, type_, reason, message)
        if self._similar_to_many(key, now_s):
            self._count("aggregated")
            message = COMBINED_PREFIX + message
            key = (namespace, uid, type_, reason, COMBINED_PREFIX)
        waiting = self._pending.get(key)
        if waiting is not None:
            waiting.count += 1
            waiting.last_s = now_s
            waiting.message = message
            waiting.despite_dry_run = waiting.despite_dry_run or despite_dry_run
            self._count("merged")
            return
        bucket = self._spam.get((namespace, uid, type_))
        if bucket is None:
            bucket = _Bucket(tokens=float(SPAM_BURST), at_s=now_s)
            self._spam.put((namespace, uid, type_), bucket)
        if not bucket.take(now_s, burst=SPAM_BURST, refill_per_s=SPAM_REFILL_PER_S):
            self._count("rate_limited")
            self._report("event.dropped", "rate_limited", involved, reason)
            return
        if len(self._pending) >= self._max_pending:
            self._count("dropped")
            self._report("event.dropped", "dropped", involved, reason)
            return
        self._pending[key] = _Pending(
            involved, type_, reason, message, 1, now_s, now_s, despite_dry_run
        )
        self._count("queued")
        self._idle.clear()
        self._waiting.set()

    async def wait_idle(self) -> None:
        """Wait until every accepted Event has been sent (or has failed)."""
        await self._idle.wait()

    async def run(self) -> None:
        """Send the waiting Events one by one, oldest first, until cancelled."""
        while True:
            await self._waiting.wait()
            await self._wait_turn()
            key, pending = self._pending.popitem(last=False)
            if not self._pending:
                self._waiting.clear()
            try:
                if self._allowed(_service(pending.involved), pending.despite_dry_run):
                    self._count(await self._post(key, pending))
                else:
                    self._count("unsent")
            except _api.NotLeaderError:
                self._count("unsent")  # leadership ended while it waited: a follower posts nothing
            finally:
                if not self._pending:
                    self._idle.set()

    def _allowed(self, service: str, despite_dry_run: bool) -> bool:
        return (despite_dry_run or not self._dry_run) and self._calls.fence(service)

    def _similar_to_many(self, key: _Key, now_s: float) -> bool:
        """Whether the object has had many Events like this one with other messages lately
        (client-go's `EventAggregator`)."""
        namespace, uid, type_, reason, message = key
        similar = self._similar.get((namespace, uid, type_, reason))
        if similar is None or now_s - similar.last_s > AGGREGATE_INTERVAL_S:
            similar = _Similar(set(), now_s)
            self._similar.put((namespace, uid, type_, reason), similar)
        similar.messages.add(message)
        similar.last_s = now_s
        if len(similar.messages) < AGGREGATE_MAX_EVENTS:
            return False
        similar.messages.pop()  # never hold more than the threshold
        return True

    async def _wait_turn(self) -> None:
        """Take a token of the posting pace, waiting on the clock for one when none is left."""
        now_s = self._clock.now()
        if self._pace is None:
            self._pace = _Bucket(tokens=float(self._post_burst), at_s=now_s)
        while not self._pace.take(now_s, burst=self._post_burst, refill_per_s=self._posts_per_s):
            await self._clock.sleep((1.0 - self._pace.tokens) / self._posts_per_s)
            now_s = self._clock.now()

    async def _post(self, key: _Key, pending: _Pending) -> str:
        """Send one waiting Event: patch the count of the one posted before, or create it."""
        involved = pending.involved
        namespace = _event_namespace(involved)
        target = _service(involved)
        try:
            posted = self._posted.get(key)
            if posted is not None:
                patch = {
                    "count": posted.count + pending.count,
                    "lastTimestamp": codec.format_time(pending.last_s),
                    "message": pending.message,
                }
                # 404: the Event expired (its TTL): post a fresh one.
                path = _api.resource_path("", "v1", "events", namespace, posted.name)
                answer = await self._calls.call_allowing(
                    (404,),
                    "events.patch",
                    target,
                    _api.Request(self._api, "PATCH", path, patch, _api.MERGE_PATCH),
                    write=True,
                )
                if answer is not None:
                    posted.count += pending.count
                    return "patched"
            body: dict[str, Any] = {
                "metadata": {"generateName": f"{involved['name']}.", "namespace": namespace},
                "involvedObject": involved,
                "type": pending.type,
                "reason": pending.reason,
                "message": pending.message,
                "source": {"component": self.component},
                "reportingComponent": self.component,
                "reportingInstance": self.instance,
                "firstTimestamp": codec.format_time(pending.first_s),
                "lastTimestamp": codec.format_time(pending.last_s),
                "count": pending.count,
            }
            created = await self._calls.call(
                "events.create",
                target,
                _api.Request(
                    self._api, "POST", _api.resource_path("", "v1", "events", namespace), body
                ),
                write=True,
            )
        except _api.KubeApiError as e:
            self._report("event.failed", "failed", involved, pending.reason, error=str(e))
            return "failed"
        self._posted.put(key, _Posted(_api.name(created), pending.count))
        return "created"

    def _count(self, outcome: str) -> None:
        self.counts[outcome] += 1
        if self._on_outcome is not None:
            self._on_outcome(outcome)

    def _report(
        self, event: str, outcome: str, involved: Obj, reason: str, **details: object
    ) -> None:
        """Log an Event not sent now and then, never per Event: the first of each kind
        (`event`) per `LOSS_LOG_INTERVAL_S`, with how many of each outcome since the last."""
        now_s = self._wall_now()
        lost = self._lost[event]
        lost[outcome] += 1
        if now_s - self._loss_logged_s.get(event, -math.inf) < LOSS_LOG_INTERVAL_S:
            return
        log.warning(
            event,
            why=outcome,
            reason=reason,
            object=f"{_event_namespace(involved)}/{involved['name']}",
            since_last_report=dict(lost),
            waiting=len(self._pending),
            **details,
        )
        lost.clear()
        self._loss_logged_s[event] = now_s
