"""The controller's one way to write its annotations on a Deployment (or another scale target:
a StatefulSet, a LeaderWorkerSet, a Rollout, through its `scaling.Endpoint`).

A merge patch of `metadata.annotations` that carries the resourceVersion it was based on, so
it never overwrites a change it has not seen. A 409 (the Deployment moved meanwhile) re-reads
the Deployment after a jittered backoff, and the patch is sent again at the new version, unless
what is there already says what was to be written; past the last attempt the conflict is
raised. Every call goes through the caller's `_api.Caller`: fenced by the Lease of the
service's bucket, its failures mapped to `KubeApiError` and counted.

It must not decide what to write: its callers do (the status and state of `publish`, the ramp's
saved state).
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections.abc import Callable, Mapping

import structlog
from kubernetes_asyncio import client

from autoscaler import clock as clock_
from autoscaler.adapters.kubernetes import _api, informer, scaling
from autoscaler.adapters.kubernetes._api import KubeApiError, Obj
from autoscaler.contract import targets

log = structlog.get_logger(__name__)

Written = Callable[[Mapping[str, str]], bool]
"""Whether the annotations found on the Deployment already say what is to be written."""


@dataclasses.dataclass(frozen=True, slots=True)
class ConflictRetry:
    """How a write that lost a race (409) is sent again: `attempts` in all, paced on `clock`."""

    clock: clock_.Clock
    rng: random.Random
    attempts: int = 4
    backoff: informer.Backoff = dataclasses.field(
        default_factory=lambda: informer.Backoff(initial_s=0.05, max_s=1.0)
    )


async def patch_annotations(
    calls: _api.Caller,
    apps: client.AppsV1Api,
    deployment: Obj,
    annotations: Mapping[str, str],
    *,
    target: str,
    retry: ConflictRetry,
    version: str | None = None,
    found: Mapping[str, str] | None = None,
    written: Written | None = None,
    endpoint: scaling.Endpoint | None = None,
) -> Obj | None:
    """Merge `annotations` into `deployment`'s; the API's answer, or None when already there.

    `version` is the resourceVersion to patch at (by default `deployment`'s own; a caller whose
    cache lags behind its own last write passes that write's, and with `found` the annotations
    that write left). `written` tells whether what is found is as good as what is to be written
    (by default: every key holds its value). `target` names the service in errors and logs.
    `endpoint` says how to reach an object other than a Deployment.
    """
    name, namespace = _api.name(deployment), _api.namespace(deployment)
    ends = endpoint or scaling.Endpoint(targets.DEPLOYMENTS, apps=apps)
    is_written = written or (lambda found: all(found.get(k) == v for k, v in annotations.items()))
    current = deployment
    version = version or _api.resource_version(current)
    known = _api.annotations_of(current) if found is None else found
    for attempt in itertools.count(1):
        if is_written(known):
            return None
        body = {"metadata": {"resourceVersion": version, "annotations": dict(annotations)}}
        try:
            return await calls.call(
                ends.operation("patch"),
                target,
                ends.patch(name, namespace, body),
                write=True,
                service=target,
            )
        except KubeApiError as e:
            if e.status != 409 or attempt >= retry.attempts:
                raise
        log.info(
            "annotations.conflicted", service=target, keys=sorted(annotations), attempt=attempt
        )
        await retry.clock.sleep(retry.backoff.delay_s(attempt, retry.rng))
        read, args = ends.read(name, namespace)
        current = await calls.call(ends.operation("get"), target, read, *args)
        version = _api.resource_version(current)
        known = _api.annotations_of(current)
    raise AssertionError("unreachable: itertools.count never ends")
