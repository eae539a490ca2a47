"""``make baseline``: forwarding performance without migration (paper 004 Fig. 2)."""
