"""Benchmarks: figures and ratios, not tests. Run with `python -m benchmarks [name ...]`."""
