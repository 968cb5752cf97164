"""Which of the servers' signals a baseline scales on: what its user points it at.

The simulator hands every baseline its one metric as the LOAD signal; this says which metric that
is, so a decision's detail names the right unit and a comparison can say what each peer ran on.

Pure: values only.
"""

from __future__ import annotations

import enum


class Metric(enum.Enum):
    """A baseline's scaling metric."""

    RATE = "rate"
    """Requests per second (`rate(vllm:request_success_total[...])`, Knative's `rps`)."""
    CONCURRENCY = "concurrency"
    """Requests in the server: running plus waiting (`vllm:num_requests_running +
    vllm:num_requests_waiting`; Knative's `concurrency`, its default)."""

    @property
    def unit(self) -> str:
        return "rps" if self is Metric.RATE else "in flight"
