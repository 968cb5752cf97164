"""The benchmarks of docs/benchmark.md, run from the repository root (`python -m bench.run`).

`scenarios` builds the request traces, `run` simulates every policy on them and searches each
policy's utilisation target for GPU-hours at equal SLO, `equal_slo` holds that search, and
`report` renders the table, the JSON and the plots.

Nothing here is part of the installed package, and nothing in `autoscaler` imports it.
"""
