"""The simulated cluster: a virtual Kubernetes cluster and trace-driven traffic that implement
the same ports as the real adapters, so the real loop runs in the demo, the tests and the
benchmarks. Simulated time runs as fast as the CPU allows.

It must not import the real adapters or any Kubernetes or Prometheus client.
"""
