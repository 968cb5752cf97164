"""Tests of the command line and its files: trace loading, reports, logging and settings."""
