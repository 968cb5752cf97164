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

A write the adapters send often (a status annotation, a scale, an Event) is a `Request`: its
method, path and body, sent on the `ApiClient`'s own HTTP session (its connector's TLS and
connection limit, its proxy) with the headers the generated client would send (`Accept`,
`Content-Type`, its default headers such as the User-Agent, and the `authorization` of the
configuration's `auth_settings()`, asked before every request, so a refreshed token is used),
the body serialised once as the generated client serialises it (the same bytes). It skips
the generated client's parameter checks, sanitising and generic header building: about 60 %
of the client's own CPU per write beside the HTTP request (docs/benchmark.md). Its answer and
its failures are mapped exactly as `call_json` maps the generated client's.

It must not cache, retry or decide anything.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import functools
import json
import urllib.parse
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, Final

import aiohttp
from kubernetes_asyncio import client
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
JSON: Final = "application/json"
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


@dataclasses.dataclass(frozen=True, slots=True)
class Request:
    """One call sent on `api`'s session without the generated client (module docstring)."""

    api: client.ApiClient
    method: str
    path: str
    """From the API's root, its segments quoted (`resource_path`): `/apis/apps/v1/...`."""
    body: object = None
    """JSON-serialisable; None sends no body."""
    content_type: str = JSON


Target = Callable[..., Awaitable[Any]] | Request
"""What a call sends: a generated client function (with its arguments) or a `Request`."""


def resource_path(
    group: str,
    version: str,
    plural: str,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """The path of a collection or an object as the API serves it (the core group is "")."""
    parts = ["api", version] if not group else ["apis", group, version]
    if namespace is not None:
        parts += ["namespaces", _quote(namespace)]
    parts.append(plural)
    if name is not None:
        parts.append(_quote(name))
        if subresource is not None:
            parts.append(subresource)
    return "/" + "/".join(parts)


def _quote(segment: str) -> str:
    # As the generated client quotes a path parameter: every reserved character.
    return urllib.parse.quote(segment, safe="")


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
        fn: Target,
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
        fn: Target,
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
    fn: Target,
    *args: Any,
    request_timeout_s: float | None = DEFAULT_REQUEST_TIMEOUT_S,
    **kwargs: Any,
) -> Obj:
    """Call a generated client method (or send a `Request`, which takes no other argument) and
    return the answer's JSON; raise on a non-2xx status."""
    if isinstance(fn, Request):
        return await _requested(fn, args, kwargs, request_timeout_s)
    if request_timeout_s is not None:
        kwargs["_request_timeout"] = request_timeout_s
    return await _answer(await fn(*args, _preload_content=False, **kwargs))


async def _requested(
    request: Request,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    request_timeout_s: float | None,
    *,
    before_send: Callable[[], None] | None = None,
) -> Obj:
    """Send `request` and read its answer; `before_send` runs between its authorization (which
    may wait on a token's refresh) and the sending, where a raise sends nothing."""
    if args or kwargs:
        raise TypeError("a Request carries its own arguments")
    url, headers = await _prepared(request)
    if before_send is not None:
        before_send()
    return await _answer(await _send(request, url, headers, request_timeout_s))


async def _prepared(request: Request) -> tuple[str, dict[str, str]]:
    """The URL and headers the generated client would send, with the configuration's
    authorization (`auth_settings()` runs its refresh hook: a rotated token file, an exec
    plugin)."""
    api = request.api
    headers = {"Accept": JSON, "Content-Type": request.content_type, **api.default_headers}
    if api.cookie:
        headers["Cookie"] = api.cookie
    queries: list[tuple[str, str]] = []
    await api.update_params_for_auth(headers, queries, list(_AUTH_SETTINGS))
    url = (api.configuration.host or "") + request.path
    if queries:
        url += "?" + urllib.parse.urlencode(queries)
    return url, headers


async def _send(
    request: Request, url: str, headers: Mapping[str, str], request_timeout_s: float | None
) -> aiohttp.ClientResponse:
    """Send `request` to `url` with `headers` as the generated client's REST layer would (its
    session, proxy, TLS server name, timeout and body bytes); the response, unread."""
    rest = request.api.rest_client
    options: dict[str, Any] = {}
    if rest.proxy:
        options["proxy"] = rest.proxy
    if rest.proxy_headers:
        options["proxy_headers"] = rest.proxy_headers
    if rest.server_hostname:
        options["server_hostname"] = rest.server_hostname
    if request.body is not None:
        options["data"] = json.dumps(request.body).encode()
    response: aiohttp.ClientResponse = await rest.pool_manager.request(
        request.method,
        url,
        headers=headers,
        timeout=_timeout(request_timeout_s),
        **options,
    )
    return response


_AUTH_SETTINGS: Final = ("BearerToken",)
"""The generated client's authentication for every Kubernetes call (a bearer token, refreshed
by the configuration's hook); client certificates are in the session's TLS context."""


@functools.lru_cache(maxsize=8)
def _timeout(request_timeout_s: float | None) -> aiohttp.ClientTimeout:
    """As the generated client sets it: a total deadline, or none when 0 or None."""
    if request_timeout_s:
        return aiohttp.ClientTimeout(total=request_timeout_s)
    return aiohttp.ClientTimeout()


async def _answer(response: aiohttp.ClientResponse) -> Obj:
    """The JSON object of a response; `ApiException` on a non-2xx status."""
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
    fn: Target,
    *args: Any,
    request_timeout_s: float | None = DEFAULT_REQUEST_TIMEOUT_S,
    **kwargs: Any,
) -> Obj:
    """`call_json` for a write on behalf of `service`: `NotLeaderError`, and nothing sent, when
    `fence(service)` says no. A `Request`'s fence is asked after its authorization is (which
    may wait on a token's refresh), immediately before it is sent."""
    if isinstance(fn, Request):
        return await _requested(
            fn, args, kwargs, request_timeout_s, before_send=lambda: _fenced(fence, service)
        )
    _fenced(fence, service)
    return await call_json(fn, *args, request_timeout_s=request_timeout_s, **kwargs)


def _fenced(fence: Fence, service: str) -> None:
    if not fence(service):
        raise NotLeaderError(
            f"{service}: this instance does not lead its Lease (or the renew deadline passed)"
        )


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
