"""Tests of the real loop driven by the simulator, in simulated time."""
