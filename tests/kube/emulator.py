"""An in-process Kubernetes API server that the real kubernetes-asyncio client talks to over HTTP.

Built on kmock 0.8 (pinned), by the author of kopf. What is reused and what is replaced:

- Reused from kmock: the HTTP server on a loopback port (`kmock.Server`), the `Status` rendering
  of unexpected errors, API discovery (`/api`, `/apis`, `/apis/GROUP[/VERSION]`, `/version`)
  from its bundled resource list, and its DSL: a test can still put a reaction in front of the
  emulated API (`kube.emulator['patch', kmock.resource('apps', 'v1', 'deployments')] << 500`).
- Replaced: kmock's `KubernetesEmulator` state. Its gaps were measured, not guessed: create
  answers 200 where the client expects 201 (custom objects then deserialise to None); PUT is not
  routed (Lease renewals fail); the client's `watch=True` is not taken for a watch (kmock
  compares with "true"), and its watches ignore selectors, resourceVersion and
  `timeoutSeconds` and cannot answer 410; there are no label/field
  selectors, resourceVersions, conflicts, uids, generations or generateName; `/version/` (the
  client's spelling) is a 404; status patches replace `conditions` whole; listing namespaces is
  a 500 and `/api/v1/namespaces/NAME` is misparsed; every write is applied even when a test's
  reaction intercepts it; and its request log is scanned by every request, so each call gets
  slower as a test runs. These are not thin fixes over its store (a history of dicts patched
  by plain merging), so the state and the verbs live in `store.py` and the HTTP routing here;
  kmock's log is trimmed to the last few requests. `RequestLog` is the cheap replacement: a
  counter of (verb, group, resource, subresource, namespace) plus a bounded recent window.

Watches stream JSON lines, resume from a resourceVersion, end at `timeoutSeconds` of event-loop
time (virtual under looptime), and answer 410 Gone when compacted or on demand
(`expire_next_watch`). `fail()` injects an error status for the next matching calls. `hold()`
keeps the next matching request waiting, unserved, until the test releases it (a write delayed
in flight), and carries it out even when its client has gone away, as an API server does.
`chaos()` makes a seeded fraction of all calls fail in one way until `calm()`: `5xx` (500 or
503), `409` (writes), `410` (watches expire), `drop` (the connection closes without an answer)
or `hang` (no answer until `calm()`, then a 504 with nothing applied: the client's own timeout
ends its wait). The request log keeps every write with its answer's
status and the client's User-Agent, which names the controller replica.

It must not sleep, and runs nothing in the background except the watches clients hold open;
held and hung requests wait on events the test sets.
"""

import asyncio
import collections
import contextlib
import dataclasses
import functools
import json
import pathlib
import random
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any, NamedTuple

import aiohttp.web
import attrs
import kmock
from kmock._internal import rendering  # StreamingError: kmock's own streaming failures
from kubernetes_asyncio import client

from .store import ApiError, ResourceType, Store, bundled_resources

_WATCH_TRUE = {"true", "1"}
_WRITES = {"create", "update", "patch", "delete", "deletecollection"}
CHAOS_KINDS = ("5xx", "409", "410", "drop", "hang")
_VERBS = {"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
_ACTIONS = {
    "list": kmock.action.LIST,
    "watch": kmock.action.WATCH,
    "get": kmock.action.FETCH,
    "create": kmock.action.CREATE,
    "update": kmock.action.UPDATE,
    "patch": kmock.action.UPDATE,
    "delete": kmock.action.DELETE,
}


class Route(NamedTuple):
    """A parsed API path; `plural` is None for the discovery paths `/api/v1`, `/apis/G/V`."""

    group: str
    version: str
    plural: str | None
    namespace: str | None
    name: str | None
    subresource: str | None


def parse_route(path: str) -> Route | None:
    """Parse `/api/v1/...` and `/apis/GROUP/VERSION/...`; None for any other path."""
    parts = [part for part in path.split("/") if part]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = None
    # `namespaces/NS/PLURAL/...` is a namespaced resource; `namespaces[/NAME[/status]]` itself
    # is the cluster-scoped Namespace (its only subresources are status and finalize).
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
        namespace, rest = rest[1], rest[2:]
    if len(rest) > 3:
        return None
    plural, name, subresource = [*rest, None, None, None][:3]
    return Route(group, version, plural, namespace, name, subresource)


def kubernetes_verb(method: str, route: Route, query: Mapping[str, str]) -> str:
    """The verb RBAC would check for this request."""
    match method.upper():
        case "GET" if query.get("watch", "").lower() in _WATCH_TRUE:
            return "watch"
        case "GET":
            return "get" if route.name else "list"
        case "POST":
            return "create"
        case "PUT":
            return "update"
        case "PATCH":
            return "patch"
        case "DELETE":
            return "delete" if route.name else "deletecollection"
        case other:
            return other.lower()


class ApiCall(NamedTuple):
    """One API request as RBAC sees it."""

    verb: str
    group: str
    resource: str
    subresource: str  # "" when none
    namespace: str | None


class Write(NamedTuple):
    """One write request as the server answered it."""

    verb: str
    resource: str  # plural, or plural/subresource
    namespace: str | None
    name: str | None  # a create's is the created object's
    agent: str  # the client's User-Agent
    status: int
    holder: str | None = None  # a Lease's holder as the answer names it


@dataclasses.dataclass
class RequestLog:
    """What clients asked the API for: aggregated, so it stays cheap however long a test runs."""

    recent_limit: int = 500
    counts: collections.Counter[ApiCall] = dataclasses.field(default_factory=collections.Counter)
    non_resource: collections.Counter[tuple[str, str]] = dataclasses.field(
        default_factory=collections.Counter
    )  # (verb, path) of /version, /api, /healthz, ...
    recent: collections.deque[ApiCall] = dataclasses.field(init=False)
    writes: list[Write] = dataclasses.field(default_factory=list)
    """Every write, in the order the server answered them."""

    def __post_init__(self) -> None:
        self.recent = collections.deque(maxlen=self.recent_limit)

    def record(self, call: ApiCall) -> None:
        self.counts[call] += 1
        self.recent.append(call)

    def count(self, verb: str | None = None, resource: str | None = None, **fields: Any) -> int:
        """How many calls match; `resource` may name a subresource as `pods/status`."""
        return sum(
            n for call, n in self.counts.items() if _call_matches(call, verb, resource, fields)
        )

    def rules(self) -> set[tuple[str, str, str]]:
        """(verb, group, resource[/subresource]) triples, the shape of RBAC rules."""
        return {
            (
                call.verb,
                call.group,
                f"{call.resource}/{call.subresource}" if call.subresource else call.resource,
            )
            for call in self.counts
        }

    def clear(self) -> None:
        self.counts.clear()
        self.non_resource.clear()
        self.recent.clear()
        self.writes.clear()


def _call_matches(
    call: ApiCall, verb: str | None, resource: str | None, fields: Mapping[str, Any]
) -> bool:
    if verb is not None and call.verb != verb:
        return False
    if resource is not None:
        plural, _, sub = resource.partition("/")
        if (call.resource, call.subresource) != (plural, sub):
            return False
    return all(getattr(call, key) == value for key, value in fields.items())


@dataclasses.dataclass
class Fault:
    """An injected error for the next `times` calls that match."""

    status: int
    verb: str | None = None
    resource: str | None = None  # plural, or plural/subresource
    namespace: str | None = None
    name: str | None = None
    times: int = 1
    streamed: bool = False  # for watches: HTTP 200 and an ERROR event instead of an HTTP error
    message: str = "injected by the test"

    def matches(self, call: ApiCall, name: str | None) -> bool:
        fields = {"namespace": self.namespace} if self.namespace is not None else {}
        return _call_matches(call, self.verb, self.resource, fields) and self.name in (None, name)

    def error(self) -> ApiError:
        reasons = {
            400: "BadRequest",
            403: "Forbidden",
            404: "NotFound",
            409: "Conflict",
            410: "Expired",
        }
        return ApiError(self.status, reasons.get(self.status, "InternalError"), self.message)


@dataclasses.dataclass(eq=False)
class Hold:
    """The next request matching `verb` and `resource` waits, unserved, until `release()`."""

    verb: str | None
    resource: str | None
    name: str | None = None
    arrived: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    """Set when the held request has come in."""
    released: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    answered: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    """Set once the released request has been served (even if its client went away)."""
    status: int | None = None
    """The HTTP status it was answered with."""

    def release(self) -> None:
        """Serve the held request now, against the store as it is now."""
        self.released.set()


@dataclasses.dataclass
class Chaos:
    """A seeded fraction `rate` of the calls fail as `kind` says (see the module docstring)."""

    kind: str
    rate: float
    rng: random.Random
    hits: int = 0

    def strikes(self, verb: str) -> bool:
        if self.kind == "409" and verb not in _WRITES:
            return False
        if self.kind == "410" and verb != "watch":
            return False
        if self.rng.random() >= self.rate:
            return False
        self.hits += 1
        return True


class _DropError(Exception):
    """The connection is closed without an answer."""


@attrs.frozen(kw_only=True, eq=False)
class ApiRequest(kmock.Request):
    """kmock's request with our own parse of the path (kmock 0.8 misparses namespaces)."""

    route: Route | None = None
    verb: str = ""


class _HandOverError(Exception):
    """Raised by the lowest-priority reaction: no test reaction took the request; serve it."""


def _is_resource_request(request: kmock.Request) -> bool:
    return (
        isinstance(request, ApiRequest)
        and request.route is not None
        and request.route.plural is not None
    )


def _hand_over() -> None:
    raise _HandOverError


@attrs.define(kw_only=True)
class Emulator(kmock.KubernetesScaffold):
    """kmock's Kubernetes scaffold with a real API behind it. See the module docstring."""

    store: Store = attrs.field(factory=Store)
    calls: RequestLog = attrs.field(factory=RequestLog)
    request_window: int = 8  # how many requests kmock's own log keeps (its DSL scans it)
    watch_limit_s: float | None = None
    """Ends every watch after this many seconds at most, as an API server's own request
    timeout does; None leaves it to the client's `timeoutSeconds`."""
    _faults: list[Fault] = attrs.field(factory=list, init=False)
    _holds: list[Hold] = attrs.field(factory=list, init=False)
    _chaos: Chaos | None = attrs.field(default=None, init=False)
    _calm: asyncio.Event = attrs.field(factory=asyncio.Event, init=False)
    _held_answers: set[asyncio.Future[aiohttp.web.StreamResponse]] = attrs.field(
        factory=set, init=False
    )
    _native: Any = attrs.field(default=None, init=False)
    _own_reactions: int = attrs.field(default=0, init=False)
    _served: int = attrs.field(default=0, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        for ref, info in bundled_resources():
            self.resources[ref] = info
        for probe in ("/healthz", "/livez", "/readyz"):
            self.fallback[f"get {probe}"] << b"ok"
        self._native = self.fallback[_is_resource_request] << _hand_over
        self._own_reactions = len(self._payloads)

    # -- test controls -------------------------------------------------------------------------

    def fail(
        self,
        verb: str | None = None,
        resource: str | None = None,
        *,
        status: int = 500,
        times: int = 1,
        namespace: str | None = None,
        name: str | None = None,
        message: str = "injected by the test",
    ) -> None:
        """Answer the next `times` matching calls with `status`, changing nothing."""
        self._faults.append(Fault(status, verb, resource, namespace, name, times, message=message))

    def expire_next_watch(self, resource: str | None = None, *, http: bool = False) -> None:
        """Answer the next watch with 410 Gone: an ERROR event (as a real server) or HTTP 410."""
        fault = Fault(410, "watch", resource, streamed=not http, message="too old resource version")
        self._faults.append(fault)

    def hold(
        self, verb: str | None = None, resource: str | None = None, *, name: str | None = None
    ) -> Hold:
        """Keep the next matching request waiting until the returned `Hold` is released."""
        held = Hold(verb, resource, name)
        self._holds.append(held)
        return held

    def chaos(self, kind: str, rate: float, *, seed: int) -> Chaos:
        """Fail a seeded fraction `rate` of the calls as `kind` until `calm()`."""
        if kind not in CHAOS_KINDS:
            raise ValueError(f"chaos is one of {CHAOS_KINDS}, not {kind!r}")
        self._calm.clear()
        self._chaos = Chaos(kind, rate, random.Random(seed))
        return self._chaos

    def calm(self) -> None:
        """End the chaos; hung requests are answered (504, nothing applied)."""
        self._chaos = None
        self._calm.set()

    # -- kmock plumbing ------------------------------------------------------------------------

    def _get_resources(self) -> list[kmock.resource]:
        # Discovery lists what the store serves, custom resources included.
        for rtype in self.store.resource_types():
            ref = kmock.resource(group=rtype.group, version=rtype.version, plural=rtype.plural)
            if ref not in self.resources:
                self.resources[ref] = kmock.ResourceInfo(
                    kind=rtype.kind,
                    namespaced=rtype.namespaced is not False,
                    subresources=rtype.subresources,
                    verbs=_VERBS,
                )
        return super()._get_resources()

    async def _serve_api(self, request: kmock.Request) -> dict[str, Any]:
        # kmock 0.8 omits serverAddressByClientCIDRs, which the client's V1APIVersions requires.
        address = request.url.host or "127.0.0.1"
        if request.url.port:
            address = f"{address}:{request.url.port}"
        cidrs = [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}]
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": cidrs}

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        # As kmock's RawHandler.__call__, but with our request parsing and a trimmed log.
        raw_response: aiohttp.web.StreamResponse | None = None
        try:
            request = await self._parse(raw_request)
            self._requests.append(request)
            del self._requests[: -self.request_window]
            try:
                return await self._handle(request)
            except rendering.StreamingError as e:
                raw_response = e.args[0]
                raise e.__cause__ or e from None
        except _DropError:
            if raw_request.transport is not None:
                raw_request.transport.close()
            return aiohttp.web.Response(status=500)  # never sent: the connection is closed
        except Exception as e:
            if not self._errors:
                raise
            self._errors[-1].append(e)
            if raw_response is None or not raw_response.prepared:
                return await self._render_error(e)
            await self._stream_error(e, raw_response)
            await raw_response.write_eof()
            return raw_response

    async def _parse(self, raw_request: aiohttp.web.BaseRequest) -> ApiRequest:
        body = await raw_request.read()
        try:
            data = json.loads(body) if body else None
        except ValueError:
            data = None
        query = dict(raw_request.query)
        route = parse_route(raw_request.path)
        verb = (
            kubernetes_verb(raw_request.method, route, query)
            if route
            else raw_request.method.lower()
        )
        if route is not None and route.plural is not None:
            self.calls.record(
                ApiCall(verb, route.group, route.plural, route.subresource or "", route.namespace)
            )
        else:
            self.calls.non_resource[verb, raw_request.path] += 1
        self._served += 1
        # The API server treats `/api/` as `/api`; so do kmock's discovery patterns, then.
        path = raw_request.path.rstrip("/") or "/"
        return ApiRequest(
            id=self._served,
            raw_request=raw_request,
            url=raw_request.url.with_path(path).with_query(raw_request.url.query),
            method=raw_request.method,
            params=query,
            headers=dict(raw_request.headers),
            cookies=dict(raw_request.cookies),
            body=body,
            text=body.decode("utf-8", errors="replace"),
            data=data,
            action=_ACTIONS.get(verb),
            resource=resource_ref(route.group, route.version, route.plural) if route else None,
            namespace=route.namespace if route else None,
            name=route.name if route else None,
            subresource=route.subresource if route else None,
            route=route,
            verb=verb,
        )

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        # kmock matches every reaction against its request log, at ~1 ms a reaction: skip that
        # for API requests until a test adds a reaction of its own.
        if not _is_resource_request(request) or len(self._payloads) > self._own_reactions:
            try:
                return await super()._handle(request)
            except _HandOverError:
                del self._native._requests[:]  # kmock keeps every request a reaction served
        assert isinstance(request, ApiRequest)
        assert request.route is not None
        held = self._take_hold(request, request.route)
        if held is None:
            return await self._answer(request, request.route)
        held.arrived.set()
        # As an API server does, finish the request even when its client has gone away.
        answer = asyncio.ensure_future(self._answer_when_released(held, request, request.route))
        self._held_answers.add(answer)
        answer.add_done_callback(self._held_answers.discard)
        return await asyncio.shield(answer)

    async def _answer_when_released(
        self, held: Hold, request: ApiRequest, route: Route
    ) -> aiohttp.web.StreamResponse:
        await held.released.wait()
        response = await self._answer(request, route)
        held.status = response.status
        held.answered.set()
        return response

    async def _answer(self, request: ApiRequest, route: Route) -> aiohttp.web.StreamResponse:
        try:
            response = await self._serve(request, route)
        except ApiError as e:
            response = aiohttp.web.json_response(e.to_status(), status=e.status)
        if request.verb in _WRITES:
            resource = route.plural or ""
            if route.subresource:
                resource = f"{resource}/{route.subresource}"
            agent = request.headers.get("User-Agent", "")
            name = route.name
            body = response.body if isinstance(response, aiohttp.web.Response) else None
            if name is None and response.status < 300 and isinstance(body, bytes):
                # A create names its object in the answer (a generated name included).
                name = json.loads(body).get("metadata", {}).get("name")
            holder = None
            if route.plural == "leases" and response.status < 300 and isinstance(body, bytes):
                holder = json.loads(body).get("spec", {}).get("holderIdentity")
            self.calls.writes.append(
                Write(request.verb, resource, route.namespace, name, agent, response.status, holder)
            )
        return response

    # -- the API -------------------------------------------------------------------------------

    async def _serve(self, request: ApiRequest, route: Route) -> aiohttp.web.StreamResponse:
        chaos = self._chaos
        if chaos is not None and chaos.strikes(request.verb):
            await self._strike(chaos)
            if chaos.kind == "410":
                return await self._stream_watch(request, rtype_of(self.store, route), None, _GONE)
        fault = self._take_fault(request, route)
        if fault is not None and not fault.streamed:
            raise fault.error()
        store, verb, params, data = self.store, request.verb, request.params, request.data
        kind = data.get("kind") if verb == "create" and isinstance(data, dict) else None
        assert route.plural is not None
        rtype = store.resource_type(
            resource_ref(route.group, route.version, route.plural),
            kind_hint=kind if isinstance(kind, str) else None,
        )
        namespace, name = self._check_scope(rtype, route, verb), route.name
        selected = {
            "label_selector": params.get("labelSelector"),
            "field_selector": params.get("fieldSelector"),
        }
        result: Any
        match verb:
            case "watch":
                return await self._stream_watch(request, rtype, namespace, fault)
            case "list":
                limit = params.get("limit", "")
                result = store.list_page(
                    rtype,
                    namespace,
                    limit=int(limit) if limit.isdigit() else None,
                    continue_token=params.get("continue"),
                    **selected,
                )
            case "deletecollection":
                items = store.delete_collection(rtype, namespace, **selected)
                meta = {"resourceVersion": store.resource_version}
                result = {
                    "apiVersion": rtype.api_version,
                    "kind": f"{rtype.kind}List",
                    "metadata": meta,
                    "items": items,
                }
            case "create" if name is None:
                return aiohttp.web.json_response(
                    store.create(rtype, data, namespace=namespace), status=201
                )
            case _ if route.subresource not in (None, "status", "scale"):
                raise ApiError(
                    404,
                    "NotFound",
                    f"the server could not find the requested resource ({route.subresource})",
                )
            case "get" if route.subresource == "scale":
                result = store.get_scale(rtype, namespace, name or "")
            case "get":
                result = store.get(rtype, namespace, name or "")
            case "update":
                result = store.replace(
                    rtype, namespace, name or "", data, subresource=route.subresource
                )
            case "patch":
                if data is None:
                    raise ApiError(400, "BadRequest", "the patch body is not valid JSON")
                content_type = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
                result = store.patch(
                    rtype,
                    namespace,
                    name or "",
                    data,
                    content_type=content_type,
                    subresource=route.subresource,
                )
            case "delete":
                preconditions = data.get("preconditions") if isinstance(data, dict) else None
                result = store.delete(rtype, namespace, name or "", preconditions=preconditions)
            case _:
                raise ApiError(405, "MethodNotAllowed", f"{request.method} is not supported here")
        return aiohttp.web.json_response(result)

    def _check_scope(self, rtype: ResourceType, route: Route, verb: str) -> str | None:
        """The namespace of the request; a URL of the wrong scope does not exist (404)."""
        if rtype.namespaced is False and route.namespace is not None:
            raise ApiError(404, "NotFound", f"{route.plural} is not namespaced")
        if rtype.namespaced and route.namespace is None and verb not in ("list", "watch"):
            raise ApiError(
                404, "NotFound", f"{route.plural} is namespaced: the URL needs a namespace"
            )
        return route.namespace

    def _take_hold(self, request: ApiRequest, route: Route) -> Hold | None:
        call = ApiCall(
            request.verb, route.group, route.plural or "", route.subresource or "", route.namespace
        )
        for held in self._holds:
            if _call_matches(call, held.verb, held.resource, {}) and held.name in (
                None,
                route.name,
            ):
                self._holds.remove(held)
                return held
        return None

    async def _strike(self, chaos: Chaos) -> None:
        """Fail this call as the chaos says; a 410 is the watch's to stream."""
        match chaos.kind:
            case "5xx":
                status = chaos.rng.choice((500, 503))
                reason = "InternalError" if status == 500 else "ServiceUnavailable"
                raise ApiError(status, reason, "injected by the chaos")
            case "409":
                raise ApiError(409, "Conflict", "injected by the chaos")
            case "drop":
                raise _DropError
            case "hang":
                await self._calm.wait()
                raise ApiError(504, "Timeout", "the request hung until the chaos ended")

    def _take_fault(self, request: ApiRequest, route: Route) -> Fault | None:
        call = ApiCall(
            request.verb, route.group, route.plural or "", route.subresource or "", route.namespace
        )
        for fault in self._faults:
            if fault.matches(call, route.name):
                fault.times -= 1
                if fault.times <= 0:
                    self._faults.remove(fault)
                return fault
        return None

    async def _stream_watch(
        self, request: ApiRequest, rtype: ResourceType, namespace: str | None, fault: Fault | None
    ) -> aiohttp.web.StreamResponse:
        params = request.params
        field_selector = params.get("fieldSelector")
        if request.name is not None:  # the legacy watch of one named object
            by_name = f"metadata.name={request.name}"
            field_selector = f"{field_selector},{by_name}" if field_selector else by_name
        timeout = params.get("timeoutSeconds", "")
        timeout_s = float(timeout) if timeout.isdigit() else None
        if self.watch_limit_s is not None:
            timeout_s = min(timeout_s or self.watch_limit_s, self.watch_limit_s)
        events: AsyncGenerator[dict[str, Any]]
        if fault is not None:  # an injected expiry: the server's way is an ERROR event
            events = _one({"type": "ERROR", "object": fault.error().to_status()})
        else:
            events = self.store.watch(  # raises on bad parameters: a 400, before any header
                rtype,
                namespace,
                resource_version=params.get("resourceVersion"),
                label_selector=params.get("labelSelector"),
                field_selector=field_selector,
                timeout_s=timeout_s,
                bookmarks=params.get("allowWatchBookmarks", "").lower() in _WATCH_TRUE,
            )
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
        assert request._raw_request is not None
        await response.prepare(request._raw_request)
        # When the client goes away, so does the watch.
        async with contextlib.aclosing(events):
            with contextlib.suppress(ConnectionResetError):
                async for event in events:
                    await response.write(json.dumps(event).encode() + b"\n")
                await response.write_eof()
        return response


_GONE = Fault(410, "watch", streamed=True, message="too old resource version (chaos)")


def rtype_of(store: Store, route: Route) -> ResourceType:
    assert route.plural is not None
    return store.resource_type(resource_ref(route.group, route.version, route.plural))


@functools.lru_cache(maxsize=1024)
def resource_ref(group: str, version: str, plural: str | None) -> kmock.resource:
    """kmock's name for a resource, made once: making one costs more than serving a small
    request (it checks its argument against a runtime protocol)."""
    return kmock.resource(group=group, version=version, plural=plural)


async def _one(event: dict[str, Any]) -> AsyncGenerator[dict[str, Any]]:
    yield event


@dataclasses.dataclass
class Kube:
    """A running emulator: its URL, configured clients, and the controls a test needs."""

    emulator: Emulator
    url: str
    kubeconfig: pathlib.Path | None = None
    _clients: list[client.ApiClient] = dataclasses.field(default_factory=list)

    @property
    def store(self) -> Store:
        return self.emulator.store

    @property
    def requests(self) -> RequestLog:
        return self.emulator.calls

    def configuration(self) -> client.Configuration:
        return client.Configuration(host=self.url)

    def api_client(self) -> client.ApiClient:
        """A client for this server, closed when the server stops (or earlier with `async with`)."""
        api = client.ApiClient(self.configuration())
        self._clients.append(api)
        return api

    def fail(self, verb: str | None = None, resource: str | None = None, **kwargs: Any) -> None:
        """See `Emulator.fail`: e.g. `kube.fail("patch", "deployments/scale", status=409)`."""
        self.emulator.fail(verb, resource, **kwargs)

    def expire_next_watch(self, resource: str | None = None, *, http: bool = False) -> None:
        self.emulator.expire_next_watch(resource, http=http)

    def hold(self, verb: str | None = None, resource: str | None = None, **kwargs: Any) -> Hold:
        """See `Emulator.hold`: e.g. `kube.hold("patch", "deployments/scale")`."""
        return self.emulator.hold(verb, resource, **kwargs)

    def chaos(self, kind: str, rate: float, *, seed: int) -> Chaos:
        return self.emulator.chaos(kind, rate, seed=seed)

    def calm(self) -> None:
        self.emulator.calm()

    def compact(self) -> None:
        self.store.compact()

    async def close_clients(self) -> None:
        for api in self._clients:
            await api.close()
        self._clients.clear()


def write_kubeconfig(path: pathlib.Path, url: str) -> pathlib.Path:
    """A kubeconfig with one context for `url` and no credentials (JSON is valid YAML)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "emulator", "cluster": {"server": url}}],
        "users": [{"name": "emulator", "user": {}}],
        "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "emulator"}}],
        "current-context": "emulator",
    }
    path.write_text(json.dumps(config, indent=2))
    return path


@contextlib.asynccontextmanager
async def serve(
    emulator: Emulator | None = None, *, kubeconfig: pathlib.Path | None = None
) -> AsyncIterator[Kube]:
    """Run an emulator on a free 127.0.0.1 port; on exit, end watches and close the clients."""
    emulator = emulator if emulator is not None else Emulator(strict=True)
    async with emulator, kmock.Server(emulator) as server:
        url = f"http://{server.host}:{server.port}"
        kube = Kube(emulator, url, write_kubeconfig(kubeconfig, url) if kubeconfig else None)
        try:
            yield kube
        finally:
            emulator.calm()  # hung requests end
            await kube.close_clients()
            emulator.store.close()  # open watches end, so the server stops without waiting
