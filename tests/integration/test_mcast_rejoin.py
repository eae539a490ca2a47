"""migrate.drivers.criu.mcast.rejoin on a real process (root): a multicast group joined again on
the OSPF raw socket of a process below the given one, in its network namespace, and held by that
socket (gone when the process closes it)."""

import secrets
import subprocess
import sys

import pytest

from migrate.drivers.criu import mcast
from tests.integration.conftest import require_root_and

pytestmark = pytest.mark.integration

CHILD = """
import socket, sys
bound = socket.socket(socket.AF_INET, socket.SOCK_RAW, 89)
bound.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"d1")
free = socket.socket(socket.AF_INET, socket.SOCK_RAW, 89)
print("ready", flush=True)
sys.stdin.readline()
free.close()
print("closed", flush=True)
sys.stdin.readline()
"""


def _groups(pid: int) -> dict[str, set[str]]:
    return {d: g for d, g in mcast.parse_igmp(open(f"/proc/{pid}/net/igmp").read()).items() if g - {"224.0.0.1"}}


def test_rejoin_puts_the_groups_back_on_the_processs_own_sockets():
    require_root_and()
    ns = f"vmrj{secrets.token_hex(2)}-t"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    child = None
    try:
        for argv in (["link", "add", "d0", "type", "veth", "peer", "name", "d1"], ["link", "set", "d0", "up"],
                     ["link", "set", "d1", "up"]):  # fmt: skip
            subprocess.run(["ip", "-n", ns, *argv], check=True)
        # the sockets' holder is a child of the given process, as BIRD is of the container's init
        child = subprocess.Popen(["ip", "netns", "exec", ns, "sh", "-c", '"$0" -c "$1"; exit 0', sys.executable,
                                  CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "ready"
        assert _groups(child.pid) == {}
        res = mcast.rejoin(child.pid, [("224.0.0.5", "d0"), ("224.0.0.5", "d1"), ("224.0.0.5", "dX")])
        by_dev = {r["device"]: r for r in res}
        assert by_dev["d0"].get("joined") and by_dev["d1"].get("joined"), res
        assert "no device dX" in str(by_dev["dX"].get("error")), res
        # d1's group went to the socket bound to d1, d0's to the unbound one
        assert by_dev["d0"]["socket_inode"] != by_dev["d1"]["socket_inode"]
        assert _groups(child.pid) == {"d0": {"224.0.0.5", "224.0.0.1"}, "d1": {"224.0.0.5", "224.0.0.1"}}
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "closed"
        # the membership was the process's own socket's: closing it there dropped d0's group
        assert _groups(child.pid) == {"d1": {"224.0.0.5", "224.0.0.1"}}
    finally:
        if child is not None:
            child.kill()
            child.wait()
        subprocess.run(["ip", "netns", "del", ns], check=False)
