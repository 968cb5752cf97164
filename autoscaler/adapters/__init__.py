"""Adapters translate the ports to real systems (Prometheus, the Kubernetes API, mesh CRDs).

Each one speaks its library's protocol, carries the project's own values across the port, and maps
the library's exceptions to the project's errors (`errors.ObservationError`, `ActuationError`)
with `raise ... from`. An adapter decides nothing: no thresholds, no holds, no fallbacks to a
guessed value; missing data stays missing (NaN) for the decision core to judge.
"""
