"""The decision core: values in, decisions out.

Pure and deterministic. Nothing here performs I/O, reads a clock, logs, or knows about asyncio,
Kubernetes or Prometheus: time arrives as `now_s` inside the inputs. numpy and scipy are fine,
and smoothing is vectorised across services so one tick can carry thousands of them.
"""
