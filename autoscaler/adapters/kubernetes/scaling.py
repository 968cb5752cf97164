"""The API calls on a scale target: its object and its `/scale` subresource, for every kind of
`contract.targets` (the generated client spells them differently for Deployments, StatefulSets
and custom resources).

Each read answers the generated function and its arguments, each patch an `_api.Request` (a
JSON merge patch, sent on the client's session without the generated client's per-call
work), for the caller's `_api.Caller` to send with its deadline, fence and error mapping.

It must not call the API itself, cache or decide anything.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from kubernetes_asyncio import client

from autoscaler.adapters.kubernetes import _api
from autoscaler.adapters.kubernetes._api import Obj
from autoscaler.contract import targets

Call = tuple[Callable[..., Awaitable[Any]], tuple[Any, ...]]
"""A generated client function and its positional arguments."""

_APPS_NAMES: Final = {"Deployment": "deployment", "StatefulSet": "stateful_set"}


def apps_name(kind: targets.TargetKind) -> str:
    """How `AppsV1Api` spells a built-in kind in its method names (`stateful_set`)."""
    return _APPS_NAMES[kind.kind]


class Endpoint:
    """The calls on the objects of one workload kind."""

    def __init__(
        self,
        kind: targets.TargetKind,
        *,
        apps: client.AppsV1Api,
        custom: client.CustomObjectsApi | None = None,
    ) -> None:
        """`custom` is needed for a custom resource's kind only."""
        if kind.custom and custom is None:
            raise ValueError(f"{kind.kind} is a custom resource: its calls need CustomObjectsApi")
        self.kind = kind
        self._apps = apps
        self._custom = custom
        self._client: client.ApiClient = apps.api_client  # type: ignore[attr-defined]  # no stub

    @classmethod
    def of(cls, api: client.ApiClient, kind: targets.TargetKind) -> Endpoint:
        return cls(kind, apps=client.AppsV1Api(api), custom=client.CustomObjectsApi(api))

    def operation(self, verb: str, *, scale: bool = False) -> str:
        """How a failed call is named and counted: `statefulsets/scale.patch`."""
        return f"{self.kind.plural}{'/scale' if scale else ''}.{verb}"

    def list(self, namespace: str | None) -> Call:
        """The list (and, with `watch=True`, watch) of one namespace, or of all when None."""
        kind = self.kind
        if self._custom is not None and kind.custom:
            group, version, plural = kind.group, kind.version, kind.plural
            if namespace is None:
                return self._custom.list_cluster_custom_object, (group, version, plural)
            return self._custom.list_namespaced_custom_object, (group, version, namespace, plural)
        spelt = apps_name(kind)
        if namespace is None:
            return getattr(self._apps, f"list_{spelt}_for_all_namespaces"), ()
        return getattr(self._apps, f"list_namespaced_{spelt}"), (namespace,)

    def read(self, name: str, namespace: str) -> Call:
        return self._call("read", "get", name, namespace)

    def patch(self, name: str, namespace: str, body: Obj) -> _api.Request:
        """A merge patch of the object."""
        return self._patch(name, namespace, body, None)

    def read_scale(self, name: str, namespace: str) -> Call:
        return self._call("read", "get", name, namespace, scale=True)

    def patch_scale(self, name: str, namespace: str, body: Obj) -> _api.Request:
        """A merge patch of the object's `/scale`."""
        return self._patch(name, namespace, body, "scale")

    def _patch(self, name: str, namespace: str, body: Obj, subresource: str | None) -> _api.Request:
        kind = self.kind
        path = _api.resource_path(
            kind.group, kind.version, kind.plural, namespace, name, subresource
        )
        return _api.Request(self._client, "PATCH", path, body, _api.MERGE_PATCH)

    def _call(
        self,
        apps_verb: str,
        custom_verb: str,
        name: str,
        namespace: str,
        *body: Obj,
        scale: bool = False,
    ) -> Call:
        suffix = "_scale" if scale else ""
        kind = self.kind
        if self._custom is not None and kind.custom:
            fn = getattr(self._custom, f"{custom_verb}_namespaced_custom_object{suffix}")
            return fn, (kind.group, kind.version, namespace, kind.plural, name, *body)
        fn = getattr(self._apps, f"{apps_verb}_namespaced_{apps_name(kind)}{suffix}")
        return fn, (name, namespace, *body)
