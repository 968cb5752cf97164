"""Run `bench.run` with `policy.default` given other `PolicyConfig` fields: a variant of the
default policy measured on the bench without changing its code.

    python -m bench.policy_variant --set deadband_ratio=0.05 --set scale_down_cooldown_s=120 \\
        -- --jobs 1 --policies default --scenarios diurnal,on-off --out bench-out/variant

Each `--set NAME=VALUE` is a field of `model.PolicyConfig`, or `slo.NAME` one of the
`model.SloConfig` the service's SLO is built with (`--set slo.fit_settle_s=60`); the value is
read as JSON (`true`, `60`, `1.5`), `none` as None. The fields the simulation sets for every run
(`sim.policies.SET_BY_THE_SIMULATION`: the targets the sweep moves, the bounds, the SLO) are
refused: a variant's value for them would silently never apply. Everything after `--` goes to
`bench.run` unchanged. Runs in one process only (`--jobs 1`): worker processes would build the
unchanged policy.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
from collections.abc import Iterator, Mapping, Sequence

from autoscaler.core import model, policy
from autoscaler.sim import policies

from . import run


def parse_field(text: str) -> tuple[str, object]:
    """`NAME=VALUE` as a `PolicyConfig` field name and its value."""
    name, sep, value = text.partition("=")
    known = {f.name for f in dataclasses.fields(model.PolicyConfig)}
    known |= {f"{_SLO}{f.name}" for f in dataclasses.fields(model.SloConfig)}
    if not sep or name not in known:
        raise argparse.ArgumentTypeError(
            f"expected NAME=VALUE with a PolicyConfig or slo.SloConfig field: {text!r}"
        )
    if name in policies.SET_BY_THE_SIMULATION:
        raise argparse.ArgumentTypeError(
            f"{name}: the simulation sets it for every run (the sweep's targets, the bounds, the "
            "SLO), so a variant's value would never be used; set slo.NAME for an SLO field"
        )
    if value.lower() == "none":
        return name, None
    try:
        return name, json.loads(value)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"{name}: {value!r} is not a JSON value") from e


_SLO = "slo."


@contextlib.contextmanager
def default_with(fields: Mapping[str, object]) -> Iterator[None]:
    """`policy.default` with `fields` set (a caller's own overrides still win, but `slo.NAME`
    applies to the SLO the caller gives), until the end."""
    shipped = policy.default
    slo = {name.removeprefix(_SLO): v for name, v in fields.items() if name.startswith(_SLO)}
    plain = {name: v for name, v in fields.items() if not name.startswith(_SLO)}

    def variant(*, max_replicas: int, **overrides: object) -> model.PolicyConfig:
        config = shipped(max_replicas=max_replicas, **{**plain, **overrides})
        if slo and config.slo is not None:
            config = dataclasses.replace(config, slo=dataclasses.replace(config.slo, **slo))  # type: ignore[arg-type]
        return config

    policy.default = variant
    try:
        yield
    finally:
        policy.default = shipped


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    rest: list[str] = []
    if "--" in args:
        at = args.index("--")
        args, rest = args[:at], args[at + 1 :]
    parser = argparse.ArgumentParser(prog="python -m bench.policy_variant", description=__doc__)
    parser.add_argument("--set", dest="fields", type=parse_field, action="append", default=[])
    fields = dict(parser.parse_args(args).fields)
    if "--jobs" not in rest:
        rest = ["--jobs", "1", *rest]
    elif rest[rest.index("--jobs") + 1 :][:1] != ["1"]:
        parser.error("a variant runs in one process: --jobs 1")
    with default_with(fields):
        return run.main(rest)


if __name__ == "__main__":
    raise SystemExit(main())
