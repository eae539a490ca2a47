"""migrate.xenhost: the dom0 command channel's framing and the streamed log, against a fake agent
speaking the protocol of routers/xenfs/vrmig-agent over two UNIX sockets (synthetic, no root)."""

import base64
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from migrate.xenhost import AgentDom0, Dom0Error, StreamLog

AGENT = Path(__file__).resolve().parents[2] / "routers" / "xenfs" / "vrmig-agent"


def _fake_agent(ctl_path, log_path, replies):
    """Serve one connection per socket: answer each request with the scripted reply."""
    ctl = socket.socket(socket.AF_UNIX)
    ctl.bind(str(ctl_path))
    ctl.listen(1)
    logs = socket.socket(socket.AF_UNIX)
    logs.bind(str(log_path))
    logs.listen(1)

    def serve():
        c, _ = ctl.accept()
        lg, _ = logs.accept()
        f = c.makefile("rwb")
        for line in f:
            rid, kind, *rest = line.decode().split()
            rc, out, streamed = replies(kind, rest)
            for s in streamed:
                lg.sendall(s.encode())
            f.write(f"noise before the reply\nVRMIG-RC {rid} {rc} {base64.b64encode(out.encode()).decode()}\n".encode())
            f.flush()

    threading.Thread(target=serve, daemon=True).start()


def test_run_and_stream(tmp_path):
    def replies(kind, rest):
        if kind == "run":
            cmd = base64.b64decode(rest[0]).decode()
            return (3, "", []) if cmd == "false" else (0, f"ran {cmd}\n", [])
        return 0, "started 42\n", [f"{rest[0]} hello\n{rest[0]} wor", f"ld\n{rest[0]} VRMIG-EXIT 0\n"]

    _fake_agent(tmp_path / "ctl", tmp_path / "log", replies)
    streams = StreamLog(tmp_path / "xen_log.jsonl")
    d = AgentDom0("R1", tmp_path / "ctl", tmp_path / "log", streams, lambda: True)
    try:
        assert d.run("xl list") == (0, "ran xl list\n")
        assert d.run("false") == (3, "")
        d.stream("send", "xl migrate")
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
