"""Raw baseline point (point.json, gen-<k>.json, sink-<k>.json, irtt.json.gz) -> one tidy row
for baseline.csv and one row per router for baseline_routers.csv.

Definitions (rates count Ethernet-frame bits incl. FCS, as vrgen/vrsink and the papers do):

* ``offered_bps``/``offered_pps``: sum over the routers' generators of their achieved rate;
* ``forwarded_pps``: per flow, packets received at its sink / the generator's send span, summed;
  ``forwarded_bps`` = that x frame bits;
* ``loss_ratio``: lost / sent over all flows, the suite's one loss definition (docs/metrics.md,
  ``analysis.metrics.cross.loss``): lost = packets the generator sent (send errors excluded) − packets
  received − the sink socket's own drops, so packets lost before the sink's first sequence
  number count too;
* ``rtt_*``: irtt C -> D through router 0, probes sent while the generators ran;
* CPU in CPU-seconds per second between the two snapshots around the generators:
  ``cpu_host`` = busy time of all CPUs (user+nice+system+irq+softirq+steal) — on a shared machine
  it includes everybody's work; ``cpu_softirq`` = the host's softirq time (forwarding between
  namespaces runs in softirq context of whichever CPU sends, so it cannot be attributed to the
  router's namespace); ``cpu_hv`` = the QEMU processes (HV=kvm only); ``cpu_router_daemons`` =
  the router's own processes where they are host processes: HV=none's daemons, HV=criu's whole
  container (init, daemons, helpers); ``cpu_gen`` = the
  generators' own user+system time per second of sending (HV=none: the sender's softirq often
  forwards the packet through the whole namespace chain inside vrgen's system time).
* ``owd_median_ms``: the sink's median one-way delay, sender's timestamp (A) to arrival (B).  On
  the embedded testbed both read the same kernel clock (``owd_uncertainty_ms`` 0).  On a lab
  (``TESTBED=``) they are two hosts: the point records each host's clock offset against the
  orchestrator at its end (``clock``), the delay is corrected by B's offset minus A's, and
  ``owd_uncertainty_ms`` is the sum of the two offsets' bounds.  The RTT window, on A's clock,
  is moved onto C's the same way.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from analysis.baseline.ndr import jain_index
from analysis.load import load_irtt
from analysis.metrics.cross import loss
from analysis.metrics.rtt import rtt_jitter_ms, rtt_stats
from migrate.core.rundir import POINT_JSON

GEN_SHORTFALL = 0.05  # a paced point whose offered rate is > 5 % below the requested one is generator-limited
BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq", "steal")
LOAD_FRAME_BYTES = 64
NEIGHBOUR_PREFIX = "nb-"  # CPU snapshot names of the LOAD neighbour's processes (QEMU, daemons, busy loop)
#: set-ups whose router runs as host processes (HV=none: router<k>-daemon<i>; HV=criu: every
#: process of the container, router<k>-ct<pid>)
PROCESS_ROUTER_HVS = ("none", "criu")

ROW_COLUMNS = (
    "hv", "nic", "ip", "frame_bytes", "routers", "load", "rate_bps", "phase", "rep",
    "offered_bps", "offered_pps", "forwarded_bps", "forwarded_pps", "loss_ratio",
    "rtt_median_ms", "rtt_p99_ms", "rtt_lost", "owd_median_ms", "owd_uncertainty_ms",
    "cpu_host", "cpu_softirq", "cpu_hv", "cpu_router_daemons", "cpu_gen", "cpu_neighbour",
    "jain_throughput", "jain_cpu", "load_offered_bps", "load_forwarded_bps", "gen_limited", "status", "role",
    "rtt_jitter_ms", "proto",
)  # fmt: skip
ROUTER_COLUMNS = (
    "hv", "nic", "ip", "frame_bytes", "routers", "load", "rate_bps", "phase", "rep", "router",
    "offered_bps", "forwarded_bps", "forwarded_pps", "loss_ratio", "owd_median_ms", "owd_uncertainty_ms",
    "cpu_router", "role", "proto",
)  # fmt: skip


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def cpu_rates(t0: dict[str, Any], t1: dict[str, Any]) -> dict[str, Any]:
    """CPU-seconds per second between two :func:`migrate.core.cpustat.snapshot` readings: ``host``
    (busy), ``softirq`` and ``procs`` {name: value or None if the process was missing}."""
    dt = (t1["mono_ns"] - t0["mono_ns"]) / 1e9
    hz = float(t0["user_hz"])
    if dt <= 0:
        return {"host": None, "softirq": None, "procs": {}, "interval_s": dt}
    h0, h1 = t0["host"], t1["host"]
    busy = sum(h1[f] - h0[f] for f in BUSY_FIELDS)
    procs: dict[str, float | None] = {}
    for name, v0 in t0["procs"].items():
        v1 = t1["procs"].get(name)
        procs[name] = None if v0 is None or v1 is None else (sum(v1) - sum(v0)) / hz / dt
    return {
        "host": busy / hz / dt,
        "softirq": (h1["softirq"] - h0["softirq"]) / hz / dt,
        "procs": procs,
        "interval_s": dt,
    }


def _sum(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return math.fsum(vals) if vals else None


def _rtt(point_dir: Path, record: dict[str, Any], start_ns: int, end_ns: int) -> dict[str, Any]:
    if not record.get("irtt") or not (point_dir / record["irtt"]).exists():
        return {"rtt_median_ms": None, "rtt_p99_ms": None, "rtt_lost": None, "rtt_jitter_ms": None}
    try:
        trace = load_irtt(point_dir / record["irtt"])
    except (OSError, ValueError, KeyError, TypeError):
        return {"rtt_median_ms": None, "rtt_p99_ms": None, "rtt_lost": None, "rtt_jitter_ms": None}
    during = (trace.send_ns >= start_ns) & (trace.send_ns <= end_ns)
    rtt = np.asarray(trace.rtt_ns)[during]
    st = rtt_stats(rtt)
    return {"rtt_median_ms": st.median_ms, "rtt_p99_ms": st.p99_ms, "rtt_lost": st.lost,
            "rtt_jitter_ms": rtt_jitter_ms(rtt)}  # fmt: skip


def _gen_cpu(gen: dict[str, Any], span_s: float) -> float | None:
    """vrgen's user+system CPU seconds per second of sending; None when either figure is missing
    (an older vrgen or another backend: unknown, not 0)."""
    user, sys_s = gen.get("cpu_user_s"), gen.get("cpu_sys_s")
    if not isinstance(user, int | float) or not isinstance(sys_s, int | float) or span_s <= 0:
        return None
    return (user + sys_s) / span_s


def clock_shift(clock: dict[str, Any] | None, src: str, dst: str) -> tuple[int, int]:
    """(ns to subtract from a difference of ``dst``'s and ``src``'s timestamps, its uncertainty
    bound in ns): ``dst``'s clock offset minus ``src``'s and the sum of their bounds; (0, 0)
    without a ``clock`` record (the embedded testbed: one kernel clock)."""
    if not clock:
        return 0, 0
    a, b = clock[src], clock[dst]
    return int(b["offset_ns"]) - int(a["offset_ns"]), int(a["uncertainty_ns"]) + int(b["uncertainty_ns"])


#: the end host's name in a flow record when it is the router VM: its tools read the guest's own
#: clock, which is not the hosts' (hundreds of ms apart were seen under TCG); ROLE=vm-vm's
#: receiver, router 1's VM, is "VM1"
GUEST = "VM"
#: the host of the router (and of an end host in it): whose clock the CPU snapshots read
ROUTER_HOST = "R1"


def _guest(name: str | None) -> bool:
    return name is not None and name.startswith(GUEST)


def _window_owner(flow: dict[str, Any], sink_known: bool) -> str | None:
    """Whose clock :func:`_window` takes the flow's span on: the sender's, the sink's when a guest
    sent, None for the orchestrator's bracket (both ends guests, or the sink's span unknown)."""
    if not _guest(flow.get("from")):
        return flow.get("from", "A")
    if not _guest(flow.get("to")) and sink_known:
        return flow.get("to", "B")
    return None


def _window(flow: dict[str, Any], sender: tuple[Any, Any], sink: tuple[Any, Any], bracket: tuple[Any, Any]) -> tuple:
    """A flow's span on a host's clock (the RTT probes' window): the sender's, the sink's when a
    guest sent, and when both ends are guests (ROLE=vm-vm under HV=kvm) the orchestrator's own
    bracket of the flow (its CPU snapshots just before the generators start and after they exit,
    CLOCK_REALTIME of the router's host: wider than the flow by the console round trips)."""
    owner = _window_owner(flow, None not in sink)
    if owner is None:
        return bracket
    return sender if owner == flow.get("from", "A") else sink


def _tcp_flow(point_dir: Path, flow: dict[str, Any], bracket: tuple[Any, Any] = (None, None)) -> dict[str, Any] | None:
    """PROTO=tcp: one bulk flow's goodput, the payload bytes the sink read × 8 over its reads'
    span (vrtcp sink's t_first_ns .. t_last_ns, one clock).  Offered is absent: what the sender
    wrote includes what its socket still held when it stopped (megabytes against a few seconds),
    and TCP sends only what the path takes.  No packet counts, loss or one-way delay: TCP
    retransmits what it loses, and its segments are not numbered for the sink.  The flow's
    window (for the RTT probes) is the sender's span, or the sink's when the sender is the guest."""
    send, sink = _read_json(point_dir / flow["gen"]), _read_json(point_dir / flow["sink"])
    if send is None or sink is None or sink.get("t_first_ns") is None or sink.get("t_last_ns") is None:
        return None
    span_s = (int(sink["t_last_ns"]) - int(sink["t_first_ns"])) / 1e9
    if span_s <= 0:
        return None
    read = sum(int(b) for b in sink["bytes"])
    ends = _window(flow, (send["t_start_ns"], send["t_end_ns"]), (sink["t_first_ns"], sink["t_last_ns"]), bracket)
    if None in ends:
        return None
    return {
        "router": flow["router"], "from": flow.get("from", "A"),
        "offered_bps": None, "offered_pps": None,
        "forwarded_bps": read * 8 / span_s, "forwarded_pps": None,
        "sent": None, "lost": None, "loss_ratio": None, "owd_median_ms": None, "owd_uncertainty_ms": None,
        "start_ns": int(ends[0]), "end_ns": int(ends[1]), "gen_cpu": None,
        "clock": _window_owner(flow, True),
    }  # fmt: skip


def _flow(
    point_dir: Path,
    flow: dict[str, Any],
    frame_bytes: int,
    clock: dict[str, Any] | None = None,
    bracket: tuple[Any, Any] = (None, None),
) -> dict[str, Any] | None:
    if flow.get("proto") == "tcp":
        return _tcp_flow(point_dir, flow, bracket)
    gen, sink = _read_json(point_dir / flow["gen"]), _read_json(point_dir / flow["sink"])
    if gen is None or sink is None:
        return None
    span_s = (gen["end_ns"] - gen["start_ns"]) / 1e9
    sent, recv = int(gen["packets"]), int(sink["packets"])
    drops = sink.get("socket_drops") if isinstance(sink.get("socket_drops"), int) else None
    lost, ratio, _ = loss(sent, recv, drops)
    fwd_pps = recv / span_s if span_s > 0 else 0.0
    # the one-way delay compares the sender's and the receiver's clocks: not with the guest's
    guest = _guest(flow.get("from")) or _guest(flow.get("to"))
    owd = None if guest else (sink.get("owd_ns") or {}).get("median")
    shift, unc = (0, 0) if guest else clock_shift(clock, flow.get("from", "A"), flow.get("to", "B"))
    known = owd is not None and recv
    ends = _window(flow, (gen["start_ns"], gen["end_ns"]), (sink.get("first_ns"), sink.get("last_ns")), bracket)
    if None in ends:
        return None
    return {
        "router": flow["router"],
        "from": flow.get("from", "A"),
        "offered_bps": float(gen["achieved_bps"]),
        "offered_pps": float(gen["achieved_pps"]),
        "forwarded_pps": fwd_pps,
        "forwarded_bps": fwd_pps * frame_bytes * 8,
        "sent": sent,
        "lost": lost,
        "loss_ratio": ratio,
        "owd_median_ms": (owd - shift) / 1e6 if known else None,
        "owd_uncertainty_ms": unc / 1e6 if known else None,
        "start_ns": int(ends[0]),
        "end_ns": int(ends[1]),
        "gen_cpu": _gen_cpu(gen, span_s),
        "clock": _window_owner(flow, None not in (sink.get("first_ns"), sink.get("last_ns"))),
    }


def _load_rates(record: dict[str, Any], interval_s: float | None) -> tuple[float | None, float | None]:
    c0, c1 = record.get("load_counters_t0"), record.get("load_counters_t1")
    if not c0 or not c1 or not interval_s:
        return None, None
    bits = LOAD_FRAME_BYTES * 8

    def span_s(what: str) -> float:
        if f"{what}_mono_ns" in c0 and f"{what}_mono_ns" in c1:
            return (c1[f"{what}_mono_ns"] - c0[f"{what}_mono_ns"]) / 1e9
        return interval_s  # older points: the CPU snapshots' interval

    offered = (c1["source_rx_tx"][1] - c0["source_rx_tx"][1]) / span_s("source") * bits
    forwarded = (c1["sink_rx_tx"][0] - c0["sink_rx_tx"][0]) / span_s("sink") * bits
    return offered, forwarded


def analyse_point(point_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """(row, per-router rows) of one point directory; None if it has no point.json."""
    record = _read_json(point_dir / POINT_JSON)
    if record is None:
        return None
    key = record["key"]
    row: dict[str, Any] = {c: None for c in ROW_COLUMNS}
    row.update({k: key[k] for k in ("hv", "nic", "ip", "frame_bytes", "routers", "load", "rate_bps", "phase", "rep")})
    row["role"] = key.get("role", "router")  # points written before ROLE existed forwarded
    row["proto"] = key.get("proto", "udp")
    row["status"] = record.get("status")
    clock = record.get("clock")
    bracket = ((record.get("cpu_t0") or {}).get("t_ns"), (record.get("cpu_t1") or {}).get("t_ns"))
    flows = [_flow(point_dir, f, key["frame_bytes"], clock, bracket) for f in record.get("flows", [])]
    if record.get("status") != "ok" or not flows or any(f is None for f in flows):
        row["status"] = "failed" if record.get("status") == "ok" else record.get("status")
        return row, []
    fl: list[dict[str, Any]] = [f for f in flows if f is not None]
    udp = all(f["sent"] is not None for f in fl)
    sent = sum(f["sent"] for f in fl) if udp else 0
    cpu = cpu_rates(record["cpu_t0"], record["cpu_t1"])
    procs = cpu["procs"]
    per_router_cpu = {
        f["router"]: _sum(
            [v for n, v in procs.items() if n == f"qemu{f['router']}" or n.startswith(f"router{f['router']}-")]
        )
        for f in fl
    }
    row.update(
        offered_bps=math.fsum(f["offered_bps"] for f in fl) if udp else None,
        offered_pps=math.fsum(f["offered_pps"] for f in fl) if udp else None,
        forwarded_bps=math.fsum(f["forwarded_bps"] for f in fl),
        forwarded_pps=math.fsum(f["forwarded_pps"] for f in fl) if udp else None,
        loss_ratio=sum(f["lost"] for f in fl) / sent if sent else None,
        owd_median_ms=fl[0]["owd_median_ms"],
        owd_uncertainty_ms=fl[0]["owd_uncertainty_ms"],
        cpu_host=cpu["host"],
        cpu_softirq=cpu["softirq"],
        cpu_hv=_sum([v for n, v in procs.items() if n.startswith("qemu")]) if key["hv"] == "kvm" else None,
        cpu_router_daemons=(
            _sum([v for n, v in procs.items() if n.startswith("router") and ("-daemon" in n or "-ct" in n)])
            if key["hv"] in PROCESS_ROUTER_HVS
            else None
        ),
        cpu_neighbour=_sum([v for n, v in procs.items() if n.startswith(NEIGHBOUR_PREFIX)]),
        cpu_gen=None if any(f["gen_cpu"] is None for f in fl) else _sum([f["gen_cpu"] for f in fl]),
        jain_throughput=jain_index([f["forwarded_bps"] for f in fl]),
        jain_cpu=jain_index(list(per_router_cpu.values())),
    )
    # the generators' window, on C's clock; the bracket is on the router host's (a lab's R1)
    to_c, _ = clock_shift(clock, fl[0]["clock"] or ROUTER_HOST, "C")
    row.update(_rtt(point_dir, record, min(f["start_ns"] for f in fl) + to_c, max(f["end_ns"] for f in fl) + to_c))
    row["load_offered_bps"], row["load_forwarded_bps"] = _load_rates(record, cpu.get("interval_s"))
    requested = key["rate_bps"] * len(fl)
    offered = row["offered_bps"]
    row["gen_limited"] = None if offered is None else bool(requested and offered < (1 - GEN_SHORTFALL) * requested)
    routers = []
    for f in fl:
        r = {c: row[c] for c in ROUTER_COLUMNS if c in row}
        r.update(
            router=f["router"], offered_bps=f["offered_bps"], forwarded_bps=f["forwarded_bps"],
            forwarded_pps=f["forwarded_pps"], loss_ratio=f["loss_ratio"], owd_median_ms=f["owd_median_ms"],
            owd_uncertainty_ms=f["owd_uncertainty_ms"],
            cpu_router=per_router_cpu[f["router"]],
        )  # fmt: skip
        routers.append(r)
    return row, routers
