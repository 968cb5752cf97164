"""The token-aware server model: continuous batching against prefill, decode and KV-cache limits.

The request model (`traffic.Traffic`) gives every replica a fixed request throughput. An LLM
server's capacity is tokens instead: a prompt costs prefill compute, each output token one
decode step shared by the whole batch, and every request in the batch holds KV-cache memory for
its prompt and its answer. A shift of the prompt/answer mix at a constant request rate changes a
replica's capacity several times over; this model shows that.

Each second's arrivals form one cohort: its requests arrive uniformly within the second and
share that second's mean prompt and output lengths (fluid: fractional counts are kept). The
serving replicas are one pool, load spread evenly, so every quantity below is per replica:

- Admission, first come first served: a request joins the batch when the cache has room for its
  whole length (prompt plus output: the model reserves at admission and never preempts) and the
  second's prefill budget has room for its prompt. The rest waits; a request waiting longer than
  `queue_timeout_s` is dropped. Requests wait while the cache is full.
- Prefill and decode share the GPU as chunked prefill does: a step carries up to
  `max_batched_tokens` tokens, prompts filling what the decodes leave, so prefill takes at most
  `M / (s + M / P)` of a second's GPU time when prompts queue (`P` the prefill rate, `s` the
  decode step, `M` the step's token budget), and decoding the rest.
- A decode step takes `decode_step_s + cached_tokens x decode_s_per_cached_token`: reading the
  weights, then the batch's KV cache (memory-bound, the roofline of a decode step). Each running
  request gains one token per step.
- TTFT of an admitted request: its wait, its place in the second's prefill work, its own prompt
  at one replica's prefill rate, and one decode step. TPOT: the decode step stretched by the
  second's prefill share. A request whose TTFT exceeds `slo_ttft_s` misses the SLO, and so does a
  dropped one.

Calibration (the defaults of `TokenConfig`): Llama-3-8B in bf16 on one A100-SXM4-40GB under vLLM.
- KV cache 91,056 tokens: vLLM reports 5,691 GPU blocks of 16 tokens for Meta-Llama-3-8B on an
  A100 40GB at `gpu_memory_utilization` 0.9 (11.12 GiB for the cache; vllm-project/vllm issue
  12330). That is 128 KiB per token, 32 layers x 8 KV heads x 128 x 2 (K and V) x 2 bytes.
- Decode: 75 tokens/s for one request, 6.6 times that at 8 concurrent requests of 1,024 prompt and
  128 output tokens (J. Musgrave, "vLLM throughput-latency sweep on NVIDIA A100",
  johnmusgrave.com, Llama-3.1-8B-Instruct bf16, vLLM 0.23). One request: a 13.3 ms step; eight:
  8 / 495 = 16.2 ms with about 8,700 cached tokens, so 0.33 us per cached token.
- Prefill 10,000 tokens/s: not a published measurement; 2 x 8.0e9 FLOP per prompt token against
  the A100's 312 TFLOP/s of dense bf16 at about half of peak, the utilisation a large prefill
  batch reaches.

It must not know about pods, metrics or the control loop: serving replicas come in per second.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from autoscaler.sim import traffic as traffic_

FloatArray = npt.NDArray[np.float64]

_EPS = 1e-9
_HISTOGRAM_BIN_S = 0.01


@dataclass(frozen=True, slots=True)
class TokenConfig:
    """One replica's token capacity and the service's TTFT SLO (see the module docstring)."""

    prefill_tokens_per_s: float = 10_000.0
    """Prompt tokens one replica prefills per second when it does nothing else."""
    decode_step_s: float = 1 / 75
    """A decode step with an empty cache: one request decodes at 75 tokens/s."""
    decode_s_per_cached_token: float = 0.33e-6
    """What each token in the batch's KV cache adds to a decode step."""
    kv_cache_tokens: float = 91_056.0
    """The KV-cache budget of one replica, in tokens."""
    max_batched_tokens: float = 2048.0
    """Tokens one step carries (vLLM's `max_num_batched_tokens` with chunked prefill)."""
    slo_ttft_s: float = 2.0
    """A request whose time to first token exceeds this misses the SLO."""
    queue_timeout_s: float = 60.0
    """A request still waiting after this is dropped (and misses the SLO)."""

    def __post_init__(self) -> None:
        positive = {
            "prefill_tokens_per_s": self.prefill_tokens_per_s,
            "decode_step_s": self.decode_step_s,
            "kv_cache_tokens": self.kv_cache_tokens,
            "max_batched_tokens": self.max_batched_tokens,
            "slo_ttft_s": self.slo_ttft_s,
            "queue_timeout_s": self.queue_timeout_s,
        }
        for name, value in positive.items():
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be finite and > 0, got {value}")
        per_token = self.decode_s_per_cached_token
        if not (math.isfinite(per_token) and per_token >= 0):
            raise ValueError(f"decode_s_per_cached_token must be finite and >= 0, got {per_token}")


class TokenSecond(NamedTuple):
    """What one simulated second did, in the request model's terms (`traffic.Second`) and in
    tokens."""

    arrivals: float
    served: float
    """Requests admitted to the batch (their prefill started)."""
    dropped: float
    slo_misses: float
    """Requests admitted with a TTFT over the SLO, plus requests dropped."""
    queue: float
    """Requests waiting at the end of the second."""
    p95_latency_s: float
    """95th percentile TTFT of the requests admitted in this second; NaN when none were."""
    prompt_tokens: float
    """Prompt tokens prefilled."""
    generation_tokens: float
    """Output tokens decoded."""
    running: float
    """Requests in the batch at the end of the second."""
    kv_usage_ratio: float
    """Share of the serving replicas' KV cache held at the end of the second (NaN with none)."""
    tpot_s: float
    """Time per output token of the second's decodes; NaN when nothing decoded."""
    busy_ratio: float
    """Share of the serving replicas' capacity in use: the prefill share of the second, and
    the cache's share of the rest; NaN with no replica."""


class TokenMix(NamedTuple):
    """Prompt and output tokens that arrive in each second (sums over that second's requests)."""

    prompt_tokens: FloatArray
    output_tokens: FloatArray


@dataclass(slots=True)
class _Cohort:
    """Requests of one arrival second still waiting."""

    second: int
    count: float
    arrived_from_s: float
    """Arrival time of the earliest of them (they arrive uniformly up to `second + 1`)."""
    prompt: float
    output: float


class TokenTraffic:
    """The batch and the queue of one service, moved forward one second at a time by `step`."""

    def __init__(
        self,
        arrivals: FloatArray,
        mix: TokenMix,
        config: TokenConfig | None = None,
    ) -> None:
        self.config = config or TokenConfig()
        values = np.asarray(arrivals, dtype=np.float64)
        prompt = np.asarray(mix.prompt_tokens, dtype=np.float64)
        output = np.asarray(mix.output_tokens, dtype=np.float64)
        if values.ndim != 1 or prompt.shape != values.shape or output.shape != values.shape:
            raise ValueError("arrivals, prompt and output tokens must be one value per second each")
        for name, array in (("arrivals", values), ("prompt", prompt), ("output", output)):
            if not bool(np.all(np.isfinite(array)) and np.all(array >= 0)):
                raise ValueError(f"{name} must be finite and >= 0")
        busy = values > 0
        if bool(np.any(prompt[busy] < values[busy])):
            raise ValueError("every request has at least one prompt token")
        safe = np.where(busy, values, 1.0)
        self._arrivals = values.tolist()
        self._prompt = np.where(busy, prompt / safe, 0.0).tolist()
        self._output = np.where(busy, output / safe, 0.0).tolist()
        self._n = len(self._arrivals)
        self._t = 0
        self._waiting: deque[_Cohort] = deque()
        self._queue = 0.0
        # The batch: one entry per admitted cohort, requests, tokens left and cache per request.
        self._count = np.zeros(0)
        self._left = np.zeros(0)
        self._cache = np.zeros(0)
        self._replicas = 0.0
        self.arrived = 0.0
        self.served = 0.0
        self.dropped = 0.0
        self.slo_misses = 0.0
        self.prompt_tokens_total = 0.0
        self.generation_tokens_total = 0.0
        bins = math.ceil(self.config.queue_timeout_s * 2 / _HISTOGRAM_BIN_S) + 2
        self.ttft_histogram = np.zeros(bins)
        """Admitted requests by TTFT, `_HISTOGRAM_BIN_S` per bin (cumulative, like
        `vllm:time_to_first_token_seconds`)."""
        self.tpot_histogram = np.zeros(bins)
        """Output tokens by TPOT, same bins (`vllm:time_per_output_token_seconds`)."""

    @property
    def now_s(self) -> int:
        return self._t

    @property
    def queue(self) -> float:
        """Requests waiting now."""
        return self._queue

    @property
    def replicas(self) -> float:
        """Serving replicas (speed-weighted) of the last second simulated."""
        return self._replicas

    @property
    def running(self) -> float:
        """Requests in the batch now."""
        return float(self._count.sum())

    @property
    def cached_tokens(self) -> float:
        """KV-cache tokens the batch holds now."""
        return float(self._count @ self._cache)

    def step(self, replicas: float) -> TokenSecond:
        """Simulate the next second with `replicas` serving (speed-weighted) replicas."""
        if not (math.isfinite(replicas) and replicas >= 0):
            raise ValueError("replicas must be finite and >= 0")
        config = self.config
        t = self._t
        self._t = t + 1
        self._replicas = replicas
        arrivals = self._arrivals[t] if t < self._n else 0.0
        self.arrived += arrivals
        if arrivals > 0:
            self._waiting.append(
                _Cohort(t, arrivals, float(t), self._prompt[t], max(self._output[t], 1.0))
            )
            self._queue += arrivals
        dropped = self._drop_expired(float(t))

        n = replicas if replicas > _EPS else 0.0
        cached = self.cached_tokens
        prefill_rate = config.prefill_tokens_per_s
        if n > 0:
            step_s = config.decode_step_s + cached / n * config.decode_s_per_cached_token
            chunk_s = config.max_batched_tokens / prefill_rate
            prefill_share = chunk_s / (step_s + chunk_s)
            budget = n * prefill_rate * prefill_share
            free = n * config.kv_cache_tokens - cached
        else:
            step_s = config.decode_step_s
            budget = free = 0.0
        chunks, admitted, prefilled, cached_new = self._admit(t, budget, free, prefill_rate, step_s)
        served = late = 0.0
        for chunk in chunks:
            served += chunk.mass
            late += chunk.mass * _fraction_above(chunk, config.slo_ttft_s)
            self._histogram(self.ttft_histogram, chunk)
        p95 = traffic_.wait_quantile(chunks, 0.95) if served > 0 else math.nan

        generated = freed = 0.0
        tpot = busy = math.nan
        if n > 0:
            share = prefilled / (n * prefill_rate)
            running = float(self._count.sum())
            if running > 0:
                per_request = (1.0 - share) / step_s
                generated, freed = self._decode(per_request)
                tpot = step_s / max(1.0 - share, _EPS)
                self._histogram(self.tpot_histogram, traffic_.Chunk(generated, tpot, tpot))
            busy = min(1.0, share + (1.0 - share) * cached / (n * config.kv_cache_tokens))
        if admitted:
            self._count = np.concatenate((self._count, [c for c, _, _ in admitted]))
            self._left = np.concatenate((self._left, [o for _, o, _ in admitted]))
            self._cache = np.concatenate((self._cache, [k for _, _, k in admitted]))
        self.served += served
        self.dropped += dropped
        self.slo_misses += late + dropped
        self.prompt_tokens_total += prefilled
        self.generation_tokens_total += generated
        held = cached - freed + cached_new
        usage = held / (n * config.kv_cache_tokens) if n > 0 else math.nan
        return TokenSecond(
            arrivals,
            served,
            dropped,
            late + dropped,
            self._queue,
            p95,
            prefilled,
            generated,
            float(self._count.sum()),
            usage,
            tpot,
            busy,
        )

    def unmet_at_end(self) -> float:
        """Requests waiting now that already waited past the TTFT SLO: a run that ends here
        counts them as misses."""
        now = float(self._t)
        unmet = 0.0
        for cohort in self._waiting:
            late_until = min(float(cohort.second + 1), now - self.config.slo_ttft_s)
            span = cohort.second + 1 - cohort.arrived_from_s
            if late_until > cohort.arrived_from_s and span > 0:
                unmet += cohort.count * min(1.0, (late_until - cohort.arrived_from_s) / span)
        return unmet

    def latency_quantile(self, q: float) -> float:
        """The q-quantile TTFT over every request admitted so far; NaN when none was."""
        return histogram_quantile(self.ttft_histogram, q)

    # -- internals --------------------------------------------------------------------------

    def _drop_expired(self, now_s: float) -> float:
        """Drop the waiting requests that arrived more than the timeout ago."""
        limit = now_s - self.config.queue_timeout_s
        dropped = 0.0
        while self._waiting and self._waiting[0].arrived_from_s < limit - _EPS:
            cohort = self._waiting[0]
            span = cohort.second + 1 - cohort.arrived_from_s
            share = min(1.0, (limit - cohort.arrived_from_s) / span) if span > 0 else 1.0
            gone = cohort.count * share
            dropped += gone
            cohort.count -= gone
            cohort.arrived_from_s = min(float(cohort.second + 1), limit)
            if cohort.count <= _EPS or share >= 1.0:
                dropped += cohort.count
                self._waiting.popleft()
                continue
            break
        self._queue = max(0.0, self._queue - dropped)
        return dropped

    def _admit(
        self, t: int, budget: float, free: float, prefill_rate: float, step_s: float
    ) -> tuple[list[traffic_.Chunk], list[tuple[float, float, float]], float, float]:
        """Admit waiting cohorts first come first served within the prefill budget and the free
        cache; returns their TTFT chunks, the admitted (requests, output, cache per request),
        the prompt tokens prefilled and the cache they took."""
        chunks: list[traffic_.Chunk] = []
        admitted: list[tuple[float, float, float]] = []
        prefilled = taken = 0.0
        pool_rate = budget  # prompt tokens per second the pool prefills now
        while self._waiting and budget > _EPS and free > _EPS:
            cohort = self._waiting[0]
            need = cohort.prompt + cohort.output
            count = min(cohort.count, budget / cohort.prompt, free / need)
            if count <= _EPS:
                break
            span = (cohort.second + 1 - cohort.arrived_from_s) * count / cohort.count
            start_s = t + prefilled / pool_rate
            end_s = t + (prefilled + count * cohort.prompt) / pool_rate
            own_s = cohort.prompt / prefill_rate + step_s
            first = max(0.0, start_s - cohort.arrived_from_s) + own_s
            last = max(0.0, end_s - (cohort.arrived_from_s + span)) + own_s
            chunks.append(traffic_.Chunk(count, first, last))
            admitted.append((count, cohort.output, need))
            prefilled += count * cohort.prompt
            taken += count * need
            budget -= count * cohort.prompt
            free -= count * need
            self._queue = max(0.0, self._queue - count)
            cohort.count -= count
            cohort.arrived_from_s += span
            if cohort.count <= _EPS:
                self._waiting.popleft()
            else:
                break
        return chunks, admitted, prefilled, taken

    def _decode(self, tokens_per_request: float) -> tuple[float, float]:
        """Give every running request `tokens_per_request` tokens; retire the finished ones.
        Returns the tokens generated and the cache freed."""
        step = np.minimum(self._left, tokens_per_request)
        generated = float(self._count @ step)
        self._left = self._left - step
        done = self._left <= _EPS
        freed = float(self._count[done] @ self._cache[done])
        if bool(done.any()):
            keep = ~done
            self._count, self._left, self._cache = (
                self._count[keep],
                self._left[keep],
                self._cache[keep],
            )
        return generated, freed

    def _histogram(self, histogram: FloatArray, chunk: traffic_.Chunk) -> None:
        if chunk.mass <= 0:
            return
        lo, hi = sorted((chunk.first_s, chunk.last_s))
        last = len(histogram) - 1
        i = min(int(lo / _HISTOGRAM_BIN_S), last)
        j = min(int(hi / _HISTOGRAM_BIN_S), last)
        histogram[i : j + 1] += chunk.mass / (j - i + 1)


def histogram_quantile(histogram: FloatArray, q: float) -> float:
    """The q-quantile of a histogram of `TokenTraffic`'s bins (linear within a bin, as
    Prometheus' `histogram_quantile`); NaN when it is empty."""
    total = float(histogram.sum())
    if not total > 0:
        return math.nan
    cumulative = np.cumsum(histogram)
    j = int(np.searchsorted(cumulative, q * total, side="left"))
    below = float(cumulative[j - 1]) if j > 0 else 0.0
    inside = float(histogram[j])
    share = (q * total - below) / inside if inside > 0 else 1.0
    return (j + share) * _HISTOGRAM_BIN_S


def _fraction_above(chunk: traffic_.Chunk, limit_s: float) -> float:
    """Share of the chunk's requests whose value exceeds `limit_s` (uniform within it)."""
    lo, hi = sorted((chunk.first_s, chunk.last_s))
    if hi <= limit_s:
        return 0.0
    if lo > limit_s or hi - lo < _EPS:
        return 1.0
    return (hi - limit_s) / (hi - lo)
