"""Cache-aware placement (docs/architecture.md, "Cache-aware placement"): which nodes still hold a
model's weights, and what follows from it.

A node that ran a Ready pod of a model has the model's image and weights in its local cache
(image layers, the model directory, the page cache) for a while after the pod is gone. A new
replica that starts there loads in seconds instead of minutes. The rules here:

- **Model identity** (`identify`): the `model` annotation when set; otherwise the first
  container of the pod template that names a model, as its image plus that model (the value of
  a `--model`, `--model-id`, `--model-path` or `--model-name` argument, `--flag value` or
  `--flag=value`; the word after `serve` as in `vllm serve <model>`; else the value of an
  environment variable `MODEL`, `MODEL_ID`, `MODEL_NAME`, `MODEL_PATH` or `HF_MODEL_ID`);
  otherwise the first container's image alone (a model baked into the image). `key` turns the
  identity into a label-safe name: a readable slug of the model and a hash of the identity.
- **Retention** (`retention_s`): how long a node stays warm after the last pod of the model on
  it stopped running, size-weighted as an LRU cache evicts: `base_s * reference_gib / size`,
  clipped to `[min_s, max_s]`; `base_s` for a model of unknown size.
- **The warm map** (`observe`, `expire`): a node becomes warm for a model when a pod of that model
  becomes Ready on it, from that time (`Warmth.since_s`); it stays warm while such a pod runs and
  for the retention after, then is forgotten.
- **Hit or miss** (`is_hit`): a pod's start is a cache hit when its node was warm for its model
  when the pod was created; `split` gives the observed start-up of each kind.
- **Ranking** (`rank`): warm nodes first, the order otherwise kept.

Pure: no I/O, no clock (every time is an argument, in Unix seconds), no Kubernetes types.
"""

from __future__ import annotations

import hashlib
import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NewType

ModelKey = NewType("ModelKey", str)
"""A model's label-safe name (`llama-3-8b-instruct-0123456789ab`), at most 63 characters."""

LABEL_PREFIX = "cache.autoscaler.dsec.io/"
"""Node labels `cache.autoscaler.dsec.io/<model key>` mark the nodes warm for a model."""
RUNNING = "1"
"""The label's value while a pod of the model runs on the node; otherwise the Unix second at
which the node is forgotten."""

MODEL_ARGS = ("--model", "--model-id", "--model-path", "--model-name")
"""Container arguments that name the model served."""
MODEL_ENV = ("MODEL", "MODEL_ID", "MODEL_NAME", "MODEL_PATH", "HF_MODEL_ID")
"""Environment variables that name the model served, in the order they are looked for."""

_SLUG_CHARS = re.compile(r"[^a-z0-9._-]+")
_SLUG_MAX = 50
_HASH_CHARS = 12


@dataclass(frozen=True, slots=True)
class Container:
    """What the identity rules read of one container of a pod template."""

    image: str
    args: tuple[str, ...] = ()
    """Its `command` followed by its `args`."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Its literal environment values (`value`, not `valueFrom`)."""


@dataclass(frozen=True, slots=True)
class Model:
    """A model, as the cache rules know it."""

    identity: str
    """The annotation's value, `<image> <model>`, or the image alone."""
    size_gib: float | None = None
    """The weights' size (`model-size-gib`), for the retention; None when unknown."""

    @property
    def key(self) -> ModelKey:
        return key(self.identity)

    @property
    def label(self) -> str:
        return LABEL_PREFIX + self.key


def _model_argument(args: Sequence[str]) -> str | None:
    for i, arg in enumerate(args):
        flag, equals, value = arg.partition("=")
        if flag in MODEL_ARGS:
            if equals:
                return value or None
            if i + 1 < len(args) and not args[i + 1].startswith("-"):
                return args[i + 1]
        if arg == "serve" and i + 1 < len(args) and not args[i + 1].startswith("-"):
            return args[i + 1]
    return None


def model_named_by(container: Container) -> str | None:
    """The model a container serves, from its arguments or its environment; None when neither
    names one."""
    named = _model_argument(container.args)
    if named:
        return named
    for name in MODEL_ENV:
        value = container.env.get(name)
        if value:
            return value
    return None


def identify(
    containers: Sequence[Container], *, annotated: str | None = None, size_gib: float | None = None
) -> Model | None:
    """The model of a pod template (see the module docstring); None without any container."""
    if annotated:
        return Model(annotated, size_gib)
    for container in containers:
        named = model_named_by(container)
        if named:
            return Model(f"{container.image} {named}", size_gib)
    if containers and containers[0].image:
        return Model(containers[0].image, size_gib)
    return None


def key(identity: str) -> ModelKey:
    """A label-safe name for a model identity: the slug of its last path part (the model's
    own name) and a hash of the whole, so two identities never share a key in practice."""
    last = identity.split()[-1] if identity.split() else identity
    last = last.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[0] or "model"
    slug = _SLUG_CHARS.sub("-", last.lower()).strip("-._")[:_SLUG_MAX].strip("-._") or "model"
    digest = hashlib.sha256(identity.encode()).hexdigest()[:_HASH_CHARS]
    return ModelKey(f"{slug}-{digest}")


# -- Retention --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Retention:
    """How long a node's cache keeps a model it no longer runs (`AUTOSCALER_CACHE__...`)."""

    base_s: float = 3600.0
    """Retention of a model of `reference_gib` (and of one of unknown size)."""
    reference_gib: float = 16.0
    min_s: float = 300.0
    max_s: float = 6 * 3600.0

    def __post_init__(self) -> None:
        values = (self.base_s, self.reference_gib, self.min_s, self.max_s)
        if not all(math.isfinite(v) and v > 0 for v in values):
            raise ValueError("retention settings must be finite and > 0")
        if self.min_s > self.max_s:
            raise ValueError("min_s must be <= max_s")


def retention_s(config: Retention, size_gib: float | None) -> float:
    """Seconds a node stays warm for a model after its last pod there stopped: bigger models
    are evicted sooner (`base_s * reference_gib / size_gib`, clipped)."""
    if size_gib is None or not (size_gib > 0 and math.isfinite(size_gib)):
        return min(max(config.base_s, config.min_s), config.max_s)
    return min(max(config.base_s * config.reference_gib / size_gib, config.min_s), config.max_s)


# -- The warm map -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Warmth:
    """One node warm for one model."""

    since_s: float
    """When a pod of the model first became Ready there in this spell (-inf: before the
    controller could see, relearnt from the node's label)."""
    until_s: float
    """When the node is forgotten: inf while a pod of the model runs there, else the last
    time one was seen running plus the retention."""

    @property
    def running(self) -> bool:
        return self.until_s == math.inf


WarmMap = Mapping[tuple[ModelKey, str], Warmth]
"""(model key, node name) -> warmth."""


def observe(
    warm: WarmMap,
    model: ModelKey,
    *,
    running: Mapping[str, float],
    now_s: float,
    retention_s: float,
) -> dict[tuple[ModelKey, str], Warmth]:
    """The map after seeing which nodes run a Ready pod of `model` now: node -> the earliest
    time one of those pods became Ready. A node that ran it and no longer does keeps its warmth
    for `retention_s` from now."""
    out = dict(warm)
    for (m, node), warmth in warm.items():
        if m == model and node not in running and warmth.running:
            out[m, node] = Warmth(warmth.since_s, now_s + retention_s)
    for node, ready_s in running.items():
        old = out.get((model, node))
        since = ready_s if old is None or old.until_s < ready_s else min(old.since_s, ready_s)
        out[model, node] = Warmth(since, math.inf)
    return out


def expire(warm: WarmMap, now_s: float) -> tuple[dict[tuple[ModelKey, str], Warmth], int]:
    """The map without the entries whose retention has passed, and how many went."""
    kept = {k: w for k, w in warm.items() if w.until_s > now_s}
    return kept, len(warm) - len(kept)


def warm_nodes(warm: WarmMap, model: ModelKey, *, now_s: float) -> frozenset[str]:
    """The nodes warm for `model` at `now_s`."""
    return frozenset(node for (m, node), w in warm.items() if m == model and w.until_s > now_s)


def is_hit(warm: WarmMap, model: ModelKey, *, node: str, created_s: float) -> bool:
    """Whether a pod of `model` created at `created_s` on `node` found the node warm."""
    warmth = warm.get((model, node))
    return warmth is not None and warmth.since_s <= created_s < warmth.until_s


def label_value(warmth: Warmth) -> str:
    """The node label's value for this warmth: `1` while running, else the expiry second."""
    return RUNNING if warmth.running else str(math.ceil(warmth.until_s))


def relearn(value: str, *, now_s: float, retention_s: float) -> Warmth | None:
    """The warmth a node label written by an earlier controller stands for; None for a value it
    cannot read. A `1` whose pod is gone is kept for `retention_s` from now: when that pod
    stopped is lost with the process."""
    if value == RUNNING:
        return Warmth(-math.inf, now_s + retention_s)
    if value.isdigit() and len(value) <= 12:
        return Warmth(-math.inf, float(value))
    return None


def rank(nodes: Iterable[str], warm: Iterable[str]) -> tuple[str, ...]:
    """`nodes` with the warm ones first, the order within each kind kept."""
    ordered = tuple(nodes)
    hot = frozenset(warm)
    return tuple(n for n in ordered if n in hot) + tuple(n for n in ordered if n not in hot)


# -- Start-up split by hit or miss ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Start:
    """One pod's observed start: created, Ready `duration_s` later, on a warm node or not."""

    created_s: float
    duration_s: float
    hit: bool


@dataclass(frozen=True, slots=True)
class StartupSplit:
    """Median observed start-up of the recent pods that started on a warm node and on a cold one
    (None without any), how many of each are still there, and how many of each were ever seen."""

    hit_s: float | None = None
    miss_s: float | None = None
    hits: int = 0
    misses: int = 0
    started_hits: int = 0
    """Pods of the service classed as a hit since the controller started, gone ones included:
    it only grows (a counter)."""
    started_misses: int = 0
    """As `started_hits`, for the misses."""


def split(
    starts: Iterable[Start], *, recent: int, started_hits: int = 0, started_misses: int = 0
) -> StartupSplit:
    """The median start-up of the `recent` newest hits and of the `recent` newest misses, with
    the counts of every start classed so far (`started_hits`, `started_misses`)."""
    newest = sorted(starts, key=lambda s: -s.created_s)
    hits = [s for s in newest if s.hit]
    misses = [s for s in newest if not s.hit]
    return StartupSplit(
        hit_s=_median(hits[:recent]),
        miss_s=_median(misses[:recent]),
        hits=len(hits),
        misses=len(misses),
        started_hits=started_hits,
        started_misses=started_misses,
    )


def _median(starts: Sequence[Start]) -> float | None:
    return float(statistics.median(s.duration_s for s in starts)) if starts else None
