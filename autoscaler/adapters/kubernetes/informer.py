"""A watch-based cache of one kind of object, as client-go's reflector and indexer.

Each `Source` (all namespaces, one namespace, or a cluster-scoped kind) is listed once, in
pages, and then watched from the list's resourceVersion with bookmarks. A watch that ends or
breaks resumes from the last resourceVersion it saw, after a jittered exponential backoff when
it failed; a `410 Gone` (an HTTP status or an ERROR event) relists and replaces that source's
part of the cache, telling the handlers what changed meanwhile. An `optional` kind (a custom
resource whose CRD may not be installed) whose list answers 404 counts as listed and empty: it
is logged once, and listed again every `absent_retry_s` until the kind appears (and again if it
goes). Reads (`get`, `items`,
`by_index`) are plain methods on memory: nothing here lists per tick.

It must not interpret the objects: what to keep and how to index them are the caller's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import structlog
from kubernetes_asyncio import watch

from autoscaler import clock as clock_
from autoscaler.adapters.kubernetes import _api
from autoscaler.adapters.kubernetes._api import Obj

log = structlog.get_logger(__name__)

ADDED: Final = "ADDED"
MODIFIED: Final = "MODIFIED"
DELETED: Final = "DELETED"
_BOOKMARK: Final = "BOOKMARK"

Key = tuple[str, str]
"""(namespace, name); the namespace is "" for a cluster-scoped object."""

Handler = Callable[[str, Obj | None, Obj | None], None]
"""Told (event type, old object, new object) after each change: ADDED has no old, DELETED no new."""

Indexer = Callable[[Obj], Iterable[str]]
"""The index values of an object (as client-go's `IndexFunc`)."""

_WATCH_GRACE_S: Final = 30.0
"""How much longer than the server-side watch timeout the client waits for a line."""


@dataclasses.dataclass(frozen=True, slots=True)
class Source:
    """One list endpoint of a generated client (`apps.list_namespaced_deployment`, "serving")."""

    list_fn: Callable[..., Awaitable[Any]]
    args: tuple[Any, ...] = ()
    namespace: str | None = None
    """The namespace whose objects this source covers; None for all (or cluster-scoped)."""

    def covers(self, key: Key) -> bool:
        return self.namespace is None or key[0] == self.namespace


@dataclasses.dataclass(frozen=True, slots=True)
class Backoff:
    """Jittered exponential backoff: the n-th failure in a row waits about `initial_s x 2^(n-1)`."""

    initial_s: float = 0.5
    max_s: float = 30.0
    factor: float = 2.0
    jitter_ratio: float = 0.5
    """The wait is drawn uniformly from [(1 - jitter_ratio) x d, d]."""

    def delay_s(self, failures: int, rng: random.Random) -> float:
        base = min(self.max_s, self.initial_s * self.factor ** max(0, failures - 1))
        return base * (1.0 - self.jitter_ratio * rng.random())


@dataclasses.dataclass(slots=True)
class _Progress:
    """Where one source's list+watch stands."""

    resource_version: str | None = None
    synced: bool = False
    failures: int = 0
    expiries: int = 0


class _RawWatch(watch.Watch):
    """The client's `Watch`, streaming events as raw JSON and without a private `ApiClient`.

    `Watch()` builds an `ApiClient` of its own (an aiohttp session and an SSL context, about
    0.1 s of CPU on the event loop) only to deserialise events into models; the caches keep
    the API's JSON, so that client is never needed and never built.
    """

    def __init__(self) -> None:  # deliberately not super().__init__(): see the docstring
        self._raw_return_type = None
        self._stop = False
        self.resource_version = None
        self.resp = None

    def get_return_type(self, func: object) -> str:
        return ""  # no model: `event["object"]` stays the raw dict

    async def close(self) -> None:
        if self.resp is not None:
            self.resp.release()
            self.resp = None


def key_of(obj: Obj) -> Key:
    return (_api.namespace(obj), _api.name(obj))


SHARED_MAX_CHARS: Final = 24
"""The longest string value `shared` makes one of: kinds, phases, condition types and
statuses, label values, node and container names; not uids, nor most timestamps."""
_NOT_SHARED: Final = frozenset({"resourceVersion"})
"""Keys whose short values are never the same twice: not worth an interned entry."""


def shared(obj: Obj) -> Obj:
    """The same object, its keys and short string values interned (`sys.intern`), so that the
    objects of a cache hold one copy of each rather than one per object.

    A list page is decoded in one piece, and the JSON decoder already gives its objects one
    copy of each key; every watch event is decoded alone, so an object that came by a watch
    held its own copy of every key and value: 4.6 KB in memory for a pod of 720 bytes of JSON,
    against 2.4 KB shared (docs/benchmark.md, "The first tick and the memory at 10,000
    services"). Interned strings are freed with their last user.
    """
    out = {}
    for key, value in obj.items():
        kind = value.__class__
        if kind is dict:
            value = shared(value)
        elif kind is list:
            value = [shared(item) if item.__class__ is dict else item for item in value]
        elif kind is str and len(value) <= SHARED_MAX_CHARS and key not in _NOT_SHARED:
            value = sys.intern(value)
        out[sys.intern(key)] = value
    return out


def _unshared(obj: Obj) -> Obj:
    return obj


class Informer:
    """A cache of one kind, filled by list+watch of its sources; see the module docstring."""

    def __init__(
        self,
        kind: str,
        sources: Sequence[Source],
        *,
        clock: clock_.Clock,
        keep: Callable[[Obj], bool] | None = None,
        transform: Callable[[Obj], Obj] | None = None,
        transform_shares: bool = False,
        indexers: Mapping[str, Indexer] | None = None,
        on_api_error: _api.ErrorCallback = _api.ignore_error,
        backoff: Backoff | None = None,
        watch_timeout_s: float = 300.0,
        page_size: int = 500,
        request_timeout_s: float = 30.0,
        rng: random.Random | None = None,
        optional: bool = False,
        absent_retry_s: float = 300.0,
    ) -> None:
        """Cache `kind` (a plural, for logs and error counts) from `sources`.

        With `optional`, a 404 on a source's list or watch (the kind is not served: its CRD is
        not installed) empties that source's part and counts as synced; the list is tried
        again after `absent_retry_s`.

        `keep` drops objects the caller does not want (an excluded namespace); `transform`
        trims what is stored. With `transform_shares`, the transform's objects share their keys
        and strings already (`caches.pick`): a watch's object is not made `shared` first.
        A watch asks the server to end it after `watch_timeout_s` to 1.5 x that (jittered, so
        that watches do not all reconnect at once).
        """
        if not sources:
            raise ValueError("an informer needs at least one source")
        self.kind = kind
        self.sources = tuple(sources)
        self.clock = clock
        self._keep = keep
        self._transform = transform
        self._share = shared if transform is None or not transform_shares else _unshared
        self._indexers = dict(indexers or {})
        self._on_api_error = on_api_error
        self._backoff = backoff or Backoff()
        self._watch_timeout_s = watch_timeout_s
        self._page_size = page_size
        self._request_timeout_s = request_timeout_s
        self._rng = rng or random.Random()
        self._optional = optional
        self._absent_retry_s = absent_retry_s
        self._absent = False
        self._items: dict[Key, Obj] = {}
        self._indexes: dict[str, dict[str, set[Key]]] = {name: {} for name in self._indexers}
        self._handlers: list[Handler] = []
        self._progress = [_Progress() for _ in self.sources]
        self._synced = asyncio.Event()
        self.relists = 0
        """Lists done since start, the first ones included."""

    # -- reads -----------------------------------------------------------------------------------

    def get(self, namespace: str, name: str) -> Obj | None:
        return self._items.get((namespace, name))

    def items(self) -> list[Obj]:
        return list(self._items.values())

    def __len__(self) -> int:
        return len(self._items)

    def by_index(self, index: str, value: str) -> list[Obj]:
        return [self._items[key] for key in self._indexes[index].get(value, ())]

    @property
    def synced(self) -> bool:
        """Whether every source has been listed at least once."""
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        await self._synced.wait()

    def resource_version(self, source: int = 0) -> str | None:
        """The last resourceVersion seen by a source's list or watch."""
        return self._progress[source].resource_version

    def add_handler(self, handler: Handler) -> None:
        """Call `handler` after every change to the cache, relists included."""
        self._handlers.append(handler)

    def remove_handler(self, handler: Handler) -> None:
        self._handlers.remove(handler)

    # -- the list+watch loop ---------------------------------------------------------------------

    async def run(self) -> None:
        """List and watch every source until cancelled."""
        if len(self.sources) == 1:
            await self._follow(0)
            return
        async with asyncio.TaskGroup() as group:
            for index in range(len(self.sources)):
                group.create_task(self._follow(index))

    async def _follow(self, index: int) -> None:
        source, progress = self.sources[index], self._progress[index]
        while True:
            operation = f"{self.kind}.list"
            try:
                if progress.resource_version is None:
                    await self._relist(index)
                operation = f"{self.kind}.watch"
                healthy = await self._watch(index)
            except _api.CALL_ERRORS as e:
                status = _api.status_of(e)
                if status == 404 and self._optional:
                    self._not_served(index)
                    await self.clock.sleep(self._absent_retry_s)
                    continue
                if status == 410:
                    # The history the watch needed is gone: relist now, back off if it repeats.
                    progress.resource_version = None
                    progress.expiries += 1
                    log.info("watch.expired", kind=self.kind, namespace=source.namespace)
                    if progress.expiries > 1:
                        await self._sleep_after_failure(progress, operation, e)
                    continue
                await self._fail(progress, operation, e)
            else:
                progress.expiries = 0
                if healthy:
                    progress.failures = 0
                else:  # ended at once with nothing to say: do not hammer the server
                    await self._sleep_after_failure(progress, operation, None)

    def _not_served(self, index: int) -> None:
        """The kind is not served (404): nothing of it exists; said once, until it appears."""
        source, progress = self.sources[index], self._progress[index]
        progress.resource_version = None  # relist when it is tried again
        progress.failures = 0
        self._replace(source, ())
        if not self._absent:
            self._absent = True
            log.info(
                "cache.kind_absent",
                kind=self.kind,
                namespace=source.namespace,
                retry_in_s=self._absent_retry_s,
            )
        self._mark_synced(progress)

    def _mark_synced(self, progress: _Progress) -> None:
        if not progress.synced:
            progress.synced = True
            if all(p.synced for p in self._progress):
                self._synced.set()

    async def _fail(self, progress: _Progress, operation: str, error: BaseException) -> None:
        self._on_api_error(operation)
        await self._sleep_after_failure(progress, operation, error)

    async def _sleep_after_failure(
        self, progress: _Progress, operation: str, error: BaseException | None
    ) -> None:
        progress.failures += 1
        delay_s = self._backoff.delay_s(progress.failures, self._rng)
        if error is not None:
            log.warning(
                "watch.failed",
                operation=operation,
                status=_api.status_of(error),
                error=str(_api.failure(operation, self.kind, error)),
                failures=progress.failures,
                retry_in_s=round(delay_s, 3),
            )
        await self.clock.sleep(delay_s)

    async def _relist(self, index: int) -> None:
        source, progress = self.sources[index], self._progress[index]
        items: list[Obj] = []
        version: str | None = None
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": self._page_size}
            if token:
                kwargs["_continue"] = token
            page = await _api.call_json(
                source.list_fn, *source.args, request_timeout_s=self._request_timeout_s, **kwargs
            )
            page_meta = _api.meta(page)
            if version is None:  # every page is a snapshot at the first page's version
                version = str(page_meta.get("resourceVersion") or "")
            items.extend(item for item in page.get("items") or () if isinstance(item, dict))
            token = page_meta.get("continue")
            if not token:
                break
        changed = self._replace(source, items)
        self.relists += 1
        if self._absent:
            self._absent = False
            log.info("cache.kind_present", kind=self.kind, namespace=source.namespace)
        progress.resource_version = version or ""  # "": watch from the newest state
        log.debug(
            "cache.listed",
            kind=self.kind,
            namespace=source.namespace,
            objects=len(items),
            changed=changed,
        )
        self._mark_synced(progress)

    async def _watch(self, index: int) -> bool:
        """Follow one watch to its end; whether it was worth its connection."""
        source, progress = self.sources[index], self._progress[index]
        timeout_s = int(self._watch_timeout_s * (1.0 + 0.5 * self._rng.random()))
        started_s = self.clock.now()
        seen = False
        async with _RawWatch() as stream:
            events = stream.stream(
                source.list_fn,
                *source.args,
                resource_version=progress.resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=max(1, timeout_s),
                _request_timeout=(self._request_timeout_s, timeout_s + _WATCH_GRACE_S),
            )
            async for event in events:
                seen = True
                self._apply(source, progress, event)
        return seen or self.clock.now() - started_s >= 1.0

    # -- the cache ---------------------------------------------------------------------------------

    def _apply(self, source: Source, progress: _Progress, event: Mapping[str, Any]) -> None:
        kind, raw = event.get("type"), event.get("raw_object")
        if not isinstance(raw, dict):
            return
        version = _api.resource_version(raw)
        if kind in (ADDED, MODIFIED):
            key = key_of(raw)
            if self._wanted(raw):
                self._put(key, self._trim(self._share(raw)))
            else:
                self._remove(key)
        elif kind == DELETED:
            self._remove(key_of(raw))
        elif kind != _BOOKMARK:
            return
        if version:
            progress.resource_version = version

    def _replace(self, source: Source, items: Iterable[Obj]) -> int:
        """Make the source's part of the cache equal `items`; how many objects changed."""
        fresh = {key_of(obj): obj for obj in items if self._wanted(obj)}
        stale = [key for key in self._items if source.covers(key) and key not in fresh]
        changed = 0
        for key in stale:
            self._remove(key)
            changed += 1
        for key, obj in fresh.items():
            old = self._items.get(key)
            if old is None or _api.resource_version(old) != _api.resource_version(obj):
                self._put(key, self._trim(obj))
                changed += 1
        return changed

    def _wanted(self, obj: Obj) -> bool:
        return self._keep is None or self._keep(obj)

    def _trim(self, obj: Obj) -> Obj:
        return obj if self._transform is None else self._transform(obj)

    def _put(self, key: Key, obj: Obj) -> None:
        old = self._items.get(key)
        self._items[key] = obj
        self._reindex(key, old, obj)
        self._notify(MODIFIED if old is not None else ADDED, old, obj)

    def _remove(self, key: Key) -> None:
        old = self._items.pop(key, None)
        if old is None:
            return
        self._reindex(key, old, None)
        self._notify(DELETED, old, None)

    def _reindex(self, key: Key, old: Obj | None, new: Obj | None) -> None:
        """Move `key` from the index values of `old` to those of `new`. The values of the old
        object are asked of the indexers again rather than kept for each object (at 40,000 pods
        and four indexes, 160,000 tuples): the indexers are functions of the object alone, and a
        cached object is never changed in place."""
        for name, indexer in self._indexers.items():
            index = self._indexes[name]
            before = () if old is None else dict.fromkeys(indexer(old))
            after = () if new is None else dict.fromkeys(indexer(new))
            for value in before:
                if value in after:
                    continue
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]
            for value in after:
                if value not in before:
                    index.setdefault(value, set()).add(key)

    def _notify(self, kind: str, old: Obj | None, new: Obj | None) -> None:
        for handler in self._handlers:
            handler(kind, old, new)
