"""Repeated runs: sweeps, nightly regression runs, their history, chaos, reports."""
