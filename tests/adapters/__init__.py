"""Adapter tests: the real clients against real servers or emulators."""
