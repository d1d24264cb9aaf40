"""Reproducible measurements: one workload run four ways (uninterrupted, Baton, periodic, submitit).

Run `python -m benchmarks` (or `--quick`) from the repository root; see docs/benchmarks.md.
"""
