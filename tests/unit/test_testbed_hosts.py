"""The SSH transport without hosts: argv building (parameters survive a POSIX shell as one
argument each), login-failure classification, and clock arithmetic on synthetic exchanges."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from migrate.testbed.hosts import (
    AuthRefused,
    ConfigError,
    HostKeyMismatch,
    HostKeyUnknown,
    HostUnreachable,
    LocalHost,
    SshHost,
    classify_login_failure,
    estimate_offset,
    master_argv,
    session_argv,
)
from migrate.testbed.inventory import HostSpec, SshTarget, embedded

T = SshTarget("198.19.128.2", 2222, "root", Path("/etc/vrmig/k"), Path("/etc/vrmig/kh"))
NASTY = ["a b", "c'd", 'e"f', "$HOME", "`id`", "$(id)", "g;h", "*", "", "-n", "tab\there", "new\nline", "\\x", "~"]


def test_session_argv_is_options_then_host_then_one_shlex_joined_command() -> None:
    argv = session_argv(T, Path("/tmp/c/A.ctl"), ["printf", "%s\\0", *NASTY])
    assert argv[0] == "ssh"
    i = argv.index("--")
    assert argv[i + 1] == T.host and len(argv) == i + 3
    assert argv[-1] == shlex.join(["printf", "%s\\0", *NASTY])
    opts = " ".join(argv[:i])
    for o in (
        "BatchMode=yes",
        "StrictHostKeyChecking=yes",
        "UserKnownHostsFile=/etc/vrmig/kh",
        "IdentitiesOnly=yes",
        "ControlPath=/tmp/c/A.ctl",
        "ControlMaster=no",
        "ProxyCommand=false",
        "ConnectTimeout=",
    ):
        assert o in opts
    assert argv[argv.index("-i") + 1] == "/etc/vrmig/k" and argv[argv.index("-p") + 1] == "2222"


def test_remote_command_reaches_a_posix_shell_as_the_same_arguments() -> None:
    # what sshd does with the command string: hand it to the user's shell as `sh -c <string>`
    command = session_argv(T, Path("/c"), ["printf", "%s\\0", *NASTY])[-1]
    out = subprocess.run(["sh", "-c", command], capture_output=True, check=True).stdout
    assert out.split(b"\0")[:-1] == [x.encode() for x in NASTY]


def test_empty_remote_argv_is_refused() -> None:
    with pytest.raises(ValueError):
        session_argv(T, Path("/c"), [])


def test_master_is_a_pdeathsig_child_in_the_foreground() -> None:
    argv = master_argv(T, Path("/c/A.ctl"))
    assert argv[:4] == ["setpriv", "--pdeathsig", "KILL", "--"]
    assert "-N" in argv and "-f" not in argv and "ControlMaster=yes" in argv and "ControlPersist=no" in argv
    assert argv[-2:] == ["--", T.host]


def test_control_dir_too_long_for_a_unix_socket_is_refused() -> None:
    spec = HostSpec("A", "ssh", T)
    with pytest.raises(ConfigError, match="too long for a unix socket"):
        SshHost(spec, Path("/" + "d" * 100))


# stderr of ssh as captured from OpenSSH 9.2 against the integration tests' sshd lab (paths
# replaced; "timeout" is OpenSSH's wording for an unanswered connection, not captured here)
CAPTURED = {
    "auth": "root@198.19.170.2: Permission denied (publickey).\n",
    "refused": "ssh: connect to host 198.19.170.2 port 2222: Connection refused\n",
    "unknown": (
        "No ED25519 host key is known for 198.19.170.2 and you have requested strict checking.\n"
        "Host key verification failed.\n"
    ),
    "mismatch": (
        "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n"
        "@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n"
        "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n"
        "IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!\n"
        "Someone could be eavesdropping on you right now (man-in-the-middle attack)!\n"
        "It is also possible that a host key has just been changed.\n"
        "The fingerprint for the ED25519 key sent by the remote host is\n"
        "SHA256:3mGr0zAXJjS8AEjJKw+CO5nolqR/g6Qy0sNkGVRj8qI.\n"
        "Please contact your system administrator.\n"
        "Add correct host key in /etc/vrmig/kh to get rid of this message.\n"
        "Offending ED25519 key in /etc/vrmig/kh:1\n"
        '  remove with:\n  ssh-keygen -f "/etc/vrmig/kh" -R "198.19.170.2"\n'
        "Host key for 198.19.170.2 has changed and you have requested strict checking.\n"
        "Host key verification failed.\n"
    ),
    "timeout": "ssh: connect to host 198.19.99.2 port 22: Connection timed out\n",
}


@pytest.mark.parametrize(
    ("case", "exc", "words"),
    [
        ("auth", AuthRefused, "authentication refused for key /etc/vrmig/k"),
        ("refused", HostUnreachable, "unreachable: ssh: connect to host 198.19.170.2 port 2222: Connection refused"),
        ("unknown", HostKeyUnknown, "host key unknown: /etc/vrmig/kh has no key"),
        ("mismatch", HostKeyMismatch, "host key does not match /etc/vrmig/kh"),
        ("timeout", HostUnreachable, "Connection timed out"),
    ],
)
def test_login_failures_are_told_apart(case: str, exc: type, words: str) -> None:
    err = classify_login_failure("A", T, CAPTURED[case])
    assert type(err) is exc
    assert str(err).startswith("A (root@198.19.128.2:2222): ") and words in str(err)
    assert err.exit_code == 2 and "\n" not in str(err)


def test_offset_from_synthetic_exchanges_takes_the_smallest_round_trip() -> None:
    # synthetic: a remote clock 5 ms ahead; the second exchange has the smallest round trip
    ex = [(1_000, 5_000_000 + 1_900, 3_000), (10_000, 5_000_000 + 10_400, 10_800), (20_000, 5_000_000 + 25_000, 30_000)]
    c = estimate_offset(ex)
    assert c.rtt_min_ns == 800 and c.uncertainty_ns == 400 and c.n == 3
    assert c.offset_ns == 5_000_000 + 10_400 - 10_400  # remote − midpoint(10_000, 10_800)
    assert abs(c.offset_ns - 5_000_000) <= c.uncertainty_ns


@pytest.mark.parametrize("where", [0.0, 0.3, 1.0])
def test_offset_bound_holds_wherever_the_remote_read_its_clock(where: float) -> None:
    # synthetic: true offset −7 ns, odd round trip (rounding must not break the bound)
    s, r, true = 1_000_001, 1_000_008, -7
    remote = s + round(where * (r - s)) + true
    c = estimate_offset([(s, remote, r)])
    assert abs(c.offset_ns - true) <= c.uncertainty_ns


def test_offset_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        estimate_offset([])
    with pytest.raises(ValueError):
        estimate_offset([(10, 5, 9)])


def test_local_host_has_the_orchestrator_clock_and_runs_argv_without_a_shell(tmp_path: Path) -> None:
    h = LocalHost(embedded().host("A"))
    c = h.clock()
    assert (c.offset_ns, c.uncertainty_ns, c.n) == (0, 0, 0) and "own clock" in c.method
    assert h.run(["printf", "%s\\0", *NASTY]).stdout.split(b"\0")[:-1] == [x.encode() for x in NASTY]
    assert LocalHost(embedded().host("A"), netns="ns1").ssh_argv(["true"]) == ["ip", "netns", "exec", "ns1", "true"]
    h.put(b"\x00\xff", str(tmp_path / "f"), mode=0o600)
    assert (tmp_path / "f").stat().st_mode & 0o777 == 0o600
    h.fetch(str(tmp_path / "f"), tmp_path / "g")
    assert (tmp_path / "g").read_bytes() == b"\x00\xff"
    h.forward_unix(tmp_path / "l.sock", str(tmp_path / "r.sock"))
    assert (tmp_path / "l.sock").is_symlink()
    h.close()
    assert not (tmp_path / "l.sock").exists()
