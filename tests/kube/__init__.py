"""A Kubernetes API emulator, fake controllers and a fake kubelet for tests without a cluster.

`emulator.py` serves the API over HTTP to the real kubernetes-asyncio client, `store.py` holds
the objects and their semantics, `kubelet.py` turns Deployments into ready pods when a test
steps it, and `fixtures.py` provides them to tests (`kube`, `kubelet`, `kube_clock`). Nothing
here sleeps for real or runs controllers in the background.
"""
