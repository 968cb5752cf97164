"""Run `bench.run` with `policy.default` given extra `PolicyConfig` fields: a variant of the
default policy measured on the bench without changing its code.

    python -m bench.policy_variant --set scale_down_spread=true --set scale_down_step_s=30 \\
        -- --jobs 1 --policies default --scenarios diurnal,on-off --out bench-out/spread

Each `--set NAME=VALUE` is a field of `model.PolicyConfig`; the value is read as JSON (`true`,
`60`, `1.5`), `none` as None. Everything after `--` goes to `bench.run` unchanged. Runs in one
process only (`--jobs 1`): worker processes would build the unchanged policy.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence

from autoscaler.core import model, policy

from . import run


def _field(text: str) -> tuple[str, object]:
    name, sep, value = text.partition("=")
    known = {f.name for f in dataclasses.fields(model.PolicyConfig)}
    if not sep or name not in known:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE with a PolicyConfig field: {text!r}")
    return name, None if value.lower() == "none" else json.loads(value)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    rest: list[str] = []
    if "--" in args:
        at = args.index("--")
        args, rest = args[:at], args[at + 1 :]
    parser = argparse.ArgumentParser(prog="python -m bench.policy_variant", description=__doc__)
    parser.add_argument("--set", dest="fields", type=_field, action="append", default=[])
    chosen = dict(parser.parse_args(args).fields)
    if "--jobs" not in rest:
        rest = ["--jobs", "1", *rest]
    if rest[rest.index("--jobs") + 1] != "1":
        parser.error("a variant runs in one process: --jobs 1")
    shipped = policy.default

    def variant(*, max_replicas: int, **overrides: object) -> model.PolicyConfig:
        return shipped(max_replicas=max_replicas, **{**chosen, **overrides})

    policy.default = variant
    try:
        return run.main(rest)
    finally:
        policy.default = shipped


if __name__ == "__main__":
    raise SystemExit(main())
