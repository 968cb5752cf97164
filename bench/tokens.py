"""Token-mix scenarios in the simulator's token mode: every policy at the same TTFT SLO.

    python -m bench.tokens [--regime cold] [--policies p,q] [--scenarios a,b] [--jobs N]
                           [--duration-s S] [--prompt-token-weight W] [--no-search]

An LLM server's capacity is tokens, not requests: when long prompts arrive (retrieval-augmented
answers, code with its repository context) at the same request rate, each replica carries a
fraction of the requests it did. Three scenarios at one constant Poisson request rate, each
request's prompt and output lengths drawn jointly from the bundled Azure hour
(`azure_llm_2023_conv.per_request.csv.gz`):

- `tokens-stable`: the Azure mix throughout.
- `tokens-rag`: from 15 to 45 min, half of the requests carry `RAG_CONTEXT_TOKENS` more prompt
  (the share ramps over 5 min each way).
- `tokens-code`: from 20 min on, `CODE_SHARE` of the requests are code completions: prompts
  `CODE_PROMPT_FACTOR` times longer, outputs `CODE_OUTPUT_DIVISOR` times shorter.

Every policy but one scales on request signals with mu measured on the stable mix
(`measure_capacity`: the highest rate that ten replicas serve with at most 1 % of requests over
the TTFT SLO, per replica, and the time a request stays in the server at the load target, for
the concurrency targets), as an operator would set its targets after a load test. Each runs at its
default target and through the equal-SLO search of `autoscaler.experiment.sweep` on the TTFT
SLO; the table gives misses (TTFT over the SLO, or dropped) and GPU-hours.

`default-tokens` is ours with the token signals besides: the KV-cache usage and the tokens per
second one replica shows at mu on the stable mix (`Capacity`), times the same utilisation target
as its request target, and a P95 TTFT target of `TTFT_TARGET_SHARE` of the SLO; what a load test
on the stable mix gives an operator, who then annotates `target-kv-cache-utilization`,
`target-tokens-per-replica` and `target-ttft-p95`. The tokens target counts generated tokens, a
prompt token as `prompt-token-weight` of one (`--prompt-token-weight`, the annotation's default
unless told; 1 counts every token alike). It is registered with the simulator's policies for
this bench only, and so is `default-token-rate`: ours with the tokens target alone (no
KV-cache or TTFT target), to tell what the weighted token rate does from what the other two
votes add.

It lives beside `bench.run` rather than in `bench.scenarios` so the default benchmark's running
time does not change. It must not change the simulator or the policies.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import functools
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from autoscaler.core import model
from autoscaler.experiment import equal_slo, sweep, trace
from autoscaler.experiment import run as sim_run
from autoscaler.experiment.scenario import Scenario
from autoscaler.sim import policies as sim_policies
from autoscaler.sim import tokens
from autoscaler.sim.params import SimParams
from bench import common

FloatArray = npt.NDArray[np.float64]

DURATION_S = 3600
STABLE_REPLICAS = 20.0
"""The request rate: what this many replicas carry at the default target on the stable mix."""
RAG_CONTEXT_TOKENS = 4000
RAG_SHARE = 0.5
CODE_SHARE = 0.7
CODE_PROMPT_FACTOR = 3.0
CODE_OUTPUT_DIVISOR = 4.0
SEED = 16
TOKENS_POLICY = "default-tokens"
TOKEN_RATE_POLICY = "default-token-rate"
POLICIES = ("seed", "default", TOKENS_POLICY, TOKEN_RATE_POLICY, "hpa", "keda", "kpa", "oracle")
TTFT_TARGET_SHARE = 0.5
"""`default-tokens`'s P95 TTFT target, as a share of the SLO: it votes before requests miss."""
TOKEN_CONFIG = tokens.TokenConfig()
GRID = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
"""Utilisation targets the equal-SLO search may try: a shift to long prompts can need three
times the stable mix's headroom, so the grid reaches further down than `sweep.GRID`."""
_PROBE_REPLICAS = 10.0
_PROBE_S = 1800


@dataclass(frozen=True, slots=True)
class TokenScenario:
    scenario: Scenario
    mix: tokens.TokenMix


@dataclass(frozen=True, slots=True)
class Row:
    scenario: str
    policy: str
    default: equal_slo.Trial
    equal: equal_slo.Trial | None
    ttft_p95_s: float | None


@functools.cache
def azure_pairs() -> tuple[FloatArray, FloatArray]:
    """The bundled hour's (prompt, output) token counts, one pair per request."""
    requests = trace.load_per_request(trace.bundled_per_request())
    return requests.prompt_tokens, requests.output_tokens


def draw(
    rate_rps: float,
    duration_s: int,
    share: FloatArray,
    shift: Callable[[FloatArray, FloatArray], tuple[FloatArray, FloatArray]],
    *,
    seed: int,
) -> tuple[FloatArray, tokens.TokenMix]:
    """Poisson arrivals at `rate_rps`, each request's lengths drawn from the Azure pairs; a
    request is shifted (`shift(prompt, output)`) with the chance `share[t]` of its second."""
    prompts, outputs = azure_pairs()
    rng = np.random.default_rng(seed)
    counts = rng.poisson(rate_rps, duration_s)
    second = np.repeat(np.arange(duration_s), counts)
    pick = rng.integers(0, len(prompts), len(second))
    prompt, output = prompts[pick], outputs[pick]  # fancy indexing copies: the cache stays
    shifted = rng.random(len(second)) < share[second]
    prompt[shifted], output[shifted] = shift(prompt[shifted], output[shifted])
    mix = tokens.TokenMix(
        np.bincount(second, weights=prompt, minlength=duration_s).astype(np.float64),
        np.bincount(second, weights=output, minlength=duration_s).astype(np.float64),
    )
    return counts.astype(np.float64), mix


def _ramp(duration_s: int, start_s: int, end_s: int, peak: float, ramp_s: int = 300) -> FloatArray:
    t = np.arange(duration_s, dtype=np.float64)
    up = np.clip((t - start_s) / ramp_s, 0.0, 1.0)
    down = np.clip((end_s - t) / ramp_s, 0.0, 1.0)
    return peak * np.minimum(up, down)


def _rag(prompt: FloatArray, output: FloatArray) -> tuple[FloatArray, FloatArray]:
    return prompt + RAG_CONTEXT_TOKENS, output


def _code(prompt: FloatArray, output: FloatArray) -> tuple[FloatArray, FloatArray]:
    return prompt * CODE_PROMPT_FACTOR, np.maximum(1.0, np.round(output / CODE_OUTPUT_DIVISOR))


def build(mu_rps: float, duration_s: int = DURATION_S) -> dict[str, TokenScenario]:
    """The three scenarios at the rate `STABLE_REPLICAS` replicas carry on the stable mix."""
    rate = STABLE_REPLICAS * SimParams().target_utilisation * mu_rps
    none = np.zeros(duration_s)
    rag = _ramp(duration_s, 900, 2700, RAG_SHARE)
    code = _ramp(duration_s, 1200, duration_s + 300, CODE_SHARE)
    specs = {
        "tokens-stable": (none, _rag, "the Azure mix throughout", None, None),
        "tokens-rag": (
            rag,
            _rag,
            f"from 15 to 45 min, {RAG_SHARE:.0%} of requests carry {RAG_CONTEXT_TOKENS:,} more "
            "prompt tokens",
            900.0,
            1800.0,
        ),
        "tokens-code": (
            code,
            _code,
            f"from 20 min on, {CODE_SHARE:.0%} of requests are code: prompts "
            f"x{CODE_PROMPT_FACTOR:g}, outputs /{CODE_OUTPUT_DIVISOR:g}",
            1200.0,
            None,
        ),
    }
    built: dict[str, TokenScenario] = {}
    for name, (share, shift, about, step_at_s, step_s) in specs.items():
        arrivals, mix = draw(rate, duration_s, share, shift, seed=SEED)
        description = f"{rate:.1f} requests/s (Poisson); {about}"
        scenario = Scenario(name, description, arrivals, step_at_s=step_at_s, step_s=step_s)
        built[name] = TokenScenario(scenario, mix)
    return built


@dataclass(frozen=True, slots=True)
class Capacity:
    """One replica on the stable mix, as a load test would measure it."""

    mu_rps: float
    """Requests per second it serves with at most 1 % of requests over the TTFT SLO."""
    in_service_s: float
    """How long a request stays in the server at the default load target (75 % of mu;
    Little's law: running over throughput): the request model's `service_time_s`, from which
    the concurrency targets (KPA's) are set. Under continuous batching it grows with the load
    (a fuller batch decodes slower), so it is taken where the policies aim, not at mu."""
    tokens_per_s: float = 0.0
    """Output (generated) tokens per second one replica serves at mu."""
    prompt_tokens_per_s: float = 0.0
    """Prompt tokens per second one replica prefills at mu."""
    kv_usage_ratio: float = 0.0
    """The mean share of its KV cache one replica holds at mu."""


@dataclass(frozen=True, slots=True)
class _Probe:
    miss_pct: float
    in_service_s: float
    tokens_per_s: float
    prompt_tokens_per_s: float
    kv_usage_ratio: float


def measure_capacity(config: tokens.TokenConfig = TOKEN_CONFIG) -> Capacity:
    """Bisect, on ten replicas, the highest per-replica rate within the SLO, to 0.05
    requests/s."""

    def probe(per_replica: float) -> _Probe:
        rate = per_replica * _PROBE_REPLICAS
        arrivals, mix = draw(rate, _PROBE_S, np.zeros(_PROBE_S), _rag, seed=SEED + 1)
        traffic = tokens.TokenTraffic(arrivals, mix, config)
        running = generated = prompt = kv = 0.0
        for _ in range(_PROBE_S):
            second = traffic.step(_PROBE_REPLICAS)
            running += second.running
            generated += second.generation_tokens
            prompt += second.prompt_tokens
            kv += second.kv_usage_ratio
        missed = traffic.slo_misses + traffic.unmet_at_end()
        return _Probe(
            100.0 * missed / traffic.arrived,
            running / _PROBE_S / rate,
            generated / _PROBE_S / _PROBE_REPLICAS,
            prompt / _PROBE_S / _PROBE_REPLICAS,
            kv / _PROBE_S,
        )

    lo, hi = 0.5, 20.0
    while hi - lo > 0.05:
        mid = (lo + hi) / 2
        if probe(mid).miss_pct <= equal_slo.SLO_MISS_LIMIT_PCT:
            lo = mid
        else:
            hi = mid
    mu = round(lo, 2)
    at_mu = probe(mu)
    return Capacity(
        mu,
        round(probe(mu * SimParams().target_utilisation).in_service_s, 2),
        round(at_mu.tokens_per_s),
        round(at_mu.prompt_tokens_per_s),
        round(at_mu.kv_usage_ratio, 3),
    )


def register_tokens_policy(
    capacity: Capacity,
    config: tokens.TokenConfig = TOKEN_CONFIG,
    *,
    prompt_token_weight: float = model.DEFAULT_PROMPT_TOKEN_WEIGHT,
) -> None:
    """Register `default-tokens`: ours with the token targets a load test at mu gives, a
    prompt token counted as `prompt_token_weight` of a generated one."""
    per_replica = capacity.tokens_per_s + prompt_token_weight * capacity.prompt_tokens_per_s

    def policy_config(params: SimParams) -> model.PolicyConfig:
        u = params.target_utilisation
        return dataclasses.replace(
            sim_policies.default_config(params),
            target_kv_cache_ratio=min(1.0, u * capacity.kv_usage_ratio),
            target_tokens_per_replica=u * per_replica,
            prompt_token_weight=prompt_token_weight,
            target_ttft_p95_s=TTFT_TARGET_SHARE * config.slo_ttft_s,
        )

    def rate_config(params: SimParams) -> model.PolicyConfig:
        return dataclasses.replace(
            sim_policies.default_config(params),
            target_tokens_per_replica=params.target_utilisation * per_replica,
            prompt_token_weight=prompt_token_weight,
        )

    for name, factory, about in (
        (TOKENS_POLICY, policy_config, "ours with KV-cache, token-rate and TTFT votes besides"),
        (TOKEN_RATE_POLICY, rate_config, "ours with the token-rate vote besides"),
    ):
        sim_policies.register(name, sim_policies.PolicyEntry(factory, about=about), replace=True)
        sweep.DEFAULT_UTILISATION[name] = sweep.DEFAULT_UTILISATION["default"]


def _trial(
    name: str, policy: str, utilisation: float, regime: str, base: SimParams
) -> tuple[equal_slo.Trial, float | None]:
    built = _SCENARIOS[name]
    task = sweep.Task(name, regime, policy, utilisation)
    params = sweep.params_for(task, built.scenario, base)
    decider = sweep.decider_for(task, params)
    result = sim_run.simulate(built.scenario.arrivals, params, policy=decider, token_mix=built.mix)
    summary = result.summary
    p95 = summary["p95_latency_s"]
    trial = equal_slo.Trial(utilisation, float(summary["slo_miss_pct"]), summary["gpu_hours"])
    return trial, None if p95 is None else float(p95)


_SCENARIOS: dict[str, TokenScenario] = {}


def start_worker(
    scenarios: dict[str, TokenScenario],
    capacity: Capacity,
    prompt_token_weight: float = model.DEFAULT_PROMPT_TOKEN_WEIGHT,
) -> None:
    """Make this process ready for `search`: the scenarios, and `default-tokens` registered."""
    sweep.quiet_logs()
    _SCENARIOS.update(scenarios)
    register_tokens_policy(capacity, prompt_token_weight=prompt_token_weight)


def search(
    name: str, policy: str, regime: str, base: SimParams, grid: Sequence[float] | None
) -> Row:
    """The policy at its default target, then the equal-SLO search from there (none without
    a grid)."""
    default = sweep.DEFAULT_UTILISATION[policy]
    first, p95 = _trial(name, policy, default, regime, base)
    trials = [first]
    if grid is None:
        return Row(name, policy, first, None, p95)
    while (target := equal_slo.next_target(grid, trials)) is not None:
        trials.append(_trial(name, policy, target, regime, base)[0])
    return Row(name, policy, first, equal_slo.cheapest(trials), p95)


def markdown(
    rows: Sequence[Row], scenarios: dict[str, TokenScenario], header: str, *, searched: bool
) -> str:
    lines = [header, ""]
    for name, built in scenarios.items():
        lines.append(f"- `{name}`: {built.scenario.description}")
    lines += [
        "",
        "| scenario | policy | default: TTFT misses | default: GPU-h | TTFT p95 | "
        "equal SLO: target | misses | GPU-h |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        equal = row.equal
        if not searched:
            tail = "not searched | — | —"
        elif equal is None:
            tail = "none within 1 % | — | —"
        else:
            tail = f"{equal.utilisation:.2f} | {equal.slo_miss_pct:.2f} % | {equal.gpu_hours:.1f}"
        p95 = "—" if row.ttft_p95_s is None else f"{row.ttft_p95_s:.2f} s"
        lines.append(
            f"| {row.scenario} | {row.policy} | {row.default.slo_miss_pct:.2f} % | "
            f"{row.default.gpu_hours:.1f} | {p95} | {tail} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tokens", description=__doc__)
    parser.add_argument("--regime", choices=tuple(sweep.REGIMES), default="cold")
    parser.add_argument("--policies", default=",".join(POLICIES), metavar="P,Q")
    parser.add_argument("--jobs", type=common.positive_int, default=sweep.available_cpus())
    parser.add_argument("--duration-s", type=common.positive_int, default=DURATION_S)
    parser.add_argument("--scenarios", default="", metavar="A,B", help="default: all three")
    parser.add_argument(
        "--prompt-token-weight",
        type=float,
        default=model.DEFAULT_PROMPT_TOKEN_WEIGHT,
        metavar="W",
        help="generated tokens one prompt token counts for in default-tokens' tokens target "
        "(default: the annotation's, %(default)s)",
    )
    parser.add_argument(
        "--no-search", action="store_true", help="default targets only, no equal-SLO search"
    )
    args = parser.parse_args(argv)
    policies = tuple(p for p in args.policies.split(",") if p)
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        parser.error(f"unknown policy {', '.join(unknown)}; known: {', '.join(POLICIES)}")
    started = time.perf_counter()
    weight = args.prompt_token_weight
    if not 0 < weight <= 1:
        parser.error("--prompt-token-weight must be > 0 and <= 1")
    capacity = measure_capacity()
    register_tokens_policy(capacity, prompt_token_weight=weight)
    mu = capacity.mu_rps
    scenarios = build(mu, args.duration_s)
    if args.scenarios:
        chosen = [n for n in args.scenarios.split(",") if n]
        if unknown := [n for n in chosen if n not in scenarios]:
            parser.error(f"unknown scenario {', '.join(unknown)}; known: {', '.join(scenarios)}")
        scenarios = {n: scenarios[n] for n in chosen}
    base = dataclasses.replace(
        sweep.BASE,
        tokens=TOKEN_CONFIG,
        replica_capacity_rps=mu,
        service_time_s=capacity.in_service_s,
    )
    jobs = [(name, policy) for name in scenarios for policy in policies]
    with concurrent.futures.ProcessPoolExecutor(
        max_workers=args.jobs, initializer=start_worker, initargs=(scenarios, capacity, weight)
    ) as pool:
        futures = [
            pool.submit(search, name, policy, args.regime, base, None if args.no_search else GRID)
            for name, policy in jobs
        ]
        rows = [f.result() for f in futures]
    header = (
        f"Token mode, {args.regime} start-up, TTFT SLO {TOKEN_CONFIG.slo_ttft_s:g} s, "
        f"mu {mu:g} requests/s per replica and {capacity.in_service_s:g} s in the server; "
        f"at mu, {capacity.prompt_tokens_per_s:g} prompt and {capacity.tokens_per_s:g} output "
        f"tokens/s and {capacity.kv_usage_ratio:.1%} of the KV cache per replica (measured on "
        f"the stable mix); prompt-token-weight {weight:g}"
    )
    print(markdown(rows, scenarios, header, searched=not args.no_search))
    elapsed = time.perf_counter() - started
    print(f"{len(rows)} searches in {elapsed:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
