"""Plumbing shared by the Kubernetes adapter: raw JSON calls, the error type, object accessors.

Objects travel as the API's own JSON (plain dicts), not as the client's generated models: a
list of thousands of pods deserialises several times faster, and the caches keep what the API
sent. Every call goes through `call_json`, which turns a failure into `ApiException` (HTTP
statuses) or a transport error, and `failure` maps either to `KubeApiError`.

The adapters call through a `Caller`: the one place where a call is made with its deadline, its
failure mapped to `KubeApiError` (naming the operation and the object) and counted through the
error callback. A status the caller expects as an answer (a 404 on a read that may find
nothing) is not a failure: `call_allowing` returns None for it and counts nothing. The informers'
list+watch loop is the one exception: a watch is a stream, not a call, and the loop catches
`CALL_ERRORS` itself to relist on a 410 and back off.

Every write goes through `write_json`, fenced by the Lease of the service it is for: it asks its
`Fence` about that service (`namespace/name` of the managed Deployment; the bucket Leases'
`leads`, false once the renew deadline of the service's bucket has passed by this replica's own
clock) immediately before the request is sent, after every await of the caller, and raises
`NotLeaderError` instead of sending. The deadline comes a safety margin before any other
replica may judge the Lease expired; a write already on its way when the deadline passes is
fenced by its precondition (the resourceVersion it was based on), not here.

It must not cache, retry or decide anything.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, Final

import aiohttp
from kubernetes_asyncio.client import ApiException

from autoscaler import errors

Obj = dict[str, Any]
"""A Kubernetes object as the API serialises it."""

Fence = Callable[[str], bool]
"""Whether this replica may write now for the service `namespace/name`; asked immediately
before each write is sent."""

ErrorCallback = Callable[[str], None]
"""Told the operation (`deployments.list`, `leases.update`, ...) of every failed API call."""

MERGE_PATCH: Final = "application/merge-patch+json"
DEFAULT_REQUEST_TIMEOUT_S: Final = 10.0

TRANSPORT_ERRORS: Final = (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError)
"""What a call raises when no HTTP answer came back (refused, reset, timed out)."""

CALL_ERRORS: Final = (ApiException, *TRANSPORT_ERRORS, ValueError)
"""What a call raises when it failed: an HTTP error status, no answer, or an answer that is not
a JSON object."""


class KubeApiError(errors.ActuationError):
    """A Kubernetes API call failed; `status` is the HTTP status, None when none came back."""

    def __init__(self, operation: str, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.operation = operation
        self.status = status


class NotLeaderError(errors.ActuationError):
    """A write was asked of an instance that does not hold the Lease of its service's bucket."""


def ignore_error(_: str) -> None:
    """The default error callback: counts nothing."""


def always(_: str) -> bool:
    """The fence of a caller that is not fenced by a Lease (the electors themselves, a lone
    instance, tests): every write is allowed."""
    return True


@dataclasses.dataclass(frozen=True, slots=True)
class Caller:
    """How one adapter calls the API: its write fence, its error count and its deadline.

    Every failure leaves as `KubeApiError` with the HTTP status (None when no answer came back)
    and is counted through `on_error`, told the operation (`deployments.patch`).
    """

    fence: Fence = always
    """Asked about the write's service immediately before each write is sent (`write_json`)."""
    on_error: ErrorCallback = ignore_error
    request_timeout_s: float | None = DEFAULT_REQUEST_TIMEOUT_S

    async def call(
        self,
        operation: str,
        target: str,
        fn: Callable[..., Awaitable[Any]],
        *args: Any,
        write: bool = False,
        service: str | None = None,
        **kwargs: Any,
    ) -> Obj:
        """The answer's JSON; a `write` is fenced by the Lease of `service` (`namespace/name`;
        `target` when None, for a call on the service's own Deployment). `target` names the
        object in the error."""
        answer = await self.call_allowing(
            (), operation, target, fn, *args, write=write, service=service, **kwargs
        )
        assert answer is not None  # nothing is allowed, so every failure raised
        return answer

    async def call_allowing(
        self,
        allow: Collection[int],
        operation: str,
        target: str,
        fn: Callable[..., Awaitable[Any]],
        *args: Any,
        write: bool = False,
        service: str | None = None,
        **kwargs: Any,
    ) -> Obj | None:
        """As `call`, but None (and nothing counted) when the HTTP status is one of `allow`."""
        try:
            if write:
                return await write_json(
                    self.fence,
                    target if service is None else service,
                    fn,
                    *args,
                    request_timeout_s=self.request_timeout_s,
                    **kwargs,
                )
            return await call_json(fn, *args, request_timeout_s=self.request_timeout_s, **kwargs)
        except CALL_ERRORS as e:
            if isinstance(e, ApiException) and e.status in allow:
                return None
            self.on_error(operation)
            raise failure(operation, target, e) from e


async def call_json(
    fn: Callable[..., Awaitable[Any]],
    *args: Any,
    request_timeout_s: float | None = DEFAULT_REQUEST_TIMEOUT_S,
    **kwargs: Any,
) -> Obj:
    """Call a generated client method and return the answer's JSON; raise on a non-2xx status."""
    if request_timeout_s is not None:
        kwargs["_request_timeout"] = request_timeout_s
    response: aiohttp.ClientResponse = await fn(*args, _preload_content=False, **kwargs)
    try:
        body = await response.read()
    finally:
        response.release()
    if not 200 <= response.status <= 299:
        error = ApiException(status=response.status, reason=response.reason)
        error.body = body
        raise error
    document = json.loads(body)
    if not isinstance(document, dict):
        raise ValueError(f"the API answered {type(document).__name__}, not an object")
    return document


async def write_json(
    fence: Fence,
    service: str,
    fn: Callable[..., Awaitable[Any]],
    *args: Any,
    request_timeout_s: float | None = DEFAULT_REQUEST_TIMEOUT_S,
    **kwargs: Any,
) -> Obj:
    """`call_json` for a write on behalf of `service`: `NotLeaderError`, and nothing sent, when
    `fence(service)` says no."""
    if not fence(service):
        raise NotLeaderError(
            f"{service}: this instance does not lead its Lease (or the renew deadline passed)"
        )
    return await call_json(fn, *args, request_timeout_s=request_timeout_s, **kwargs)


def status_of(error: BaseException) -> int | None:
    """The HTTP status of a failed call, None when no answer came back."""
    return error.status if isinstance(error, ApiException) else None


def failure(operation: str, target: str, error: BaseException) -> KubeApiError:
    """The project's error for a failed call: which call, on what, and the server's words."""
    status = status_of(error)
    if isinstance(error, ApiException):
        detail = f"HTTP {error.status} {error.reason or ''}".rstrip()
        message = _server_message(error.body)
        if message:
            detail += f": {message}"
    else:
        detail = f"{type(error).__name__}: {error}".rstrip(": ")
    return KubeApiError(operation, f"{operation} {target} failed: {detail}", status=status)


def _server_message(body: object) -> str:
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    if not isinstance(body, str) or not body:
        return ""
    try:
        status = json.loads(body)
    except ValueError:
        return body[:200]
    message = status.get("message") if isinstance(status, dict) else None
    return message if isinstance(message, str) else ""


# -- object accessors -------------------------------------------------------------------------


def meta(obj: Mapping[str, Any]) -> Obj:
    value = obj.get("metadata")
    return value if isinstance(value, dict) else {}


def name(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("name") or "")


def namespace(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("namespace") or "")


def uid(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("uid") or "")


def resource_version(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("resourceVersion") or "")


def annotations_of(obj: Mapping[str, Any]) -> dict[str, str]:
    value = meta(obj).get("annotations")
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, str)}


def spec(obj: Mapping[str, Any]) -> Obj:
    value = obj.get("spec")
    return value if isinstance(value, dict) else {}


def status(obj: Mapping[str, Any]) -> Obj:
    value = obj.get("status")
    return value if isinstance(value, dict) else {}


def controller_uid(obj: Mapping[str, Any]) -> str | None:
    """The uid of the object's controlling owner (the ownerReference with `controller: true`)."""
    for owner in meta(obj).get("ownerReferences") or ():
        if isinstance(owner, dict) and owner.get("controller") and owner.get("uid"):
            return str(owner["uid"])
    return None


def condition(obj: Mapping[str, Any], kind: str) -> Obj | None:
    for item in status(obj).get("conditions") or ():
        if isinstance(item, dict) and item.get("type") == kind:
            return item
    return None


def parse_time(text: object) -> float | None:
    """Unix seconds of an RFC 3339 API timestamp; None when absent or malformed."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def format_micro_time(unix_s: float) -> str:
    """RFC 3339 with microseconds in UTC, as `metav1.MicroTime` serialises."""
    moment = datetime.datetime.fromtimestamp(unix_s, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
