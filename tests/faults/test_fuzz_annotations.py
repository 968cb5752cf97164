"""Fuzzed annotations through every reader the controller has: each fails only as documented.

Every annotation the controller reads, the service owner's settings and its own `state`,
`status` and `ramp`, is text a tenant controls. Seeded generators (mutations of valid values,
random JSON, random text) and a hand-made hostile corpus (huge integers, 1e400, deep nesting,
NaN and Infinity, wrong types, huge strings, unicode, NUL, duplicate keys) go through the real
entry points: `annotations.parse`, `validate.validate_text`, `codec.parse_state`,
`codec.read_status` and `same_status`, `core.ramp.loads` and `explain.main`. A crash is any
exception but the documented one (`ValueError` from `parse_state` and `loads`, none from the
others) or a message that is not one bounded, printable line.
"""

from __future__ import annotations

import io
import json
import random
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from autoscaler import explain, validate
from autoscaler.contract import annotations as contract
from autoscaler.contract import codec
from autoscaler.core import model, ramp

from .figures import Figures

SEED = 20_250_611
BUDGET_S = 60.0
"""Wall time for the whole file on a busy machine; the counts below take about a sixth."""
MESSAGE_MAX = 600
"""Longest line a reader may print about one value: key, 80 escaped characters, the rule."""

BASE = {
    contract.ENABLED_KEY: "true",
    contract.PREFIX + "max-replicas": "10",
    contract.PREFIX + "target-qps-per-replica": "5",
}
VALID_STATE = codec.state_text(
    model.PolicyState(last_scale_up_s=1.75e9, last_scale_change_s=1.75e9 + 0.5, burst_until_s=2.0),
    replicas=4,
)
VALID_STATUS = codec.dumps(
    {
        "desired": 4,
        "current": 3,
        "kind": "scale-up",
        "reason": "above-target",
        "detail": "load ratio 1.50 asks for 4",
        "contributions": {
            "load": {"ratio": 1.5, "desired": 4, "estimator": "mean", "estimate": 30.0}
        },
        "cooldownUntil": "2025-06-15T00:01:00Z",
        "time": "2025-06-15T00:00:00Z",
    }
)
VALID_RAMP = ramp.dumps(
    ramp.RampState(
        phase=ramp.Phase.RAMPING,
        cohort=("chat-1", "chat-2"),
        step=1,
        step_started_s=1.75e9,
        weight_pct=7,
        checks=2,
        deadlines={"chat-3": 1.75e9 + 600},
        passed=("chat-4",),
        failures=1,
        drain=ramp.Drain(3, (ramp.Victim("chat-5", warm=True, stable=False),), 1.0, None),
    )
)

NUMBERS = [
    "9" * 400,
    "-" + "9" * 400,
    "1" * 5000,
    "1e400",
    "-1e400",
    "1e-400",
    "NaN",
    "Infinity",
    "-Infinity",
    "9007199254740993",
    "-0",
    "0.1e1",
    "1E+2",
    "1" + "0" * 300 + ".5",
]
SPECIAL_TEXT = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "\n",
    "\u202e",
    "\ufeff",
    "\ud800",
    "٣",
    "\uff13",  # a fullwidth digit
    "é" * 50,
    "😀" * 30,
    "x" * 70_000,
    '"',
    "\\",
]
JSON_CORPUS = [
    *NUMBERS,
    "[" * 100_000,
    "{" * 100_000,
    '{"a":' * 50_000,
    "[" * 9 + "]" * 9,
    "[" * 8 + "]" * 8,
    '["' + "[" * 100_000 + '"]',
    '["' + '\\"' * 50_000,
    '{"a": 1, "a": 2}',
    "null",
    "true",
    "[]",
    "{}",
    '""',
    "0",
    '"' + "x" * 300_000 + '"',
    "\x00",
    '{"\x00": 1}',
    '{"a": "\\ud800"}',
    "\ufeff{}",
    "{} {}",
]


# -- generators ------------------------------------------------------------------------------------


def random_json(rng: random.Random, depth: int = 0) -> Any:
    """A random JSON value, sometimes of a hostile shape; the deeper, the likelier a leaf."""
    roll = rng.random()
    if depth > 10 or roll < 0.35 + 0.07 * depth:
        leaves: list[Callable[[], Any]] = [
            lambda: None,
            lambda: rng.random() < 0.5,
            lambda: rng.randint(-(10**20), 10**20),
            lambda: rng.uniform(-1e12, 1e12),
            lambda: rng.choice([0, 1, -1, 2**53, 2**53 + 1, 10**400]),
            lambda: random_text(rng, 20),
            lambda: rng.choice(["idle", "ramping", "promoting", "held", "warming", "draining"]),
        ]
        return rng.choice(leaves)()
    if roll < 0.7:
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    keys = ["v", "phase", "step", "cohort", "deadlines", "drain", "lastScaleUp", "replicas"]
    return {
        rng.choice(keys) if rng.random() < 0.8 else random_text(rng, 8): random_json(rng, depth + 1)
        for _ in range(rng.randint(0, 4))
    }


def random_text(rng: random.Random, most: int) -> str:
    alphabet = rng.choice(
        [
            "0123456789.-+eE",
            '[]{}":,\\ \n\tabc0123456789',
            "".join(chr(c) for c in range(0x20)) + "\x7f\u202e\ufeff\u2028",
            "abcdefghijklmnopqrstuvwxyz-_/:.%",
        ]
    )
    text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, most)))
    if rng.random() < 0.1:
        text += chr(rng.choice([0xD800, 0xDFFF, 0x10FFFF, 0x0660, 0xFF10, 0x1F600]))
    return text


def mutate(rng: random.Random, text: str) -> str:
    """A valid text with one hostile edit."""
    kind = rng.randrange(9)
    at = rng.randint(0, len(text))
    if kind == 0:  # a number replaced by a hostile one
        digits = [i for i, c in enumerate(text) if c.isdigit()]
        if digits:
            i = rng.choice(digits)
            j = i
            while j < len(text) and (text[j].isdigit() or text[j] in ".eE+-"):
                j += 1
            return text[:i] + rng.choice(NUMBERS) + text[j:]
    if kind == 1:  # truncated
        return text[:at]
    if kind == 2:  # random bytes inserted
        return text[:at] + random_text(rng, 10) + text[at:]
    if kind == 3:  # wrapped in deep nesting
        depth = rng.choice([9, 100, 10_000, 60_000])
        return "[" * depth + text + "]" * rng.choice([0, depth])
    if kind == 4 and text.startswith("{") and ":" in text:  # a key doubled
        first = text[1 : text.index(",") if "," in text else -1]
        return "{" + first + "," + text[1:]
    if kind == 5:  # a value swapped for another type
        return text.replace(":", ":" + json.dumps(random_json(rng)) + ",", 1)
    if kind == 6:  # a huge string
        return text[:at] + "x" * rng.choice([1000, 70_000, 300_000]) + text[at:]
    if kind == 7 and text:  # one character changed
        i = rng.randrange(len(text))
        return text[:i] + chr(rng.randrange(0x30000)) + text[i + 1 :]
    return json.dumps(random_json(rng), allow_nan=True)


def json_inputs(rng: random.Random, valid: str, count: int) -> Iterator[str]:
    """The corpus, then `count` seeded mutations of `valid` and random documents."""
    yield valid
    yield from JSON_CORPUS
    for _ in range(count):
        yield mutate(rng, valid) if rng.random() < 0.7 else mutate(rng, mutate(rng, valid))


def setting_inputs(
    rng: random.Random, count: int, *, corpus_keys: int | None = None
) -> Iterator[tuple[str, str]]:
    """(key, value) for the service owner's settings: the corpus on every key (or on
    `corpus_keys` of them), then mutations of common values and random text."""
    keys = list(contract.SETTING_KEYS)
    for key in keys if corpus_keys is None else rng.sample(keys, corpus_keys):
        for value in [*NUMBERS, *SPECIAL_TEXT]:
            yield key, value
    defaults = ["10", "5", "30s", "1h30m", "12Gi", "10,30,50,100", "vllm", "true", "/v1/models"]
    for _ in range(count):
        key = rng.choice([*keys, contract.PREFIX + random_text(rng, 12)])
        base = rng.choice(defaults)
        value = mutate(rng, base) if rng.random() < 0.6 else random_text(rng, 80)
        yield key, value


# -- the entry points ----------------------------------------------------------------------------


def check_message(message: str) -> None:
    if not message.isprintable() or len(message) > MESSAGE_MAX:
        raise AssertionError(f"unbounded or unprintable message: {message[:200]!r}")


def parse_setting(item: tuple[str, str]) -> None:
    key, value = item
    result = contract.parse(BASE | {key: value}, namespace="ns")
    if isinstance(result, contract.Invalid):
        for problem in result.problems:
            check_message(problem.message)


def validate_setting(item: tuple[str, str]) -> None:
    key, value = item
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "chat", "namespace": "ml", "annotations": BASE | {key: value}},
    }
    for line in validate.validate_text(yaml.safe_dump(body), source="fuzz.yaml"):
        check_message(line)


def parse_state(text: str) -> None:
    try:
        codec.parse_state(text)
    except ValueError as e:
        check_message(contract.Problem(contract.STATE_KEY, text, str(e)).message)


def read_status(text: str) -> None:
    status = codec.read_status(text)
    if status is not None and not isinstance(status, dict):
        raise AssertionError(f"status read as {type(status).__name__}")
    codec.same_status(text, {"desired": 4})


def load_ramp(text: str) -> None:
    try:
        ramp.loads(text)
    except ValueError as e:
        check_message(contract.Problem(contract.RAMP_KEY, text, str(e)).message)


def explained(notes: dict[str, str]) -> None:
    deployment = {
        "metadata": {"name": "chat", "namespace": "ml", "annotations": notes},
        "spec": {"replicas": 3},
    }
    out, err = io.StringIO(), io.StringIO()
    code = explain.main("ml", "chat", deployment, out, err)
    if code not in (explain.EXIT_OK, explain.EXIT_NOT_MANAGED):
        raise AssertionError(f"exit code {code}")
    for line in (out.getvalue() + err.getvalue()).splitlines():
        check_message(line)


def explain_inputs(rng: random.Random, count: int) -> Iterator[dict[str, str]]:
    states = json_inputs(rng, VALID_STATE, count)
    statuses = json_inputs(rng, VALID_STATUS, count)
    settings = setting_inputs(rng, count)
    for state, status, (key, value) in zip(states, statuses, settings, strict=False):
        notes = dict(BASE)
        if rng.random() < 0.3:
            notes[key] = value
        notes[contract.STATE_KEY] = state
        notes[contract.STATUS_KEY] = status
        notes[contract.RAMP_KEY] = mutate(rng, VALID_RAMP)
        yield notes


# -- the test ------------------------------------------------------------------------------------


def fuzz(inputs: Iterator[Any], reader: Callable[[Any], None]) -> tuple[int, list[str]]:
    """How many inputs went through `reader`, and a description of each crash."""
    count = 0
    crashes = []
    for item in inputs:
        count += 1
        try:
            reader(item)
        except Exception as e:
            crashes.append(f"{type(e).__name__}: {str(e)[:120]} on {repr(item)[:120]}")
    return count, crashes


CASES: dict[str, Callable[[random.Random], tuple[Iterator[Any], Callable[[Any], None]]]] = {
    "settings (parse)": lambda rng: (setting_inputs(rng, 3000), parse_setting),
    # YAML is slow to write and read: fewer inputs, the corpus on three keys.
    "settings (validate)": lambda rng: (
        setting_inputs(rng, 300, corpus_keys=3),
        validate_setting,
    ),
    contract.STATE_KEY: lambda rng: (json_inputs(rng, VALID_STATE, 4000), parse_state),
    contract.STATUS_KEY: lambda rng: (json_inputs(rng, VALID_STATUS, 4000), read_status),
    contract.RAMP_KEY: lambda rng: (json_inputs(rng, VALID_RAMP, 4000), load_ramp),
    "explain (all)": lambda rng: (explain_inputs(rng, 1500), explained),
}


@pytest.mark.timeout(180)
def test_fuzzed_annotations_fail_only_as_documented(figures: Figures) -> None:
    """Thousands of seeded hostile values crash no reader, and the whole file stays in budget."""
    started = time.perf_counter()
    total = 0
    found: dict[str, list[str]] = {}
    for offset, (annotation, case) in enumerate(CASES.items()):
        inputs, reader = case(random.Random(SEED + offset))
        count, crashes = fuzz(inputs, reader)
        figures.record("fuzz", annotation=annotation, inputs=count, crashes=len(crashes))
        total += count
        if crashes:
            found[annotation] = crashes[:3]
    elapsed_s = time.perf_counter() - started
    assert found == {}
    assert total >= 10_000
    assert elapsed_s < BUDGET_S, f"{total} inputs took {elapsed_s:.1f} s"
