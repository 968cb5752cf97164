"""Elastic inference autoscaler: keeps GPU model-serving Deployments at the right size.

The package is layered (docs/architecture.md): `core` decides, `ports` names what the
loop talks to, `adapters` and `sim` implement the ports, `loop` ties them together, and
`cli`/`app` wire it up. Only `loop.Loop.run` schedules time.
"""

__version__ = "0.1.0"
