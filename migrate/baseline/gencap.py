"""What the cross-traffic generator can reach on this machine, measured before a baseline starts.

vrgen runs unpaced (``--rate 0``) into a vrsink over the loopback interface of a scratch network
namespace (registered, removed in ``finally``) for :data:`TRIAL_S` seconds, up to
:data:`TRIALS` times per (IP version, frame size); the best trial is the capability.  A requested
rate above it cannot be offered, so the baseline refuses it before anything else starts (unless
GEN_CHECK=0).  On a loaded machine the figure moves with the load: it is recorded in meta.json."""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from crosstraffic.backend import GenRequest, SinkRequest
from migrate.core.errors import ConfigError, DependencyError
from migrate.core.netlink import iproute
from migrate.core.procs import Proc, ProcessError
from migrate.core.registry import Registry
from migrate.core.units import format_rate
from migrate.experiment.instruments import BUILTIN
from migrate.testbed.builder import new_prefix

log = logging.getLogger(__name__)

TRIAL_S = 0.5
TRIALS = 3
PORT = 9099
READY_TIMEOUT_S = 10.0
LOOPBACK = {4: "127.0.0.1", 6: "::1"}


@dataclass(frozen=True)
class Capability:
    """Best unpaced rate of one (IP version, frame size)."""

    ip: int
    frame_bytes: int
    max_bps: float
    max_pps: float
    trials_bps: tuple[float, ...]


def _trial(reg: Registry, ns: str, out: Path, ip: int, frame: int, n: int) -> tuple[float, float]:
    gen = Proc(
        f"gencap-gen-ip{ip}-{frame}-{n}",
        BUILTIN.gen_argv(GenRequest(dst=LOOPBACK[ip], port=PORT, rate_bps=0, frame_bytes=frame, duration_s=TRIAL_S)),
        reg, out, netns=ns, stdout_name=f"gencap-gen-ip{ip}-{frame}-{n}.json",
    ).start()  # fmt: skip
    rc = gen.wait(TRIAL_S + 30)
    if rc != 0:
        gen.stop()
        raise DependencyError(f"vrgen failed while measuring its capability (status {rc}): {gen.stderr_tail()}")
    res = BUILTIN.parse_gen(gen.stdout_path.read_text())
    return res.achieved_bps, res.achieved_pps


def measure(needs: Iterable[tuple[int, int, int]], scratch: Path) -> dict[tuple[int, int], Capability]:
    """For each ``(ip, frame_bytes, wanted_bps)``: the generator's unpaced capability (stops
    early once a trial reaches ``wanted_bps``).  ``scratch`` is a private directory for the
    tools' output."""
    wanted: dict[tuple[int, int], int] = {}
    for ip, frame, bps in needs:
        wanted[(ip, frame)] = max(bps, wanted.get((ip, frame), 0))
    reg = Registry(new_prefix())
    reg.open()
    ns = f"{reg.prefix}-CAL"
    caps: dict[tuple[int, int], Capability] = {}
    try:
        reg.create_netns(ns)
        with iproute(ns) as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
        for (ip, frame), bps in sorted(wanted.items()):
            sink = Proc(
                f"gencap-sink-ip{ip}-{frame}",
                BUILTIN.sink_argv(SinkRequest(port=PORT, bind=LOOPBACK[ip])),
                reg, scratch, netns=ns, stdout_name=f"gencap-sink-ip{ip}-{frame}.json",
            ).start()  # fmt: skip
            try:
                sink.wait_for("READY", READY_TIMEOUT_S)
                trials: list[tuple[float, float]] = []
                for n in range(TRIALS):
                    trials.append(_trial(reg, ns, scratch, ip, frame, n))
                    if trials[-1][0] >= bps:
                        break
            except ProcessError as err:
                raise DependencyError(f"cannot measure the generator's capability: {err}") from err
            finally:
                sink.stop(signal.SIGTERM)
            best = max(trials)
            caps[(ip, frame)] = Capability(ip, frame, best[0], best[1], tuple(t[0] for t in trials))
    finally:
        problems = reg.teardown()
        if problems:
            log.warning("generator capability check: teardown problems: %s", "; ".join(problems))
    return caps


def require(needs: Iterable[tuple[int, int, int, str]], caps: dict[tuple[int, int], Capability]) -> None:
    """ConfigError for the first ``(ip, frame, rate_bps, variable)`` above the capability."""
    for ip, frame, bps, what in needs:
        cap = caps[(ip, frame)]
        if bps > cap.max_bps:
            raise ConfigError(
                f"{what}={format_rate(bps)} at {frame} B over IPv{ip} is above what the generator reaches on this "
                f"machine now ({cap.max_bps / 1e6:.0f} Mbit/s = {cap.max_pps / 1e3:.0f} kpps unpaced): lower it, "
                "use 'max' (unpaced) in RATES, or set GEN_CHECK=0 to run anyway"
            )
