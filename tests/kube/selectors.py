"""Label and field selectors, parsed and matched as the Kubernetes API server does.

Pure functions over plain dicts: no I/O, no state. A malformed selector raises `ValueError`, which
the emulator answers with 400 Bad Request, as the API server does.
"""

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_KEY = rf"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_NAME}"
_VALUE = rf"({_NAME})?"
KEY_RE = re.compile(_KEY)
VALUE_RE = re.compile(_VALUE)

_SET_RE = re.compile(rf"^(?P<key>{_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_CMP_RE = re.compile(rf"^(?P<key>{_KEY})\s*(?P<op>==|=|!=|>|<)\s*(?P<value>{_VALUE})$")
_EXISTS_RE = re.compile(rf"^(?P<neg>!?)\s*(?P<key>{_KEY})$")
_FIELD_RE = re.compile(r"^(?P<field>[A-Za-z0-9_.]+)\s*(?P<op>==|=|!=)(?P<value>.*)$")


@dataclasses.dataclass(frozen=True, slots=True)
class Requirement:
    """One clause of a label selector: `key op values`."""

    key: str
    operator: str  # "in", "notin", "exists", "!exists", "gt", "lt"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        match self.operator:
            case "in":
                return present and value in self.values
            case "notin":
                return not present or value not in self.values
            case "exists":
                return present
            case "!exists":
                return not present
            case "gt" | "lt":
                if not present or not (value or "").lstrip("-").isdigit():
                    return False
                (bound,) = self.values
                return (
                    int(value or 0) > int(bound)
                    if self.operator == "gt"
                    else int(value or 0) < int(bound)
                )
        raise AssertionError(self.operator)


LabelSelector = tuple[Requirement, ...]
FieldSelector = tuple[tuple[str, bool, str], ...]  # (field path, equal?, value)


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside parentheses: `a in (x,y),b` has two clauses."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return [part.strip() for part in parts]


def parse_labels(text: str | None) -> LabelSelector:
    """Parse `app=x,tier!=db,env in (a,b),!legacy,gpu` into requirements."""
    if not text or not text.strip():
        return ()
    requirements: list[Requirement] = []
    for clause in _split_top_level(text):
        if match := _SET_RE.match(clause):
            values = frozenset(v.strip() for v in match["values"].split(","))
            if not all(VALUE_RE.fullmatch(v) for v in values):
                raise ValueError(f"invalid label value in {clause!r}")
            requirements.append(Requirement(match["key"], match["op"], values))
        elif match := _CMP_RE.match(clause):
            key, op, value = match["key"], match["op"], match["value"]
            if op in (">", "<"):
                if not value.lstrip("-").isdigit():
                    raise ValueError(f"{clause!r}: for '>' and '<' the value must be an integer")
                requirements.append(
                    Requirement(key, "gt" if op == ">" else "lt", frozenset({value}))
                )
            else:
                requirements.append(
                    Requirement(key, "notin" if op == "!=" else "in", frozenset({value}))
                )
        elif match := _EXISTS_RE.match(clause):
            requirements.append(Requirement(match["key"], "!exists" if match["neg"] else "exists"))
        else:
            raise ValueError(f"unable to parse requirement: {clause!r}")
    return tuple(requirements)


def match_labels(selector: LabelSelector, labels: Mapping[str, str] | None) -> bool:
    return all(requirement.matches(labels or {}) for requirement in selector)


def from_label_selector(spec: Mapping[str, Any] | None) -> LabelSelector:
    """Turn a `metav1.LabelSelector` (matchLabels, matchExpressions) into requirements."""
    spec = spec or {}
    requirements = [
        Requirement(key, "in", frozenset({value}))
        for key, value in (spec.get("matchLabels") or {}).items()
    ]
    operators = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}
    for expression in spec.get("matchExpressions") or []:
        operator = operators[expression["operator"]]
        requirements.append(
            Requirement(expression["key"], operator, frozenset(expression.get("values") or ()))
        )
    return tuple(requirements)


def format_label_selector(spec: Mapping[str, Any] | None) -> str:
    """Render a `metav1.LabelSelector` as the string a Scale's `status.selector` carries."""
    clauses = []
    for requirement in sorted(from_label_selector(spec), key=lambda r: r.key):
        values = ",".join(sorted(requirement.values))
        match requirement.operator:
            case "in" if len(requirement.values) == 1:
                clauses.append(f"{requirement.key}={values}")
            case "in" | "notin":
                clauses.append(f"{requirement.key} {requirement.operator} ({values})")
            case "exists":
                clauses.append(requirement.key)
            case "!exists":
                clauses.append(f"!{requirement.key}")
    return ",".join(clauses)


def parse_fields(text: str | None, allowed: Mapping[str, str]) -> FieldSelector:
    """Parse `metadata.name=x,status.phase!=Running`; `allowed` maps field labels to paths."""
    if not text or not text.strip():
        return ()
    clauses: list[tuple[str, bool, str]] = []
    for clause in text.split(","):
        match = _FIELD_RE.match(clause.strip())
        if not match:
            raise ValueError(f"invalid field selector: {clause!r}")
        if match["field"] not in allowed:
            raise ValueError(f"field label not supported: {match['field']}")
        clauses.append((allowed[match["field"]], match["op"] != "!=", match["value"]))
    return tuple(clauses)


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string form of a dotted field, as field selectors compare it ("" when absent)."""
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def match_fields(selector: FieldSelector, obj: Mapping[str, Any]) -> bool:
    return all((field_value(obj, path) == value) == equal for path, equal, value in selector)
