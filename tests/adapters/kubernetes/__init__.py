"""The Kubernetes adapter through the real kubernetes-asyncio client against the API emulator."""
