"""What the backends whose tools report counts only (iperf3, D-ITG) have in common.

Their sinks give totals, read with :func:`crosstraffic.backend.count_sink_result`: packets,
bytes, loss and, for some, reordering; no duplicates, gaps, per-ms histogram, one-way delay,
per-packet log or kernel timestamps.
"""

from __future__ import annotations

from crosstraffic.backend import Capabilities


def count_capabilities(
    *, reordering: bool, ipv6: bool, unpaced: bool, payload_header_bytes: int, notes: str
) -> Capabilities:
    """Capabilities of a tool pair that reports counts only: loss, and ``reordering`` if it counts it."""
    return Capabilities(
        loss=True,
        reordering=reordering,
        duplicates=False,
        gaps=False,
        hist_ms=False,
        owd=False,
        packet_log=False,
        kernel_timestamps=False,
        ipv6=ipv6,
        unpaced=unpaced,
        payload_header_bytes=payload_header_bytes,
        notes=notes,
    )
