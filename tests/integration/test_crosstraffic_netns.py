"""vrgen -> vrsink (and iperf3) for real, in two fresh ``vrt-ct-*`` namespaces joined by a veth pair.

Skips with the reason unless running as root with the binaries built (``make -C crosstraffic``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator

import pytest

from crosstraffic import GenRequest, SinkRequest, get_backend
from crosstraffic.backend import GenResult, SinkResult
from crosstraffic.runner import Child, VethPair, veth_pair, wait_tcp_listen
from tests.integration.conftest import require_root_and

pytestmark = pytest.mark.integration

PORT = 9000
READY_TIMEOUT_S = 10.0


@pytest.fixture(scope="module")
def pair():
    """One veth pair for the module; its namespaces must be gone afterwards."""
    require_root_and("ip", "crosstraffic/bin/vrgen", "crosstraffic/bin/vrsink")
    with veth_pair("it") as p:
        yield p
    left = set(os.listdir("/run/netns")) & {p.a, p.b} if os.path.isdir("/run/netns") else set()
    assert not left, f"namespaces left behind: {sorted(left)}"


def start_sink(p: VethPair, dst: str, gap_us: int) -> Child:
    """vrsink in namespace b, ready (READY on stderr)."""
    b = get_backend("builtin")
    sink = Child(b.sink_argv(SinkRequest(port=PORT, bind=dst, gap_us=gap_us)), netns=p.b)
    sink.wait_line(b.sink_readiness(PORT)[1], READY_TIMEOUT_S)
    return sink


def stop_sink(sink: Child) -> SinkResult:
    """SIGTERM (by PID) and parse sink.json."""
    sink.signal(signal.SIGTERM)
    f = sink.finish(10)
    assert f.returncode == 0, f.stderr
    return get_backend("builtin").parse_sink(f.stdout)


def run_gen(p: VethPair, dst: str, rate_bps: int, frame: int, duration_s: float) -> GenResult:
    """vrgen in namespace a, to completion."""
    b = get_backend("builtin")
    gen = Child(
        b.gen_argv(GenRequest(dst=dst, port=PORT, rate_bps=rate_bps, frame_bytes=frame, duration_s=duration_s)),
        netns=p.a,
    )
    f = gen.finish(duration_s + 30)
    assert f.returncode == 0, f.stderr
    return b.parse_gen(f.stdout)


def round_trip(p: VethPair, dst: str, rate_bps: int, frame: int, duration_s: float) -> tuple[GenResult, SinkResult]:
    """vrsink (1 ms gap threshold) in namespace b, vrgen from a to completion, the sink stopped; both parsed."""
    sink = start_sink(p, dst, gap_us=1000)
    try:
        g = run_gen(p, dst, rate_bps, frame, duration_s)
    finally:
        s = stop_sink(sink)
    return g, s


def test_50M_1500_for_2s_is_on_rate_without_loss(pair):
    g, s = round_trip(pair, pair.b4, 50_000_000, 1500, 2.0)
    assert abs(g.rate_error) <= 0.02, f"achieved {g.achieved_bps:.0f} bit/s"
    assert g.send_errors == 0
    assert s.lost == 0 and s.socket_drops == 0 and s.duplicates == 0
    assert s.packets == g.packets and s.first_seq == 0 and s.last_seq == g.packets - 1
    assert s.frame_bytes == 1500 and s.timestamps == "kernel"
    rx_bps = (s.packets - 1) * 1500 * 8 / ((s.last_ns - s.first_ns) / 1e9)
    assert abs(rx_bps / 50e6 - 1) <= 0.02


def test_ipv6_small_frames(pair):
    g, s = round_trip(pair, pair.b6, 10_000_000, 82, 1.0)
    assert g.family == 6 and g.payload_bytes == 16
    assert abs(g.rate_error) <= 0.02 and s.lost == 0 and s.packets == g.packets and s.frame_bytes == 82


@contextlib.contextmanager
def realtime_priority(prio: int) -> Iterator[None]:
    """Run the calling thread with SCHED_FIFO ``prio``, then restore its policy."""
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(prio))
    try:
        yield
    finally:
        os.sched_setscheduler(0, policy, param)


def test_largest_gap_matches_a_200ms_link_outage(pair):
    """Take the sink-side veth down for 200 ms while 20 Mbit/s of 1500 B frames flow."""
    from migrate.core.netlink import iproute

    rate, frame = 20_000_000, 1500
    interval_ms = frame * 8 / rate * 1e3  # 0.6 ms
    b = get_backend("builtin")
    sink = start_sink(pair, pair.b4, gap_us=2000)
    # SCHED_FIFO for the generator and for this thread around the link calls: the test measures the
    # sink's gap accuracy, not how much CPU the rest of the machine leaves to the two of them.
    argv = [
        *b.gen_argv(GenRequest(dst=pair.b4, port=PORT, rate_bps=rate, frame_bytes=frame, duration_s=0)),
        "--fifo",
        "10",
    ]
    gen = Child(argv, netns=pair.a)
    try:
        with iproute(pair.b) as ipr, realtime_priority(20):
            idx = ipr.link_lookup(ifname=pair.b_if)[0]
            time.sleep(0.5)  # stimulus schedule: traffic flows before the outage
            t0 = time.monotonic()
            ipr.link("set", index=idx, state="down")
            t1 = time.monotonic()
            time.sleep(0.2)  # the outage itself
            t2 = time.monotonic()
            ipr.link("set", index=idx, state="up")
            t3 = time.monotonic()
            time.sleep(0.5)  # traffic flows after the outage
    finally:
        gen.signal(signal.SIGTERM)
        gf = gen.finish(10)
        s = stop_sink(sink)
    g = b.parse_gen(gf.stdout)
    assert g.stopped_by == "signal"
    outage_ms = ((t2 + t3) / 2 - (t0 + t1) / 2) * 1e3
    gap = s.max_gap
    assert gap is not None
    gap_ms = gap.duration_ns / 1e6
    assert abs(gap_ms - outage_ms) <= 5 + interval_ms, (
        f"largest gap {gap_ms:.2f} ms vs outage {outage_ms:.2f} ms (calls took {(t1 - t0) * 1e3:.2f} / "
        f"{(t3 - t2) * 1e3:.2f} ms); gaps: {[round(x.duration_ns / 1e6, 2) for x in s.gaps]}"
    )
    assert gap.missing > 0 and s.lost == gap.missing, "the packets lost are exactly those of the outage"
    assert s.last_seq == g.packets - 1 and s.packets + s.lost == g.packets


def test_default_pacing_10M_64B_sends_short_bursts_on_schedule(pair):
    """10 Mbit/s of 64 B frames (51.2 µs apart) with vrgen's default 500 µs quantum: bursts of 9
    packets, none before it is due, the rate within 0.1 %, every packet at the sink."""
    g, s = round_trip(pair, pair.b4, 10_000_000, 64, 2)
    d, q = g.raw["sched_dev_ns"], g.raw["quantum_packets"]
    assert q == 9 and g.raw["quantum_us"] == 500
    assert abs(g.rate_error) <= 0.001, f"rate error {g.rate_error}"
    assert d["count"] == g.packets and d["min"] >= 0, f"a packet was sent before it was due: {d}"
    # one wakeup per burst, not per packet (what saves the CPU); a stall on this shared machine
    # only makes bursts larger
    assert g.raw["waits"] <= g.packets / (q - 1), f"{g.raw['waits']} waits for {g.packets} packets"
    assert d["p50"] <= 500_000 + 200_000, f"median send delay {d['p50']} ns beyond the quantum"
    assert s.packets == g.packets and s.lost == 0


def test_iperf3_backend_round_trip(pair):
    require_root_and("iperf3")
    b = get_backend("iperf3")
    srv = Child(b.sink_argv(SinkRequest(port=5201, bind=pair.b4)), netns=pair.b)
    try:
        kind, port = b.sink_readiness(5201)
        assert kind == "tcp-listen"
        wait_tcp_listen(pair.b, int(port), READY_TIMEOUT_S, srv)
        cli = Child(
            b.gen_argv(GenRequest(dst=pair.b4, port=5201, rate_bps=10_000_000, frame_bytes=1500, duration_s=1)), pair.a
        )
        c = cli.finish(30)
        s = srv.finish(30)
    finally:
        srv.kill()
    g = b.parse_gen(c.stdout)
    r = b.parse_sink(s.stdout)
    assert abs(g.rate_error) <= 0.05
    assert r.packets == g.packets and r.lost == 0
