"""Benchmarks run by make targets (not collected by pytest: no test_ files)."""
