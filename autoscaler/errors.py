"""The project's exceptions. Adapters translate library errors into these with `raise ... from`.

    AutoscalerError
    ├── ConfigError          bad settings or input files: fatal at start, exit code 2
    │   └── TraceError       a request trace that cannot be replayed (file, line, field)
    ├── ObservationError     metrics unavailable or stale: the affected services hold
    └── ActuationError       a write failed (conflict, not found, forbidden): retried later

Bad data inside the decision core is not an exception: it is a hold decision with a reason.
"""

from __future__ import annotations


class AutoscalerError(Exception):
    """Base of every error the project raises on purpose."""


class ConfigError(AutoscalerError):
    """Configuration or input that cannot be used; reported as one line, exit code 2."""


class TraceError(ConfigError):
    """A request trace that cannot be replayed, located by file, line and field."""

    def __init__(self, path: str, line: int | None, field: str | None, problem: str) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.problem = problem
        where = path if line is None else f"{path}:{line}"
        what = problem if field is None else f"field {field!r}: {problem}"
        super().__init__(f"{where}: {what}")


class ObservationError(AutoscalerError):
    """Metrics could not be read, or are too old to trust."""


class ActuationError(AutoscalerError):
    """A change to the cluster could not be made this time."""
