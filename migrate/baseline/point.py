"""One baseline measurement point: every router's flow at one offered rate and frame size.

Order: a fresh vrsink per flow (ready when it prints READY), an irtt client C -> D through router
0, a CPU snapshot, one vrgen per flow for DURATION seconds (they exit by themselves), a second
CPU snapshot, then the drain (until the sinks' interfaces stop receiving, observed) and the
sinks' and probes' stop.  Raw output only (gen-<k>.json, sink-<k>.json, irtt.json.gz and
point.json with the CPU snapshots); ``analysis.baseline.points`` derives the metrics.

Every helper runs through the testbed's own methods (``spawn``, ``out_path``, ``fetch``,
``rx_packets``), so a point measures the same way in a namespace of this machine and on a lab's
hosts over SSH (``TESTBED=``).  On a lab, the flows' one-way delay and the RTT window combine
clocks of different hosts: each point then records the clock offsets of A, B and C at its end
(``clock``), and the analysis corrects with them and carries their uncertainty."""

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crosstraffic import tcp
from crosstraffic.backend import GenRequest, SinkRequest
from migrate.baseline.bed import link_packets
from migrate.baseline.endhost import EndHost, GuestTool
from migrate.baseline.plan import Slot
from migrate.baseline.spec import UNPACED, PointKey
from migrate.core.atomic import write_json
from migrate.core.errors import GuestError
from migrate.core.procs import Proc, ProcessError
from migrate.core.registry import Registry
from migrate.core.rundir import IRTT_JSON_GZ, POINT_JSON, POINT_JSON_FORMAT
from migrate.experiment.instruments import (
    BUILTIN,
    IRTT_PORT,
    READY_TIMEOUT_S,
    TCP_PORT,
    TRAFFIC_PORT,
    gap_threshold_us,
)
from migrate.testbed import topology as topo
from migrate.testbed.builder import Testbed

log = logging.getLogger(__name__)

POINT_FORMAT = POINT_JSON_FORMAT
GEN_EXIT_GRACE_S = 30.0
DRAIN_POLL_S = 0.1
DRAIN_MAX_S = 5.0
IRTT_NAME = IRTT_JSON_GZ
#: PROTO=tcp: vrtcp's trace interval (the traces are kept, the point's figures come from the
#: summaries' byte counts and the sender's span)
TCP_SAMPLE_MS = 100
IRTT_EXTRA_S = 120.0  # the client is stopped by SIGINT; its own duration is only a backstop


@dataclass
class PointContext:
    """What every point of a configuration shares."""

    tb: Testbed
    registry: Registry
    slots: list[Slot]
    duration_s: float
    probe_ms: int
    #: a migrate.core.cpustat snapshot of the router host and the routers' processes
    cpu_snapshot: Callable[[], dict[str, Any]]
    load_slot: Slot | None = None  # LOAD=smallpkts: the neighbour's flow (counters read per point)
    abort: Callable[[], bool] | None = None
    #: on a lab: the clock offsets of the given roles against this machine, measured now
    clocks: Callable[[list[str]], dict[str, dict[str, int]]] | None = None
    #: ROLE=vm-tx/vm-rx/vm-vm: slot 0's router as the end host of its flow
    endhost: EndHost | None = None
    #: ROLE=vm-vm: slot 1's router, the receiving end host (slot 1 has no flow of its own)
    peer: EndHost | None = None

    def flow_slots(self) -> list[Slot]:
        """The slots with a flow: every router's, but ROLE=vm-vm's one flow is slot 0's."""
        return self.slots[:1] if self.peer is not None else self.slots


def _host_addr(role: str, ip: int) -> str:
    h = topo.host(role)
    return topo.addr(h.ipv4 if ip == 4 else h.ipv6)


def _spawn(
    ctx: PointContext, role: str, what: str, argv: list[str], out_dir: Path, stdout_name: str | None = None
) -> Proc:
    """Start a helper on ``role`` (the suite's own helpers at their path there)."""
    argv = [ctx.tb.helper(role, argv[0]), *argv[1:]]
    return ctx.tb.spawn(role, what, argv, ctx.registry, out_dir, stdout_name=stdout_name)


Where = str | EndHost  # a testbed role, or the end host


@dataclass(frozen=True)
class FlowEnds:
    """Where one slot's flow starts and ends, and the address it is sent to."""

    source: Where
    sink: Where
    dst: str


def flow_ends(s: Slot, ip: int, endhost: EndHost | None, peer: EndHost | None = None) -> FlowEnds:
    """A forwarded flow runs A -> B through the router; ROLE=vm-tx sends from the end host to B,
    ROLE=vm-rx from A to the end host's eth0, ROLE=vm-vm from the end host to ``peer``'s eth0."""
    if endhost is None or s.k != 0:
        return FlowEnds(s.source_role, s.sink_role, s.sink_addr(ip))
    if endhost.role == "vm-vm":
        if peer is None:
            raise ValueError("ROLE=vm-vm: no receiving end host")
        return FlowEnds(endhost, peer, peer.addr(ip))
    if endhost.role == "vm-tx":
        return FlowEnds(endhost, s.sink_role, s.sink_addr(ip))
    return FlowEnds(s.source_role, endhost, endhost.addr(ip))


def _spawn_on(
    ctx: PointContext, where: Where, what: str, argv: list[str], out_dir: Path, stdout_name: str
) -> Proc | GuestTool:
    if isinstance(where, EndHost):
        return where.spawn(what, argv, out_dir, stdout_name)
    return _spawn(ctx, where, what, argv, out_dir, stdout_name=stdout_name)


def _file_on(ctx: PointContext, where: Where, point_dir: Path, name: str) -> str:
    """Where a tool on ``where`` writes its trace ``name``: the point's directory on this machine,
    the run's one directory on a lab's host (:meth:`Testbed.out_path`, fetched by
    :func:`_fetch_traces`), or the end host's own (:meth:`EndHost.file_path`)."""
    unique = f"{point_dir.name}-{name}"
    if isinstance(where, EndHost):
        return where.file_path(point_dir, name, unique)
    return ctx.tb.out_path(where, point_dir, name, unique=unique)


def _fetch_traces(ctx: PointContext, traces: list[tuple[Where, str, Path]]) -> list[str]:
    """Copy the traces written on a lab's hosts into the point's directory; what could not be
    fetched, one line each (the point's figures come from the tools' summaries: a missing trace
    is recorded, not fatal).  Nothing to do where the tools wrote into the point's directory or
    their own filesystem."""
    problems = []
    for where, path, local in traces:
        if path == str(local) or (isinstance(where, EndHost) and where.own_files):
            continue
        tb, role = where.runs_on() if isinstance(where, EndHost) else (ctx.tb, where)
        try:
            tb.fetch(role, path, local)
        except Exception as err:  # reported in point.json, the figures do not depend on it
            problems.append(f"fetching {path} from {role}: {err}")
    return problems


def _sink_argv(
    ctx: PointContext, key: PointKey, s: Slot, e: FlowEnds, point_dir: Path, traces: list[tuple[Where, str, Path]]
) -> tuple[list[str], str]:
    """The sink of slot ``s``'s flow and the file its stdout (its JSON record) goes to; a trace
    it writes is added to ``traces``."""
    if key.proto == "tcp":
        name = f"tcp-sink-{s.k}.tsv"
        out = _file_on(ctx, e.sink, point_dir, name)
        traces.append((e.sink, out, point_dir / name))
        argv = tcp.sink_argv(bind=e.dst, port=TCP_PORT, flows=1, sample_ms=TCP_SAMPLE_MS, out=Path(out))
        return argv, f"tcp-sink-{s.k}.json"
    req = SinkRequest(port=TRAFFIC_PORT, bind=e.dst, gap_us=gap_threshold_us(key.rate_bps, key.frame_bytes))
    return BUILTIN.sink_argv(req), f"sink-{s.k}.json"


def _gen_argv(
    ctx: PointContext, key: PointKey, s: Slot, e: FlowEnds, point_dir: Path, traces: list[tuple[Where, str, Path]]
) -> tuple[list[str], str]:
    """The generator of slot ``s``'s flow (vrgen, or vrtcp send with one flow paced at the rate:
    ``max`` unpaced) and the file its stdout goes to; a trace it writes is added to ``traces``."""
    rate = key.rate_bps if key.rate_bps != UNPACED else 0
    duration_s = ctx.duration_s
    if key.proto == "tcp":
        name = f"tcp-send-{s.k}.tsv"
        out = _file_on(ctx, e.source, point_dir, name)
        traces.append((e.source, out, point_dir / name))
        argv = tcp.send_argv(dst=e.dst, port=TCP_PORT, flows=1, sample_ms=TCP_SAMPLE_MS, out=Path(out),
                             rate_bps=rate, duration_s=duration_s)  # fmt: skip
        return argv, f"tcp-send-{s.k}.json"
    req = GenRequest(dst=e.dst, port=TRAFFIC_PORT, rate_bps=rate, frame_bytes=key.frame_bytes, duration_s=duration_s)
    return BUILTIN.gen_argv(req), f"gen-{s.k}.json"


def _name(where: Where) -> str:
    return where.name if isinstance(where, EndHost) else where


def _drain(ctx: PointContext, ip: int) -> float:
    """Wait until no sink interface receives anything for DRAIN_POLL_S (at most DRAIN_MAX_S; an
    end host: until its kernel delivers nothing more, :meth:`EndHost.delivered`); return the
    seconds waited."""
    t0 = time.monotonic()

    def counts() -> list[int]:
        out = []
        for s in ctx.flow_slots():
            sink = flow_ends(s, ip, ctx.endhost, ctx.peer).sink
            if isinstance(sink, EndHost):
                out.append(sink.delivered())
            else:
                out.append(ctx.tb.rx_packets(sink, ctx.tb.host_if(sink)))
        return out

    last = counts()
    while time.monotonic() - t0 < DRAIN_MAX_S:
        time.sleep(DRAIN_POLL_S)
        now = counts()
        if now == last:
            break
        last = now
    return time.monotonic() - t0


def _clocks(ctx: PointContext, ends: list[FlowEnds]) -> dict[str, dict[str, int]]:
    """On a lab: the clock offsets of C and of every host a flow starts or ends on, an end host
    in the container or the bare router under its router host's (the router host's own too:
    :mod:`analysis.baseline.points` puts a guest's flow window on it when only the CPU snapshots
    bracket it)."""
    assert ctx.clocks is not None
    ehs = [w for e in ends for w in (e.source, e.sink) if isinstance(w, EndHost)]
    roles = {w for e in ends for w in (e.source, e.sink) if isinstance(w, str)}
    hosts = {eh.host[1] for eh in ehs if eh.host is not None}
    clock = ctx.clocks(sorted({"C", *roles, *hosts}))
    for eh in ehs:
        if eh.clock_role is not None:
            clock[eh.name] = clock[eh.clock_role]
    return clock


def _load_counters(ctx: PointContext) -> dict[str, Any] | None:
    """The neighbour flow's source tx / sink rx counters, each with the CLOCK_MONOTONIC ns it was
    read at (reading a namespace's counters takes milliseconds: each rate uses its own interval)."""
    if ctx.load_slot is None:
        return None
    s = ctx.load_slot
    out: dict[str, Any] = {}
    for what, role in (("source", s.source_role), ("sink", s.sink_role)):
        out[f"{what}_rx_tx"] = list(link_packets(ctx.tb.ns(role)))
        out[f"{what}_mono_ns"] = time.monotonic_ns()
    return out


def run_point(ctx: PointContext, key: PointKey, point_dir: Path) -> dict[str, Any]:
    """Measure one point into ``point_dir`` (recreated) and return what point.json holds."""
    if point_dir.exists():
        shutil.rmtree(point_dir)
    point_dir.mkdir(parents=True)
    tb = ctx.tb
    record: dict[str, Any] = {
        "format": POINT_FORMAT,
        "key": {
            "hv": key.config.hv, "nic": key.config.nic, "routers": key.config.routers, "load": key.config.load,
            "ip": key.ip, "frame_bytes": key.frame_bytes, "rate_bps": key.rate_bps, "rep": key.rep,
            "phase": key.phase, "role": key.config.role, "proto": key.proto,
        },
        "duration_s": ctx.duration_s,
        "status": "running",
        "failure": None,
        "flows": [],
        "irtt": None,
    }  # fmt: skip
    procs: list[tuple[Proc | GuestTool, int]] = []
    traces: list[tuple[Where, str, Path]] = []
    slots = ctx.flow_slots()
    ends = [flow_ends(s, key.ip, ctx.endhost, ctx.peer) for s in slots]
    try:
        sinks, sink_names = [], []
        for s, e in zip(slots, ends, strict=True):
            argv, name = _sink_argv(ctx, key, s, e, point_dir, traces)
            sink_names.append(name)
            sink = _spawn_on(ctx, e.sink, f"sink-{s.k}", argv, point_dir, name)
            procs.append((sink, signal.SIGTERM))
            sinks.append(sink)
        for sink in sinks:
            sink.wait_for("READY", READY_TIMEOUT_S, abort=ctx.abort)
        from probes.irtt import client_argv

        # a lab host keeps every point's file in the run's one directory there; it is fetched below
        irtt_out = tb.out_path("C", point_dir, IRTT_NAME, unique=f"irtt-{key.name}.json.gz")
        irtt = _spawn(
            ctx, "C", "irtt-client",
            client_argv(
                f"{_host_addr('D', key.ip)}:{IRTT_PORT}", ctx.probe_ms, ctx.duration_s + IRTT_EXTRA_S, Path(irtt_out)
            ),
            point_dir,
        )  # fmt: skip
        procs.append((irtt, signal.SIGINT))
        record["irtt"] = IRTT_NAME
        record["load_counters_t0"] = _load_counters(ctx)
        record["cpu_t0"] = ctx.cpu_snapshot()
        gens = []
        for s, e, sink_name in zip(slots, ends, sink_names, strict=True):
            argv, gen_name = _gen_argv(ctx, key, s, e, point_dir, traces)
            gen = _spawn_on(ctx, e.source, f"gen-{s.k}", argv, point_dir, gen_name)
            procs.append((gen, signal.SIGTERM))
            gens.append(gen)
            record["flows"].append({"router": s.k, "proto": key.proto, "dst": e.dst, "gen": gen_name,
                                    "sink": sink_name, "from": _name(e.source), "to": _name(e.sink)})  # fmt: skip
        deadline = time.monotonic() + ctx.duration_s + GEN_EXIT_GRACE_S
        bad = []
        for gen in gens:
            rc = gen.wait(max(0.1, deadline - time.monotonic()))
            if rc != 0:
                bad.append(f"{gen.what} exited with status {rc}: {gen.stderr_tail()}")
        record["cpu_t1"] = ctx.cpu_snapshot()
        record["load_counters_t1"] = _load_counters(ctx)
        record["drain_s"] = _drain(ctx, key.ip)
        for proc, sig in procs:
            proc.stop(sig)
        if rereads := sum(p.rereads for p, _ in procs if isinstance(p, GuestTool)):
            record["console_rereads"] = rereads  # the guest's files read again after a checksum mismatch
        if ctx.clocks is not None:
            record["clock"] = _clocks(ctx, ends)
        if problems := _fetch_traces(ctx, traces):
            record["trace_failures"] = problems
        try:  # nothing to copy when C writes into the point's directory (the embedded testbed)
            tb.fetch("C", irtt_out, point_dir / IRTT_NAME)
        except Exception as err:  # the RTT figures are then absent, with this reason
            record["irtt_failure"] = f"fetching {irtt_out} from C: {err}"
        for p, _ in procs:
            if p not in gens and p.returncode() not in (0, None):
                msg = f"{p.what} exited with status {p.returncode()}: {p.stderr_tail()}"
                # RTT probes are secondary: an overloaded router may even refuse irtt's handshake
                if p is irtt:
                    record["irtt_failure"] = msg
                else:
                    bad.append(msg)
        sink_files = [point_dir / f["sink"] for f in record["flows"]]
        missing = [p.name for p in sink_files if not p.exists() or not p.stat().st_size]
        bad += [f"{m} is empty" for m in missing]
        record["status"], record["failure"] = ("failed", "; ".join(bad)) if bad else ("ok", None)
    except (ProcessError, GuestError) as err:
        record["status"], record["failure"] = "failed", str(err)
    finally:
        for proc, _ in procs:
            with contextlib.suppress(GuestError):
                if proc.alive():
                    proc.stop(signal.SIGKILL, timeout_s=5)
        write_json(point_dir / POINT_JSON, record)
    if record["status"] != "ok":
        log.warning("point %s failed: %s", key.name, record["failure"])
    return record
