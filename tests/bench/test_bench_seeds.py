"""`bench.run --seeds N`: every scenario as N draws of its noise, each target judged on them all.

Draw 0 is the scenario as it always was, and one draw is the bench as it always was, to the bit:
the figures below were measured on the bench before draws existed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import structlog

from autoscaler import logs
from autoscaler.experiment import report, sweep
from autoscaler.experiment.scenario import Scenario
from autoscaler.experiment.sweep import Config, Run
from bench import compare, policy_variant, scenarios
from bench import run as bench_run


@pytest.fixture(autouse=True)
def _quiet_logs() -> Iterator[None]:
    logs.configure(json=True, level="warning")
    yield
    structlog.reset_defaults()


# --- the draws ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", scenarios.NAMES)
def test_draw_zero_is_the_scenario_and_later_draws_are_their_own(name: str) -> None:
    """Draw 0 is the scenario as `build` made it before draws; a later draw is repeatable,
    different from draw 0 and from the other draws, and carries about the same load."""
    alone = scenarios.build(name, sweep.BASE)
    zero = scenarios.build(name, sweep.BASE, 0)
    one, again = (scenarios.build(name, sweep.BASE, 1) for _ in range(2))
    two = scenarios.build(name, sweep.BASE, 2)

    assert np.array_equal(alone.arrivals, zero.arrivals)
    assert np.array_equal(one.arrivals, again.arrivals)
    assert len(one.arrivals) == len(zero.arrivals)
    assert not np.array_equal(one.arrivals, zero.arrivals)
    assert not np.array_equal(one.arrivals, two.arrivals)
    assert one.arrivals.min() >= 0
    assert one.arrivals.sum() == pytest.approx(zero.arrivals.sum(), rel=0.5)
    assert (one.past is None) == (zero.past is None)


def test_a_later_draw_redraws_the_shape_not_only_the_noise() -> None:
    """The Pareto bursts and the code-assistant's minutes come from the draw's own stream."""
    zero = scenarios.burst_schedule(3600, seed=scenarios.draw_seed(48, 0))
    one = scenarios.burst_schedule(3600, seed=scenarios.draw_seed(48, 1))

    assert zero == scenarios.burst_schedule(3600, seed=48)
    assert zero != one
    minutes = [scenarios.code_assist_curve(3600, scenarios.draw_seed(31, d))[1] for d in (0, 1)]
    assert minutes[0] != minutes[1]


def test_the_azure_draws_keep_the_real_swings_and_the_real_noise() -> None:
    """A later draw of the real hour follows its minute-scale shape, and its counts spread around
    their local mean as the real counts do (not twice as much, as a draw around the counts
    themselves would)."""
    real = scenarios.build("azure-conv", sweep.BASE)
    drawn = scenarios.build("azure-conv", sweep.BASE, 1)

    def dispersion(arrivals: np.ndarray) -> float:
        local = scenarios.local_rate(arrivals, scenarios.AZURE_RATE_WINDOW_S)
        scale = float(np.mean(local))
        return float(np.var(arrivals - local)) / scale

    per_minute = [a.arrivals[:3480].reshape(-1, 60).mean(axis=1) for a in (real, drawn)]
    assert np.corrcoef(*per_minute)[0, 1] > 0.9
    assert dispersion(drawn.arrivals) == pytest.approx(dispersion(real.arrivals), rel=0.2)


def test_local_rate_is_the_centred_mean_shorter_at_the_ends() -> None:
    counts = np.array([3.0, 0.0, 6.0, 0.0, 0.0])

    assert scenarios.local_rate(counts, 3).tolist() == [1.5, 3.0, 2.0, 2.0, 0.0]


def test_an_unknown_or_negative_draw_is_refused() -> None:
    with pytest.raises(ValueError, match="draw"):
        scenarios.build("step-5x", sweep.BASE, -1)


# --- one draw: the bench as it was ------------------------------------------------------------


def test_one_seed_gives_the_figures_of_the_bench_before_draws() -> None:
    """`--seeds 1` (the default) runs exactly what the bench ran before: every figure of these
    runs, to the last bit, as measured then."""
    config = bench_run.quick_config(
        scenarios=("pareto-bursts", "azure-conv"), policies=("default",), duration_s=600
    )
    drawn = bench_run.build_draws(config)
    results = sweep.run(config, bench_run.build_scenarios(config), jobs=1, draws=drawn)

    measured = {
        (o.scenario, o.regime): [(r.utilisation, r.gpu_hours, r.slo_miss_pct) for r in o.runs]
        for o in results.outcomes
    }
    assert measured == {
        ("pareto-bursts", "cold"): [
            (0.75, 1.4380555555555556, 0.0),
            (0.9, 1.4255555555555555, 0.0),
            (1.0, 1.426111111111111, 0.0),
        ],
        ("azure-conv", "cold"): [
            (0.75, 4.954444444444444, 0.0),
            (0.9, 4.318888888888889, 0.0),
            (1.0, 4.851111111111111, 8.038845747714426),
        ],
    }
    assert all(not r.draws for r in results.runs)
    assert all(not o.draws for o in results.outcomes)


# --- the search over several draws -------------------------------------------------------------


def run_at(utilisation: float, seed: int, miss_pct: float, gpu_hours: float) -> Run:
    return Run(
        scenario="s",
        regime="warm",
        policy="default",
        utilisation=utilisation,
        requests=1000.0,
        slo_miss_pct=miss_pct,
        dropped_pct=0.0,
        gpu_hours=gpu_hours,
        scale_events=3 + seed,
        time_to_capacity_s=None,
        p95_latency_s=2.0,
        mean_replicas=10.0,
        seed=seed,
    )


def test_a_target_is_judged_by_the_misses_pooled_over_the_draws() -> None:
    """At 0.75 draw 0 meets the limit and draw 1 does not: pooled they miss 1.25 %, so the
    search tries below rather than above (draw 0 alone would have tried 1.0), and only once both
    draws have run there."""
    search = sweep._Search(Config(scenarios=("s",), grid=(0.5, 0.75, 1.0), seeds=2))

    assert search.record(run_at(0.75, 0, 0.5, 10.0)) == []
    assert search.record(run_at(0.75, 1, 2.0, 12.0)) == [(0, 0.5), (1, 0.5)]
    assert search.record(run_at(0.5, 1, 0.0, 15.0)) == []
    assert search.record(run_at(0.5, 0, 0.0, 14.0)) == []
    assert search.done

    found = search.outcome(("s", "warm", "default"))
    assert [r.utilisation for r in found.runs] == [0.5, 0.75]
    at_75 = found.runs[1]
    assert at_75.slo_miss_pct == pytest.approx(1.25)
    assert at_75.gpu_hours == pytest.approx(11.0)
    assert (at_75.requests, at_75.scale_events) == (2000.0, 4)
    assert [r.seed for r in at_75.draws] == [0, 1]
    assert found.equal_slo is not None
    assert (found.equal_slo.utilisation, found.equal_slo.gpu_hours) == (0.5, 14.5)
    assert found.draws == ()


def test_per_draw_searches_each_draw_on_from_the_pooled_targets() -> None:
    """With `per_draw`, once the pooled search ends each draw goes on alone: draw 0, which met
    0.75, tries 1.0 by itself; draw 1 is already pinned."""
    config = Config(scenarios=("s",), grid=(0.5, 0.75, 1.0), seeds=2, per_draw=True)
    search = sweep._Search(config)
    search.record(run_at(0.75, 0, 0.5, 10.0))
    search.record(run_at(0.75, 1, 2.0, 12.0))
    search.record(run_at(0.5, 0, 0.0, 14.0))

    assert search.record(run_at(0.5, 1, 0.0, 15.0)) == [(0, 1.0)]
    assert not search.done
    assert search.record(run_at(1.0, 0, 3.0, 8.0)) == []
    assert search.done

    found = search.outcome(("s", "warm", "default"))
    assert found.equal_slo is not None
    assert found.equal_slo.utilisation == 0.5
    mine = [d.equal_slo for d in found.draws]
    assert [(r.utilisation, r.gpu_hours) for r in mine if r is not None] == [
        (0.75, 10.0),
        (0.5, 15.0),
    ]


def tiny_draws(seeds: int) -> tuple[Scenario, ...]:
    rate = np.where(np.arange(600) < 300, 4.5, 13.5)
    return tuple(
        Scenario("tiny", "a 3x step", np.random.default_rng([3, d]).poisson(rate).astype(float))
        for d in range(seeds)
    )


def test_several_draws_run_every_target_on_each_and_jobs_do_not_matter() -> None:
    """Each target of the search runs on every draw, the pooled run is what they add up to, and
    a pool of two workers gives what one process gives."""
    config = Config(
        scenarios=("tiny",), regimes=("warm",), policies=("seed",), seeds=2, per_draw=True
    )
    draws = tiny_draws(2)

    alone = sweep.run(config, {"tiny": draws[0]}, jobs=1, draws={"tiny": draws})
    pooled = sweep.run(config, {"tiny": draws[0]}, jobs=2, draws={"tiny": draws})

    assert report.as_json(alone) == report.as_json(pooled)
    (outcome,) = alone.outcomes
    for run in outcome.runs:
        assert [d.seed for d in run.draws] == [0, 1]
        assert run.gpu_hours == pytest.approx(sum(d.gpu_hours for d in run.draws) / 2)
        missed = sum(d.slo_miss_pct * d.requests for d in run.draws)
        assert run.slo_miss_pct == pytest.approx(missed / run.requests)
    assert [d.default.seed for d in outcome.draws] == [0, 1]
    saved = report.as_json(alone)
    assert saved["config"]["seeds"] == 2
    assert [d["seed"] for d in saved["outcomes"][0]["runs"][0]["draws"]] == [0, 1]
    assert [d["seed"] for d in saved["outcomes"][0]["draws"]] == [0, 1]


def test_seeds_without_their_draws_are_refused() -> None:
    config = Config(scenarios=("tiny",), seeds=2)
    with pytest.raises(ValueError, match="draws"):
        sweep.run(config, {"tiny": tiny_draws(1)[0]})
    with pytest.raises(ValueError, match="draws of tiny"):
        sweep.run(config, {"tiny": tiny_draws(1)[0]}, draws={"tiny": tiny_draws(3)})


# --- the command line --------------------------------------------------------------------------


def test_run_seeds_records_the_draws_and_spread_reads_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--seeds 2 --per-draw` writes the seeds and every draw's runs; `compare --spread` reads
    each draw's own setting from it."""
    out = tmp_path / "out"
    argv = ["--quick", "--scenarios", "step-5x", "--policies", "oracle", "--duration-s", "600"]
    argv += ["--jobs", "1", "--seeds", "2", "--per-draw", "--out", str(out), "--quiet"]

    assert bench_run.main(argv) == 0

    saved = json.loads((out / "results.json").read_text())
    assert (saved["config"]["seeds"], saved["config"]["per_draw"]) == (2, True)
    (outcome,) = saved["outcomes"]
    assert all(len(r["draws"]) == 2 for r in outcome["runs"])
    assert "2 draws" in (out / "results.md").read_text()
    capsys.readouterr()

    assert compare.main(["--spread", "oracle", str(out / "results.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["cell", "draw", "0", "draw", "1", "range", "pooled"]
    assert lines[1].split()[:2] == ["step-5x", "cold"]


def test_policy_variant_passes_the_seeds_on(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr(bench_run, "main", lambda argv: seen.append(list(argv)) or 0)

    assert policy_variant.main(["--set", "deadband_ratio=0.05", "--", "--seeds", "3"]) == 0
    assert seen == [["--jobs", "1", "--seeds", "3"]]


def test_the_parser_takes_seeds_and_defaults_to_one() -> None:
    assert bench_run._parser().parse_args([]).seeds == 1
    assert bench_run._parser().parse_args(["--seeds", "3"]).seeds == 3
    with pytest.raises(SystemExit):
        bench_run._parser().parse_args(["--seeds", "0"])


# --- compare -----------------------------------------------------------------------------------


def saved_run(seeds: int | None) -> dict[str, object]:
    config: dict[str, object] = {"scenarios": ["s"], "regimes": {"warm": 8.0}}
    if seeds is not None:
        config["seeds"] = seeds
    best = {"gpu_hours": 10.0, "utilisation": 0.8}
    outcome = {"scenario": "s", "regime": "warm", "policy": "default", "equal_slo": best}
    return {"config": config, "outcomes": [{**outcome, "equal_slo_vs_oracle": None}]}


@pytest.mark.parametrize("keep", [[], ["--keep", "default"]])
def test_compare_refuses_runs_on_different_seeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], keep: list[str]
) -> None:
    """Three draws against one is refused, saying why; a run from before the draws is one."""
    (tmp_path / "old.json").write_text(json.dumps(saved_run(None)))
    (tmp_path / "three.json").write_text(json.dumps(saved_run(3)))
    (tmp_path / "one.json").write_text(json.dumps(saved_run(1)))

    with pytest.raises(SystemExit):
        compare.main([*keep, str(tmp_path / "old.json"), str(tmp_path / "three.json")])
    assert "different numbers of draws" in capsys.readouterr().err
    with pytest.raises(compare.SeedsDifferError, match="--seeds 1, after --seeds 3"):
        compare.same_seeds(saved_run(1), saved_run(3))
    assert compare.main([*keep, str(tmp_path / "old.json"), str(tmp_path / "one.json")]) == 0


def test_spread_gives_each_draw_its_range_and_the_pooled_figure() -> None:
    def cell(scenario: str, draws: list[float | None], pooled: float | None) -> dict[str, object]:
        def best(g: float | None) -> dict[str, float] | None:
            return None if g is None else {"gpu_hours": g, "utilisation": 0.8}

        return {
            "scenario": scenario,
            "regime": "warm",
            "policy": "default",
            "equal_slo": best(pooled),
            "draws": [{"equal_slo": best(g)} for g in draws],
        }

    saved = {"outcomes": [cell("a", [10.0, 12.5, 11.0], 11.2), cell("b", [5.0, None, 6.0], None)]}

    cells = compare.spread(saved, "default")
    assert cells["a", "warm"].range == pytest.approx(2.5)
    assert cells["b", "warm"].range is None
    text = compare.spread_report(cells).splitlines()
    assert text[1].split() == ["a", "warm", "10.0", "12.5", "11.0", "2.5", "11.2"]
    assert text[2].split() == ["b", "warm", "5.0", "none", "6.0", "none", "none"]
    assert text[3].endswith("median 2.5, largest 2.5 GPU-hours")


def test_keep_gives_each_draw_its_own_change_when_both_runs_have_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With both runs made with `--per-draw`, a cell's line ends with each draw's change (or
    the setting it lost or won), in draw order."""

    def made(pooled: float, draws: list[float | None]) -> dict[str, object]:
        def best(g: float | None) -> dict[str, float] | None:
            return None if g is None else {"gpu_hours": g, "utilisation": 0.8}

        saved = saved_run(3)
        (outcome,) = saved["outcomes"]  # type: ignore[misc]
        outcome["equal_slo"] = best(pooled)
        outcome["draws"] = [{"equal_slo": best(g)} for g in draws]
        return saved

    (tmp_path / "b.json").write_text(json.dumps(made(10.0, [9.0, 10.0, None])))
    (tmp_path / "a.json").write_text(json.dumps(made(10.5, [9.5, None, 12.0])))

    assert (
        compare.main(["--keep", "default", str(tmp_path / "b.json"), str(tmp_path / "a.json")]) == 0
    )

    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("each draw alone: change")
    assert lines[1].split() == ["s", "warm", "10.0", "10.5", "+0.5", "+0.5", "lost", "won"]
