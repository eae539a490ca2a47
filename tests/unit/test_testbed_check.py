"""hosts-check without hosts: what a host's probe reports (synthetic facts, shaped like
``ip -j addr`` and migrate.testbed.probe_host) turned into its row and problem lines, the exit
status, the table, and the command line's bad input."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from migrate.cli.main import main
from migrate.labs.check import ERROR, WARNING, CheckResult, evaluate, format_table, unreachable_row
from migrate.testbed import probe_host
from migrate.testbed.hosts import AuthRefused, ClockSample, HostSpec, SshTarget
from migrate.testbed.inventory import embedded

T = SshTarget("198.19.128.2", 22, "root", Path("/k"), Path("/kh"))
END = HostSpec("A", "ssh", T, "L", "eth0", "198.18.1.10/24", "2001:2:0:1::10/64")
HV = embedded().host("R1")


def _link(name: str, *addrs: tuple[str, int], up: bool = True, carrier: bool = True, master: str | None = None):
    flags = ["BROADCAST", *(["UP"] if up else []), *(["LOWER_UP"] if carrier and up else [])]
    info = [{"family": "inet6" if ":" in a else "inet", "local": a, "prefixlen": n} for a, n in addrs]
    return {"ifname": name, "flags": flags, "addr_info": info, **({"master": master} if master else {})}


def _end_facts() -> dict[str, Any]:
    """Synthetic: a healthy end host."""
    return {
        "kernel": "6.1.0-test",
        "python": "3.11.2",
        "tools": {"ip": "/usr/sbin/ip", "python3": "/usr/bin/python3", "irtt": "/usr/bin/irtt", "virsh": None},
        "versions": {"irtt": "irtt version: 0.9.0", "python3": "Python 3.11.2"},
        "kvm": None,
        "helpers": {h: {"path": f"/var/lib/vrmig/bin/{h}", "ok": True} for h in ("vrgen", "vrsink", "vrsampler")},
        "links": [_link("lo", ("127.0.0.1", 8)), _link("eth0", ("198.18.1.10", 24), ("2001:2:0:1::10", 64))],
    }


def _hv_facts() -> dict[str, Any]:
    """Synthetic: a healthy hypervisor host (the embedded testbed's interface names)."""
    links = [_link("mig0", ("198.19.255.1", 30))]
    for s in "LR":
        links += [_link(f"br{s}"), _link(f"up{s}", master=f"br{s}"), _link(f"tap{s}", carrier=False, master=f"br{s}")]
    return {
        "kernel": "6.1.0-test",
        "python": "3.11.2",
        "tools": {"ip": "/usr/sbin/ip", "python3": "/usr/bin/python3", "qemu-system-x86_64": "/usr/bin/qemu"},
        "versions": {"qemu-system-x86_64": "QEMU emulator version 7.2.22 (Debian)"},
        "kvm": {"ok": True, "reason": "vmx/svm present and /dev/kvm creates VMs"},
        "helpers": {"vrsampler": {"path": "/var/lib/vrmig/bin/vrsampler", "ok": True}},
        "links": links,
    }


SYNCED = {"method": "chrony", "synchronised": True}
CLOCK = ClockSample(120_000, 40_000, 80_000, 20)


def _eval(spec: HostSpec, facts: dict[str, Any], sync=SYNCED, clock=CLOCK, **kw: Any):
    return evaluate(spec, facts, sync, clock, deploy_dir="/var/lib/vrmig", testbed_arg="lab.toml", **kw)


def test_healthy_hosts_have_no_problem() -> None:
    for spec, facts in ((END, _end_facts()), (HV, _hv_facts())):
        row, problems = _eval(spec, facts)
        assert problems == [], problems
        assert row.interfaces_ok and row.addresses_ok and row.reachable == "yes"


def _lines(spec: HostSpec, facts: dict[str, Any], **kw: Any) -> list[str]:
    return [p.line() for p in _eval(spec, facts, **kw)[1]]


def _broken(base: dict[str, Any], edit) -> dict[str, Any]:
    f = copy.deepcopy(base)
    edit(f)
    return f


@pytest.mark.parametrize(
    ("spec", "base", "edit", "want"),
    [
        (
            END,
            _end_facts,
            lambda f: f["tools"].update(irtt=None),
            "A: tool missing: irtt (apt-get install irtt)",
        ),
        (
            HV,
            _hv_facts,
            lambda f: f["tools"].update({"qemu-system-x86_64": None}),
            "R1: tool missing: qemu-system-x86_64",
        ),
        (
            END,
            _end_facts,
            lambda f: f["helpers"]["vrgen"].update(ok=False),
            "ERROR   A: helper missing: /var/lib/vrmig/bin/vrgen (run make hosts-setup TESTBED=lab.toml)",
        ),
        (END, _end_facts, lambda f: f["links"].pop(1), "ERROR   A: interface eth0 missing (hosts.A.interface"),
        (
            END,
            _end_facts,
            lambda f: f["links"][1]["flags"].remove("UP"),
            "A: interface eth0 is down (ip link set eth0 up)",
        ),
        (END, _end_facts, lambda f: f["links"][1]["flags"].remove("LOWER_UP"), "A: interface eth0 has no carrier"),
        (
            END,
            _end_facts,
            lambda f: f["links"][1]["addr_info"].pop(0),
            "A: address 198.18.1.10/24 not on eth0 (hosts.A.ipv4: ip addr add 198.18.1.10/24 dev eth0)",
        ),
        (
            END,
            _end_facts,
            lambda f: f["links"][1]["addr_info"][1].update(prefixlen=48),
            "A: address 2001:2:0:1::10 on eth0 has prefix /48, hosts.A.ipv6 says 2001:2:0:1::10/64",
        ),
        (HV, _hv_facts, lambda f: f["links"][2].pop("master"), "R1: interface upL is in no bridge, not in bridge brL"),
        (HV, _hv_facts, lambda f: f["links"][0]["addr_info"].clear(), "R1: address 198.19.255.1/30 not on mig0"),
        (HV, _hv_facts, lambda f: f.update(links=None, links_error="ip not installed"), "R1: cannot read interfaces"),
    ],
)
def test_each_problem_has_one_error_line(spec: HostSpec, base, edit, want: str) -> None:
    lines = _lines(spec, _broken(base(), edit))
    assert any(want in line and line.startswith("ERROR") for line in lines), lines


def test_missing_helpers_are_one_line() -> None:
    f = _broken(_end_facts(), lambda f: [h.update(ok=False) for h in f["helpers"].values()])
    assert _lines(END, f) == [
        "ERROR   A: helper missing: /var/lib/vrmig/bin/vrgen, vrsink, vrsampler (run make hosts-setup TESTBED=lab.toml)"
    ]


def test_tap_without_carrier_is_fine_but_a_down_tap_is_not() -> None:
    assert _lines(HV, _hv_facts()) == []
    lines = _lines(HV, _broken(_hv_facts(), lambda f: f["links"][3]["flags"].remove("UP")))
    assert lines == ["ERROR   R1: interface tapL is down (ip link set tapL up)"]


def test_no_kvm_is_a_warning_that_says_figures_differ() -> None:
    f = _broken(_hv_facts(), lambda f: f.update(kvm={"ok": False, "reason": "cannot open /dev/kvm: No such file"}))
    row, problems = _eval(HV, f)
    assert [p.severity for p in problems] == [WARNING] and row.kvm is False
    assert "TCG" in problems[0].message and "differ from KVM" in problems[0].message


def test_clock_offset_threshold_and_bound() -> None:
    far = ClockSample(-25_000_000, 100_000, 200_000, 20)
    lines = _lines(END, _end_facts(), clock=far)
    assert lines == [
        "ERROR   A: clock offset -25.000 ± 0.100 ms exceeds 10 ms (synchronise the hosts: chrony or PTP; "
        "--max-offset-ms sets the threshold)"
    ]
    assert _lines(END, _end_facts(), clock=far, max_offset_ms=30) == []
    vague = ClockSample(1_000_000, 12_000_000, 24_000_000, 20)
    assert "cannot be bounded below 10 ms" in _lines(END, _end_facts(), clock=vague)[0]


def test_unsynchronised_clock_within_threshold_is_a_warning() -> None:
    sync = {"method": "none", "synchronised": False, "reason": "no chrony, ptp4l or systemd-timesyncd running"}
    _, problems = _eval(END, _end_facts(), sync=sync)
    assert [(p.severity, p.message.split(";")[0]) for p in problems] == [
        (WARNING, "clock not synchronised (no chrony, ptp4l or systemd-timesyncd running)")
    ]
    far = ClockSample(50_000_000, 1_000, 2_000, 20)
    sev = [p.severity for p in _eval(END, _end_facts(), sync=sync, clock=far)[1]]
    assert sev == [ERROR, WARNING]


def test_exit_code_table_and_json() -> None:
    rows, problems = [], []
    for spec, facts in ((END, _end_facts()), (HV, _hv_facts())):
        r, p = _eval(spec, facts)
        rows.append(r)
        problems += p
    r, p = unreachable_row(
        HostSpec("B", "ssh", T), AuthRefused("B (root@198.19.128.2:22): authentication refused for key /k"), "root@x"
    )
    ok = CheckResult("lab.toml", rows, problems, 10.0)
    assert ok.exit_code == 0
    table = format_table(ok).splitlines()
    assert table[0].split()[:3] == ["role", "address", "reachable"]
    assert [line.split()[0] for line in table[1:3]] == ["A", "R1"]
    assert "7.2.22" in table[2] and "+0.120 ± 0.040 ms" in table[1]
    assert table[-1] == "hosts-check: OK: 2 hosts, 0 error(s), 0 warning(s)"
    bad = CheckResult("lab.toml", [*rows, r], [*problems, *p], 10.0)
    assert bad.exit_code == 2 and r.reachable == "auth refused"
    assert "ERROR   B: root@x: authentication refused for key /k" in format_table(bad)
    doc = bad.as_dict()
    assert doc["ok"] is False and doc["exit_code"] == 2 and len(doc["hosts"]) == 3
    assert doc["hosts"][0]["clock"]["offset_ns"] == 120_000


def test_probe_reports_this_machine() -> None:
    f = probe_host.facts({"tools": ["ip", "python3", "no-such-tool-xyz"], "deploy_dir": "/nonexistent", "kvm": True,
                          "helpers": ["vrgen"]})  # fmt: skip
    assert f["tools"]["no-such-tool-xyz"] is None and f["tools"]["ip"]
    assert f["helpers"]["vrgen"] == {"path": "/nonexistent/bin/vrgen", "ok": False}
    assert isinstance(f["kvm"]["ok"], bool) and f["kvm"]["reason"]
    assert any(link["ifname"] == "lo" for link in f["links"])
    s = probe_host.sync()
    assert s["method"] in ("none", "chrony", "ptp4l", "timesyncd") and "kernel" in s


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hosts-check", "--testbed", str(tmp_path / "absent.toml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such inventory" in err[0]
    assert main(["hosts-check", "--testbed", "x.toml", "--max-offset-ms", "0"]) == 2
    assert "MAX_OFFSET_MS" in capsys.readouterr().err
