"""Fixtures for every test package."""

# The Kubernetes API emulator and fake kubelet (tests/kube/fixtures.py); the module path is
# relative to this file's package, whether or not `tests` itself is a package.
pytest_plugins = [f"{__package__}.kube.fixtures" if __package__ else "kube.fixtures"]
