"""vrsampler and irtt for real, between two network namespaces joined by a veth pair (root, built
probes/bin/vrsampler, irtt).  Namespaces are ``vrt-pr-it<pid>-{x,y}``, removed afterwards; the
processes started here are stopped by PID."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from probes.bench import tx_packets
from tests.integration.conftest import require_root_and

pytestmark = pytest.mark.integration

X_ADDR, Y_ADDR = "198.18.77.1", "198.18.77.2"
X6_ADDR, Y6_ADDR = "2001:2:0:77::1", "2001:2:0:77::2"
POLL_S = 0.01
SENDER = (
    "import socket, sys, time\n"
    "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
    "while True:\n"
    "    s.sendto(bytes(100), (sys.argv[1], 9))\n"
    "    time.sleep(0.0005)\n"
)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture
def veth_pair() -> Iterator[tuple[str, str]]:
    """Namespaces x and y, x:vx <-> y:vy, IPv4 and IPv6 addresses; removed (and checked) after."""
    require_root_and()  # skip (not error) without root, before touching namespaces
    x, y = f"vrt-pr-it{os.getpid()}-x", f"vrt-pr-it{os.getpid()}-y"
    made = []
    try:
        for ns in (x, y):
            _ip("netns", "add", ns)
            made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("link", "add", "vx", "netns", x, "type", "veth", "peer", "name", "vy", "netns", y)
        for ns, dev, a4, a6 in ((x, "vx", X_ADDR, X6_ADDR), (y, "vy", Y_ADDR, Y6_ADDR)):
            _ip("-n", ns, "addr", "add", f"{a4}/24", "dev", dev)
            _ip("-n", ns, "addr", "add", f"{a6}/64", "dev", dev, "nodad")
            _ip("-n", ns, "link", "set", dev, "up")
        yield x, y
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
    left = set(os.listdir("/run/netns")) & {x, y}
    assert not left, f"namespaces left behind: {sorted(left)}"


@contextlib.contextmanager
def started(argv: list[str], stderr: Path | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """A process that is killed (by PID) and reaped on exit if still running."""
    err = stderr.open("wb") if stderr else subprocess.DEVNULL
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    try:
        yield p
    finally:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
        p.wait()
        if stderr:
            err.close()  # type: ignore[union-attr]


def _wait(
    cond: Callable[[], object], what: str, timeout_s: float = 10.0, proc: subprocess.Popen[bytes] | None = None
) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process exited ({proc.returncode}) while waiting for {what}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(POLL_S)


@contextlib.contextmanager
def traffic(x: str) -> Iterator[None]:
    """~2000 UDP packets/s from x to y; returns once they flow."""
    before = tx_packets(x, "vx")
    with started(["ip", "netns", "exec", x, sys.executable, "-c", SENDER, Y_ADDR]) as p:
        _wait(lambda: tx_packets(x, "vx") > before + 20, "traffic", proc=p)
        yield


def _steal_s() -> float:
    """CPU time the hypervisor under this machine gave to others (/proc/stat steal, all CPUs)."""
    from migrate.core.cpustat import parse_proc_stat, user_hz

    return parse_proc_stat(Path("/proc/stat").read_text())["steal"] / user_hz()


ON_TIME_TRIES = 3


def test_sampler_one_second_with_traffic(veth_pair, tmp_path):
    """One second at 10 ms with traffic.  Its rounds are on time (90 % within 2 ms of the period)
    in one of ON_TIME_TRIES seconds: once, in CI, only 61 % were, in the same minutes as a
    routing test's BFD sessions flapped 18 times on a busy machine; a late second is retried
    (the assertion gives each try's share and the CPU time stolen from this VM, /proc/stat),
    and a sampler off its schedule is late in all of them."""
    require_root_and("probes/bin/vrsampler")
    from probes.sampler import load_counters, sampler_argv

    x, y = veth_pair
    tries = []
    for i in range(ON_TIME_TRIES):
        out = tmp_path / f"counters-{i}.tsv"
        argv = sampler_argv(out, {x: ["vx", "lo"], y: ["vy"], ".": ["lo"]}, 10, rt=True, duration_s=1.0)
        with traffic(x):
            t_start, steal = time.time_ns(), _steal_s()
            res = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
            t_end, steal = time.time_ns(), _steal_s() - steal
        assert res.returncode == 0, res.stderr
        c = load_counters(out)
        dt = np.diff(c.series(x, "vx").t_ns)
        on_time = float(np.mean(np.abs(dt - 10_000_000) < 2_000_000))
        tries.append((on_time, round(steal, 3)))
        if on_time > 0.9:
            break
    assert tries[-1][0] > 0.9, f"(on-time share, steal s) per try: {tries}"
    assert "READY" in res.stderr.splitlines()
    assert res.stderr.splitlines()[-1].startswith("# cpu_user_s=")

    assert set(c.keys()) == {(x, "vx"), (x, "lo"), (y, "vy"), (".", "lo")}
    vx, vy = c.series(x, "vx"), c.series(y, "vy")
    assert 85 <= len(vx) <= 102
    # one clock: CLOCK_REALTIME, inside the run
    assert t_start <= vx.t_ns[0] and vx.t_ns[-1] <= t_end
    assert abs(np.median(dt) - 10_000_000) < 500_000, np.median(dt)
    # counters grow: ~2000 packets/s sent by x, received by y
    sent = int(vx.tx_packets[-1] - vx.tx_packets[0])
    got = int(vy.rx_packets[-1] - vy.rx_packets[0])
    assert sent > 300 and got > 300
    assert abs(sent - got) < 0.05 * sent
    assert (np.diff(vx.tx_packets.astype(np.int64)) >= 0).all()
    assert int(vy.rx_bytes[-1] - vy.rx_bytes[0]) >= got * 100
    assert c.footer_number("rounds") == len(vx)
    assert c.footer_number("read_errors") == 0


def test_sampler_stops_on_sigterm_and_survives_a_removed_interface(veth_pair, tmp_path):
    require_root_and("probes/bin/vrsampler")
    from probes.sampler import load_counters, sampler_argv

    x, y = veth_pair
    _ip("-n", y, "link", "add", "tap9", "type", "veth", "peer", "name", "tap9p")
    out, err = tmp_path / "counters.tsv", tmp_path / "sampler.stderr"
    argv = sampler_argv(out, {x: ["vx"], y: ["vy", "tap9"]}, 10, rt=True)
    with started(argv, stderr=err) as p:
        _wait(lambda: b"READY" in err.read_bytes(), "READY", proc=p)
        _ip("-n", y, "link", "del", "tap9")
        _wait(lambda: b"tap9 disappeared" in err.read_bytes(), "disappearance logged", proc=p)
        # keep sampling after the removal: the next flush (at least once a second) grows the file
        size = out.stat().st_size
        _wait(lambda: out.stat().st_size > size, "a flush after the removal", proc=p)
        os.kill(p.pid, signal.SIGTERM)
        assert p.wait(timeout=5) == 0
    c = load_counters(out)
    assert c.footer_number("rounds") == len(c.series(x, "vx"))
    tap9, vy = c.series(y, "tap9"), c.series(y, "vy")
    assert 0 < len(tap9) < len(vy)
    assert (vy.t_ns > tap9.t_ns[-1]).sum() >= 5  # y still sampled after tap9 went away


def test_irtt_server_ready_and_client_trace(veth_pair, tmp_path):
    require_root_and("irtt")
    from probes.irtt import client_argv, load_irtt, server_argv, wait_irtt_server

    x, y = veth_pair
    srv = ["ip", "netns", "exec", y, *server_argv(f"{Y_ADDR}:2112")]
    with started(srv, stderr=tmp_path / "server.stderr") as sp:
        wait_irtt_server(y, Y_ADDR, 2112, 10, pid=sp.pid, abort=lambda: sp.poll() is not None)
        for ms in (10, 1):
            out = tmp_path / f"irtt{ms}.json.gz"
            res = subprocess.run(
                ["ip", "netns", "exec", x, *client_argv(f"{Y_ADDR}:2112", ms, 0.5, out)],
                capture_output=True, text=True, timeout=30, check=False,
            )  # fmt: skip
            assert res.returncode == 0, res.stderr  # 1 ms accepted: the server has no minimum interval
            t = load_irtt(out)
            assert t.interval_ns == ms * 1_000_000
            assert len(t) + t.timer_misses >= 0.9 * 500 / ms
            assert t.received.mean() > 0.95
            assert np.nanmedian(t.rtt_ns) < 5_000_000
            assert abs(t.send_ns[0] - time.time_ns()) < 60e9  # CLOCK_REALTIME


def test_irtt_client_sigint_writes_output_ipv6(veth_pair, tmp_path):
    require_root_and("irtt")
    from probes.irtt import client_argv, load_irtt, server_argv, wait_irtt_server

    x, y = veth_pair
    srv = ["ip", "netns", "exec", y, *server_argv(f"{Y6_ADDR}:2112")]
    with started(srv) as sp:
        wait_irtt_server(y, Y6_ADDR, 2112, 10, pid=sp.pid, abort=lambda: sp.poll() is not None)
        out = tmp_path / "irtt.json.gz"
        before = tx_packets(x, "vx")
        with started(["ip", "netns", "exec", x, *client_argv(f"{Y6_ADDR}:2112", 10, 600, out)]) as cp:
            _wait(lambda: tx_packets(x, "vx") > before + 30, "probes flowing", proc=cp)
            os.kill(cp.pid, signal.SIGINT)
            assert cp.wait(timeout=10) == 0
        t = load_irtt(out)
        assert len(t) >= 20 and t.received.sum() >= 20
        assert t.remote == f"[{Y6_ADDR}]:2112"


def test_wait_irtt_server_fails_fast_when_server_cannot_bind(veth_pair):
    require_root_and("irtt")
    from probes.irtt import server_argv, wait_irtt_server

    _, y = veth_pair
    srv = ["ip", "netns", "exec", y, *server_argv("198.18.99.99:2112")]  # not an address of y
    with started(srv) as sp:
        t = time.monotonic()
        with pytest.raises(RuntimeError, match="gone"):
            wait_irtt_server(y, "198.18.99.99", 2112, 10, pid=sp.pid, abort=lambda: sp.poll() is not None)
        assert time.monotonic() - t < 5
