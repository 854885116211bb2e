"""Benchmarks: programs that measure, run by hand (`python -m benchmarks.NAME`), not tests."""
