"""Registered but not yet implemented backends: D-ITG and trafgen (netsniff-ng).

Both are installable on Debian 12 (``apt-cache policy``: d-itg 2.8.1-r1023-6, netsniff-ng 0.6.8-3).
``get_backend()`` refuses them with a one-line message; their capability records say what an
implementation could report, so ``backend_class(name).capabilities`` can be listed already.
"""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

from crosstraffic.backend import Backend, Capabilities, GenResult, NotImplementedBackendError, SinkResult


class _Stub(Backend):
    """Every operation raises NotImplementedBackendError."""

    implemented = False
    debian_package = ""
    could_report = ""

    @classmethod
    def not_implemented_message(cls) -> str:
        """The one-line refusal."""
        return (
            f"traffic backend {cls.name!r} is not implemented yet (Debian package {cls.debian_package} is "
            "installable; see crosstraffic/stubs.py for what it could report); use 'builtin' or 'iperf3'"
        )

    def _refuse(self) -> NoReturn:
        raise NotImplementedBackendError(self.not_implemented_message())

    def executables(self) -> dict[str, str]:
        """Not implemented."""
        self._refuse()

    def sink_argv(
        self,
        *,
        port: int,
        bind: str | None = None,
        family: int | None = None,
        gap_us: int = 1000,
        duration_s: float | None = None,
        log: str | Path | None = None,
        cpu: int | None = None,
    ) -> list[str]:
        """Not implemented."""
        self._refuse()

    def gen_argv(
        self,
        *,
        dst: str,
        port: int,
        rate_bps: int,
        frame_bytes: int,
        duration_s: float,
        cpu: int | None = None,
    ) -> list[str]:
        """Not implemented."""
        self._refuse()

    def parse_sink(self, stdout: str) -> SinkResult:
        """Not implemented."""
        self._refuse()

    def parse_gen(self, stdout: str) -> GenResult:
        """Not implemented."""
        self._refuse()


class DitgBackend(_Stub):
    """D-ITG: ITGSend / ITGRecv with a per-packet binary log decoded by ITGDec."""

    name = "ditg"
    debian_package = "d-itg"
    could_report = (
        "per-packet sequence numbers and send/receive timestamps (ITGRecv -l log, ITGDec -l text), hence "
        "loss, reordering, duplicates, one-way delay, jitter, inter-arrival gaps and per-ms bit rate / loss "
        "(ITGDec -b/-p/-d 1); rates are given in packets/s (-C) with payload size (-c)"
    )
    capabilities = Capabilities(
        loss=True,
        reordering=True,
        duplicates=True,
        gaps=True,
        hist_ms=True,
        owd=True,
        packet_log=True,
        kernel_timestamps=False,
        ipv6=True,
        unpaced=False,
        payload_header_bytes=0,  # to be determined when implemented
        notes="not implemented yet; user-space timestamps (gettimeofday), log decoded offline by ITGDec",
    )


class TrafgenBackend(_Stub):
    """trafgen: AF_PACKET TX_RING generator from a packet configuration (no receiver of its own)."""

    name = "trafgen"
    debian_package = "netsniff-ng"
    could_report = (
        "generator side only: packets/bytes sent at very high pps from an mmap TX ring with a rate "
        "(--rate) or inter-packet gap (-t); with a per-packet counter field (dinc) vrsink on the receiving "
        "side gives loss, reordering, duplicates, gaps and the per-ms histogram, but no one-way delay "
        "(trafgen writes no send timestamps)"
    )
    capabilities = Capabilities(
        loss=True,
        reordering=True,
        duplicates=True,
        gaps=True,
        hist_ms=True,
        owd=False,
        packet_log=True,
        kernel_timestamps=True,
        ipv6=True,
        unpaced=True,
        payload_header_bytes=8,
        notes="not implemented yet; needs the next-hop MAC address (builds whole Ethernet frames); sink = vrsink",
    )
