"""migrate.drivers.xen.dom0: the dom0 command channel's framing and the streamed log, against a fake agent
speaking the protocol of routers/xenfs/vrmig-agent over two UNIX sockets (synthetic, no root)."""

import base64
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from migrate.drivers.xen.dom0 import AgentDom0, Dom0Error, StreamLog

AGENT = Path(__file__).resolve().parents[2] / "routers" / "xenfs" / "vrmig-agent"


def _serve_agent(
    ctl_path: Path, log_path: Path, answer: Callable[[str, list[str], socket.socket], tuple[int, str]], noise: str = ""
) -> None:
    """Listen on the agent's command and log sockets and serve one connection on each in a thread,
    as routers/xenfs/vrmig-agent does: each request line ``<id> <kind> <args...>`` gets
    ``answer(kind, args, log socket)`` -> (status, output), which may stream to the log socket
    first, framed as ``VRMIG-RC <id> <status> <base64 output>`` after ``noise``."""
    ctl = socket.socket(socket.AF_UNIX)
    ctl.bind(str(ctl_path))
    ctl.listen(1)
    logs = socket.socket(socket.AF_UNIX)
    logs.bind(str(log_path))
    logs.listen(1)

    def serve() -> None:
        c, _ = ctl.accept()
        lg, _ = logs.accept()
        f = c.makefile("rwb")
        for line in f:
            rid, kind, *rest = line.decode().split()
            rc, out = answer(kind, rest, lg)
            f.write(f"{noise}VRMIG-RC {rid} {rc} {base64.b64encode(out.encode()).decode()}\n".encode())
            f.flush()

    threading.Thread(target=serve, daemon=True).start()


def _fake_agent(ctl_path, log_path, replies):
    """Serve one connection per socket: answer each request with the scripted reply."""

    def answer(kind, rest, lg):
        rc, out, streamed = replies(kind, rest)
        for s in streamed:
            lg.sendall(s.encode())
        return rc, out

    _serve_agent(ctl_path, log_path, answer, noise="noise before the reply\n")


def test_run_and_stream(tmp_path):
    def replies(kind, rest):
        if kind == "run":
            cmd = base64.b64decode(rest[0]).decode()
            return (3, "", []) if cmd == "exec false" else (0, f"ran {cmd}\n", [])  # argv -> "exec <quoted words>"
        return 0, "started 42\n", [f"{rest[0]} hello\n{rest[0]} wor", f"ld\n{rest[0]} VRMIG-EXIT 0\n"]

    _fake_agent(tmp_path / "ctl", tmp_path / "log", replies)
    streams = StreamLog(tmp_path / "xen_log.jsonl")
    d = AgentDom0("R1", tmp_path / "ctl", tmp_path / "log", streams, lambda: True)
    try:
        assert d.run(["xl", "list"]) == (0, "ran exec xl list\n")
        assert d.run(["false"]) == (3, "")
        assert d.run(["echo", "a b", "$x"]) == (0, "ran exec echo 'a b' '$x'\n")
        d.stream("send", ["xl", "migrate"])
        hit = streams.wait("R1", "send", ("VRMIG-EXIT",), 5.0)
        assert hit is not None and hit["line"] == "VRMIG-EXIT 0"
        assert streams.tail("R1", "send") == ["hello", "world", "VRMIG-EXIT 0"]  # a line split across reads
    finally:
        d.close()
        streams.close()
    assert len((tmp_path / "xen_log.jsonl").read_text().splitlines()) == 3


def test_no_connection_when_the_host_died(tmp_path):
    streams = StreamLog(tmp_path / "xen_log.jsonl")
    with pytest.raises(Dom0Error, match="exited"):
        AgentDom0("R2", tmp_path / "absent", tmp_path / "absent2", streams, lambda: False)
    streams.close()


def test_real_agent_script_frames_output_and_status(tmp_path):
    """The dom0 agent itself (busybox-compatible sh) on a FIFO pair: one reply line per request."""
    req, rep, port = tmp_path / "req", tmp_path / "rep", tmp_path / "port"
    subprocess.run(["mkfifo", str(req)], check=True)
    # dom0's agent reads and writes one virtio port: here requests come from a FIFO, replies go to a file
    script = AGENT.read_text().replace('exec 3<>"$PORT"', f'exec 3<"{req}" 5>"{rep}"').replace(
        '>&3', '>&5').replace("exec 4>/run/vrmig/log-port", f'exec 4>"{port}"')  # fmt: skip
    assert "read -r id kind a b <&3" in script
    (tmp_path / "agent").write_text(script)
    rep.touch()
    p = subprocess.Popen(["sh", str(tmp_path / "agent"), "unused"], cwd=tmp_path)
    try:
        with open(req, "w") as w:
            cmd = base64.b64encode(b"echo hi; exit 7").decode()
            w.write(f"1 run {cmd}\n")
        deadline = time.monotonic() + 10
        while "VRMIG-RC" not in rep.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        parts = rep.read_text().split()
        assert parts[:3] == ["VRMIG-RC", "1", "7"]
        assert base64.b64decode(parts[3]) == b"hi\n"
    finally:
        p.kill()
        p.wait()


# -- no shell strings: hostile parameters stay inert --------------------------------------------

FAKE_BIN = {
    # xl records its arguments; `xl migrate -s '' DOM RUNE` runs RUNE with sh -c, as the real xl does
    "xl": '[ "$1" = -vvv ] && shift\n[ "$1" = migrate ] && { sh -c "$5"; echo "Migration successful"; }\nexit 0\n',
    "socat": '{ printf "%s\\n" "$@"; echo ---; } >> "$FAKE_LOG/socat.args"\n',
    "ss": 'echo "LISTEN 0 5 0.0.0.0:4444 0.0.0.0:*"\n',
    "tail": "exit 0\n",
    "cat": "exit 1\n",  # dom0's NIC counters: absent here
}


def _script_agent(sock_dir, host_env, cwd):
    """A stand-in dom0 agent on two UNIX sockets that, like routers/xenfs/vrmig-agent, runs every
    request's script with sh (here with stand-in xl/socat/ss/tail first in PATH)."""
    ctl_path, log_path = sock_dir / "ctl", sock_dir / "log"

    def sh(script):
        return subprocess.run(["sh", "-c", script], env=host_env, cwd=cwd, capture_output=True, timeout=20)

    def answer(kind, rest, lg):
        script = base64.b64decode(rest[-1]).decode()
        res = sh(script)
        if kind == "run":
            return res.returncode, (res.stdout + res.stderr).decode()
        tag = rest[0]
        text = "".join(f"{tag} {ln}\n" for ln in (res.stdout + res.stderr).decode().splitlines())
        lg.sendall(f"{text}{tag} VRMIG-EXIT {res.returncode}\n".encode())
        return 0, "started\n"

    _serve_agent(ctl_path, log_path, answer)
    return ctl_path, log_path


def test_xen_driver_passes_a_hostile_migration_address_as_one_inert_argument(tmp_path, monkeypatch):
    """Even past the scenario's check, the address reaches socat as one argument, in R2's
    listener and in the transport that xl hands to sh: no shell ever runs what it contains."""
    from types import SimpleNamespace

    from migrate.drivers.xen import driver as xen

    fake = tmp_path / "bin"
    fake.mkdir()
    for name, body in FAKE_BIN.items():
        (fake / name).write_text("#!/bin/sh\n" + body)
        (fake / name).chmod(0o755)
    marker = tmp_path / "pwned"
    hostile = f"198.19.255.2$(touch {marker});touch {marker}"
    monkeypatch.setattr(xen, "DOMU_CONSOLE_LOG", str(tmp_path / "console.log"))
    monkeypatch.setattr(xen, "SEND_PIDFILE", str(tmp_path / "dom0run" / "send.pid"), raising=False)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "FAKE_LOG": str(tmp_path)}
    streams = StreamLog(tmp_path / "xen_log.jsonl")
    dom0 = {}
    for host in ("R1", "R2"):
        (tmp_path / host).mkdir()
        ctl, log_port = _script_agent(tmp_path / host, env, tmp_path / host)
        dom0[host] = AgentDom0(host, ctl, log_port, streams, lambda: True)
    actions = []
    drv = xen.XenDriver.__new__(xen.XenDriver)
    drv.ctx = SimpleNamespace(
        scenario=SimpleNamespace(migrate_timeout_s=15.0, mode="precopy"),
        recorder=SimpleNamespace(action=lambda *a, **k: actions.append((a, k))),
        run_dir=tmp_path, faults=None, testbed=None,
    )  # fmt: skip
    drv.nested, drv.procs, drv.dom0, drv.streams = False, {}, dom0, streams
    drv.mig_addr, drv.mig_ifs = hostile, {"R1": "ethM", "R2": "ethM"}
    try:
        drv.prepare_destination()
        drv.migrate()
    finally:
        for d in dom0.values():
            d.close()
        streams.close()
    calls = (tmp_path / "socat.args").read_text().split("---\n")
    assert not marker.exists(), "the address was run by a shell"
    assert calls[0].splitlines() == [f"TCP-LISTEN:4444,bind={hostile},reuseaddr", "EXEC:xl -vvv migrate-receive"]
    assert calls[1].splitlines() == ["-", f"TCP:{hostile}:4444"]


def test_shell_dom0_keeps_each_argument_one_word(tmp_path):
    """Locally the argv is exec'd as is; through a transport that hands its command line to a
    shell (as ssh does; here `sh -c`) it is shlex-quoted, so the shell sees the same words."""
    from migrate.drivers.xen.dom0 import ShellDom0

    marker = tmp_path / "pwned"
    hostile = f"x; touch {marker}; $(touch {marker}) `touch {marker}` '\""
    streams = StreamLog(tmp_path / "xen_log.jsonl")
    try:
        for prefix in (None, ["sh", "-c"]):
            rc, out = ShellDom0("R2", streams, prefix).run(["printf", "%s|", hostile, "two words"])
            assert (rc, out) == (0, f"{hostile}|two words|")
        with pytest.raises(TypeError, match="argv lists"):
            ShellDom0("R2", streams).run(f"printf {hostile}")
    finally:
        streams.close()
    assert not marker.exists()


def test_scenario_refuses_a_migration_address_that_is_not_an_ip(tmp_path, monkeypatch):
    """XEN_MIG_ADDR (and XEN_MIG_IF, XEN_PEER) are checked before anything starts: one line, exit 2."""
    from migrate.core.errors import ConfigError
    from migrate.model.scenario import Scenario

    marker = tmp_path / "pwned"
    for value in (f"198.19.255.2; touch {marker}", f"$(touch {marker})", "198.19.255.2 -v"):
        monkeypatch.setenv("XEN_MIG_ADDR", value)
        with pytest.raises(ConfigError, match=r"^XEN_MIG_ADDR=.* is not an IP address") as err:
            Scenario(hv="xen")
        assert "\n" not in str(err.value)
    monkeypatch.setenv("XEN_MIG_ADDR", "198.19.255.2")
    assert Scenario(hv="xen").hv == "xen"
    for var, value in (("XEN_MIG_IF", "ethM/../../x"), ("XEN_PEER", "-oProxyCommand=touch x")):
        monkeypatch.setenv(var, value)
        with pytest.raises(ConfigError, match=f"^{var}="):
            Scenario(hv="xen")
        monkeypatch.delenv(var)
    monkeypatch.setenv("XEN_MIG_ADDR", f"1.2.3.4;touch {marker}")
    res = subprocess.run(
        [sys.executable, "-m", "migrate", "run", "--hv", "xen", "--results", str(tmp_path / "res")],
        capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().count("\n") == 0 and "XEN_MIG_ADDR" in res.stderr
    assert not (tmp_path / "res").exists() and not marker.exists()


def test_the_router_domu_boots_with_the_runs_peering_arguments(tmp_path, monkeypatch):
    """PEERING under Xen: the domU's kernel command line (the config written into dom0 and kept
    as xen-domu.cfg) carries vrmig-router's peering arguments, as the KVM guest's does."""
    from types import SimpleNamespace

    from migrate.drivers.xen import driver as xen
    from migrate.model import routing
    from routers.guest import READY_MARKER

    written: list[str] = []

    class Dom0:
        def run(self, argv, timeout_s=30.0):
            if argv[:2] == ["sh", "-c"] and argv[4:5] == [xen.DomuPaths().cfg]:
                written.append(argv[5])
            return 0, ""

        def stream(self, tag, argv):
            pass

    class Streams:
        def wait(self, host, tag, needles, timeout_s, alive):
            return {"line": f"{READY_MARKER} router=frr"}

    scenario = SimpleNamespace(
        router="frr", mem_mib=256, vcpus=1, xen_guest="pvh", boot_timeout_s=5.0, rib_routes=0,
        peering="bgp,ospf,bfd", peering_protocols=("bgp", "ospf", "bfd"), bfd_interval_ms=50, bfd_multiplier=3,
        bgp_hold_s=9, ospf_dead_s=4,
    )  # fmt: skip
    drv = xen.XenDriver.__new__(xen.XenDriver)
    from migrate.testbed.builder import Testbed

    drv.ctx = SimpleNamespace(
        scenario=scenario,
        recorder=SimpleNamespace(action=lambda *a, **k: None),
        run_dir=tmp_path,
        testbed=Testbed("vmtest00"),
    )
    drv.dom0, drv.streams, drv.procs = {"R1": Dom0()}, Streams(), {}
    drv.domu_paths = xen.DomuPaths()
    drv._create_domu()
    cfg = (tmp_path / "xen-domu.cfg").read_text()
    assert written == [cfg]
    for arg in routing.router_args(scenario):
        assert f"vrmig.{arg}" in cfg, (arg, cfg)
    assert "vrmig.peering=bgp,ospf,bfd" in cfg and "vrmig.ospfdead=4" in cfg


def test_a_lab_host_without_the_nested_image_or_with_a_small_link_mtu(tmp_path):
    """HV=xen on a lab: a host that lacks a file hosts-setup copies is named with the command that
    copies it; dom0's tunnel MTU is the host's migration link MTU less the tunnel's headers, at
    most XEN_MIG_MTU (read on the host, not assumed)."""
    from types import SimpleNamespace

    from migrate.core.errors import DependencyError
    from migrate.drivers.xen import driver as xen
    from migrate.model.scenario import Scenario
    from migrate.testbed.inventory import load

    inv = load(Path(__file__).resolve().parents[2] / "docs" / "lab.example.toml")
    present: set[str] = set(xen.lab_xen_files(inv.deploy_dir, "frr"))
    mtu = {"R1": b"1500\n", "R2": b"9000\n"}

    class Lab:
        remote, inventory = True, inv

        def exists(self, role, path):
            return path in present

        def read_bytes(self, role, path):
            assert path == f"/sys/class/net/{inv.host(role).migration_if}/mtu", path
            return mtu[role]

    drv = xen.XenDriver.__new__(xen.XenDriver)
    drv.ctx = SimpleNamespace(scenario=Scenario(hv="xen", xen_mig_mtu=1500), testbed=Lab())
    site = xen._LabNestedHosts(drv)
    for r in ("R1", "R2"):
        site.prepare(r)
    assert site.mtu == {"R1": 1500 - xen.TUNNEL_OVERHEAD, "R2": 1500}
    present.discard(xen.lab_xen_files(inv.deploy_dir, "frr")[2])
    with pytest.raises(DependencyError, match=r"R1: .*dom0-initrd-frr\.img is missing: run `make hosts-setup TESTBED="):
        site.prepare("R1")
