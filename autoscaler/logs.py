"""structlog setup: JSON lines in the cluster (or whenever stderr is not a terminal), pretty
console lines on a terminal. Called once at start by the CLI; nothing else configures logging.

Event names are the constants below, `noun.past_verb`; values travel as key/value pairs, never
inside the event text.

It must not decide anything, nor write anywhere but the stream it is given (stderr by default).
"""

from __future__ import annotations

import contextvars
import io
import logging
import sys
from collections.abc import Callable, MutableMapping
from typing import Any, TextIO, cast

import structlog

LEVELS = ("debug", "info", "warning", "error", "critical")

# Events of the command line (the loop's own, such as `decision.made`, live in `loop`).
TRACE_LOADED = "trace.loaded"
SIMULATION_STARTED = "simulation.started"
SIMULATION_FINISHED = "simulation.finished"
REPORT_WRITTEN = "report.written"
SETTING_IGNORED = "setting.ignored"

SIM_CLOCK: contextvars.ContextVar[Callable[[], float] | None] = contextvars.ContextVar(
    "sim_clock", default=None
)
"""The simulated clock while a simulation runs in this context (the simulator sets it): every
event logged meanwhile carries `sim_t_s`, the simulated time, beside the wall-clock timestamp."""


def configure(*, json: bool | None, level: str, stream: TextIO | None = None) -> None:
    """Route structlog to `stream` (stderr) at `level`.

    `json=None` picks JSON lines when the stream is not a terminal and console rendering when it
    is; True or False forces one of them. Raises `ValueError` for an unknown level.
    """
    if level.lower() not in LEVELS:
        raise ValueError(f"unknown log level {level!r} (choose from {', '.join(LEVELS)})")
    out = cast(TextIO, _Stderr()) if stream is None else stream
    tty = _isatty(sys.stderr if stream is None else stream)
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if (not tty if json is None else json)
        else structlog.dev.ConsoleRenderer(colors=tty)
    )
    processors: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _add_sim_time,
    ]
    if isinstance(renderer, structlog.processors.JSONRenderer):
        processors.append(structlog.processors.dict_tracebacks)
    processors.append(renderer)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(out),
        # Not cached: a later `configure` (tests, a second command in one process) must apply
        # to module-level loggers too.
        cache_logger_on_first_use=False,
    )


def _add_sim_time(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    now = SIM_CLOCK.get()
    if now is not None:
        event["sim_t_s"] = round(now(), 3)
    return event


class _Stderr(io.TextIOBase):
    """Whatever `sys.stderr` is at the time of each write, not at the time of `configure`.

    A progress bar (rich) swaps `sys.stderr` for a proxy that prints above the bar, and pytest
    swaps it per test; a logger bound to the original stream would write past both.
    """

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or not a real file
        return False
