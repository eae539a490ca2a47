"""The instruments of a run: cross-traffic generator (A) and sink (B), RTT probes C->D and the
10 ms counter sampler.  All are started by PID in the testbed namespaces, ready by observation.

The sink publishes a live state file (``sink_state.json``) and reports the first packet sent at or
after a time the orchestrator gives it while running (``sink_after_ns``: the migration's
completion).  Each instrument's CPU time (user + system) is read from ``/proc/<pid>/stat`` of the
exited, not yet reaped process, so its shutdown work (vrsink's drain, irtt writing its JSON) counts."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from crosstraffic.backend import GenRequest, SinkRequest
from crosstraffic.backends.builtin import BuiltinBackend
from migrate.core.errors import DependencyError, VrmigError
from migrate.core.procs import Proc
from migrate.core.registry import Registry
from migrate.core.rundir import (
    COUNTERS_TSV,
    GEN_BA_JSON,
    GEN_JSON,
    IRTT_JSON_GZ,
    RR_CLIENT_JSON,
    RR_SERVER_JSON,
    RR_TSV,
    SINK_AFTER_NS,
    SINK_BA_JSON,
    SINK_JSON,
    SINK_STATE_JSON,
    TCP_PCAP,
    TCP_PCAP_BA,
    TCP_RECV_BA_JSON,
    TCP_RECV_BA_TSV,
    TCP_RECV_JSON,
    TCP_RECV_TSV,
    TCP_SEND_BA_JSON,
    TCP_SEND_BA_TSV,
    TCP_SEND_JSON,
    TCP_SEND_TSV,
)
from migrate.model.recorder import Recorder
from migrate.model.scenario import Scenario
from migrate.testbed import topology as topo
from migrate.testbed.builder import Testbed

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
#: the one builder of vrgen/vrsink argv (crosstraffic.backend's registry, builtin backend)
BUILTIN = BuiltinBackend()
VRGEN = Path(BUILTIN.executables()["gen"])
VRSINK = Path(BUILTIN.executables()["sink"])
VRSAMPLER = REPO / "probes" / "bin" / "vrsampler"
TRAFFIC_PORT = 9000
FLOW_RUN1_MAX_PPS = 50_000  # TRAFFIC=udp:M: one packet per flow in turn up to this rate (flow_run)
FLOW_RUN_FAST = 8  # above it, runs of 8 packets per flow (vrgen's default)
TRAFFIC_BA_PORT = 9001  # TRAFFIC=udp,dir=both: the B -> A CBR's port at A
IRTT_PORT = 2112
TCP_PORT = 9100  # TRAFFIC=tcp: vrtcp's bulk flows
TCP_BA_PORT = 9101  # TRAFFIC=tcp,dir=both: the B -> A flows' port at A
RR_PORT = 9200  # TRAFFIC=rr: vrtcp's request/response
#: the silence between two reads of one TCP flow that vrtcp's receiver records as a gap, exactly:
#: twice the sampling period, so any silence the 10 ms grid could show has its exact ends too
TCP_GAP_MS = 20
#: TRAFFIC=tcp/rr: vrtcp's connections must be up within this time of the router forwarding (a
#: SYN lost before the router forwards is sent again after 1 s, then 3 s)
TCP_READY_TIMEOUT_S = 15.0
#: what each vrtcp process writes besides its stdout record, by role: fetched from a lab's host
TCP_OUTPUTS = {
    "tcp-send": ("A", TCP_SEND_TSV),
    "tcp-recv": ("B", TCP_RECV_TSV),
    "tcp-send-BA": ("B", TCP_SEND_BA_TSV),
    "tcp-recv-BA": ("A", TCP_RECV_BA_TSV),
    "rr-client": ("A", RR_TSV),
    "tcp-capture": ("B", TCP_PCAP),
    "tcp-capture-BA": ("A", TCP_PCAP_BA),
}
#: TRAFFIC=tcp: B's capture of the bulk flows' segments, headers only (Ethernet 14 + IPv6 40 +
#: TCP with options 60 fit in 128 bytes); kernel time stamps in ns, as PEERING's captures
TCP_CAPTURE_SNAPLEN = 128
READY_TIMEOUT_S = 10.0
GEN_EXTRA_S = 600.0  # the generator is stopped by SIGTERM; its own duration is only a backstop
MIN_GAP_US = 1000
GAP_INTERVALS = 3  # a gap is recorded when it exceeds 3 packet intervals (and 1 ms)
FORWARD_POLL_S = 0.02
FORWARD_MIN_PACKETS = 10
SINK_STATE_NAME = SINK_STATE_JSON  # vrsink --state: its live state, rewritten every SINK_STATE_MS
SINK_AFTER_NAME = SINK_AFTER_NS  # vrsink --after-file: the threshold send time, CLOCK_REALTIME ns
SINK_STATE_MS = 10
STOP_TIMEOUT_S = 10.0
EXIT_POLL_S = 0.005
#: meta.json instruments_cpu_s keys -> the processes counted in each ("prober": both irtt ends)
CPU_GROUPS = {
    "gen": ("gen", "gen-BA"),
    "sink": ("sink", "sink-BA"),
    "sampler": ("sampler",),
    "prober": ("irtt-client", "irtt-server"),
    "tcp": (
        "tcp-send",
        "tcp-recv",
        "tcp-send-BA",
        "tcp-recv-BA",
        "rr-client",
        "rr-server",
        "tcp-capture",
        "tcp-capture-BA",
    ),
}


#: the CPU groups present only when their processes ran
OPTIONAL_CPU_GROUPS = ("tcp",)


class ForwardingError(VrmigError):
    """The router did not forward the cross-traffic before the migration."""


def gap_threshold_us(rate_bps: int, frame_bytes: int) -> int:
    """Sink gap threshold: max(1 ms, GAP_INTERVALS packet intervals) at this rate."""
    if rate_bps <= 0:
        return MIN_GAP_US
    interval_us = frame_bytes * 8 / rate_bps * 1e6
    return int(max(MIN_GAP_US, GAP_INTERVALS * interval_us))


def proc_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` (whole thread group) from /proc/<pid>/stat;
    also readable while it is an unreaped zombie.  None if it cannot be read."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()  # after "pid (comm) ": state is field 3
    try:
        ticks = int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15
    except (IndexError, ValueError):
        return None
    return ticks / os.sysconf("SC_CLK_TCK")


def stop_measured(p: Proc, sig: int, timeout_s: float = STOP_TIMEOUT_S) -> float | None:
    """Send ``sig`` to ``p``, wait for it to exit, read its CPU seconds while it is a zombie (not
    yet reaped: ``waitid(WNOWAIT)``), then reap it.  None when the process had already been reaped
    (it exited earlier) or did not exit within ``timeout_s`` (it is then killed)."""
    if p.popen is None or p.popen.poll() is not None:
        return None
    if hasattr(p, "stop_measured"):  # a helper on a lab host: its guard reports the CPU time
        return p.stop_measured(sig, timeout_s)
    with contextlib.suppress(ProcessLookupError):
        os.kill(p.pid, sig)
    cpu: float | None = None
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            exited = os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # reaped elsewhere
            break
        if exited is not None:
            cpu = proc_cpu_s(p.pid)
            break
        if time.monotonic() > deadline:
            log.warning(
                "%s ignored signal %d for %.0f s; killing (its CPU time is not recorded)", p.what, sig, timeout_s
            )
            p.stop(signal.SIGKILL)
            return None
        time.sleep(EXIT_POLL_S)
    p.stop(sig)  # reaps the exited process
    return cpu


def flow_run(rate_bps: int, sizes: tuple[tuple[int, int], ...] | None, frame_bytes: int) -> int:
    """vrgen's ``--flow-run`` for TRAFFIC=udp:M: 1 (packet k on flow k mod M, each flow a CBR of
    RATE/M: a flow's longest gap then resolves to M packet intervals) up to FLOW_RUN1_MAX_PPS, where
    one sendmmsg call per packet costs a few per cent of a core; above it vrgen's runs of
    FLOW_RUN_FAST consecutive packets per call (a flow's resolution M x FLOW_RUN_FAST intervals)."""
    mean = sum(b * w for b, w in sizes) / sum(w for _, w in sizes) if sizes else frame_bytes
    pps = rate_bps / (mean * 8) if rate_bps > 0 else float("inf")
    return 1 if pps <= FLOW_RUN1_MAX_PPS else FLOW_RUN_FAST


class Instruments:
    """Starts and stops the measurement processes of one run."""

    def __init__(self, scenario: Scenario, tb: Testbed, registry: Registry, run_dir: Path, rec: Recorder) -> None:
        self.s, self.tb, self.reg, self.dir, self.rec = scenario, tb, registry, run_dir, rec
        self.procs: dict[str, Proc] = {}
        self.roles: dict[str, str] = {}
        self.cpu_by_proc: dict[str, float | None] = {}
        self.t_start: float | None = None  # monotonic: the first instrument's start
        self.t_stop: float | None = None  # monotonic: the last instrument's exit

    @staticmethod
    def check() -> None:
        """The instruments' binaries exist (the same for every scenario)."""
        from crosstraffic.tcp import BIN as VRTCP

        missing = [str(p.relative_to(REPO)) for p in (VRGEN, VRSINK, VRSAMPLER, VRTCP) if not p.exists()]
        missing += [t for t in ("irtt", "ip") if shutil.which(t) is None]
        if missing:
            raise DependencyError(f"missing {', '.join(missing)}: run `make setup`")

    def _dst(self, role: str) -> str:
        h = topo.host(role)
        return topo.addr(h.ipv4 if self.s.ip == 4 else h.ipv6)

    def _sink_addr(self) -> str:
        """Where the cross-traffic goes: B's address on segment R, or with PEERING the address
        B announces over BGP (the router forwards to it only while it holds that route)."""
        from migrate.model.routing import sink_address

        return sink_address(self.s) or self._dst("B")

    def _start(self, what: str, argv: list[str], role: str, stdout_name: str | None = None, wait: bool = True) -> Proc:
        argv = [self.tb.helper(role, argv[0]), *argv[1:]]
        p = self.tb.spawn(role, what, argv, self.reg, self.dir, stdout_name=stdout_name, wait=wait)
        self.procs[what] = p
        self.roles[what] = role
        return p

    def _out(self, role: str, name: str) -> Path:
        """Where the helper on ``role`` writes ``name`` (a path on that host)."""
        return Path(self.tb.out_path(role, self.dir, name))

    def start(self) -> None:
        """Sink, probe server, sampler, probe client, generator — in that order."""
        s = self.s
        self.t_start = time.monotonic()
        sink = self._start(
            "sink",
            BUILTIN.sink_argv(
                SinkRequest(
                    port=TRAFFIC_PORT, bind=self._sink_addr(), gap_us=self._gap_us()
                ),
                state=self._out("B", SINK_STATE_NAME), state_ms=SINK_STATE_MS,
                after_file=self._out("B", SINK_AFTER_NAME),
            ),
            "B", stdout_name=SINK_JSON,
        )  # fmt: skip
        sink.wait_for("READY", READY_TIMEOUT_S)
        mix = s.traffic_mix
        if mix.udp_both and s.rate_bps > 0:
            back = self._start(
                "sink-BA",
                BUILTIN.sink_argv(SinkRequest(
                    port=TRAFFIC_BA_PORT, bind=self._dst("A"), gap_us=self._gap_us()
                )),
                "A", stdout_name=SINK_BA_JSON,
            )  # fmt: skip
            back.wait_for("READY", READY_TIMEOUT_S)
        from probes.irtt import server_argv

        server = self._start("irtt-server", server_argv(f"{self._dst('D')}:{IRTT_PORT}"), "D")
        self.tb.wait_udp_bound(
            "D", self._dst("D"), IRTT_PORT, READY_TIMEOUT_S, abort=lambda: not server.alive(), pid=server.host_pid
        )
        from probes.sampler import sampler_argv

        for role, targets, out in self.tb.sampler_plan():
            what = "sampler" if out == COUNTERS_TSV else f"sampler-{role}"
            argv = sampler_argv(self._out(role, out), targets, s.sample_ms)
            self._start(what, argv, role, wait=False)  # a lab's samplers start together
        for what, p in self.procs.items():
            if what.startswith("sampler"):
                p.started()
                p.wait_for("READY", READY_TIMEOUT_S)
        from probes.irtt import client_argv

        self.rec.action("probes-start")
        self._start(
            "irtt-client",
            client_argv(
                f"{self._dst('D')}:{IRTT_PORT}", s.probe_ms, s.duration_s + GEN_EXTRA_S, self._out("C", IRTT_JSON_GZ)
            ),
            "C",
        )
        self.rec.action("traffic-start", rate_bps=s.rate_bps, frame_bytes=s.frame_bytes)
        if s.rate_bps > 0:
            self._start("gen", BUILTIN.gen_argv(self._gen_request(self._sink_addr(), TRAFFIC_PORT)), "A",
                        stdout_name=GEN_JSON)  # fmt: skip
            if "sink-BA" in self.procs:
                self._start("gen-BA", BUILTIN.gen_argv(self._gen_request(self._dst("A"), TRAFFIC_BA_PORT)), "B",
                            stdout_name=GEN_BA_JSON)  # fmt: skip

    def _gap_us(self) -> int:
        """The sinks' gap threshold: packet k+1 is due k's frame bits after k, so with a size mix
        the longest normal spacing follows its largest frame (its smallest would make every packet
        after a large frame a recorded gap)."""
        sizes = self.s.frame_sizes
        return gap_threshold_us(self.s.rate_bps, max(b for b, _ in sizes) if sizes else self.s.frame_bytes)

    def _gen_request(self, dst: str, port: int) -> GenRequest:
        """The UDP CBR of RATE= (and TRAFFIC=udp's flows and sizes) to ``dst``:``port``, until stopped."""
        s = self.s
        return GenRequest(dst=dst, port=port, rate_bps=s.rate_bps, frame_bytes=s.frame_bytes, duration_s=0,
                          flows=s.traffic_mix.udp_flows, flow_run=flow_run(s.rate_bps, s.frame_sizes, s.frame_bytes),
                          sizes=s.frame_sizes)  # fmt: skip

    def _capture(self, what: str, role: str, name: str, port: int) -> None:
        """The bulk flows' segments as ``role``'s interface receives them, headers only, kernel
        time stamps in ns (the independent check of the receiver's outage); ready once tcpdump
        says it listens."""
        cap = self._start(
            what,
            ["tcpdump", "-i", self.tb.host_if(role), "-Z", "root", "-n", "-U", "-s", str(TCP_CAPTURE_SNAPLEN),
             "-j", "adapter_unsynced", "--time-stamp-precision", "nano", "-w", str(self._out(role, name)),
             f"tcp port {port}"],
            role,
        )  # fmt: skip
        cap.wait_for("listening on", READY_TIMEOUT_S)

    def start_tcp(self) -> None:
        """TRAFFIC=tcp / rr: vrtcp's receiver (and rr server) on B, then its sender (and rr
        client) on A, once the router forwards; each ready by its own READY line (the receiver
        listening, every sender connection established through the router)."""
        from crosstraffic import tcp as vrtcp

        mix, s = self.s.traffic_mix, self.s
        dst = self._sink_addr()
        if mix.tcp is not None:
            self._capture("tcp-capture", "B", TCP_PCAP, TCP_PORT)
            recv = self._start(
                "tcp-recv",
                vrtcp.sink_argv(bind=dst, port=TCP_PORT, flows=mix.tcp.flows, sample_ms=s.sample_ms,
                                out=self._out("B", TCP_RECV_TSV), gap_ms=TCP_GAP_MS),
                "B", stdout_name=TCP_RECV_JSON,
            )  # fmt: skip
            recv.wait_for("READY", READY_TIMEOUT_S)
            if mix.tcp.both:
                self._capture("tcp-capture-BA", "A", TCP_PCAP_BA, TCP_BA_PORT)
                back = self._start(
                    "tcp-recv-BA",
                    vrtcp.sink_argv(bind=self._dst("A"), port=TCP_BA_PORT, flows=mix.tcp.flows, sample_ms=s.sample_ms,
                                    out=self._out("A", TCP_RECV_BA_TSV), gap_ms=TCP_GAP_MS),
                    "A", stdout_name=TCP_RECV_BA_JSON,
                )  # fmt: skip
                back.wait_for("READY", READY_TIMEOUT_S)
        if mix.rr is not None:
            server = self._start(
                "rr-server",
                vrtcp.rr_server_argv(bind=dst, port=RR_PORT, flows=mix.rr.conns, resp=mix.rr.resp_bytes),
                "B", stdout_name=RR_SERVER_JSON,
            )  # fmt: skip
            server.wait_for("READY", READY_TIMEOUT_S)
        senders = []
        if mix.tcp is not None:
            self.rec.action("tcp-start", flows=mix.tcp.flows, cc=mix.tcp.cc, rate_bps=mix.tcp.rate_bps)
            senders.append(self._start(
                "tcp-send",
                vrtcp.send_argv(dst=dst, port=TCP_PORT, flows=mix.tcp.flows, cc=mix.tcp.cc, rate_bps=mix.tcp.rate_bps,
                                sample_ms=s.sample_ms, out=self._out("A", TCP_SEND_TSV)),
                "A", stdout_name=TCP_SEND_JSON,
            ))  # fmt: skip
            if mix.tcp.both:
                senders.append(self._start(
                    "tcp-send-BA",
                    vrtcp.send_argv(dst=self._dst("A"), port=TCP_BA_PORT, flows=mix.tcp.flows, cc=mix.tcp.cc,
                                    rate_bps=mix.tcp.rate_bps, sample_ms=s.sample_ms,
                                    out=self._out("B", TCP_SEND_BA_TSV)),
                    "B", stdout_name=TCP_SEND_BA_JSON,
                ))  # fmt: skip
        if mix.rr is not None:
            self.rec.action(
                "rr-start", conns=mix.rr.conns, tps=mix.rr.tps, req=mix.rr.req_bytes, resp=mix.rr.resp_bytes
            )
            senders.append(self._start(
                "rr-client",
                vrtcp.rr_client_argv(dst=dst, port=RR_PORT, flows=mix.rr.conns, rate_tps=mix.rr.tps,
                                     req=mix.rr.req_bytes, resp=mix.rr.resp_bytes, out=self._out("A", RR_TSV)),
                "A", stdout_name=RR_CLIENT_JSON,
            ))  # fmt: skip
        for p in senders:
            p.wait_for("READY", TCP_READY_TIMEOUT_S)
        if senders:
            self.rec.action("tcp-connected")

    def wait_forwarding(self, timeout_s: float) -> None:
        """Observe the router forwarding: B's rx counter grows (cross-traffic or, at RATE=0, probes reach D)."""
        role = "B" if self.s.rate_bps > 0 else "D"
        ifname = self.tb.host_if(role)
        start = self.tb.rx_packets(role, ifname)
        deadline = time.monotonic() + timeout_s
        while self.tb.rx_packets(role, ifname) - start < FORWARD_MIN_PACKETS:
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

    def sink_state(self) -> dict[str, Any] | None:
        """vrsink's latest live state (``--state``), or None before its first write."""
        raw = self.tb.read_bytes("B", str(self._out("B", SINK_STATE_NAME)))
        try:
            state = json.loads(raw or b"")
        except ValueError:
            return None
        return state if isinstance(state, dict) else None

    def mark_after(self, t_ns: int) -> None:
        """Give vrsink its threshold: from now on it reports the first packet sent at or after
        ``t_ns`` (CLOCK_REALTIME ns) and counts them (written atomically: it polls the file)."""
        self.tb.write_atomic("B", str(self._out("B", SINK_AFTER_NAME)), f"{t_ns}\n".encode())

    def probes_at_d(self) -> int | None:
        """UDP datagrams delivered in D's namespace so far (the probes that reached the irtt
        server; no other UDP flows there), None if unknown."""
        server = self.procs.get("irtt-server")
        if server is None or not server.alive():
            return None
        return self.tb.udp_in_datagrams("D", server)

    def stop(self) -> None:
        """Stop the generator and probes first, then the sink and the sampler (so they see the end);
        each one's CPU time is read as it exits."""
        self.rec.action("traffic-stop")
        samplers = [w for w in self.procs if w.startswith("sampler") and w not in self.cpu_by_proc]
        steps = (["gen", "gen-BA", "tcp-send", "tcp-send-BA", "rr-client"], ["irtt-client"],
                 ["sink", "sink-BA", "tcp-recv", "tcp-recv-BA", "rr-server"], samplers,
                 ["irtt-server", "tcp-capture", "tcp-capture-BA"])  # fmt: skip
        for step in steps:
            todo = [w for w in step if w in self.procs and w not in self.cpu_by_proc]
            sig = signal.SIGINT if step == ["irtt-client"] else signal.SIGTERM
            if len(todo) == 1:
                self.cpu_by_proc[todo[0]] = stop_measured(self.procs[todo[0]], sig)
            elif todo:  # a lab's samplers (one per host), or the senders: stopped together
                with ThreadPoolExecutor(max_workers=len(todo)) as pool:
                    cpu = list(pool.map(stop_measured, [self.procs[w] for w in todo], [sig] * len(todo)))
                self.cpu_by_proc.update(zip(todo, cpu, strict=True))
        self.t_stop = time.monotonic()
        for what, p in self.procs.items():
            rc = p.returncode()
            if rc not in (0, None, -signal.SIGTERM, -signal.SIGINT):
                log.warning("%s exited with status %s: %s", what, rc, p.stderr_tail())
        self.fetch_tcp()

    def fetch_tcp(self) -> None:
        """Bring vrtcp's traces into the run directory (on a lab they are on A's and B's hosts;
        embedded they are there already).  A trace that cannot be fetched is left absent: the
        analysis names it."""
        for what, (role, name) in TCP_OUTPUTS.items():
            if what not in self.procs:
                continue
            names = [name, f"{name}.gaps"] if what.startswith("tcp-recv") else [name]  # and TCP_RECV(_BA)_GAPS_TSV
            for n in names:
                try:
                    self.tb.fetch(role, str(self._out(role, n)), self.dir / n)
                except Exception as err:  # recorded; the analysis says which figure is absent
                    log.warning("could not fetch %s from %s: %s", n, role, err)

    def __enter__(self) -> Instruments:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()

    def kill(self) -> None:
        """Make sure every instrument is gone (idempotent; CPU times are still read)."""
        for what, p in self.procs.items():
            if p.alive():
                self.cpu_by_proc[what] = stop_measured(p, signal.SIGTERM, timeout_s=3)
        if self.t_stop is None and self.t_start is not None:
            self.t_stop = time.monotonic()

    def cpu_report(self) -> tuple[dict[str, float | None], float | None, dict[str, float | None]]:
        """(meta.json ``instruments_cpu_s``: CPU seconds per CPU_GROUPS key, None where a process
        did not run or its time is unknown; ``instruments_wall_s``: first start to last exit;
        the per-process figures)."""
        groups: dict[str, float | None] = {}
        for key, names in CPU_GROUPS.items():
            # a lab runs one sampler per host (sampler-<role>): all count as the sampler
            mine = [w for w in self.procs if w in names or (key == "sampler" and w.startswith("sampler-"))]
            if key in OPTIONAL_CPU_GROUPS and not mine:
                continue  # vrtcp did not run: no key (meta.json's older shape)
            parts = [self.cpu_by_proc.get(n) for n in mine]
            known = bool(parts) and all(v is not None for v in parts)
            groups[key] = round(sum(v for v in parts if v is not None), 3) if known else None
        wall = None
        if self.t_start is not None and self.t_stop is not None:
            wall = round(self.t_stop - self.t_start, 3)
        return groups, wall, {k: self.cpu_by_proc.get(k) for k in self.procs}

    def describe(self) -> dict[str, Any]:
        """Instrument settings for meta.json."""
        return {
            "gen": self.s.gen,
            "traffic_port": TRAFFIC_PORT,
            "traffic_ba_port": TRAFFIC_BA_PORT if "sink-BA" in self.procs else None,
            "udp_flows": self.s.traffic_mix.udp_flows,
            "frame_sizes": [list(p) for p in self.s.frame_sizes] if self.s.frame_sizes else None,
            "gap_threshold_us": self._gap_us(),
            "irtt_port": IRTT_PORT,
            "traffic": self.s.traffic,
            "tcp_port": TCP_PORT if self.s.traffic_mix.tcp is not None else None,
            "tcp_ba_port": TCP_BA_PORT if "tcp-send-BA" in self.procs else None,
            "rr_port": RR_PORT if self.s.traffic_mix.rr is not None else None,
            "tcp_gap_ms": TCP_GAP_MS if self.s.traffic_mix.tcp is not None else None,
            "tcp_capture_filter": f"tcp port {TCP_PORT}" if self.s.traffic_mix.tcp is not None else None,
            "tcp_capture_ba_filter": f"tcp port {TCP_BA_PORT}" if "tcp-capture-BA" in self.procs else None,
            "sample_ms": self.s.sample_ms,
            "probe_ms": self.s.probe_ms,
            "argv": {k: p.argv for k, p in self.procs.items()},
        }
