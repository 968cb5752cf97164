"""The mesh routers through the real kubernetes-asyncio client against the API emulator."""
