"""Analyzers: per-request records -> one tidy frame -> Parquet, metrics, sweep reports, figures, gates.

This package reads Parquet (and the records handed to it) and nothing else of the harness, so a
report can be rebuilt from a results directory alone, long after the runs ended.
"""
