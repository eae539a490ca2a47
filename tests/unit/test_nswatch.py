"""The lab tests' namespace watch (tests/nswatch.py): each way into a namespace is tried for real
in a watched child Python process and must be caught; ordinary commands, and what an ssh command
runs on the remote host, must not be."""

import subprocess
import sys
import textwrap

import pytest

from tests import nswatch

ABSENT = "vrmig-nswatch-absent"  # no such namespace: every attempt fails harmlessly

TRIES = {
    "subprocess ip -n": f"import subprocess; subprocess.run(['ip', '-n', '{ABSENT}', 'link'], capture_output=True)",
    "subprocess ip netns exec": (
        f"import subprocess; subprocess.run(['ip', 'netns', 'exec', '{ABSENT}', 'true'], capture_output=True)"
    ),
    "shell in subprocess": (
        f"import subprocess; subprocess.run(['sh', '-c', 'ip netns exec {ABSENT} true 2>/dev/null'], check=False)"
    ),
    # into PID 1's network namespace, where this process already is (or refused without root)
    "subprocess nsenter": "import subprocess as s; s.run(['nsenter', '-t', '1', '-n', 'true'], capture_output=True)",
    "os.posix_spawn": (
        "import os, shutil; p = os.posix_spawn(shutil.which('nsenter'), ['nsenter', '-t', '1', '-n', 'true'], {}); "
        "os.waitpid(p, 0)"
    ),
    "os.system": "import os; os.system('nsenter -t 1 -n true 2>/dev/null')",
    # a network namespace of its own for `true`, gone when it exits (or refused without root)
    "os.spawnv": "import os, shutil; os.spawnv(os.P_WAIT, shutil.which('unshare'), ['unshare', '--net', 'true'])",
    "os.execv": "import os, shutil; os.execv(shutil.which('nsenter'), ['nsenter', '-t', '1', '-n', 'true'])",
    "ctypes setns": "import ctypes; ctypes.CDLL(None).setns",
    "ctypes unshare": "import ctypes, ctypes.util; ctypes.CDLL(ctypes.util.find_library('c')).unshare",
    "pyroute2 NetNS": f"import pyroute2\ntry:\n    pyroute2.NetNS('{ABSENT}', flags=0)\nexcept Exception:\n    pass",
    "pyroute2 IPRoute(netns=)": (
        f"import pyroute2\ntry:\n    pyroute2.IPRoute(netns='{ABSENT}', flags=0)\nexcept Exception:\n    pass"
    ),
}


def _watched(tmp_path, code: str) -> list[str]:
    log = tmp_path / "nswatch.log"
    subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=nswatch.child_env(log), capture_output=True, timeout=60,
        check=False,
    )  # fmt: skip
    return nswatch.read_log(log)


@pytest.mark.parametrize("way", sorted(TRIES))
def test_each_way_into_a_namespace_is_caught_in_a_watched_process(tmp_path, way):
    seen = _watched(tmp_path, TRIES[way])
    assert seen, f"{way}: not caught"


def test_a_watched_process_doing_nothing_of_the_kind_reports_nothing(tmp_path):
    code = """
        import ctypes, subprocess
        ctypes.CDLL(None).getpid
        subprocess.run(['ip', '-4', 'addr', 'show', 'dev', 'lo'], capture_output=True)
        subprocess.run(['sh', '-c', 'echo ipnetns; true'], capture_output=True)
        subprocess.run(['ssh', '-V'], capture_output=True)
        subprocess.run(['unshare', '--version'], capture_output=True)  # a query: enters nothing
        subprocess.run(['sh', '-c', 'nsenter --help >/dev/null'], capture_output=True)
    """
    assert _watched(tmp_path, code) == []


def test_the_watch_in_this_process_collects_only_inside_its_block():
    with nswatch.watching() as seen:
        subprocess.run(["sh", "-c", f"ip -n {ABSENT} link 2>/dev/null"], check=False)
    subprocess.run(["sh", "-c", f"ip -n {ABSENT} link 2>/dev/null"], check=False)
    assert len(seen) == 1 and "ip -n" in seen[0], seen


@pytest.mark.parametrize(
    ("argv", "caught"),
    [
        (["ip", "-n", "x", "link"], True),
        (["/usr/sbin/ip", "-4", "-netns", "x", "addr"], True),
        (["ip", "--netns=x", "link"], True),
        (["ip", "netns", "exec", "x", "true"], True),
        (["sh", "-c", "cd /; exec nsenter -t 1 -n true"], True),
        (["env", "A=1", "/usr/bin/unshare", "-n", "true"], True),
        (["ip", "netns", "list"], False),
        (["unshare", "--version"], False),
        (["sh", "-c", "nsenter -V; unshare -n true"], True),
        (["ip", "-4", "addr"], False),
        (["ip", "neigh", "show"], False),
        (["ipython", "-n"], False),
        (["ssh", "-p", "22", "-o", "BatchMode=yes", "root@h", "nsenter", "-t", "1", "-n", "true"], False),
        (["ssh", "-o", "ProxyCommand=ip netns exec x nc %h %p", "root@h", "true"], True),
        (["ssh", "root@h", "--", "ip", "netns", "exec", "x", "true"], False),
        # the lab's wrapper that ties ssh's life to the orchestrator's: the remote unshare is R1's
        (
            [
                "setpriv",
                "--pdeathsig",
                "KILL",
                "--",
                "sh",
                "-c",
                'exec "$@"',
                "vrmig-pdeath",
                "1",
                "ssh",
                "-o",
                "BatchMode=yes",
                "-p",
                "22",
                "-l",
                "root",
                "-T",
                "--",
                "198.19.128.18",
                "python3 -c x -- unshare --net",
            ],
            False,
        ),
        (["setpriv", "--pdeathsig", "KILL", "--", "sh", "-c", "nsenter -t 1 -n true", "x", "ssh", "h", "true"], True),
    ],
)
def test_command_lines(argv, caught):
    assert (nswatch.command_entry(argv) is not None) is caught, argv
