"""One baseline measurement point: every router's flow at one offered rate and frame size.

Order: a fresh vrsink per flow (ready when it prints READY), an irtt client C -> D through router
0, a CPU snapshot, one vrgen per flow for DURATION seconds (they exit by themselves), a second
CPU snapshot, then the drain (until the sinks' interfaces stop receiving, observed) and the
sinks' and probes' stop.  Raw output only (gen-<k>.json, sink-<k>.json, irtt.json.gz and
point.json with the CPU snapshots); ``analysis.baseline.points`` derives the metrics."""

from __future__ import annotations

import logging
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from migrate.baseline.bed import link_packets
from migrate.baseline.plan import Slot
from migrate.baseline.spec import UNPACED, PointKey
from migrate.core import cpustat
from migrate.core.atomic import write_json
from migrate.core.procs import Proc, ProcessError
from migrate.core.registry import Registry
from migrate.experiment.instruments import BUILTIN, IRTT_PORT, READY_TIMEOUT_S, TRAFFIC_PORT, gap_threshold_us
from migrate.testbed import topology as topo
from migrate.testbed.builder import Testbed

log = logging.getLogger(__name__)

POINT_FORMAT = 1
GEN_EXIT_GRACE_S = 30.0
DRAIN_POLL_S = 0.1
DRAIN_MAX_S = 5.0
IRTT_EXTRA_S = 120.0  # the client is stopped by SIGINT; its own duration is only a backstop


@dataclass
class PointContext:
    """What every point of a configuration shares."""

    tb: Testbed
    registry: Registry
    slots: list[Slot]
    duration_s: float
    probe_ms: int
    cpu_pids: Callable[[], dict[str, int]]
    load_slot: Slot | None = None  # LOAD=smallpkts: the neighbour's flow (counters read per point)
    abort: Callable[[], bool] | None = None


def _host_addr(role: str, ip: int) -> str:
    h = topo.host(role)
    return topo.addr(h.ipv4 if ip == 4 else h.ipv6)


def _drain(ctx: PointContext) -> float:
    """Wait until no sink interface receives anything for DRAIN_POLL_S (at most DRAIN_MAX_S);
    return the seconds waited."""
    t0 = time.monotonic()
    sinks = [ctx.tb.ns(s.sink_role) for s in ctx.slots]
    last = [link_packets(ns)[0] for ns in sinks]
    while time.monotonic() - t0 < DRAIN_MAX_S:
        time.sleep(DRAIN_POLL_S)
        now = [link_packets(ns)[0] for ns in sinks]
        if now == last:
            break
        last = now
    return time.monotonic() - t0


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
    tb, reg = ctx.tb, ctx.registry
    record: dict[str, Any] = {
        "format": POINT_FORMAT,
        "key": {
            "hv": key.config.hv, "nic": key.config.nic, "routers": key.config.routers, "load": key.config.load,
            "ip": key.ip, "frame_bytes": key.frame_bytes, "rate_bps": key.rate_bps, "rep": key.rep,
            "phase": key.phase,
        },
        "duration_s": ctx.duration_s,
        "status": "running",
        "failure": None,
        "flows": [],
        "irtt": None,
    }  # fmt: skip
    procs: list[tuple[Proc, int]] = []
    try:
        sinks = []
        for s in ctx.slots:
            argv = BUILTIN.sink_argv(
                port=TRAFFIC_PORT, bind=s.sink_addr(key.ip), gap_us=gap_threshold_us(key.rate_bps, key.frame_bytes)
            )
            sink = Proc(f"sink-{s.k}", argv, reg, point_dir, netns=tb.ns(s.sink_role), stdout_name=f"sink-{s.k}.json")
            procs.append((sink.start(), signal.SIGTERM))
            sinks.append(sink)
        for sink in sinks:
            sink.wait_for("READY", READY_TIMEOUT_S, abort=ctx.abort)
        from probes.irtt import client_argv

        irtt_out = point_dir / "irtt.json.gz"
        irtt = Proc(
            "irtt-client",
            client_argv(
                f"{_host_addr('D', key.ip)}:{IRTT_PORT}", ctx.probe_ms, ctx.duration_s + IRTT_EXTRA_S, irtt_out
            ),
            reg, point_dir, netns=tb.ns("C"),
        )  # fmt: skip
        procs.append((irtt.start(), signal.SIGINT))
        record["irtt"] = irtt_out.name
        record["load_counters_t0"] = _load_counters(ctx)
        record["cpu_t0"] = cpustat.snapshot(ctx.cpu_pids())
        gens = []
        for s in ctx.slots:
            argv = BUILTIN.gen_argv(
                dst=s.sink_addr(key.ip),
                port=TRAFFIC_PORT,
                rate_bps=key.rate_bps if key.rate_bps != UNPACED else 0,
                frame_bytes=key.frame_bytes,
                duration_s=ctx.duration_s,
            )
            gen = Proc(f"gen-{s.k}", argv, reg, point_dir, netns=tb.ns(s.source_role), stdout_name=f"gen-{s.k}.json")
            procs.append((gen.start(), signal.SIGTERM))
            gens.append(gen)
            record["flows"].append({"router": s.k, "dst": s.sink_addr(key.ip), "gen": f"gen-{s.k}.json",
                                    "sink": f"sink-{s.k}.json"})  # fmt: skip
        deadline = time.monotonic() + ctx.duration_s + GEN_EXIT_GRACE_S
        bad = []
        for gen in gens:
            rc = gen.wait(max(0.1, deadline - time.monotonic()))
            if rc != 0:
                bad.append(f"{gen.what} exited with status {rc}: {gen.stderr_tail()}")
        record["cpu_t1"] = cpustat.snapshot(ctx.cpu_pids())
        record["load_counters_t1"] = _load_counters(ctx)
        record["drain_s"] = _drain(ctx)
        for proc, sig in procs:
            proc.stop(sig)
        for p, _ in procs:
            if p not in gens and p.returncode() not in (0, None):
                msg = f"{p.what} exited with status {p.returncode()}: {p.stderr_tail()}"
                # RTT probes are secondary: an overloaded router may even refuse irtt's handshake
                if p is irtt:
                    record["irtt_failure"] = msg
                else:
                    bad.append(msg)
        missing = [f["sink"] for f in record["flows"] if not (point_dir / f["sink"]).stat().st_size]
        bad += [f"{m} is empty" for m in missing]
        record["status"], record["failure"] = ("failed", "; ".join(bad)) if bad else ("ok", None)
    except ProcessError as err:
        record["status"], record["failure"] = "failed", str(err)
    finally:
        for proc, _ in procs:
            if proc.alive():
                proc.stop(signal.SIGKILL, timeout_s=5)
        write_json(point_dir / "point.json", record)
    if record["status"] != "ok":
        log.warning("point %s failed: %s", key.name, record["failure"])
    return record
