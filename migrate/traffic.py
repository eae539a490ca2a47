"""The instruments of a run: cross-traffic generator (A) and sink (B), RTT probes C->D and the
10 ms counter sampler.  All are started by PID in the testbed namespaces, ready by observation."""

from __future__ import annotations

import logging
import shutil
import signal
import time
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute

from migrate import topology as topo
from migrate.errors import DependencyError, VrmigError
from migrate.procs import Proc
from migrate.recorder import Recorder
from migrate.registry import Registry
from migrate.scenario import Scenario
from migrate.testbed import Testbed

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent
VRGEN = REPO / "crosstraffic" / "bin" / "vrgen"
VRSINK = REPO / "crosstraffic" / "bin" / "vrsink"
VRSAMPLER = REPO / "probes" / "bin" / "vrsampler"
TRAFFIC_PORT = 9000
IRTT_PORT = 2112
READY_TIMEOUT_S = 10.0
GEN_EXTRA_S = 600.0  # the generator is stopped by SIGTERM; its own duration is only a backstop
MIN_GAP_US = 1000
GAP_INTERVALS = 3  # a gap is recorded when it exceeds 3 packet intervals (and 1 ms)
FORWARD_POLL_S = 0.02
FORWARD_MIN_PACKETS = 10


class ForwardingError(VrmigError):
    """The router did not forward the cross-traffic before the migration."""


def gap_threshold_us(rate_bps: int, frame_bytes: int) -> int:
    """Sink gap threshold: max(1 ms, GAP_INTERVALS packet intervals) at this rate."""
    if rate_bps <= 0:
        return MIN_GAP_US
    interval_us = frame_bytes * 8 / rate_bps * 1e6
    return int(max(MIN_GAP_US, GAP_INTERVALS * interval_us))


def rx_packets(ns: str, ifname: str) -> int:
    """Kernel rx packet counter of one interface."""
    with IPRoute(netns=ns) as ipr:
        link = ipr.link("get", ifname=ifname)[0]
        stats = link.get_attr("IFLA_STATS64")
        return int(stats["rx_packets"])


class Instruments:
    """Starts and stops the measurement processes of one run."""

    def __init__(self, scenario: Scenario, tb: Testbed, registry: Registry, run_dir: Path, rec: Recorder) -> None:
        self.s, self.tb, self.reg, self.dir, self.rec = scenario, tb, registry, run_dir, rec
        self.procs: dict[str, Proc] = {}

    @staticmethod
    def check(scenario: Scenario) -> None:
        """Required binaries exist."""
        missing = [str(p.relative_to(REPO)) for p in (VRGEN, VRSINK, VRSAMPLER) if not p.exists()]
        missing += [t for t in ("irtt", "ip") if shutil.which(t) is None]
        if missing:
            raise DependencyError(f"missing {', '.join(missing)}: run `make setup`")

    def _dst(self, role: str) -> str:
        h = topo.host(role)
        return topo.addr(h.ipv4 if self.s.ip == 4 else h.ipv6)

    def _start(self, what: str, argv: list[str], role: str, **kw: Any) -> Proc:
        p = Proc(what, argv, self.reg, self.dir, netns=self.tb.ns(role), **kw).start()
        self.procs[what] = p
        return p

    def start(self) -> None:
        """Sink, probe server, sampler, probe client, generator — in that order."""
        s = self.s
        sink = self._start(
            "sink",
            [str(VRSINK), "--port", str(TRAFFIC_PORT), "--bind", self._dst("B"),
             "--gap-us", str(gap_threshold_us(s.rate_bps, s.frame_bytes))]
            + (["-6"] if s.ip == 6 else []),
            "B", stdout_name="sink.json",
        )  # fmt: skip
        sink.wait_for("READY", READY_TIMEOUT_S)
        from probes.irtt import server_argv, wait_irtt_server

        server = self._start("irtt-server", server_argv(f"{self._dst('D')}:{IRTT_PORT}"), "D")
        wait_irtt_server(
            self.tb.ns("D"),
            self._dst("D"),
            IRTT_PORT,
            READY_TIMEOUT_S,
            pid=server.pid,
            abort=lambda: not server.alive(),
        )
        from probes.sampler import sampler_argv

        sampler = self._start(
            "sampler", sampler_argv(self.dir / "counters.tsv", self.tb.sampler_targets(), s.sample_ms), "R1"
        )
        sampler.wait_for("READY", READY_TIMEOUT_S)
        from probes.irtt import client_argv

        self.rec.action("probes-start")
        self._start(
            "irtt-client",
            client_argv(
                f"{self._dst('D')}:{IRTT_PORT}", s.probe_ms, s.duration_s + GEN_EXTRA_S, self.dir / "irtt.json.gz"
            ),
            "C",
        )
        self.rec.action("traffic-start", rate_bps=s.rate_bps, frame_bytes=s.frame_bytes)
        if s.rate_bps > 0:
            self._start(
                "gen",
                [str(VRGEN), "--dst", self._dst("B"), "--port", str(TRAFFIC_PORT), "--rate", str(s.rate_bps),
                 "--frame", str(s.frame_bytes), "--duration", "0"],
                "A", stdout_name="gen.json",
            )  # fmt: skip

    def wait_forwarding(self, timeout_s: float) -> None:
        """Observe the router forwarding: B's rx counter grows (cross-traffic or, at RATE=0, probes reach D)."""
        role = "B" if self.s.rate_bps > 0 else "D"
        ns = self.tb.ns(role)
        start = rx_packets(ns, topo.HOST_IF)
        deadline = time.monotonic() + timeout_s
        while rx_packets(ns, topo.HOST_IF) - start < FORWARD_MIN_PACKETS:
            for p in self.procs.values():
                if not p.alive():
                    raise ForwardingError(f"{p.what} exited early: {p.stderr_tail()}")
            if time.monotonic() > deadline:
                raise ForwardingError(f"the router did not forward traffic to {role} within {timeout_s:.0f} s")
            time.sleep(FORWARD_POLL_S)
        self.rec.action("forwarding-observed", host=role)

    def dead(self) -> str | None:
        """Describe instruments that exited on their own before the planned stop (None if none)."""
        gone = [f"{w} (exit status {p.returncode()})" for w, p in self.procs.items() if not p.alive()]
        return ", ".join(gone) or None

    def stop(self) -> None:
        """Stop the generator and probes first, then the sink and the sampler (so they see the end)."""
        self.rec.action("traffic-stop")
        for what, sig in (("gen", signal.SIGTERM), ("irtt-client", signal.SIGINT)):
            if what in self.procs:
                self.procs[what].stop(sig)
        for what in ("sink", "sampler", "irtt-server"):
            if what in self.procs:
                self.procs[what].stop(signal.SIGTERM)
        for what, p in self.procs.items():
            rc = p.returncode()
            if rc not in (0, None, -signal.SIGTERM, -signal.SIGINT):
                log.warning("%s exited with status %s: %s", what, rc, p.stderr_tail())

    def kill(self) -> None:
        """Make sure every instrument is gone (idempotent)."""
        for p in self.procs.values():
            if p.alive():
                p.stop(signal.SIGTERM, timeout_s=3)

    def describe(self) -> dict[str, Any]:
        """Instrument settings for meta.json."""
        return {
            "gen": self.s.gen,
            "traffic_port": TRAFFIC_PORT,
            "gap_threshold_us": gap_threshold_us(self.s.rate_bps, self.s.frame_bytes),
            "irtt_port": IRTT_PORT,
            "sample_ms": self.s.sample_ms,
            "probe_ms": self.s.probe_ms,
            "argv": {k: p.argv for k, p in self.procs.items()},
        }
