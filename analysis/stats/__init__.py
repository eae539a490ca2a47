"""Statistics over repeated runs: intervals, tests, aggregates, regression decisions."""
