"""The Kubernetes API behind the ports: watch-based caches, the `Cluster`, Events and the leader.

The only package that imports kubernetes_asyncio. Reads come from caches filled by list+watch
(`informer`, `caches`), never from a list call per tick; writes (the scale subresource, status
annotations, Events, the leader Lease) go through `cluster`, `events` and `leader`, and every
library exception leaves as an `errors.ActuationError` carrying the HTTP status.

It decides nothing: which replica count is right, and what to do when a write fails, are the
core's and the loop's to say.
"""
