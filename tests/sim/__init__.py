"""Tests of the simulator: traffic, cluster, metrics and the runner."""
