"""The loop-alone bench's churning fleet: what its Prometheus answers between scrapes."""

from __future__ import annotations

import json

from bench import loop_hot_path


def values(answers: loop_hot_path.Churning) -> dict[str, list[str]]:
    return {
        kind: [series["value"][1] for series in json.loads(body)["data"]["result"]]
        for kind, body in answers.bodies.items()
    }


def test_a_pods_samples_hold_until_its_next_scrape_and_scrapes_are_spread() -> None:
    """With a scrape every three ticks each pod's samples change at one tick of three, the
    pods' turns spread over the three; scraped every tick, every sample is new each tick."""
    workloads = loop_hot_path.records(40)
    held = loop_hot_path.Churning(40, churn_per_minute=0.0, tick_s=1.0, seed=3, scrape_ticks=3)
    every = loop_hot_path.Churning(40, churn_per_minute=0.0, tick_s=1.0, seed=3)
    held.renew(workloads)
    every.renew(workloads)
    ticks = [values(held)]
    for _ in range(6):
        held.renew(workloads)
        ticks.append(values(held))
        last = values(every)
        every.renew(workloads)
        assert all(
            a != b for kind in last for a, b in zip(last[kind], values(every)[kind], strict=True)
        )

    pods = len(ticks[0]["load"])
    for kind in ("load", "queue", "gpu"):
        changed_at = [
            [t for t in range(1, 7) if ticks[t][kind][i] != ticks[t - 1][kind][i]]
            for i in range(pods)
        ]
        assert all(len(at) == 2 and at[1] - at[0] == 3 for at in changed_at)
        assert {at[0] for at in changed_at} == {1, 2, 3}
