"""Per-run metrics from raw traces (pure functions)."""
