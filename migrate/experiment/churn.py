"""Route churn from the routing peers (``CHURN=<routes/s>`` with ``PEERING=bgp``; docs/peering.md
"Route churn").

B, the peer on segment R, flaps routes at a set rate so that the router's own daemons (bgpd,
zebra, the kernel's FIB in the guest) keep writing memory, as a router in the default-free zone
does: the dirty rate QEMU measures before the migration then comes from routing work, not from
a synthetic load (``DIRTY=``).

Mechanism: the prefixes are /32s of :data:`POOL` (inside 198.18.0.0/15, unused by the testbed).
A sliding window of :data:`POOL_SIZE` / 2 of them is announced at any time: each step withdraws
the oldest and announces the next, so CHURN=N makes N route changes per second, half
announcements and half withdrawals, and the router holds a steady 512 of them.  The
orchestrator adds and removes the routes in a kernel table of B's namespace (:data:`TABLE`)
through one ``ip -force -batch -`` process there (iproute2, registered by PID), fed a line per
change; B's BIRD learns them at once (``protocol kernel`` with ``learn``, which BIRD 2 reads from
netlink's asynchronous messages) and exports them to the router over BGP.  Why ``ip -batch`` and
not pyroute2, which the testbed uses elsewhere: a pyroute2 0.9 request costs 670 µs here (an
asyncio loop per call), about 1,500 changes/s on an idle machine and 700 beside a TCG guest,
while ``ip -batch`` makes 50,000/s (measured side by side, docs/peering.md "Route churn").  Why
the kernel table and not BIRD's configuration: each change is one netlink message, paced by a
clock, not a configuration reload.  Why not ExaBGP or bgpsimple as the flapping speaker: B
already speaks BGP to the router through BIRD, whose log is the analysis' record of what the
router passed on (A's log shows every churned route the router re-advertised,
:mod:`analysis.metrics.churn`).

What is recorded: ``churn.tsv`` (one line per pacing tick: the tick's start and end in
CLOCK_REALTIME ns, the announcements and withdrawals it made, and the changes it was behind),
and meta.json ``churn`` (:meth:`Churn.describe`).
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis.metrics.churn import TSV_COLUMNS
from analysis.metrics.control_plane import learned_change, parse_bird_log
from migrate.core.errors import VrmigError
from migrate.core.procs import Proc
from migrate.core.registry import Registry
from migrate.core.rundir import CHURN_TSV, peer_log
from migrate.model.scenario import Scenario

log = logging.getLogger(__name__)

#: the churned prefixes: /32s of this network (the first POOL_SIZE of them)
POOL = ipaddress.IPv4Network("198.19.0.0/17")
POOL_SIZE = 1024
WINDOW = POOL_SIZE // 2  # announced at any time
#: the kernel table in B's namespace that BIRD learns the churned routes from
TABLE = 100
IP = "ip"
PEER = "B"  # the churning peer
OBSERVER = "A"  # the peer whose log shows what the router re-advertised
TICK_S = 0.01
#: a tick never makes more than this many seconds' worth of changes (after a stall the pace
#: resumes; the changes missed are counted as ``behind``, not burst out)
CATCH_UP_S = 0.1
FILL_TIMEOUT_S = 60.0
POLL_S = 0.05
TSV_HEADER = "\t".join(TSV_COLUMNS) + "\n"


class ChurnError(VrmigError):
    """The churn could not be set up (the router never re-advertised the first routes)."""


def prefix(i: int) -> str:
    """The i-th churned prefix (i modulo :data:`POOL_SIZE`)."""
    return f"{POOL.network_address + (i % POOL_SIZE)}/32"


def steps(first: int, count: int) -> Iterator[tuple[str, int]]:
    """Changes ``first`` .. ``first + count - 1`` of the sliding window (pure): change 2k
    withdraws prefix k (the oldest announced), change 2k+1 announces prefix k + WINDOW.
    Before change 0 prefixes 0 .. WINDOW-1 are announced (the fill)."""
    for n in range(first, first + count):
        k = n // 2
        yield ("del", k) if n % 2 == 0 else ("add", k + WINDOW)


@dataclass
class Tally:
    """What the churn did so far."""

    started_ns: int | None = None
    stopped_ns: int | None = None
    changes: int = 0
    announced: int = 0
    withdrawn: int = 0
    behind_max: int = 0
    errors: int = 0
    last_error: str | None = None


class _Batch(Proc):
    """``ip -force -batch -`` reading its commands from a pipe this process holds."""

    stdin_pipe = True


class Churn:
    """The churn of one run; a ``with`` block stops it and removes the routes it added."""

    def __init__(self, s: Scenario, tb: Any, registry: Registry, run_dir: Path) -> None:
        self.s, self.tb, self.reg, self.dir = s, tb, registry, run_dir
        self.rate = float(s.churn_rps or 0.0)
        self.tally = Tally()
        self.fill_ns: int | None = None
        self.fill_seen_ns: int | None = None
        self._batch: _Batch | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Churn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _write(self, lines: list[str]) -> None:
        assert self._batch is not None and self._batch.popen is not None and self._batch.popen.stdin is not None
        self._batch.popen.stdin.write("".join(lines).encode())
        self._batch.popen.stdin.flush()

    @staticmethod
    def _line(op: str, i: int) -> str:
        return f"route {op} {prefix(i)} dev lo table {TABLE} proto static scope link\n"

    def start(self) -> None:
        """The fill (WINDOW routes), seen re-advertised by the router at A, then the paced churn
        in a thread (none with CHURN=0: the peers run as with churn, nothing flaps)."""
        if self.s.churn_rps is None:
            return
        self._batch = _Batch(f"churn-{PEER}", [IP, "-force", "-batch", "-"], self.reg, self.dir, netns=self.tb.ns(PEER))
        self._batch.start()
        self.fill_ns = time.time_ns()
        self._write([self._line("add", i) for i in range(WINDOW)])
        self.fill_seen_ns = self._wait_seen(prefix(WINDOW - 1), FILL_TIMEOUT_S)
        log.info("route churn: %d routes announced by %s, seen at %s; churning %g routes/s", WINDOW, PEER, OBSERVER,
                 self.rate)  # fmt: skip
        self.tally.started_ns = time.time_ns()
        if self.rate > 0:
            self._thread = threading.Thread(target=self._run, name="route-churn", daemon=True)
            self._thread.start()

    def _wait_seen(self, pfx: str, timeout_s: float) -> int:
        """When A's BIRD logged ``pfx`` as imported from the router (BIRD's time)."""
        path = self.dir / peer_log(OBSERVER)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for e in reversed(parse_bird_log(path.read_text(errors="replace"))):
                if learned_change(e) == ("added", pfx):
                    return e.t_ns
            time.sleep(POLL_S)
        raise ChurnError(
            f"CHURN: the router did not re-advertise the first {WINDOW} churned routes to {OBSERVER} within "
            f"{timeout_s:.0f} s (the last, {pfx}, is not in {peer_log(OBSERVER)})"
        )

    def _run(self) -> None:
        """The pacing loop: at each tick, the changes due since the start (rate × elapsed) that
        are not made yet, at most CATCH_UP_S worth; one line of churn.tsv per tick."""
        t0 = time.monotonic()
        cap = max(1, int(self.rate * CATCH_UP_S))
        due_skipped = 0
        with open(self.dir / CHURN_TSV, "w") as out:
            out.write(TSV_HEADER)
            while not self._stop.is_set():
                start_ns = time.time_ns()
                due = int(self.rate * (time.monotonic() - t0)) - due_skipped
                todo = due - self.tally.changes
                behind = max(0, todo - cap)
                if behind:
                    due_skipped += behind  # missed, not burst out
                    self.tally.behind_max = max(self.tally.behind_max, behind)
                batch = list(steps(self.tally.changes, min(todo, cap)))
                if batch:
                    try:
                        self._write([self._line(op, i) for op, i in batch])
                    except OSError as err:  # ip exited: recorded, the run goes on without churn
                        self.tally.errors += 1
                        self.tally.last_error = f"ip -batch in {PEER}: {err}"
                        return
                added = sum(1 for op, _ in batch if op == "add")
                self.tally.changes += len(batch)
                self.tally.announced += added
                self.tally.withdrawn += len(batch) - added
                if batch or behind:
                    out.write(f"{start_ns}\t{time.time_ns()}\t{added}\t{len(batch) - added}\t{behind}\n")
                self._stop.wait(TICK_S)

    def stop(self) -> None:
        """Stop the pacing, remove every churned route from B's table (``route flush``), then let
        ``ip`` reach the end of its input; its error lines are counted."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
        if self.tally.started_ns is not None and self.tally.stopped_ns is None:
            self.tally.stopped_ns = time.time_ns()
        if self._batch is not None:
            b, self._batch = self._batch, None
            try:
                if b.alive() and b.popen is not None and b.popen.stdin is not None:
                    b.popen.stdin.write(f"route flush table {TABLE}\n".encode())
                    b.popen.stdin.close()
            except OSError:
                pass  # ip is gone: its namespace goes with the testbed
            if b.wait(5.0) is None:
                b.stop()
            try:
                errors = [ln for ln in b.stderr_path.read_text(errors="replace").splitlines() if ln.strip()]
            except OSError:
                errors = []
            if errors:
                self.tally.errors += len(errors)
                self.tally.last_error = self.tally.last_error or errors[-1]

    def describe(self) -> dict[str, Any]:
        """meta.json ``churn``."""
        t = self.tally
        span_s = (t.stopped_ns - t.started_ns) / 1e9 if t.started_ns and t.stopped_ns else None
        return {
            "requested_routes_s": self.rate,
            "peer": PEER,
            "observer": OBSERVER,
            "pool": str(POOL),
            "pool_size": POOL_SIZE,
            "window": WINDOW,
            "kernel_table": TABLE,
            "fill_ns": self.fill_ns,
            "fill_seen_ns": self.fill_seen_ns,
            "started_ns": t.started_ns,
            "stopped_ns": t.stopped_ns,
            "changes": t.changes,
            "announced": t.announced,
            "withdrawn": t.withdrawn,
            "issued_routes_s": round(t.changes / span_s, 3) if span_s else None,
            "behind_max": t.behind_max,
            "errors": t.errors,
            "last_error": t.last_error,
            "pacing": {"tick_s": TICK_S, "catch_up_s": CATCH_UP_S,
                       "mechanism": f"ip -force -batch in {PEER}'s namespace on kernel table {TABLE}, learned by "
                       f"{PEER}'s BIRD (protocol kernel, learn)"},
        }  # fmt: skip
