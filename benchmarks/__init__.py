"""Benchmarks of agentrt, each reported as a ratio against a baseline measured in the same run.

Run them all with ``make bench`` (``python -m benchmarks``).
"""
