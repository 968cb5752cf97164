"""Cache-aware placement on Kubernetes (docs/operations.md, "Cache-aware placement"): which nodes
hold a model's weights, learnt from the pods in the caches and written as node labels.

- `model_of` reads a service's model from its `model` annotation or its owner's pod template
  (`core.cache.identify`).
- `observe` is told a service's pods whenever its record is built (a pod became Ready, went,
  moved): a node with a Ready pod of the model is warm from the pod's Ready time, and a pod that
  is Ready for the first time is classed as a cache hit or miss by the map as it stood before
  (`core.cache.is_hit`); it returns the service's start-up split.
- `tend`, a chore of the loop's tick, forgets what outlived its retention and brings the node
  labels `cache.autoscaler.dsec.io/<model key>` in line with the map: `1` while a pod of the
  model runs there, then the Unix second at which the node is forgotten; removed after. Each
  write is a merge patch of the node's labels, fenced by the Lease of a service of that model.
- `preference` is the preferred node affinity term the tier Deployments carry (and the one the
  service owner adds to their own Deployment once; `contract.modelid`).

After a restart the map is relearnt: from the labels on the nodes (warm until their expiry, or,
for `1` whose pod is gone, for a retention from the restart: when that pod stopped is lost) and
from the running pods. The hit or miss of pods that became Ready before the restart is lost:
they are left out of the split. An instance removes only the labels of entries it has had in its
map: under several bucket Leases, a label another replica wrote for its own services' pods is
left to that replica (a node of a model whose services sit in two buckets may be relabelled once
per retention when one replica's entry expires first).

It decides nothing: the rules are `core.cache`'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Final

import structlog
from kubernetes_asyncio import client

from autoscaler.adapters.kubernetes import _api, caches
from autoscaler.adapters.kubernetes._api import KubeApiError, NotLeaderError, Obj
from autoscaler.contract import annotations as contract
from autoscaler.contract import modelid
from autoscaler.core import cache, model

log = structlog.get_logger(__name__)

DEFAULT_WEIGHT: Final = modelid.DEFAULT_WEIGHT


def model_of(owner: Obj, config: contract.ServiceConfig) -> cache.Model | None:
    """The model a service's pods serve (`contract.modelid.model_of`)."""
    return modelid.model_of(
        _api.spec(owner).get("template") or {},
        annotated=config.model,
        size_gib=config.model_size_gib,
    )


def startup_end_s(pod: Obj) -> float | None:
    """When the pod's start-up ended: when it became Ready, or, for a pod let out of the standby
    pool, when its containers did (it waited warm behind the closed gate, and its promotion
    made it Ready much later); None while it is not Ready. The node cache and
    `cluster.startup_s` count a start-up by this one rule."""
    ready = _api.condition(pod, "Ready")
    if ready is None or ready.get("status") != "True":
        return None
    warm = _api.condition(pod, contract.WARM_GATE) or {}
    if warm.get("reason") == contract.STANDBY_REASON:
        ready = _api.condition(pod, "ContainersReady") or ready
    return _api.parse_time(ready.get("lastTransitionTime"))


class NodeCache:
    """The warm-node map of every model the managed services serve; see the module docstring."""

    def __init__(
        self,
        api: client.ApiClient,
        cache_: caches.Caches,
        *,
        retention: cache.Retention,
        wall_now: Callable[[], float],
        may_write: _api.Fence,
        on_api_error: _api.ErrorCallback = _api.ignore_error,
        request_timeout_s: float = _api.DEFAULT_REQUEST_TIMEOUT_S,
        recent_pods: int = 5,
        weight: int = DEFAULT_WEIGHT,
    ) -> None:
        """`wall_now` is Unix seconds (the pods' timestamps and the labels' expiry are);
        `may_write(service)` is asked before each label write, for a service of the model."""
        self._core = client.CoreV1Api(api)
        self.caches = cache_
        self.retention = retention
        self.weight = weight
        self._wall_now = wall_now
        self._calls = _api.Caller(
            fence=may_write, on_error=on_api_error, request_timeout_s=request_timeout_s
        )
        self._recent = recent_pods
        self._started_s = wall_now()
        self._warm: dict[tuple[cache.ModelKey, str], cache.Warmth] = {}
        self._models: dict[cache.ModelKey, cache.Model] = {}
        self._writer: dict[cache.ModelKey, model.ServiceId] = {}
        """The service whose Lease fences the label writes of each model: the last one seen
        serving it, kept when it goes (its bucket's leader is still the replica to write)."""
        self._starts: dict[str, cache.Start] = {}
        """Pod uid -> its observed start, classed when it was first seen Ready."""
        self.started_warm = 0
        self.started_cold = 0
        """Pods classed as a cache hit and as a miss since this instance started."""
        self._started: dict[model.ServiceId, tuple[int, int]] = {}
        """The same (hits, misses) per service, while it is managed."""
        self._pods_of: dict[model.ServiceId, set[str]] = {}
        self._running: dict[model.ServiceId, tuple[cache.ModelKey, dict[str, float]]] = {}
        """Each service's model and the nodes its Ready pods run on (node -> earliest Ready):
        several services may serve one model, and a node runs it while any of them runs there."""
        self._relearnt = False
        self._stale = True
        """Whether the labels may differ from the map: set by a change to the map or a node."""
        self._next_expiry_s = math.inf
        self._known: set[tuple[cache.ModelKey, str]] = set()
        """(model, node) entries this instance has had in its map: the only labels it removes
        (another replica's, under another bucket Lease, are left alone)."""
        self._written: dict[str, dict[str, str | None]] = {}
        """Node -> the labels last written to it, until the nodes' cache shows the node again:
        the next round does not write them a second time meanwhile."""
        self.caches.nodes.add_handler(self._node_changed)

    def _node_changed(self, _: str, old: Obj | None, new: Obj | None) -> None:
        self._written.pop(_api.name(new if new is not None else old or {}), None)
        before = (_api.meta(old).get("labels") or {}) if old is not None else {}
        after = (_api.meta(new).get("labels") or {}) if new is not None else {}
        if old is None or new is None or before != after:
            self._stale = True

    def preference(self, item: cache.Model) -> Obj:
        return modelid.preference(item.label, weight=self.weight)

    def retention_s(self, key: cache.ModelKey) -> float:
        item = self._models.get(key)
        return cache.retention_s(self.retention, None if item is None else item.size_gib)

    def warm_nodes(self, item: cache.Model) -> frozenset[str]:
        return cache.warm_nodes(self._warm, item.key, now_s=self._wall_now())

    # -- learning --------------------------------------------------------------------------------

    def _relearn(self, now_s: float) -> None:
        """The map an earlier controller left on the nodes' labels (once, on the first use)."""
        self._relearnt = True
        for node in self.caches.nodes.items():
            for label, value in (_api.meta(node).get("labels") or {}).items():
                if not (isinstance(label, str) and label.startswith(cache.LABEL_PREFIX)):
                    continue
                key = cache.ModelKey(label[len(cache.LABEL_PREFIX) :])
                warmth = cache.relearn(
                    str(value), now_s=now_s, retention_s=cache.retention_s(self.retention, None)
                )
                if warmth is not None:
                    self._warm.setdefault((key, _api.name(node)), warmth)

    def observe(
        self, service: model.ServiceId, item: cache.Model, *, pods: Sequence[Obj]
    ) -> cache.StartupSplit:
        """Learn from a service's pods (every tier); its start-up split by hit or miss."""
        now_s = self._wall_now()
        if not self._relearnt:
            self._relearn(now_s)
        key = item.key
        self._models[key] = item
        self._writer[key] = service
        running: dict[str, float] = {}
        mine: list[cache.Start] = []
        seen = {_api.uid(pod) for pod in pods}
        for uid in self._pods_of.get(service, set()) - seen:
            self._starts.pop(uid, None)
        self._pods_of[service] = seen
        for pod in pods:
            node = _api.spec(pod).get("nodeName")
            ready_s = startup_end_s(pod)
            if not isinstance(node, str) or not node or ready_s is None:
                continue
            if _api.meta(pod).get("deletionTimestamp"):
                continue
            running[node] = min(ready_s, running.get(node, math.inf))
            uid = _api.uid(pod)
            start = self._starts.get(uid)
            created_s = _api.parse_time(_api.meta(pod).get("creationTimestamp"))
            if start is None and created_s is not None and ready_s >= self._started_s:
                hit = cache.is_hit(self._warm, key, node=node, created_s=created_s)
                start = cache.Start(created_s, ready_s - created_s, hit)
                self._starts[uid] = start
                warm, cold = self._started.get(service, (0, 0))
                if hit:
                    self.started_warm += 1
                    self._started[service] = (warm + 1, cold)
                else:
                    self.started_cold += 1
                    self._started[service] = (warm, cold + 1)
                log.info(
                    "startup.observed",
                    service=service,
                    model=key,
                    pod=_api.name(pod),
                    node=node,
                    startup_s=round(start.duration_s, 3),
                    cache="hit" if hit else "miss",
                )
            if start is not None:
                mine.append(start)
        before = self._running.get(service)
        self._running[service] = (key, running)
        if before is not None and before[0] != key:  # the service's model changed
            self._learn(before[0], now_s)
        self._learn(key, now_s)
        warm, cold = self._started.get(service, (0, 0))
        return cache.split(mine, recent=self._recent, started_hits=warm, started_misses=cold)

    def _learn(self, key: cache.ModelKey, now_s: float) -> None:
        """The map after seeing where every managed service of the model runs it now."""
        running: dict[str, float] = {}
        for served, nodes in self._running.values():
            if served == key:
                for node, ready_s in nodes.items():
                    running[node] = min(ready_s, running.get(node, math.inf))
        warm = cache.observe(
            self._warm, key, running=running, now_s=now_s, retention_s=self.retention_s(key)
        )
        if warm != self._warm:
            self._warm = warm
            self._stale = True

    def forget(self, present: set[model.ServiceId]) -> None:
        """Drop what is remembered about the pods of services no longer managed; the nodes they
        ran on stay warm for the retention (the weights are there whoever manages them)."""
        for service in self._pods_of.keys() - present:
            for uid in self._pods_of.pop(service):
                self._starts.pop(uid, None)
            self._started.pop(service, None)
        now_s = self._wall_now()
        for service in self._running.keys() - present:
            key, _ = self._running.pop(service)
            self._learn(key, now_s)

    # -- labels ----------------------------------------------------------------------------------

    def labels(self) -> dict[str, dict[str, str]]:
        """Node -> the cache labels the map asks for on it (warm nodes only)."""
        by_node: dict[str, dict[str, str]] = {}
        for (key, node_name), warmth in self._warm.items():
            by_node.setdefault(node_name, {})[cache.LABEL_PREFIX + key] = cache.label_value(warmth)
        return by_node

    def wanted(self) -> dict[str, dict[str, str | None]]:
        """Node -> the label changes that bring it in line with the map (None removes)."""
        now_s = self._wall_now()
        self._warm, gone = cache.expire(self._warm, now_s)
        if not (self._stale or gone or now_s >= self._next_expiry_s):
            return {}
        self._stale = False
        self._next_expiry_s = min((w.until_s for w in self._warm.values()), default=math.inf)
        by_node = self.labels()
        self._known.update(self._warm)
        changes: dict[str, dict[str, str | None]] = {}
        for node in self.caches.nodes.items():
            name = _api.name(node)
            labels = _api.meta(node).get("labels") or {}
            have = {
                k: str(v)
                for k, v in labels.items()
                if isinstance(k, str) and k.startswith(cache.LABEL_PREFIX)
            }
            for label, value in self._written.get(name, {}).items():
                if value is None:
                    have.pop(label, None)
                else:
                    have[label] = value
            want = by_node.get(name, {})
            diff: dict[str, str | None] = {k: v for k, v in want.items() if have.get(k) != v}
            diff.update(
                {
                    k: None
                    for k in have
                    if k not in want
                    and (cache.ModelKey(k[len(cache.LABEL_PREFIX) :]), name) in self._known
                }
            )
            if diff:
                changes[name] = diff
        return changes

    def _fence_for(self, diff: Mapping[str, str | None]) -> model.ServiceId | None:
        for label in diff:
            writer = self._writer.get(cache.ModelKey(label[len(cache.LABEL_PREFIX) :]))
            if writer is not None:
                return writer
        return next(iter(self._writer.values()), None)

    async def tend(self) -> None:
        """Write the node labels the map asks for; a failed write is tried again next time."""
        for node, diff in self.wanted().items():
            service = self._fence_for(diff)
            if service is None:
                self._stale = True
                return  # no managed service of any model: nothing fences a write yet
            try:
                await self._calls.call(
                    "nodes.patch",
                    node,
                    self._core.patch_node,
                    node,
                    {"metadata": {"labels": diff}},
                    write=True,
                    service=service,
                    _content_type=_api.MERGE_PATCH,
                )
            except NotLeaderError:
                continue  # another replica leads that bucket now: its own map is the one to write
            except KubeApiError as e:
                self._stale = True
                log.warning("cache.label_failed", node=node, error=str(e))
                continue
            self._written.setdefault(node, {}).update(diff)
            for label, value in diff.items():
                if value is None:
                    self._known.discard((cache.ModelKey(label[len(cache.LABEL_PREFIX) :]), node))
            log.info("cache.labelled", node=node, labels=diff)
