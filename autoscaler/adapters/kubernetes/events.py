"""Kubernetes Events on the Deployments the controller manages, as `kubectl describe` shows them.

core/v1 Events with `involvedObject` the Deployment, `source.component` and
`reportingComponent` "inference-autoscaler", `reportingInstance` this replica. Repeats are
de-duplicated as client-go's recorder does: an Event with the same object, type, reason and
message as one this process posted recently is not posted again; its `count` goes up and its
`lastTimestamp` moves (a PATCH), and a new Event is created only when the old one has expired.
client-go's aggregation of *similar* messages is not reproduced: callers post an Event when
something changed, not on every tick.

`record` never blocks and never raises: Events are posted in order by `run`, in the background,
and a failure is logged and counted, never propagated (an Event is worth less than a tick). A
recorder drops what `may_write` refuses for the Deployment (`namespace/name`: a follower, or a
replica that does not lead the Deployment's bucket Lease), when recorded and again when posted;
so does one in dry-run, but for the Events recorded `despite_dry_run` (the warm-up gates it
opens, `core.gates`).

It must not decide when something is worth an Event: its callers do.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import time
from collections.abc import Callable
from typing import Any, Final

import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiException

from autoscaler.adapters.kubernetes import _api
from autoscaler.adapters.kubernetes._api import Obj

log = structlog.get_logger(__name__)

COMPONENT: Final = "inference-autoscaler"
NORMAL: Final = "Normal"
WARNING: Final = "Warning"
MESSAGE_LIMIT: Final = 1024
"""Characters of a message kept (events.k8s.io rejects longer notes)."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Pending:
    involved: Obj
    type: str
    reason: str
    message: str
    despite_dry_run: bool = False


@dataclasses.dataclass(slots=True)
class _Posted:
    name: str
    count: int


def involved_object(deployment: Obj) -> Obj:
    """The `involvedObject` reference to a Deployment."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": _api.name(deployment),
        "namespace": _api.namespace(deployment),
        "uid": _api.uid(deployment),
        "resourceVersion": _api.resource_version(deployment),
    }


def _key(involved: Obj) -> str:
    """The `namespace/name` of an Event's Deployment: the service it is fenced by."""
    return f"{involved['namespace']}/{involved['name']}"


class EventRecorder:
    """Posts Events in the background and de-duplicates repeats; see the module docstring."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        instance: str,
        component: str = COMPONENT,
        wall_now: Callable[[], float] = time.time,
        may_write: _api.Fence = _api.always,
        dry_run: bool = False,
        on_api_error: _api.ErrorCallback = _api.ignore_error,
        queue_size: int = 1000,
        remembered: int = 4096,
        request_timeout_s: float = _api.DEFAULT_REQUEST_TIMEOUT_S,
    ) -> None:
        self._core = client.CoreV1Api(api)
        self._request_timeout_s = request_timeout_s
        self.instance = instance
        self.component = component
        self._wall_now = wall_now
        self._may_write = may_write
        self._dry_run = dry_run
        self._on_api_error = on_api_error
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue(queue_size)
        self._posted: collections.OrderedDict[tuple[str, ...], _Posted] = collections.OrderedDict()
        self._remembered = remembered
        self.dropped = 0
        """Events not posted because the queue was full."""

    def record(
        self,
        deployment: Obj,
        type_: str,
        reason: str,
        message: str,
        *,
        despite_dry_run: bool = False,
    ) -> None:
        """Queue an Event on `deployment`; dropped (and counted) when the queue is full.

        In dry-run only an Event recorded `despite_dry_run` is queued."""
        if not self._allowed(_key(involved_object(deployment)), despite_dry_run):
            return
        if len(message) > MESSAGE_LIMIT:
            message = message[: MESSAGE_LIMIT - 3] + "..."
        pending = _Pending(involved_object(deployment), type_, reason, message, despite_dry_run)
        try:
            self._queue.put_nowait(pending)
        except asyncio.QueueFull:
            self.dropped += 1
            log.warning("event.dropped", reason=reason, object=_api.name(deployment))

    async def wait_idle(self) -> None:
        """Wait until every queued Event has been posted (or has failed)."""
        await self._queue.join()

    async def run(self) -> None:
        """Post queued Events one by one until cancelled."""
        while True:
            pending = await self._queue.get()
            try:
                if self._allowed(_key(pending.involved), pending.despite_dry_run):
                    await self._post(pending)
            except _api.NotLeaderError:
                pass  # leadership ended while it waited: a follower posts nothing
            finally:
                self._queue.task_done()

    def _allowed(self, service: str, despite_dry_run: bool) -> bool:
        return (despite_dry_run or not self._dry_run) and self._may_write(service)

    async def _post(self, pending: _Pending) -> None:
        involved = pending.involved
        namespace = str(involved["namespace"])
        key = (
            namespace,
            str(involved["uid"]),
            pending.type,
            pending.reason,
            pending.message,
        )
        now = _api.format_time(self._wall_now())
        posted = self._posted.get(key)
        if posted is not None:
            patch = {"count": posted.count + 1, "lastTimestamp": now}
            try:
                await _api.write_json(
                    self._may_write,
                    _key(involved),
                    self._core.patch_namespaced_event,
                    posted.name,
                    namespace,
                    patch,
                    _content_type=_api.MERGE_PATCH,
                    request_timeout_s=self._request_timeout_s,
                )
            except ApiException as e:
                if e.status != 404:  # 404: the Event expired (its TTL); post a fresh one
                    self._failed("events.patch", pending, e)
                    return
            except (*_api.TRANSPORT_ERRORS, ValueError) as e:
                self._failed("events.patch", pending, e)
                return
            else:
                posted.count += 1
                self._posted.move_to_end(key)
                return
        body: dict[str, Any] = {
            "metadata": {"generateName": f"{involved['name']}.", "namespace": namespace},
            "involvedObject": involved,
            "type": pending.type,
            "reason": pending.reason,
            "message": pending.message,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            created = await _api.write_json(
                self._may_write,
                _key(involved),
                self._core.create_namespaced_event,
                namespace,
                body,
                request_timeout_s=self._request_timeout_s,
            )
        except (ApiException, *_api.TRANSPORT_ERRORS, ValueError) as e:
            self._failed("events.create", pending, e)
            return
        self._posted[key] = _Posted(_api.name(created), 1)
        self._posted.move_to_end(key)
        while len(self._posted) > self._remembered:
            self._posted.popitem(last=False)

    def _failed(self, operation: str, pending: _Pending, error: BaseException) -> None:
        self._on_api_error(operation)
        target = f"{pending.involved['namespace']}/{pending.involved['name']}"
        log.warning(
            "event.failed",
            reason=pending.reason,
            status=_api.status_of(error),
            error=str(_api.failure(operation, target, error)),
        )
