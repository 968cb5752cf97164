"""The traffic routers behind `ports.TrafficRouter` (docs/architecture.md,
"The warm-up gate and the traffic ramp"): Istio (`istio`), the Gateway API (`gateway`), SMI (`smi`)
and none (`none`); `registry` builds one of each for `app`.

A router splits one service's traffic between its stable and warming pods (selected by the
`autoscaler.dsec.io/stable` and `/warming` labels) by writing the mesh's own objects through the
Kubernetes API. It creates, weights and deletes only objects it labelled
`app.kubernetes.io/managed-by: inference-autoscaler` and owns through the Deployment, never the
owner's routes. It decides nothing: which percentage, when to step and when to roll back are the
ramp's to say.
"""
