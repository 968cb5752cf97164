"""HPA and KEDA run on rate and on concurrency; the bench keeps the better and says which."""

from __future__ import annotations

import numpy as np

from autoscaler.experiment import report, sweep, variants
from autoscaler.experiment.scenario import Scenario
from autoscaler.experiment.sweep import Config, Outcome, Results, Run


def fabricated(policy: str, *, misses: float, gpu_hours: float, qualifies: bool) -> Outcome:
    run = Run(
        scenario="s",
        regime="warm",
        policy=policy,
        utilisation=0.75,
        requests=1000.0,
        slo_miss_pct=misses,
        dropped_pct=0.0,
        gpu_hours=gpu_hours,
        scale_events=3,
        time_to_capacity_s=None,
        p95_latency_s=2.0,
        mean_replicas=5.0,
    )
    return Outcome("s", "warm", policy, run, run if qualifies else None, (run,))


def test_the_cheaper_qualifying_signal_wins() -> None:
    """Both meet the SLO limit: the fewer equal-SLO GPU-hours win."""
    rate = fabricated("hpa", misses=0.5, gpu_hours=12.0, qualifies=True)
    conc = fabricated("hpa-conc", misses=0.2, gpu_hours=11.0, qualifies=True)

    assert variants.better(rate, conc) is conc
    assert variants.better(conc, rate) is conc


def test_a_signal_that_meets_the_limit_beats_one_that_does_not() -> None:
    """Only concurrency meets the limit: it wins even at more GPU-hours."""
    rate = fabricated("keda", misses=30.0, gpu_hours=5.0, qualifies=False)
    conc = fabricated("keda-conc", misses=0.9, gpu_hours=20.0, qualifies=True)

    assert variants.better(rate, conc) is conc


def test_when_neither_meets_the_limit_fewer_default_misses_win_and_ties_keep_the_rate() -> None:
    """No qualifying setting: fewer misses at the default target; a full tie keeps the first."""
    rate = fabricated("hpa", misses=9.0, gpu_hours=10.0, qualifies=False)
    conc = fabricated("hpa-conc", misses=7.0, gpu_hours=14.0, qualifies=False)
    twin = fabricated("hpa-conc", misses=9.0, gpu_hours=10.0, qualifies=False)

    assert variants.better(rate, conc) is conc
    assert variants.better(rate, twin) is rate


def test_best_of_keeps_one_row_per_peer_in_place_and_sets_the_other_aside() -> None:
    """Each family's variants collapse to the winner at the first variant's place."""
    seed = fabricated("seed", misses=0.0, gpu_hours=9.0, qualifies=True)
    hpa_rate = fabricated("hpa", misses=0.0, gpu_hours=10.0, qualifies=True)
    hpa_conc = fabricated("hpa-conc", misses=0.0, gpu_hours=12.0, qualifies=True)
    keda_rate = fabricated("keda", misses=40.0, gpu_hours=8.0, qualifies=False)
    keda_conc = fabricated("keda-conc", misses=0.1, gpu_hours=13.0, qualifies=True)
    kpa = fabricated("kpa", misses=0.0, gpu_hours=11.0, qualifies=True)

    kept, aside = variants.best_of([seed, hpa_rate, hpa_conc, keda_rate, keda_conc, kpa])

    assert [o.policy for o in kept] == ["seed", "hpa", "keda-conc", "kpa"]
    assert [o.policy for o in aside] == ["hpa-conc", "keda"]


def test_the_table_and_the_json_name_the_winning_signal() -> None:
    """Rows read `hpa (rate)` and `keda (conc)`; the JSON gives family and signal, and keeps the
    losers under `set_aside`."""
    hpa_rate = fabricated("hpa", misses=0.0, gpu_hours=10.0, qualifies=True)
    keda_conc = fabricated("keda-conc", misses=0.1, gpu_hours=13.0, qualifies=True)
    keda_rate = fabricated("keda", misses=40.0, gpu_hours=8.0, qualifies=False)
    config = Config(scenarios=("s",), regimes=("warm",), policies=("hpa", "keda", "keda-conc"))
    flat = Scenario("s", "flat", np.ones(10))
    results = Results(config, {"s": flat}, (hpa_rate, keda_conc), set_aside=(keda_rate,))

    rows = [line.split("|")[3].strip() for line in report.table(results).splitlines()[2:]]
    saved = report.as_json(results)

    assert rows == ["hpa (rate)", "keda (conc)"]
    assert [(o["family"], o["signal"]) for o in saved["outcomes"]] == [
        ("hpa", "rate"),
        ("keda", "concurrency"),
    ]
    assert [o["policy"] for o in saved["set_aside"]] == ["keda"]
    assert variants.label("kpa") == "kpa"
    assert variants.signal("kpa") == "concurrency"


def test_a_bench_run_keeps_one_hpa_row_and_sets_the_other_signal_aside() -> None:
    """Run on a small 3x step, HPA's two variants become one row plus one set aside."""
    rate = np.where(np.arange(600) < 300, 4.5, 13.5)
    arrivals = np.random.default_rng(3).poisson(rate).astype(np.float64)
    step = Scenario("tiny", "a 3x step", arrivals, step_at_s=300.0)
    config = Config(scenarios=("tiny",), regimes=("warm",), policies=("hpa", "hpa-conc", "oracle"))

    results = sweep.run(config, {"tiny": step}, jobs=1)

    assert [variants.family(o.policy) for o in results.outcomes] == ["hpa", "oracle"]
    assert {results.outcomes[0].policy, results.set_aside[0].policy} == {"hpa", "hpa-conc"}
    assert len(results.set_aside) == 1
