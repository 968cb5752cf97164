"""The object store behind the API emulator: what etcd plus the API server's registry would do.

It keeps objects as plain JSON dicts and implements the semantics a controller relies on:
one resourceVersion counter bumped by every write, optimistic concurrency (a stale
`metadata.resourceVersion` is a 409), uid/creationTimestamp/generation/generateName, the
status and scale subresources, finalizers, label and field selectors, and a bounded change
log from which watches are served, resumed by resourceVersion, or expired with 410 Gone.

Every method is synchronous except `watch`, so each write is atomic on the event loop. The
HTTP layer (`emulator.py`) and the fake controllers (`kubelet.py`) share this one code path;
the fakes call it in-process, so their writes are not in the request log. Errors are
`ApiError`, carrying the HTTP status and the `Status` body the API server would send.

It must not do I/O, sleep, or read the wall clock except through its injected `now`.
"""

import asyncio
import base64
import bisect
import copy
import dataclasses
import datetime
import functools
import gzip
import importlib.resources
import json
import random
import re
import uuid
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from typing import Any

import kmock

from . import patching, selectors

Obj = dict[str, Any]

# Namespaces a fresh cluster has.
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")

_NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # as apiserver's names.SimpleNameGenerator
_SCALABLE_DEFAULT_REPLICAS = {
    ("apps", "deployments"),
    ("apps", "replicasets"),
    ("apps", "statefulsets"),
}
# Resources whose status is kept as given on create (the kubelet registers a Node with status).
_STATUS_KEPT_ON_CREATE = {("", "nodes")}
_INITIAL_STATUS: dict[tuple[str, str], dict[str, Any]] = {
    ("", "pods"): {"phase": "Pending"},
    ("", "namespaces"): {"phase": "Active"},
}

# Field selectors the API server supports beyond metadata.name/namespace, per (group, plural).
_FIELDS: dict[tuple[str, str], dict[str, str]] = {
    ("", "pods"): {
        f: f
        for f in (
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        )
    },
    ("", "nodes"): {"spec.unschedulable": "spec.unschedulable"},
    ("", "namespaces"): {"status.phase": "status.phase"},
    ("", "secrets"): {"type": "type"},
    ("", "events"): {
        **{
            f"involvedObject.{f}": f"involvedObject.{f}"
            for f in (
                "kind",
                "namespace",
                "name",
                "uid",
                "apiVersion",
                "resourceVersion",
                "fieldPath",
            )
        },
        "reason": "reason",
        "reportingComponent": "reportingComponent",
        "source": "source.component",
        "type": "type",
    },
    ("apps", "replicasets"): {"status.replicas": "status.replicas"},
}


class ApiError(Exception):
    """An API error: the HTTP status and the `Status` object the API server answers with."""

    def __init__(
        self, status: int, reason: str, message: str, *, details: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.details = dict(details or {})

    def to_status(self) -> Obj:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "details": self.details,
            "code": self.status,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class ResourceType:
    """A served resource: group/version/plural plus what discovery says about it."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool | None  # None: a custom resource of unknown scope, scoped by its URL
    subresources: frozenset[str] = frozenset()
    builtin: bool = True
    label_selector_path: tuple[str, ...] = ()
    """A custom resource's `subresources.scale.labelSelectorPath` (text at that path); empty:
    `spec.selector`, a LabelSelector object, as the built-in kinds."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str]:
        """Storage key: all versions of a group's resource share one storage, as in etcd."""
        return (self.group, self.plural)

    def describe(self, name: str | None = None) -> Obj:
        details: Obj = {"group": self.group, "kind": self.plural}
        if name is not None:
            details["name"] = name
        return details

    @property
    def qualified(self) -> str:
        """`plural.group`, as the API server names a resource in its messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def not_found(self, name: str) -> ApiError:
        message = f'{self.qualified} "{name}" not found'
        return ApiError(404, "NotFound", message, details=self.describe(name))


# How callers name a resource: "v1/pods", "apps/v1/deployments", "x.io/v1/foos", or a type.
ResourceRef = str | kmock.resource | ResourceType


@dataclasses.dataclass(frozen=True, slots=True)
class _Change:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    old: Obj | None
    new: Obj


@dataclasses.dataclass(slots=True)
class _ChangeLog:
    """The recent changes of one resource; `base` is the absolute index of `entries[0]`."""

    entries: list[_Change] = dataclasses.field(default_factory=list)
    base: int = 0
    compacted_rv: int = 0  # changes up to this resourceVersion are forgotten
    changed: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)

    @property
    def end(self) -> int:
        return self.base + len(self.entries)

    def index_after(self, rv: int) -> int:
        return self.base + bisect.bisect_right(self.entries, rv, key=lambda change: change.rv)

    def append(self, change: _Change, *, limit: int) -> None:
        self.entries.append(change)
        if len(self.entries) > limit:
            dropped = len(self.entries) - limit // 2
            self.compacted_rv = self.entries[dropped - 1].rv
            del self.entries[:dropped]
            self.base += dropped
        # Wake the watchers: they wait on the old event; the next change needs a fresh one.
        self.changed.set()
        self.changed = asyncio.Event()


@functools.cache
def bundled_resources() -> tuple[tuple[kmock.resource, kmock.ResourceInfo], ...]:
    """The discovery documents of a stock cluster that kmock bundles: kinds, scopes, subresources.

    Read here rather than by `ResourcesArray.load_bundled()`, which in kmock 0.8 calls the
    deprecated `importlib.resources.read_binary` (an error under `filterwarnings = error`).
    """
    path = importlib.resources.files("kmock._internal").joinpath("resources.json.gz")
    bundled = kmock.ResourcesArray()
    bundled.load_data(gzip.decompress(path.read_bytes()))
    return tuple((ref, bundled[ref]) for ref in bundled)


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def format_time(moment: datetime.datetime) -> str:
    """RFC 3339 in UTC with second precision, as metav1.Time serialises."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _meta(obj: Mapping[str, Any]) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


_ATOMS = frozenset({str, int, float, bool, type(None)})


def _clone(value: Any) -> Any:
    """A deep copy of a JSON tree: dicts and lists copied, scalars shared, anything else
    deep-copied. Several times faster than `copy.deepcopy`, which costs most of the emulator's
    time at thousands of objects (it keeps a memo of every node for shared references, which
    a JSON document does not have)."""
    kind = type(value)
    if kind is dict:
        return {k: v if type(v) in _ATOMS else _clone(v) for k, v in value.items()}
    if kind is list:
        return [v if type(v) in _ATOMS else _clone(v) for v in value]
    if kind in _ATOMS:
        return value
    return copy.deepcopy(value)


def _without(obj: Mapping[str, Any], *keys: str) -> Obj:
    return {k: v for k, v in obj.items() if k not in keys}


class Store:
    """In-memory Kubernetes objects with API-server semantics. See the module docstring."""

    def __init__(
        self,
        *,
        now: Callable[[], datetime.datetime] = _utc_now,
        seed: int = 0,
        history_limit: int = 1000,
    ) -> None:
        self._now = now
        self._rng = random.Random(seed)
        self._history_limit = history_limit
        self._rv = 0
        self._compacted_rv = 0  # set by compact(): resuming any watch from before it is a 410
        self._closed = False
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        # How callers named each type found: parsing a name (kmock.resource) costs more than
        # a whole small write. Forgotten whenever a type is registered.
        self._named: dict[str | kmock.resource, ResourceType] = {}
        self._builtin_groups: set[str] = set()
        self._objects: dict[tuple[str, str], dict[tuple[str | None, str], Obj]] = {}
        self._logs: dict[tuple[str, str], _ChangeLog] = {}
        self._creation_order: dict[str, int] = {}  # uid -> resourceVersion of its creation
        self._load_builtin_types()
        for namespace in DEFAULT_NAMESPACES:
            self.create("v1/namespaces", {"metadata": {"name": namespace}})

    # -- resource types ------------------------------------------------------------------------

    def _load_builtin_types(self) -> None:
        for ref, info in bundled_resources():
            assert ref.group is not None
            assert ref.version is not None
            assert ref.plural is not None
            self._types[ref.group, ref.version, ref.plural] = ResourceType(
                group=ref.group,
                version=ref.version,
                plural=ref.plural,
                kind=info.kind or ref.plural.capitalize(),
                namespaced=info.namespaced,
                subresources=frozenset(info.subresources),
            )
            self._builtin_groups.add(ref.group)

    def register(
        self,
        ref: str | kmock.resource,
        *,
        kind: str,
        namespaced: bool | None = True,
        subresources: Iterable[str] = ("status",),
        label_selector_path: str = "",
    ) -> ResourceType:
        """Declare a custom resource (as installing its CRD would); with a `scale` subresource,
        `label_selector_path` (`.status.selector`) is its CRD's `labelSelectorPath`."""
        res = kmock.resource(ref)
        if res.group is None or res.version is None or res.plural is None:
            raise ValueError(f"a resource needs a group, a version and a plural: {ref!r}")
        rtype = ResourceType(
            res.group,
            res.version,
            res.plural,
            kind,
            namespaced,
            frozenset(subresources),
            False,
            tuple(step for step in label_selector_path.split(".") if step),
        )
        self._types[res.group, res.version, res.plural] = rtype
        self._named.clear()
        return rtype

    def resource_types(self) -> list[ResourceType]:
        return list(self._types.values())

    def resource_type(self, ref: ResourceRef, *, kind_hint: str | None = None) -> ResourceType:
        """Look a resource up; an unknown one in a non-built-in group is a custom resource."""
        if isinstance(ref, ResourceType):
            return ref
        named = self._named.get(ref)
        if named is not None:
            return named
        res = kmock.resource(ref)
        group, version, plural = res.group or "", res.version or "", res.plural or ""
        if (group, version, plural) in self._types:
            found = self._named[ref] = self._types[group, version, plural]
            return found
        if group in self._builtin_groups or not group or not version or not plural:
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource ({plural})"
            )
        # Storing arbitrary custom resources needs no CRD: assume the common shape (scope from
        # the URL, a status subresource). `register()` declares anything else.
        kind = kind_hint or plural.capitalize().removesuffix("s")
        return self.register(res, kind=kind, namespaced=None)

    # -- reads ---------------------------------------------------------------------------------

    @property
    def resource_version(self) -> str:
        return str(self._rv)

    def get(self, ref: ResourceRef, namespace: str | None, name: str) -> Obj:
        rtype = self.resource_type(ref)
        return self._out(rtype, self._get(rtype, namespace, name))

    def list_objects(
        self,
        ref: ResourceRef,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]:
        rtype = self.resource_type(ref)
        match = self._matcher(rtype, label_selector, field_selector)
        return [self._out(rtype, obj) for obj in self._select(rtype, namespace, match)]

    def list_page(
        self,
        ref: ResourceRef,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> Obj:
        """A `...List` document as the API answers a list request (shared, do not mutate)."""
        rtype = self.resource_type(ref)
        match = self._matcher(rtype, label_selector, field_selector)
        items = self._select(rtype, namespace, match)
        rv = self._rv
        if continue_token:
            try:
                token = json.loads(base64.urlsafe_b64decode(continue_token.encode()))
                rv, after = int(token["rv"]), tuple(token["after"])
            except (ValueError, KeyError, TypeError) as e:
                raise ApiError(400, "BadRequest", "invalid continue token") from e
            items = [obj for obj in items if self._sort_key(obj) > after]
        metadata: Obj = {"resourceVersion": str(rv)}
        if limit and len(items) > limit:
            metadata["remainingItemCount"] = len(items) - limit
            items = items[:limit]
            last = list(self._sort_key(items[-1]))
            metadata["continue"] = base64.urlsafe_b64encode(
                json.dumps({"rv": rv, "after": last}).encode()
            ).decode()
        return {
            "apiVersion": rtype.api_version,
            "kind": f"{rtype.kind}List",
            "metadata": metadata,
            "items": [self._versioned(rtype, obj) for obj in items],
        }

    def creation_order(self, obj: Mapping[str, Any]) -> int:
        """A total order of creation (timestamps have one-second resolution)."""
        return self._creation_order.get(_meta(obj).get("uid", ""), 0)

    def _get(self, rtype: ResourceType, namespace: str | None, name: str) -> Obj:
        obj = self._objects.get(rtype.key, {}).get((self._scope(rtype, namespace), name))
        if obj is None:
            raise rtype.not_found(name)
        return obj

    @staticmethod
    def _scope(rtype: ResourceType, namespace: str | None) -> str | None:
        return None if rtype.namespaced is False else namespace

    @staticmethod
    def _sort_key(obj: Mapping[str, Any]) -> tuple[str, str]:
        meta = _meta(obj)
        return (meta.get("namespace") or "", meta.get("name") or "")

    @staticmethod
    def _versioned(rtype: ResourceType, obj: Obj) -> Obj:
        # One storage serves every version of a resource; answer in the version asked for.
        if obj.get("apiVersion") == rtype.api_version or obj.get("kind") == "Scale":
            return obj
        return {**obj, "apiVersion": rtype.api_version}

    def _out(self, rtype: ResourceType, obj: Obj) -> Obj:
        """A private copy for the caller: stored objects are never mutated in place."""
        return _clone(self._versioned(rtype, obj))

    def _matcher(
        self, rtype: ResourceType, label_selector: str | None, field_selector: str | None
    ) -> Callable[[Obj], bool]:
        allowed = {"metadata.name": "metadata.name", "metadata.namespace": "metadata.namespace"}
        allowed |= _FIELDS.get(rtype.key, {})
        try:
            labels = selectors.parse_labels(label_selector)
            fields = selectors.parse_fields(field_selector, allowed)
        except ValueError as e:
            raise ApiError(400, "BadRequest", str(e)) from e

        def match(obj: Obj) -> bool:
            return selectors.match_labels(labels, _meta(obj).get("labels")) and (
                selectors.match_fields(fields, obj)
            )

        return match

    def _select(
        self, rtype: ResourceType, namespace: str | None, match: Callable[[Obj], bool]
    ) -> list[Obj]:
        objs = self._objects.get(rtype.key, {})
        found = [
            obj
            for (obj_namespace, _), obj in objs.items()
            if (namespace is None or obj_namespace == namespace) and match(obj)
        ]
        return sorted(found, key=self._sort_key)

    # -- writes --------------------------------------------------------------------------------

    def create(
        self, ref: ResourceRef, body: Mapping[str, Any], *, namespace: str | None = None
    ) -> Obj:
        """POST: create the object; the namespace comes from the URL or else the body."""
        kind_hint = body.get("kind") if isinstance(body, Mapping) else None
        rtype = self.resource_type(ref, kind_hint=kind_hint if isinstance(kind_hint, str) else None)
        return self._out(rtype, self._create(rtype, namespace, body))

    def _create(self, rtype: ResourceType, namespace: str | None, body: Any) -> Obj:
        if not isinstance(body, Mapping):
            raise ApiError(400, "BadRequest", "the body must be a JSON object")
        obj = _clone(dict(body))
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError(400, "BadRequest", "metadata must be an object")
        self._check_type_fields(rtype, obj)
        namespace = namespace if namespace is not None else meta.get("namespace")
        self._check_namespace(rtype, namespace, meta)

        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise ApiError(422, "Invalid", "metadata.name or metadata.generateName is required")
            for _ in range(8):  # as the API server, retry a taken random suffix a few times
                name = prefix + "".join(self._rng.choices(_GENERATE_ALPHABET, k=5))
                if (self._scope(rtype, namespace), name) not in self._objects.get(rtype.key, {}):
                    break
            meta["name"] = name
        name = meta["name"]
        self._validate(rtype, obj)
        if (self._scope(rtype, namespace), name) in self._objects.get(rtype.key, {}):
            raise ApiError(
                409,
                "AlreadyExists",
                f'{rtype.qualified} "{name}" already exists',
                details=rtype.describe(name),
            )

        obj["apiVersion"] = rtype.api_version
        obj["kind"] = rtype.kind
        if rtype.namespaced is not False and namespace is not None:
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        for server_owned in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(server_owned, None)
        meta["uid"] = str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
        meta["creationTimestamp"] = format_time(self._now())
        meta["generation"] = 1
        if "status" in rtype.subresources and rtype.key not in _STATUS_KEPT_ON_CREATE:
            obj.pop("status", None)  # status is the controllers' to write, via /status
            if rtype.key in _INITIAL_STATUS:
                obj["status"] = _clone(_INITIAL_STATUS[rtype.key])
        self._default(rtype, obj)
        return self._commit(rtype, None, obj)

    def replace(
        self,
        ref: ResourceRef,
        namespace: str | None,
        name: str,
        body: Mapping[str, Any],
        *,
        subresource: str | None = None,
    ) -> Obj:
        """PUT: replace the object (or its status/scale); a stale resourceVersion is a 409."""
        rtype = self.resource_type(ref)
        return self._out(rtype, self._replace(rtype, namespace, name, body, subresource))

    def _replace(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        body: Any,
        subresource: str | None,
    ) -> Obj:
        if not isinstance(body, Mapping):
            raise ApiError(400, "BadRequest", "the body must be a JSON object")
        old = self._get(rtype, namespace, name)
        body_name = _meta(body).get("name")
        if body_name and body_name != name:
            raise ApiError(
                400,
                "BadRequest",
                f"the name of the object ({body_name}) does not match the URL ({name})",
            )
        if subresource == "scale":
            return self._write_scale(rtype, old, body)
        return self._update(rtype, old, body, subresource)

    def patch(
        self,
        ref: ResourceRef,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        content_type: str = patching.STRATEGIC,
        subresource: str | None = None,
    ) -> Obj:
        """PATCH: merge-patch, strategic-merge-patch or json-patch the object or a subresource."""
        rtype = self.resource_type(ref)
        return self._out(
            rtype, self._patch(rtype, namespace, name, body, content_type, subresource)
        )

    def _patch(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        body: Any,
        content_type: str,
        subresource: str | None,
    ) -> Obj:
        if content_type == patching.STRATEGIC and not rtype.builtin:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: "
                "application/json-patch+json, application/merge-patch+json, "
                "application/apply-patch+yaml",
            )
        if content_type == patching.APPLY:
            raise ApiError(415, "UnsupportedMediaType", "server-side apply is not emulated")
        old = self._get(rtype, namespace, name)
        document = self._scale_view(rtype, old) if subresource == "scale" else old
        try:
            patched = patching.apply(content_type, document, body)
        except patching.PatchError as e:
            reason = {400: "BadRequest", 415: "UnsupportedMediaType"}.get(e.status, "Invalid")
            raise ApiError(e.status, reason, str(e)) from e
        if subresource == "scale":
            return self._write_scale(rtype, old, patched)
        return self._update(rtype, old, patched, subresource)

    def delete(
        self,
        ref: ResourceRef,
        namespace: str | None,
        name: str,
        *,
        preconditions: Mapping[str, Any] | None = None,
    ) -> Obj:
        """DELETE: remove the object, or mark it for deletion while it has finalizers."""
        rtype = self.resource_type(ref)
        return self._out(rtype, self._delete(rtype, namespace, name, preconditions))

    def _delete(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        preconditions: Mapping[str, Any] | None = None,
    ) -> Obj:
        old = self._get(rtype, namespace, name)
        meta = _meta(old)
        for field in ("uid", "resourceVersion"):
            expected = (preconditions or {}).get(field)
            if expected and expected != meta.get(field):
                raise ApiError(
                    409,
                    "Conflict",
                    f"Precondition failed: {field} in precondition: {expected}, "
                    f"{field} in object meta: {meta.get(field)}",
                    details=rtype.describe(name),
                )
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp"):
                return old
            new = _clone(old)
            new["metadata"]["deletionTimestamp"] = format_time(self._now())
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            return self._commit(rtype, old, new)
        if rtype.key == ("", "namespaces"):
            self._delete_namespace_contents(name)
        return self._commit(rtype, old, None)

    def delete_collection(
        self,
        ref: ResourceRef,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]:
        rtype = self.resource_type(ref)
        match = self._matcher(rtype, label_selector, field_selector)
        victims = self._select(rtype, namespace, match)
        return [
            self._out(rtype, self._delete(rtype, _meta(obj).get("namespace"), _meta(obj)["name"]))
            for obj in victims
        ]

    def _delete_namespace_contents(self, namespace: str) -> None:
        # The namespace controller's work, done at once instead of through a Terminating phase.
        types_by_key = {rtype.key: rtype for rtype in self._types.values()}
        for rtype_key, objs in list(self._objects.items()):
            for key in [key for key in objs if key[0] == namespace]:
                self._commit(types_by_key[rtype_key], objs[key], None)

    # -- the shared write path -----------------------------------------------------------------

    def _update(
        self, rtype: ResourceType, old: Obj, body: Mapping[str, Any], subresource: str | None
    ) -> Obj:
        old_meta = _meta(old)
        body_meta = _meta(body)
        expected_rv = body_meta.get("resourceVersion")
        if expected_rv and expected_rv != old_meta.get("resourceVersion"):
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {rtype.qualified} "{old_meta["name"]}": the '
                "object has been modified; please apply your changes to the latest version and "
                "try again",
                details=rtype.describe(old_meta["name"]),
            )
        if subresource not in (None, "status"):
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource ({subresource})"
            )
        if subresource == "status" and "status" not in rtype.subresources:
            raise ApiError(
                404, "NotFound", "the server could not find the requested resource (status)"
            )

        if subresource == "status":
            new = _clone(old)
            if "status" in body:
                new["status"] = _clone(body["status"])
            else:
                new.pop("status", None)
        else:
            new = _clone(dict(body))
            self._check_type_fields(rtype, new)
            new["apiVersion"], new["kind"] = old["apiVersion"], old["kind"]
            meta = new.setdefault("metadata", {})
            if not isinstance(meta, dict):
                raise ApiError(400, "BadRequest", "metadata must be an object")
            for server_owned in (
                "name",
                "namespace",
                "uid",
                "creationTimestamp",
                "generation",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
            ):
                if server_owned in old_meta:
                    meta[server_owned] = old_meta[server_owned]
                else:
                    meta.pop(server_owned, None)
            if "status" in rtype.subresources:  # status is written through /status only
                if "status" in old:
                    new["status"] = _clone(old["status"])
                else:
                    new.pop("status", None)
            self._default(rtype, new)
            self._validate(rtype, new)
            ignored = ("metadata", "status") if "status" in rtype.subresources else ("metadata",)
            if _without(new, *ignored) != _without(old, *ignored):
                meta["generation"] = old_meta.get("generation", 0) + 1

        new["metadata"]["resourceVersion"] = old_meta.get("resourceVersion")
        if new == old:  # a no-op write is not persisted: no new resourceVersion, no event
            return old
        gone = bool(_meta(new).get("deletionTimestamp") and not _meta(new).get("finalizers"))
        return self._commit(rtype, old, new, deleting=gone)  # deleted when the last finalizer goes

    def _commit(
        self, rtype: ResourceType, old: Obj | None, new: Obj | None, *, deleting: bool = False
    ) -> Obj:
        """Persist a create (no old), an update, or a deletion (no new, or `deleting`)."""
        self._rv += 1
        source = new if new is not None else old
        assert source is not None
        stored = _clone(source)
        stored["metadata"]["resourceVersion"] = str(self._rv)
        meta = stored["metadata"]
        objs = self._objects.setdefault(rtype.key, {})
        key = (self._scope(rtype, meta.get("namespace")), meta["name"])
        if new is None or deleting:
            del objs[key]
            self._creation_order.pop(meta.get("uid", ""), None)
            change_type = "DELETED"
        else:
            objs[key] = stored
            if old is None:
                self._creation_order[meta["uid"]] = self._rv
            change_type = "ADDED" if old is None else "MODIFIED"
        log = self._logs.setdefault(rtype.key, _ChangeLog())
        log.append(_Change(self._rv, change_type, old, stored), limit=self._history_limit)
        return stored

    def _default(self, rtype: ResourceType, obj: Obj) -> None:
        if rtype.key in _SCALABLE_DEFAULT_REPLICAS:
            spec = obj.setdefault("spec", {})
            if isinstance(spec, dict):
                spec.setdefault("replicas", 1)

    def _check_type_fields(self, rtype: ResourceType, obj: Mapping[str, Any]) -> None:
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if api_version and api_version != rtype.api_version:
            raise ApiError(
                400,
                "BadRequest",
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({rtype.api_version})",
            )
        if kind and kind != rtype.kind:
            raise ApiError(
                400,
                "BadRequest",
                f"the kind in the data ({kind}) does not match the expected kind ({rtype.kind})",
            )

    def _check_namespace(self, rtype: ResourceType, namespace: str | None, meta: Obj) -> None:
        if meta.get("namespace") and namespace and meta["namespace"] != namespace:
            raise ApiError(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the "
                "request",
            )
        if rtype.namespaced and not namespace:
            raise ApiError(
                422, "Invalid", "metadata.namespace is required for a namespaced resource"
            )
        namespaces = self._objects.get(("", "namespaces"), {})
        if rtype.namespaced is not False and namespace and (None, namespace) not in namespaces:
            raise ApiError(
                404,
                "NotFound",
                f'namespaces "{namespace}" not found',
                details={"name": namespace, "kind": "namespaces"},
            )

    def _validate(self, rtype: ResourceType, obj: Obj) -> None:
        meta = obj["metadata"]
        name = meta.get("name", "")
        limit = 63 if rtype.key in {("", "namespaces"), ("", "services")} else 253
        if not (isinstance(name, str) and len(name) <= limit and _NAME_RE.fullmatch(name)):
            raise ApiError(
                422,
                "Invalid",
                f'{rtype.kind} "{name}" is invalid: metadata.name: Invalid value: a lowercase RFC '
                "1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'",
                details=rtype.describe(name),
            )
        for key, value in (meta.get("labels") or {}).items():
            key_ok = isinstance(key, str) and selectors.KEY_RE.fullmatch(key)
            value_ok = isinstance(value, str) and len(value) <= 63
            if not (key_ok and value_ok and selectors.VALUE_RE.fullmatch(value)):
                raise ApiError(
                    422,
                    "Invalid",
                    f'{rtype.kind} "{name}" is invalid: metadata.labels: Invalid value: {value!r}',
                    details=rtype.describe(name),
                )

    # -- the scale subresource -----------------------------------------------------------------

    def _scale_view(self, rtype: ResourceType, obj: Obj) -> Obj:
        if "scale" not in rtype.subresources:
            raise ApiError(
                404, "NotFound", "the server could not find the requested resource (scale)"
            )
        meta = _meta(obj)
        if rtype.label_selector_path:
            found: Any = obj
            for step in rtype.label_selector_path:
                found = found.get(step) if isinstance(found, dict) else None
            selector = found if isinstance(found, str) else ""
        else:
            selector = selectors.format_label_selector((obj.get("spec") or {}).get("selector"))
        return {
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {
                key: meta[key]
                for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                if key in meta
            },
            "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 0)},
            "status": {
                "replicas": (obj.get("status") or {}).get("replicas", 0),
                "selector": selector,
            },
        }

    def get_scale(self, ref: ResourceRef, namespace: str | None, name: str) -> Obj:
        rtype = self.resource_type(ref)
        return _clone(self._scale_view(rtype, self._get(rtype, namespace, name)))

    def _write_scale(self, rtype: ResourceType, old: Obj, scale: Mapping[str, Any]) -> Obj:
        self._scale_view(rtype, old)  # 404 where there is no scale subresource
        replicas = (scale.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise ApiError(422, "Invalid", f"spec.replicas: Invalid value: {replicas!r}")
        body = _clone(old)
        body["spec"] = {**(old.get("spec") or {}), "replicas": replicas}
        body["metadata"]["resourceVersion"] = _meta(scale).get("resourceVersion")
        return self._scale_view(rtype, self._update(rtype, old, body, None))

    # -- watches -------------------------------------------------------------------------------

    def compact(self) -> None:
        """Forget all change history, as etcd compaction does: older resumes get 410 Gone."""
        self._compacted_rv = self._rv
        for log in self._logs.values():
            log.base += len(log.entries)
            log.entries.clear()
            log.compacted_rv = self._rv

    def close(self) -> None:
        """End every open watch (at server shutdown)."""
        self._closed = True
        for log in self._logs.values():
            log.changed.set()

    def watch(
        self,
        ref: ResourceRef,
        namespace: str | None,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_s: float | None = None,
        bookmarks: bool = False,
    ) -> AsyncGenerator[Obj]:
        """Watch events as the API server streams them, ending at `timeout_s` of loop time.

        Bad selectors or resourceVersions raise here, before any event: an HTTP 400.
        """
        rtype = self.resource_type(ref)
        match = self._matcher(rtype, label_selector, field_selector)
        since: int | None = None
        if resource_version and resource_version != "0":
            try:
                since = int(resource_version)
            except ValueError as e:
                raise ApiError(
                    400, "BadRequest", f"invalid resourceVersion: {resource_version}"
                ) from e
        return self._watch(rtype, namespace, match, since, timeout_s, bookmarks)

    async def _watch(
        self,
        rtype: ResourceType,
        namespace: str | None,
        match: Callable[[Obj], bool],
        since: int | None,
        timeout_s: float | None,
        bookmarks: bool,
    ) -> AsyncGenerator[Obj]:
        log = self._logs.setdefault(rtype.key, _ChangeLog())
        deadline = asyncio.get_running_loop().time() + timeout_s if timeout_s else None
        if since is None:
            # No resourceVersion: the current state as synthetic ADDED events, then changes.
            index = log.end
            for obj in self._select(rtype, namespace, match):
                yield {"type": "ADDED", "object": self._versioned(rtype, obj)}
        elif since < max(self._compacted_rv, log.compacted_rv):
            yield self._expired(since)
            return
        else:
            index = log.index_after(since)

        while not self._closed:
            if index < log.base:  # this watcher fell behind the log: the API server drops it
                yield self._expired(log.compacted_rv)
                return
            if index < log.end:
                changes = log.entries[index - log.base :]
                index = log.end
                for change in changes:
                    event = self._event(rtype, namespace, match, change)
                    if event is not None:
                        yield event
                continue
            try:
                async with asyncio.timeout_at(deadline):
                    await log.changed.wait()
            except TimeoutError:
                break
        if bookmarks and not self._closed:
            meta = {"resourceVersion": str(self._rv)}
            bookmark = {"apiVersion": rtype.api_version, "kind": rtype.kind, "metadata": meta}
            yield {"type": "BOOKMARK", "object": bookmark}

    def _event(
        self,
        rtype: ResourceType,
        namespace: str | None,
        match: Callable[[Obj], bool],
        change: _Change,
    ) -> Obj | None:
        """Translate a change for one watcher; leaving or entering its selector is DELETED/ADDED."""
        if namespace is not None and _meta(change.new).get("namespace") != namespace:
            return None
        new_matches = change.type != "DELETED" and match(change.new)
        old_matches = change.old is not None and match(change.old)
        if change.type == "DELETED":
            kind = "DELETED" if old_matches else None
        elif new_matches:
            kind = "MODIFIED" if old_matches else "ADDED"
        else:
            kind = "DELETED" if old_matches else None
        if kind is None:
            return None
        return {"type": kind, "object": self._versioned(rtype, change.new)}

    @staticmethod
    def _expired(since: int) -> Obj:
        status = ApiError(410, "Expired", f"too old resource version: {since}").to_status()
        return {"type": "ERROR", "object": status}
