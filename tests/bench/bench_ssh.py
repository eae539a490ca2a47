"""``make bench-ssh``: per-command latency of the ways the orchestrator can run commands on a
host over SSH, side by side in one run against one host (docs/measurements/2026-11-24-ssh-latency.md):

- ``openssh-mux``: :meth:`SshHost.run` (a new ``ssh`` client per command through the master),
- ``openssh-channel``: one long-lived session running a small command server on the host,
- ``asyncssh``: the asyncssh library keeping one connection, a new channel per command,

each running ``true`` ``--n`` times; plus the first connection of each, a plain ``ssh host true``
without a master, and ``put``/``fetch`` of 16 MiB through the master.  Without ``--testbed`` it
builds the tests' sshd lab (root) and takes it down afterwards.  Prints a table and writes JSON."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from migrate.testbed.hosts import SshHost
from migrate.testbed.inventory import load

CHANNEL_SERVER = (
    "import json,subprocess,sys\n"
    "for line in sys.stdin:\n"
    " cp=subprocess.run(json.loads(line),stdin=subprocess.DEVNULL,capture_output=True)\n"
    " sys.stdout.write(json.dumps([cp.returncode,cp.stdout.decode(errors='replace')])+'\\n');sys.stdout.flush()\n"
)


def _stats(ns: list[int]) -> dict[str, Any]:
    a = np.array(ns, dtype=float) / 1e6
    return {
        "n": len(ns),
        "median_ms": round(float(np.median(a)), 3),
        "p95_ms": round(float(np.percentile(a, 95)), 3),
        "min_ms": round(float(a.min()), 3),
        "max_ms": round(float(a.max()), 3),
    }


def _timed(fn: Any, n: int) -> list[int]:
    out = []
    for _ in range(n):
        t = time.perf_counter_ns()
        fn()
        out.append(time.perf_counter_ns() - t)
    return out


def bench_mux(h: SshHost, n: int) -> list[int]:
    """``SshHost.run(["true"])`` through the master."""
    return _timed(lambda: h.run(["true"]), n)


def bench_channel(h: SshHost, n: int) -> tuple[int, list[int]]:
    """One session running :data:`CHANNEL_SERVER`; each command is one JSON line each way."""
    t0 = time.perf_counter_ns()
    p = subprocess.Popen(h.ssh_argv(["python3", "-c", CHANNEL_SERVER]), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert p.stdin and p.stdout

    def one() -> None:
        p.stdin.write(b'["true"]\n')
        p.stdin.flush()
        assert json.loads(p.stdout.readline())[0] == 0

    try:
        one()
        first = time.perf_counter_ns() - t0
        return first, _timed(one, n)
    finally:
        p.stdin.close()
        p.wait(timeout=10)


def bench_asyncssh(h: SshHost, n: int) -> dict[str, Any]:
    """asyncssh: one connection, ``conn.run("true")`` per command."""
    try:
        import asyncssh
    except ImportError:
        return {"skipped": "asyncssh not installed (pip install asyncssh)"}
    t = h.target

    async def go() -> dict[str, Any]:
        t0 = time.perf_counter_ns()
        async with asyncssh.connect(
            t.host,
            port=t.port,
            username=t.user,
            client_keys=[str(t.key)],
            known_hosts=str(t.known_hosts),
            agent_path=None,
            config=[],
        ) as conn:
            first = time.perf_counter_ns() - t0
            out = []
            for _ in range(n):
                s = time.perf_counter_ns()
                r = await conn.run("true", check=True)
                assert r.exit_status == 0
                out.append(time.perf_counter_ns() - s)
        return {"version": asyncssh.__version__, "first_connection_ms": round(first / 1e6, 3), **_stats(out)}

    return asyncio.run(go())


def _ssh_version() -> str:
    return subprocess.run(["ssh", "-V"], capture_output=True, text=True).stderr.strip()


def run_bench(inventory: Path, role: str, n: int) -> dict[str, Any]:
    """All measurements against ``role`` of ``inventory``."""
    spec = load(inventory).host(role)
    with tempfile.TemporaryDirectory(prefix="vrmig-bs-") as d:
        h = SshHost(spec, Path(d))
        t0 = time.perf_counter_ns()
        h.open()
        open_ns = time.perf_counter_ns() - t0
        try:
            t = h.target
            plain_argv = [
                "ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                "-o", f"UserKnownHostsFile={t.known_hosts}", "-o", "IdentitiesOnly=yes",
                "-i", str(t.key), "-p", str(t.port), "-l", t.user, "-T", "--", t.host, "true",
            ]  # fmt: skip
            plain_ns = _timed(lambda: subprocess.run(plain_argv, stdin=subprocess.DEVNULL, check=True), 10)
            # interleaved rounds: each method sees the same machine load
            mux: list[int] = []
            chan: list[int] = []
            first_chan = 0
            for _ in range(4):
                mux += bench_mux(h, n // 4)
                f, c = bench_channel(h, n // 4)
                first_chan = first_chan or f
                chan += c
            lib = bench_asyncssh(h, n)
            data = os.urandom(16 << 20)
            remote = f"/tmp/vrmig-bench-ssh-{os.getpid()}"
            t = time.perf_counter_ns()
            h.put(data, remote)
            put_s = (time.perf_counter_ns() - t) / 1e9
            t = time.perf_counter_ns()
            h.fetch(remote, Path(d) / "back")
            fetch_s = (time.perf_counter_ns() - t) / 1e9
            assert (Path(d) / "back").read_bytes() == data
            h.run(["rm", "-f", "--", remote])
            clock = h.clock(samples=50)
        finally:
            h.close()
    return {
        "format": 1,
        "what": "per-command latency of `true` on one SSH host",
        "host": {"role": role, "address": f"{spec.ssh.host}:{spec.ssh.port}" if spec.ssh else None},
        "orchestrator": {"kernel": platform.release(), "python": platform.python_version(), "ssh": _ssh_version()},
        "command": " ".join(sys.argv),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "first_connection_ms": {
            "openssh_master": round(open_ns / 1e6, 3),
            "openssh_channel_first_command": round(first_chan / 1e6, 3),
            "openssh_plain_ssh_true": _stats(plain_ns),
        },
        "per_command": {"openssh-mux": _stats(mux), "openssh-channel": _stats(chan), "asyncssh": lib},
        "transfer_16MiB_s": {"put_cat": round(put_s, 3), "fetch_cat": round(fetch_s, 3)},
        "clock_exchange": clock.as_dict(),
    }


def _table(r: dict[str, Any]) -> str:
    lines = [f"{'method':18} {'median ms':>10} {'p95 ms':>10} {'min ms':>8} {'n':>5}"]
    for k, v in r["per_command"].items():
        if "skipped" in v:
            lines.append(f"{k:18} skipped: {v['skipped']}")
        else:
            lines.append(f"{k:18} {v['median_ms']:10.3f} {v['p95_ms']:10.3f} {v['min_ms']:8.3f} {v['n']:5d}")
    f = r["first_connection_ms"]
    lines.append(
        f"first connection: openssh master {f['openssh_master']:.1f} ms, plain ssh true median "
        f"{f['openssh_plain_ssh_true']['median_ms']:.1f} ms, asyncssh "
        f"{r['per_command']['asyncssh'].get('first_connection_ms', '-')} ms"
    )
    t = r["transfer_16MiB_s"]
    lines.append(f"16 MiB through the master: put {t['put_cat']:.3f} s, fetch {t['fetch_cat']:.3f} s")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The options (``--testbed`` and ``--role``: the Make variables of ``make bench-ssh``)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--testbed", type=Path, default=None, help="inventory (default: build the tests' sshd lab, root)")
    p.add_argument("--role", default="A", help="the inventory's host the commands run on")
    p.add_argument("-n", type=int, default=100, help="commands per method")
    p.add_argument("--out", type=Path, required=True, help="JSON file to write")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``make bench-ssh``."""
    a = build_parser().parse_args(argv)
    lab = None
    try:
        if a.testbed is None:
            from tests.integration.sshlab import SshLab

            lab = SshLab(Path(tempfile.mkdtemp(prefix="vrmig-bench-lab-")), Path(__file__).resolve().parents[2])
            a.testbed = lab.up()
        result = run_bench(a.testbed, a.role, a.n)
    finally:
        if lab is not None:
            lab.down()
    if lab is not None:
        result["host"]["lab"] = "tests.integration.sshlab: sshd in a network namespace on this machine"
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2) + "\n")
    print(_table(result))
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
