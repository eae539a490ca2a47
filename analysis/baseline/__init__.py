"""``make baseline`` analysis: NDR search, points, summary, plot."""
