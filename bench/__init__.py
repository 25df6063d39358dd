"""Benchmarks for the issues' timing targets; see bench/README.md."""
