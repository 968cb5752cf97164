"""Tests of the pure decision core: smoothing and the replica policy, no I/O and no clock."""
