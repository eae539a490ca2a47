"""Migrations on an emulated lab reached only over SSH (``TESTBED=``): lab-up, hosts-setup,
hosts-check, then real KVM/QMP migrations (and baselines) whose every helper ran on the lab's
hosts; the orchestrator never enters a namespace; a SIGKILLed orchestrator leaves no process on any host,
and clean-testbed TESTBED= removes the files it left."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from migrate.core.stack import DEFAULT_QEMU
from migrate.testbed.inventory import ROLES, SshTarget, load
from migrate.testbed.topology import ANNOUNCED
from tests import nswatch
from tests.integration._runs import nested_xen_save_fault
from tests.integration.conftest import (
    REPO,
    assert_cut_rows_meet_their_targets,
    report_retry,
    require_root_and,
)

PY = sys.executable
GRACE_S = 10.0


def _require() -> None:
    require_root_and("ssh", "ansible-playbook", "qemu-system-x86_64", "irtt")
    from migrate.labs import emulated as labmod

    if not os.access(labmod.SSHD, os.X_OK):
        pytest.fail(f"{labmod.SSHD} not installed: run `make apt` (openssh-server)", pytrace=False)


#: the namespace watch's log of the test running now (``_watched``): every ``python -m migrate``
#: a test starts is watched into it from its start (tests/nswatch.py)
_WATCH_LOG: list[Path] = []


def _env(watch: Path | None = None) -> dict[str, str]:
    """The environment of a ``python -m migrate`` the tests start: this checkout, no progress bar,
    watched for namespace entries into ``watch`` (default: the running test's log; none outside
    a test, as for the lab fixture's lab-up and lab-down, which build the emulated hosts)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "VRMIG_PROGRESS": "0"}
    log = watch or (_WATCH_LOG[-1] if _WATCH_LOG else None)
    return env if log is None else nswatch.child_env(log, env)


def _cli(*args: str, timeout: float = 600, watch: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "migrate", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout, env=_env(watch)
    )


@pytest.fixture(autouse=True)
def _watched(tmp_path_factory) -> Iterator[None]:
    """Every test here, and every orchestrator it starts, under the namespace watch: on a lab
    nothing may enter a namespace of this machine (each entry fails the test, named)."""
    log = tmp_path_factory.mktemp("nswatch") / "entries.log"
    _WATCH_LOG.append(log)
    try:
        with nswatch.watching() as seen:
            yield
    finally:
        _WATCH_LOG.remove(log)
    entries = [*seen, *nswatch.read_log(log)]
    assert not entries, f"namespace entered on a lab: {entries}"


@pytest.fixture(scope="module")
def lab(shared_lab) -> Path:
    """The session's emulated lab, prepared by hosts-setup (tests/integration/conftest.py
    :class:`SharedLab`; test_hosts_setup judges that run, here it must only have succeeded)."""
    _require()
    prepared = shared_lab.get()
    assert prepared.setup.returncode == 0, prepared.setup.stdout + prepared.setup.stderr
    assert prepared.nswatch_entries == [], f"hosts-setup entered a namespace: {prepared.nswatch_entries}"
    return prepared.inventory


def _without_xen_hosts(lab: Path, tmp_path: Path) -> Path:
    """A copy of the lab's inventory without its ``hosts.R*.xen`` tables: HV=xen then runs
    nested Xen hosts on R1 and R2 (the paths in it are absolute)."""
    text = re.sub(r"\n\[hosts\.R[12]\.xen\]\n(?:[^\[\n][^\n]*\n)*", "\n", lab.read_text())
    out = tmp_path / "lab-nested.toml"
    out.write_text(text)
    assert load(out).host("R1").xen is None
    return out


def _ssh_to(t: SshTarget, *argv: str) -> subprocess.CompletedProcess[str]:
    """``argv`` run over SSH at the inventory's SSH target ``t`` (30 s at most), its output captured."""
    return subprocess.run(
        ["ssh", "-i", str(t.key), "-o", f"UserKnownHostsFile={t.known_hosts}", "-o", "BatchMode=yes",
         "-o", "StrictHostKeyChecking=yes", "-p", str(t.port), f"{t.user}@{t.host}", "--", *argv],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip


def _dom0(inv, role: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return _ssh_to(inv.host(role).xen.ssh, *argv)


def _dom0_leftovers(inv) -> dict[str, list[str]]:
    """Per Xen host: router domains, guard pid files and suite commands (socat, xl migrate,
    the console follower) still in its dom0."""
    from migrate.drivers.xen.dom0 import GUARD_DIR
    from migrate.drivers.xen.xl import router_domains

    out = {}
    for r in ("R1", "R2"):
        left = [f"domain {d}" for d in router_domains(_dom0(inv, r, "xl", "list").stdout)]
        left += [f"pidfile {f}" for f in _dom0(inv, r, "ls", GUARD_DIR).stdout.split()]
        ps = _dom0(inv, r, "ps", "-o", "pid,args").stdout.splitlines()
        marks = ("socat", "xl -vvv", "tail -n +1 -F", "reap()")
        left += [ln.strip() for ln in ps if any(m in ln for m in marks)]
        out[r] = left
    return out


def _ssh(inv, role: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return _ssh_to(inv.host(role).ssh, *argv)


def _runs_on_hosts(inv) -> dict[str, list[str]]:
    """What run directories each host still holds."""
    out = {}
    for r in ROLES:
        res = _ssh(inv, r, "ls", "-A", f"{inv.deploy_dir}/runs")
        out[r] = res.stdout.split()
    return out


def _processes_with(text: str) -> list[str]:
    """Command lines on this machine (every lab host shares its PID space) containing ``text``."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd:
            found.append(f"{d.name} {cmd[:120]}")
    return found


def _processes_after_grace(text: str) -> list[str]:
    """:func:`_processes_with` ``text`` once they have had ``GRACE_S`` to end (polled every 0.1 s)."""
    deadline = time.monotonic() + GRACE_S
    while _processes_with(text) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _processes_with(text)


def _rooted_in(text: str) -> list[str]:
    """Processes on this machine whose root directory's path contains ``text`` (chrooted there)."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError):
                if text in os.readlink(d / "root"):
                    found.append(d.name)
    return found


def _start_run(lab: Path, results: Path, *args: str) -> subprocess.Popen[bytes]:
    """``python -m migrate run <args>`` on ``lab`` in the background (to be signalled), its
    output discarded."""
    return subprocess.Popen(
        [PY, "-m", "migrate", "run", *args, "--testbed", str(lab), "--results", str(results)],
        cwd=REPO, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def _run(lab: Path, results: Path, mode: str, driver: str = "qmp", *extra: str) -> tuple[Path, dict, dict]:
    """One lab run of the default stack hosts-setup deployed (DRIVER=libvirt: run by the hosts'
    own libvirtd through the <emulator> script deployed beside it), never retried."""
    res = _cli(
        "run", "--hv", "kvm", "--driver", driver, "--mode", mode, "--rate", "10M", "--duration", "12",
        "--migrate-at", "4", "--testbed", str(lab), "--results", str(results / "run"), *extra,
    )  # fmt: skip
    assert res.stdout.strip(), res.stderr[-2000:]
    run_dir = Path(res.stdout.strip().splitlines()[-1])
    meta = json.loads((run_dir / "meta.json").read_text())
    return run_dir, meta, json.loads((run_dir / "summary.json").read_text())


def test_hosts_check_is_clean_after_hosts_setup(lab):
    res = _cli("hosts-check", "--testbed", str(lab), timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    rows = [ln for ln in res.stdout.splitlines() if ln.split()[:1] and ln.split()[0] in ROLES]
    assert sorted(r.split()[0] for r in rows) == sorted(ROLES)


def _domains(inv, role: str) -> list[str]:
    """The domains (running or defined) of ``role``'s libvirtd, through its qemu+ssh URI."""
    from migrate.labs.emulated import virsh

    res = virsh(inv.host(role).libvirt_uri, "list", "--all", "--name")
    assert res.returncode == 0, res.stderr
    return res.stdout.split()


def test_hosts_check_fails_when_r1_cannot_reach_r2s_libvirt(lab, tmp_path):
    """R2's libvirt_peer_uri on a port nothing listens on: the source daemon could not migrate."""
    text = lab.read_text()
    good = load(lab).host("R2").libvirt_peer_uri
    bad_uri = good.replace("/system", ":1/system")
    bad = tmp_path / "lab.toml"
    bad.write_text(text.replace(f'libvirt_peer_uri = "{good}"', f'libvirt_peer_uri = "{bad_uri}"'))
    assert bad.read_text() != text
    res = _cli("hosts-check", "--testbed", str(bad), timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"R1 cannot reach R2's libvirt at its libvirt_peer_uri {bad_uri}" in res.stdout + res.stderr


#: pre-copy by QMP, stop-and-copy by both drivers (libvirt's pre-copy on a lab adds no check of
#: its own: its hosts' libvirtd, its release's and a SIGKILL of it are tested below)
@pytest.mark.parametrize(("mode", "driver"), [("precopy", "qmp"), ("stopcopy", "qmp"), ("stopcopy", "libvirt")])
def test_lab_migration_runs_every_helper_on_the_hosts(lab, tmp_path, mode, driver):
    inv = load(lab)
    # one of the three also runs the other traffic: UDP flows both ways in IMIX and two TCP flows
    mixed = mode == "stopcopy" and driver == "qmp"
    extra = ("--traffic", LAB_TRAFFIC) if mixed else ()
    run_dir, meta, summary = _run(lab, tmp_path, mode, driver, *extra)
    assert meta["status"] == "completed", meta.get("failure")
    assert meta["scenario"]["driver"] == driver
    if mixed:
        _other_traffic_ran_on_the_hosts(inv, meta, summary)
    # the default stack's QEMU ran under either driver, from the copy hosts-setup deployed
    qemu = meta["stack"]["qemu"]
    assert qemu["spec"] == DEFAULT_QEMU and qemu["deployed"] and qemu["version"].startswith("QEMU emulator version 10.")
    assert meta["hypervisor"]["qemu_by_host"] == {"R1": qemu["version"], "R2": qemu["version"]}
    if driver == "libvirt":  # by the hosts' own libvirtd, whose version is recorded as theirs
        assert meta["stack"]["libvirt"]["spec"] == "system" and meta["stack"]["libvirt"]["version"]
        assert meta["hypervisor"]["libvirt"]["domain"]["emulator"] == qemu["emulator"]
        running = meta["hypervisor"]["libvirt"]["qemu_effective"]["src"]["version"]["qemu"]
        assert running["major"] == 10, running  # the QEMU the hosts' libvirtd started, asked by QMP
    assert meta["testbed"]["inventory"] == str(lab) and meta["testbed"]["hosts"]["R1"]["transport"] == "ssh"
    # the helpers ran on their hosts, from the deployed copies
    argv = meta["instruments"]["argv"]
    assert any(f"{inv.deploy_dir}/bin/vrsink" in a for a in argv["sink"]), argv["sink"]
    assert sorted(k for k in argv if k.startswith("sampler-")) == sorted(f"sampler-{r}" for r in ROLES)
    # every host's clock measured at start and end; this machine's hosts share one clock, so each
    # offset is within its own uncertainty of zero
    for r in ROLES:
        c = meta["clock"]["hosts"][r]
        for when in ("start", "end"):
            assert abs(c[when]["offset_ns"]) <= c[when]["uncertainty_ns"], (r, c)
        assert "method" in c["sync"]
    assert set(meta["lab"]["fetched"]) >= {"irtt.json.gz", *(f"counters-{r}.tsv" for r in ROLES)}
    assert all(not str(v).startswith("absent") for v in meta["lab"]["fetched"].values()), meta["lab"]
    # the figures come from the merged counters, B's packets and QEMU's own record
    pkt = summary["downtime_s"]["packets"]
    assert pkt is not None and 0 < pkt < 5, summary["downtime_s"]
    assert summary["volume_bytes"]["link"] is not None and summary["volume_bytes"]["link"] > 10e6
    assert summary["duration_s"]["hypervisor"] > 0
    assert "merged per-host samplers" in (run_dir / "counters.tsv").read_text()[:400]
    # the sink's, the generator's and irtt's timestamps were put on the orchestrator's clock
    assert summary["details"]["clock"]["corrected"] == {"sink": "B+A", "gen": "A", "irtt": "C"}
    # the forwarding proof compared the completion time with A's send stamps on A's clock
    offs = meta["after_migration"]["sender_offsets_ns"]
    assert set(offs) == {"A", "C"} and abs(offs["A"]) <= meta["clock"]["hosts"]["A"]["start"]["uncertainty_ns"]
    # nothing left on any host
    assert _runs_on_hosts(inv) == {r: [] for r in ROLES}
    assert _processes_with(f"/runs/{meta['testbed']['prefix']}") == []
    if driver == "libvirt":  # the lab's own libvirtds: QEMU ran under them, and the domain is gone
        assert (run_dir / "libvirt_jobstats.jsonl").stat().st_size > 0
        assert _domains(inv, "R1") == [] and _domains(inv, "R2") == []


LAB_TRAFFIC = "udp:2,dir=both,sizes=imix+tcp:2,rate=10M"


def _other_traffic_ran_on_the_hosts(inv, meta, summary) -> None:
    """TRAFFIC=udp:2,dir=both,sizes=imix+tcp:2 on the lab: the B -> A generator on B and its sink on
    A, vrtcp's sender on A and receiver on B, from the deployed copies; their records fetched and
    analysed like the embedded ones."""
    argv = meta["instruments"]["argv"]
    assert any(f"{inv.deploy_dir}/bin/vrgen" in a for a in argv["gen-BA"]), argv["gen-BA"]
    assert any(f"{inv.deploy_dir}/bin/vrtcp" in a for a in argv["tcp-send"]), argv["tcp-send"]
    u, tcp = summary["udp"], summary["tcp"]
    assert u["ba"]["downtime_s"] is not None and 0 < u["ba"]["downtime_s"] < 5, u["ba"]
    assert u["ab"]["flows"]["flows"] == 2 and u["ba"]["flows"]["unknown_sources"] == 0, u
    assert tcp["goodput_outage_ms"] is not None and tcp["capture_agrees"] is True, tcp


def test_a_profile_router_on_the_lab_is_placed_on_each_host_and_its_disk_follows_it(lab, tmp_path):
    """ROUTER=profiles/debian-bird-console.toml on the lab: hosts-setup deployed nothing of it;
    the run places the image on R1 and R2 by content hash, boots R1 from an overlay there, types
    the configuration on the console forwarded over SSH, and mirrors the overlay's writes to R2's
    over NBD on the migration link while the memory moves (the hosts share no storage)."""
    inv = load(lab)
    profile = REPO / "profiles" / "debian-bird-console.toml"
    run_dir, meta, summary = _run(lab, tmp_path, "precopy", "qmp", "--router", str(profile), "--mem", "256")
    assert meta["status"] == "completed", meta.get("failure")
    actions = [json.loads(x) for x in (run_dir / "actions.jsonl").read_text().splitlines()]
    placed = {a["host"] for a in actions if a["action"] == "boot-media-placed"}
    assert placed == {"R1", "R2"}, placed
    typed = next(a for a in actions if a["action"] == "router-console-config")
    assert typed["lines"] > 20
    mirror = meta["hypervisor"]["storage_mirror"]
    assert mirror["bytes"] > 0 and mirror["bytes"] == mirror["len"], mirror  # all of the top layer, in step
    names = [a["action"] for a in actions]
    assert names.index("storage-mirror-ready") < names.index("migrate") < names.index("storage-mirror-done")
    assert meta["after_migration"]["forwarding"] is True
    pkt = summary["downtime_s"]["packets"]
    assert pkt is not None and 0 < pkt < 5, summary["downtime_s"]
    # the image stays on the hosts for the next run (by content hash); the run's overlays do not
    image = Path(meta["hypervisor"]["guest_image"]["disk"]).expanduser()
    for r in ("R1", "R2"):
        listing = _ssh_to(inv.host(r).ssh, "ls", f"{inv.deploy_dir}/images/by-sha256")
        assert listing.returncode == 0 and image.name in listing.stdout, (r, listing.stdout, listing.stderr)
    assert _runs_on_hosts(inv) == {r: [] for r in ROLES}


def _libvirtd_pids() -> list[int]:
    """The PIDs of every libvirtd on this machine (the lab's hosts share its PID space)."""
    out = []
    for d in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if d.name.isdigit() and (d / "comm").read_text().strip() == "libvirtd":
                out.append(int(d.name))
    return sorted(out)


def test_lab_libvirt_release_runs_the_runs_own_daemons_beside_the_hosts_own(lab, tmp_path):
    """LIBVIRT= the release hosts-setup deployed: the run starts its own libvirtd of it on R1 and
    R2 (its own TLS port, the hosts' certificates) and stops them; the hosts' own daemons are
    neither used nor touched."""
    from migrate.core.stack import DEFAULT_LIBVIRT
    from migrate.drivers.libvirt.daemon import RUN_TLS_PORT

    inv = load(lab)
    before = _libvirtd_pids()
    run_dir, meta, summary = _run(lab, tmp_path, "precopy", "libvirt", "--libvirt", DEFAULT_LIBVIRT)
    assert meta["status"] == "completed", meta.get("failure")
    lv = meta["stack"]["libvirt"]
    assert lv["spec"] == DEFAULT_LIBVIRT and lv["deployed"] and lv["source"] != "system", lv
    assert lv["argv"][0].startswith(f"{inv.deploy_dir}/libvirt/{DEFAULT_LIBVIRT}/root/"), lv["argv"]
    want = f"libvirtd (libvirt) {lv['release']}"
    assert lv["version_by_host"] == {"R1": want, "R2": want}
    hosts = meta["hypervisor"]["libvirt"]["hosts"]
    major, minor = (int(x) for x in lv["release"].split(".")[:2])
    for r in ("R1", "R2"):  # the daemons that answered were the release's, reached by their peer on its port
        assert hosts[r]["daemon_version"] // 1000 == major * 1000 + minor, hosts[r]
        assert f":{RUN_TLS_PORT}/system" in hosts[r]["peer_uri"] and hosts[r]["uri"].startswith("qemu+unix://")
    running = meta["hypervisor"]["libvirt"]["qemu_effective"]["src"]["version"]["qemu"]
    assert running["major"] == 10, running
    assert summary["downtime_s"]["packets"] is not None and summary["duration_s"]["hypervisor"] > 0
    assert "vrmig-guard: exit=0" in (run_dir / "libvirtd-R1.stderr").read_text()
    # nothing of the run left; the hosts' own daemons are the ones that ran before, with no domain
    assert _runs_on_hosts(inv) == {r: [] for r in ROLES}
    assert _processes_with(f"/runs/{meta['testbed']['prefix']}") == []
    assert _libvirtd_pids() == before
    assert _domains(inv, "R1") == [] and _domains(inv, "R2") == []
    # what the daemons probed stays on each host for the release's next daemons (not the run's)
    for r in ("R1", "R2"):
        cached = _ssh(inv, r, "ls", f"{inv.deploy_dir}/cache/libvirt-{lv['release']}/qemu-capabilities")
        assert cached.returncode == 0 and any(n.endswith(".xml") for n in cached.stdout.split()), (r, cached)


def test_lab_sweep_runs_on_the_lab_and_records_it(lab, tmp_path):
    res = _cli(
        "sweep", "--hv", "criu", "--router", "bird", "--mode", "stopcopy", "--rates", "10M", "--reps", "1",
        "--seed", "1", "--duration", "6", "--migrate-at", "2", "--testbed", str(lab), "--results", str(tmp_path),
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-1500:] + res.stderr[-1500:]
    sweep_dir = Path(res.stdout.strip().splitlines()[-1])
    meta = json.loads((sweep_dir / "meta.json").read_text())
    assert meta["testbed"]["inventory"] == str(lab.resolve())
    runs = sorted((sweep_dir / "runs").glob("*/meta.json"))
    assert len(runs) == 1
    for m in map(lambda p: json.loads(p.read_text()), runs):
        assert m["status"] == "completed", m.get("failure")
        assert m["testbed"]["inventory"] == str(lab) and m["testbed"]["hosts"]["B"]["transport"] == "ssh"
    # a RESUME with another testbed is refused in one line, nothing run
    other = tmp_path / "other.toml"
    other.write_bytes(lab.read_bytes())
    res = _cli("sweep", "--resume", str(sweep_dir), "--testbed", str(other), "--results", str(tmp_path))
    assert res.returncode == 2 and "drop TESTBED=" in res.stderr, res.stderr


def test_orchestrator_never_enters_a_namespace(lab, tmp_path):
    """In-process run with every way into a namespace watched (tests/nswatch.py)."""
    from migrate.experiment.run import run
    from migrate.model.scenario import Scenario

    with nswatch.watching() as seen:
        run_dir = run(Scenario(hv="kvm", rate_bps=10_000_000, duration_s=10, migrate_at_s=4), tmp_path, testbed=lab)
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "completed", meta.get("failure")
    assert seen == [], seen


#: HV=xen on the lab: xl migrate copies every page of the domU at nested-link speed, so the
#: tests run BIRD, whose image boots in the least memory (112 MiB; FRR 10.3's needs 144)
XEN_ROUTER, XEN_MEM = "bird", 112


def _xen_run(testbed: Path, tmp_path: Path, mem: int = XEN_MEM) -> tuple[Path, dict, dict]:
    """One HV=xen run of BIRD on ``testbed`` (1 Mbit/s, migration at 3 s), checked for what both lab
    forms of HV=xen share: completed without entering a namespace, the router moved, the
    dom0's migration NIC sent at least the guest's memory and the link at least that, a packet
    and an xl downtime, forwarding after it.  Returns (run directory, meta, summary)."""
    from migrate.experiment.run import run
    from migrate.model.scenario import Scenario

    s = Scenario(hv="xen", router=XEN_ROUTER, rate_bps=1_000_000, mem_mib=mem, duration_s=10, migrate_at_s=3,
                 after_s=3, migrate_timeout_s=900, boot_timeout_s=300)  # fmt: skip
    for attempt in (1, 2):
        with nswatch.watching() as seen:
            run_dir = run(s, tmp_path / "run", testbed=testbed)
        meta = json.loads((run_dir / "meta.json").read_text())
        cause = nested_xen_save_fault(meta)
        if cause is None or attempt == 2:
            break
        report_retry(cause, run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert meta["status"] == "completed", meta.get("failure")
    assert seen == [], seen
    assert (meta["verify"]["src_status"], meta["verify"]["dst_status"]) == ("absent", "running"), meta["verify"]
    dom0_bytes = json.loads((run_dir / "xen.json").read_text())["dom0_mig_tx_bytes"]
    assert dom0_bytes >= mem * 2**20
    assert summary["volume_bytes"]["link"] >= dom0_bytes, (summary["volume_bytes"], dom0_bytes)
    pkt = summary["downtime_s"]["packets"]
    assert pkt is not None and pkt > 0 and summary["downtime_s"]["hypervisor"] > 0, summary["downtime_s"]
    assert meta["after_migration"]["forwarding"] is True
    return run_dir, meta, summary


def test_xen_on_the_lab_boots_nested_hosts_over_ssh_and_migrates(lab, tmp_path):
    """HV=xen on a lab: each nested Xen host's QEMU runs on R1/R2 over SSH (hosts-setup put its
    files there), dom0's agent is reached through the SSH connection, the dom0s' migration link
    is a UDP tunnel between the hosts' own migration addresses; xl migrate moves the router to
    R2, the lab's migration interface carried the stream, the orchestrator never entered a
    namespace, and nothing is left on any host (the hosts' taps are as hosts-setup made them)."""
    from migrate.drivers.xen.driver import LAB_DOM0_ADDR
    from routers.errors import RouterError
    from routers.xen_image import xen_image

    try:
        xen_image(verify=False)
    except RouterError as err:
        pytest.fail(f"HV=xen needs the nested Xen host image: {err}", pytrace=False)
    nested = _without_xen_hosts(lab, tmp_path)
    inv = load(nested)
    run_dir, meta, _ = _xen_run(nested, tmp_path)
    hv = meta["hypervisor"]
    assert hv["nested"] is True and hv["accel"] in ("kvm", "tcg") and "R1:" in hv["accel_reason"]
    tunnel = hv["lab_tunnel"]
    assert (
        tunnel["dom0_addr"] == LAB_DOM0_ADDR and tunnel["dom0_mtu"]["R1"] <= 1500 - tunnel["overhead_bytes_per_frame"]
    )
    # the nested hosts' QEMUs ran on the lab's hosts, from hosts-setup's copies
    for r in ("R1", "R2"):
        console = (run_dir / f"console-{r}.log").read_text(errors="replace")
        assert "VRMIG-DOM0-READY" in console, console[-500:]
    argv = [json.loads(x) for x in (run_dir / "actions.jsonl").read_text().splitlines()]
    assert any(a["action"] == "migration-end" and a.get("status") == "completed" for a in argv)
    # nothing left on any host; the hosts' taps as hosts-setup made them
    assert _runs_on_hosts(inv) == {r: [] for r in ROLES}
    assert _processes_with(f"/runs/{meta['testbed']['prefix']}") == []
    assert _taps_as_set_up(inv) == {"R1": [], "R2": []}


def test_xen_hosts_of_the_lab_run_xl_over_ssh_and_a_sigkill_is_cleaned(lab, tmp_path):
    """HV=xen on a lab whose R1 and R2 are Xen hosts: xl runs in their dom0s over SSH (the
    domU's files copied there), the router moves to R2 over the lab's migration link and the
    run leaves nothing in either dom0.  A SIGKILLed orchestrator mid-migration: the guards stop
    the dom0 commands when their channels close and the reapers destroy the router's domains
    and end, leaving clean-testbed only the run directories on the hosts."""
    inv = load(lab)
    if inv.host("R1").xen is None:
        pytest.fail("the lab has no Xen hosts (no nested Xen host image: make xen)", pytrace=False)
    assert _dom0_leftovers(inv) == {"R1": [], "R2": []}
    mem = XEN_MEM
    run_dir, meta, _ = _xen_run(lab, tmp_path, mem)
    hv = meta["hypervisor"]
    assert hv["nested"] is False and hv["dom0"]["reached"] == "ssh" and hv["accel"] is None
    assert hv["dom0"]["hosts"]["R2"].endswith(f"@{inv.host('R2').xen.ssh.host}:{inv.host('R2').xen.ssh.port}")
    assert all(h["xen_version"] for h in hv["hosts"].values()), hv["hosts"]
    # the sampler read R1's port of dom0's right-hand NIC (xtapR, rx + tx bytes): the router's
    # traffic to B left R1 there until the migration
    lines = (run_dir / "counters.tsv").read_text().splitlines()
    rows = [ln.split() for ln in lines if not ln.startswith(("#", "t_ns"))]
    xtap = [int(f[5]) + int(f[7]) for f in rows if f[2].endswith("-R1") and f[3] == inv.host("R1").xen.taps["R"]]
    assert xtap and xtap[-1] - xtap[0] > 100_000, xtap[:1] + xtap[-1:]
    assert _dom0_leftovers(inv) == {"R1": [], "R2": []}
    assert _runs_on_hosts(inv) == {r: [] for r in ROLES}

    # SIGKILL while xl migrate runs
    proc = _start_run(lab, tmp_path / "killed", "--hv", "xen", "--router", XEN_ROUTER, "--mem", str(mem),
                      "--rate", "1M", "--duration", "60", "--migrate-at", "3")  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            actions = next((tmp_path / "killed").glob("*/actions.jsonl"), None)
            if actions and '"migrate"' in actions.read_text():
                break
            assert proc.poll() is None, "the run ended before its migration started"
            time.sleep(0.1)
        while not any("xl -vvv" in x for x in _dom0_leftovers(inv)["R1"]):  # xl migrate runs in R1's dom0
            assert time.monotonic() < deadline and proc.poll() is None, _dom0_leftovers(inv)
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    # the guards stop the dom0 commands and the reapers destroy the router's domains, then end
    # (each first waits, at most 30 s, for a dying xl migrate/migrate-receive)
    deadline = time.monotonic() + 9 * GRACE_S
    while (left := _dom0_leftovers(inv)) != {"R1": [], "R2": []} and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left == {"R1": [], "R2": []}
    res = _cli("clean-testbed", "--testbed", str(lab), timeout=120)
    assert res.returncode == 0, res.stderr
    assert "dom0" not in res.stdout, res.stdout  # nothing was left for it in the dom0s
    assert _runs_on_hosts(inv) == {r: [] for r in ROLES}


def _taps_as_set_up(inv) -> dict[str, list[str]]:
    """What is wrong with R1's and R2's taps (hosts-setup's: tap devices on their bridges, up)."""
    out: dict[str, list[str]] = {}
    for r in ("R1", "R2"):
        h = inv.host(r)
        wrong = []
        for seg, tap in sorted(h.taps.items()):
            res = _ssh(inv, r, "ip", "-j", "-d", "link", "show", "dev", tap)
            link = json.loads(res.stdout)[0] if res.returncode == 0 else {}
            info = link.get("linkinfo", {})
            up = "UP" in link.get("flags", [])
            if info.get("info_kind") != "tun" or link.get("master") != h.bridges[seg] or not up:
                wrong.append(f"{tap}: {info.get('info_kind')} master={link.get('master')} flags={link.get('flags')}")
        out[r] = wrong
    return out


def test_lab_criu_migration_completes_and_leaves_the_hosts_as_set_up(lab, tmp_path):
    """HV=criu on the lab: criu, the rootfs and the host-side steps from hosts-setup; the dump and
    transfer on R1, receive, restore and announce on R2; afterwards no container runs and the
    taps are back."""
    inv = load(lab)
    res = _cli(
        "run", "--hv", "criu", "--router", "bird", "--mode", "stopcopy", "--rate", "10M", "--duration", "12",
        "--migrate-at", "4", "--testbed", str(lab), "--results", str(tmp_path),
    )  # fmt: skip
    assert res.stdout.strip(), res.stderr[-2000:]
    run_dir = Path(res.stdout.strip().splitlines()[-1])
    meta = json.loads((run_dir / "meta.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert meta["status"] == "completed", meta.get("failure")
    rec = json.loads((run_dir / "criu.json").read_text())
    assert rec["criu"]["argv"][-1] == f"{inv.deploy_dir}/criu/root/usr/sbin/criu"
    assert rec["transfer"]["files"] > 0 and rec["image_bytes"] > 0
    assert set(rec["host_clock_offsets_ns"]) == {"R1", "R2"}
    assert meta["verify"]["dst_peers_in_R2"] == {"eth0": True, "eth1": True}, meta["verify"]
    # the timeline is the hosts' own: the dump ended before the transfer began (R1), the last
    # image was written before the restore began, which ended before the announcement (R2)
    assert rec["rounds"][-1]["end_ns"] <= rec["transfer"]["start_ns"] <= rec["transfer"]["end_ns"]
    assert rec["receive"]["files"] == rec["transfer"]["files"]
    assert rec["receive"]["end_ns"] <= rec["restore"]["start_ns"] < rec["restore"]["end_ns"] <= rec["announce_ns"]
    pkt = summary["downtime_s"]["packets"]
    assert pkt is not None and 0 < pkt < 5, summary["downtime_s"]
    assert summary["volume_bytes"]["link"] is not None and summary["volume_bytes"]["link"] > 0.5e6
    assert _runs_on_hosts(inv) == {r: [] for r in ROLES}
    assert _processes_with("vrmig-ct-init") == []
    assert _taps_as_set_up(inv) == {"R1": [], "R2": []}


def _announced_left(inv) -> dict[str, list[str]]:
    """The peers' announced addresses still on A's and B's loopbacks."""
    out = {}
    for role, cidr in ANNOUNCED.items():
        shown = _ssh(inv, role, "ip", "-o", "addr", "show", "dev", "lo").stdout
        out[role] = [cidr] if cidr in shown else []
    return out


def test_peering_on_the_lab_runs_bird_on_a_and_b_and_a_sigkill_leaves_nothing(lab, tmp_path):
    """PEERING=bgp,bfd on a lab: BIRD and tcpdump run on the hosts A and B over SSH (BIRD from
    the bird image hosts-setup unpacked there), the sessions come up with the router, their
    logs and captures are fetched into the run directory and put on the orchestrator's clock,
    and the peers' loopback addresses go when the run ends.  A SIGKILLed orchestrator once the
    sessions are up: the guards stop the peers and take the addresses off."""
    from analysis.metrics.control_plane import BGP_PROTO
    from migrate.experiment.run import run
    from migrate.model.scenario import Scenario

    inv = load(lab)
    assert _announced_left(inv) == {"A": [], "B": []}
    s = Scenario(hv="kvm", peering="bgp,bfd", rate_bps=1_000_000, duration_s=12, migrate_at_s=5, after_s=3,
                 boot_timeout_s=300)  # fmt: skip
    with nswatch.watching() as seen:
        run_dir = run(s, tmp_path, testbed=lab)
    meta = json.loads((run_dir / "meta.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert meta["status"] == "completed", meta.get("failure")
    assert seen == [], seen
    peering = meta["peering"]
    assert set(peering["established_ns"]) == {"A", "B"}
    assert f"{inv.deploy_dir}/peers/bird" in peering["implementation"]["peers"], peering["implementation"]
    assert set(peering["versions"]["tcpdump"]) == {"A", "B"} and peering["versions"]["bird"], peering["versions"]
    for role in ("A", "B"):  # fetched from the hosts
        assert f"{BGP_PROTO}: State changed to up" in (run_dir / f"peer-{role}.log").read_text(), role
        assert (run_dir / f"control-{role}.pcap").stat().st_size > 0, role
    cp = summary["control_plane"]
    for proto in ("bgp", "bfd"):
        assert cp[proto] is not None, cp
        assert all(v["gap_ms"] is not None for v in cp[proto]["silence_by_peer"].values()), cp[proto]
    corrected = summary["details"]["clock"]["corrected"]
    assert corrected.get("peer-A") == "A" and corrected.get("peer-B") == "B", corrected
    assert _announced_left(inv) == {"A": [], "B": []}
    assert _runs_on_hosts(inv) == {r: [] for r in ROLES}
    assert _processes_with(f"/runs/{meta['testbed']['prefix']}") == []

    # SIGKILL once both peers' sessions are up (the run then waits for its migration)
    proc = _start_run(lab, tmp_path / "killed", "--hv", "kvm", "--peering", "bgp,bfd", "--rate", "1M",
                      "--duration", "60", "--migrate-at", "50")  # fmt: skip
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline:
            metas = list((tmp_path / "killed").glob("*/meta.json"))
            if metas and "established_ns" in metas[0].read_text():
                break
            assert proc.poll() is None, "the run ended before its peers' sessions were up"
            time.sleep(0.2)
        killed = json.loads(metas[0].read_text())["testbed"]["prefix"]
        assert _announced_left(inv) == {r: [c] for r, c in ANNOUNCED.items()}
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 3 * GRACE_S
    while _announced_left(inv) != {"A": [], "B": []} and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _announced_left(inv) == {"A": [], "B": []}
    # BIRD, tcpdump, the loopback holders and the instruments: their guards stop them (SIGTERM,
    # SIGKILL 3 s later) once their host's SSH channel closes, each host's on its own time
    assert _processes_after_grace(f"/runs/{killed}") == []
    res = _cli("clean-testbed", "--testbed", str(lab), timeout=120)
    assert res.returncode == 0, res.stderr
    assert _runs_on_hosts(inv) == {r: [] for r in ROLES}


@pytest.mark.parametrize(("hv", "driver"), [("kvm", "qmp"), ("kvm", "libvirt"), ("kvm", "libvirt@release")])
def test_sigkilled_orchestrator_leaves_no_process_and_clean_testbed_removes_the_files(lab, tmp_path, hv, driver):
    """libvirt@release: LIBVIRT= the deployed release, whose daemons (the run's own) take their
    QEMUs with them when their guards stop them.  HV=criu's SIGKILL (the keepers kill the
    container and put the taps back) is tested with a lab worker killed mid-run
    (tests/integration/test_many_labs.py)."""
    from migrate.core.stack import DEFAULT_LIBVIRT

    inv = load(lab)
    release = ["--libvirt", DEFAULT_LIBVIRT] if driver == "libvirt@release" else []
    driver = driver.split("@")[0]
    proc = _start_run(lab, tmp_path, "--hv", hv, "--driver", driver, *release, "--rate", "10M",
                      "--duration", "30", "--migrate-at", "20")  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        actions = None
        while time.monotonic() < deadline:
            actions = next(tmp_path.glob("*/actions.jsonl"), None)
            if actions and "traffic-start" in actions.read_text():
                break
            assert proc.poll() is None, "the run ended before its traffic started"
            time.sleep(0.1)
        assert actions is not None
        meta = json.loads((actions.parent / "meta.json").read_text())
        prefix = meta["testbed"]["prefix"]
        assert _processes_with(f"/runs/{prefix}"), "nothing of the run was running on the hosts"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert _processes_after_grace(f"/runs/{prefix}") == []
    assert _processes_with(f"vrmig-{prefix}-R") == []  # the QEMUs, by their -name
    if driver == "libvirt":  # the reaper destroyed the domain through the lab's qemu+ssh URI
        deadline = time.monotonic() + GRACE_S
        while _domains(inv, "R1") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _domains(inv, "R1") == [] and _domains(inv, "R2") == []
        assert _processes_with(f"guest=vrmig-{prefix}") == []
    left = _runs_on_hosts(inv)
    assert any(prefix in v for v in left.values()), "expected the run's directories to be left by the SIGKILL"
    res = _cli("clean-testbed", "--testbed", str(lab), timeout=120)
    assert res.returncode == 0, res.stderr
    assert f"removed {inv.deploy_dir}/runs/{prefix}" in res.stdout
    assert _runs_on_hosts(inv) == {r: [] for r in ROLES}


def _baseline_rows(run_dir: Path) -> list[dict[str, str]]:
    import csv

    with open(run_dir / "baseline.csv", newline="") as f:
        return list(csv.DictReader(f))


#: where a lab point's flow runs per role: (from, to) with the end host in the router on R1 named
#: by its hypervisor ("VM": the guest, its own clock; "CT": the container; "RT0": the bare router)
ENDHOST_NAME = {"kvm": "VM", "criu": "CT", "none": "RT0"}


def _flow_ends(hv: str, role: str) -> tuple[str, str]:
    return {"router": ("A", "B"), "vm-tx": (ENDHOST_NAME[hv], "B"), "vm-rx": ("A", ENDHOST_NAME[hv])}[role]


def _check_lab_baseline(run_dir: Path, lab: Path, configs: set[tuple[str, str, str]]) -> None:
    """Completed, each configuration's router on R1, every point (hv, role, proto) carrying the
    offered 10 Mbit/s between the ends its role names, with its RTT probes fetched from C, the
    clock offsets of the hosts it ran on recorded (the router host's under an end host's name but
    the guest's), a one-way delay wherever no guest's clock is involved, and a TCP point's traces
    fetched from every host but the guest's and the container's own /tmp."""
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "completed", meta.get("failure")
    assert meta["lab"]["inventory"] == str(lab) and meta["lab_check"]["hosts"]
    assert meta["generator_capability"] is None and "lab_generator" in meta["notes"]
    for name, info in meta["configs"].items():
        assert info["status"] == "completed", (name, info.get("failure"))
        assert info["routers"][0]["host"] == "R1" and info["testbed"]["hosts"]["B"]["transport"] == "ssh"
    rows = _baseline_rows(run_dir)
    assert {(r["hv"], r["role"], r["proto"]) for r in rows} == configs and len(rows) == len(configs)
    for r in rows:
        assert r["status"] == "ok", r
        assert abs(float(r["forwarded_bps"]) - 10e6) < 0.05 * 10e6, r
        assert float(r["rtt_median_ms"]) > 0, r
        guest = r["hv"] == "kvm" and r["role"] != "router"
        if r["proto"] == "udp":
            assert float(r["loss_ratio"]) <= 0.01, r
            assert (r["owd_uncertainty_ms"] == "") if guest else (float(r["owd_uncertainty_ms"]) > 0), r
        assert float(r["cpu_host"]) > 0, r
        if r["hv"] == "kvm":
            assert float(r["cpu_hv"]) > 0, r  # the QEMU on R1, read on R1
        if r["hv"] in ("none", "criu"):
            assert r["cpu_router_daemons"] != "", r  # the daemons or the container's processes, on R1
    for point in run_dir.glob("points/*/*"):
        record = json.loads((point / "point.json").read_text())
        key = record["key"]
        src, dst = _flow_ends(key["hv"], key["role"])
        assert (record["flows"][0]["from"], record["flows"][0]["to"]) == (src, dst), record["flows"]
        hosts = {h for h in (src, dst) if h in ROLES} | {"C"} | ({"R1"} if key["role"] != "router" else set())
        named = {h for h in (src, dst) if h not in ROLES and h != "VM"}
        assert set(record["clock"]) == hosts | named, (point, record["clock"])
        assert (point / "irtt.json.gz").stat().st_size > 0 and "trace_failures" not in record
        if key["proto"] == "tcp":
            for end, name in ((src, "tcp-send-0.tsv"), (dst, "tcp-sink-0.tsv")):
                assert (point / name).exists() == (end not in ("VM", "CT")), (point, name)


def test_lab_baseline_runs_the_router_and_every_helper_on_the_hosts(lab, tmp_path):
    """HV=none (the bare router on R1) and HV=kvm in this process with every way into a namespace
    watched, forwarding and as the end host that sends (ROLE=vm-tx: the bare router's namespace
    and the guest, whose console shell on R1 is reached over SSH), UDP and TCP; HV=criu with FRR
    through the command line (its container is never checkpointed, so FRR is allowed), forwarding
    and receiving in the container; the hosts hold nothing of them afterwards and R1's taps are
    as set up."""
    from migrate.baseline.run import run_baseline
    from migrate.baseline.spec import BaselineSpec

    inv = load(lab)
    spec = BaselineSpec(hvs=("none", "kvm"), roles=("router", "vm-tx"), protos=("udp", "tcp"), sizes=(500,),
                        rates_bps=(10_000_000,), reps=1, duration_s=3.0)  # fmt: skip
    with nswatch.watching() as seen:
        run_dir = run_baseline(spec, tmp_path / "kvm", testbed=lab)
    assert seen == [], seen
    _check_lab_baseline(run_dir, lab, {(h, r, p) for h in spec.hvs for r in spec.roles for p in spec.protos})
    assert _taps_as_set_up(inv) == {"R1": [], "R2": []}
    res = _cli(
        "baseline", "--testbed", str(lab), "--hv", "criu", "--router", "frr", "--role", "router,vm-rx", "--sizes",
        "500", "--rates", "10M", "--reps", "1", "--duration", "3", "--results", str(tmp_path / "criu"), timeout=900,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-1500:] + res.stderr[-1500:]
    _check_lab_baseline(Path(res.stdout.strip().splitlines()[-1]), lab, {("criu", "router", "udp"),
                                                                         ("criu", "vm-rx", "udp")})  # fmt: skip
    assert _runs_on_hosts(inv) == {r: [] for r in ROLES}
    assert _processes_with(f"{inv.deploy_dir}/runs/") == []
    assert _processes_with("vrmig-ct-init") == []
    assert _rooted_in("/rootfs-none") == []


@pytest.mark.parametrize("hv", ["kvm", "none"])
def test_sigkilled_lab_baseline_leaves_no_process_and_clean_testbed_removes_the_files(lab, tmp_path, hv):
    inv = load(lab)
    proc = subprocess.Popen(
        [PY, "-m", "migrate", "baseline", "--testbed", str(lab), "--hv", hv, "--sizes", "500", "--rates", "10M",
         "--reps", "1", "--duration", "30", "--results", str(tmp_path)],
        cwd=REPO, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not list(tmp_path.glob("*/points/*/*/gen-0.json")):
            assert proc.poll() is None, "the baseline ended before its first point's traffic started"
            assert time.monotonic() < deadline, "no point started within 300 s"
            time.sleep(0.1)
        meta = json.loads(next(tmp_path.glob("*/meta.json")).read_text())
        prefix = next(iter(meta["configs"].values()))["prefix"]
        assert _processes_with(f"/runs/{prefix}"), "nothing of the baseline was running on the hosts"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert _processes_after_grace(f"/runs/{prefix}") == []
    assert _processes_with(f"vrmig-{prefix}-R") == []  # the router's QEMU, by its -name
    if hv == "none":  # the keeper killed the chrooted daemons and put R1's taps back
        deadline = time.monotonic() + GRACE_S
        while _taps_as_set_up(inv)["R1"] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _rooted_in(f"/runs/{prefix}/rootfs-none") == []
        assert _taps_as_set_up(inv) == {"R1": [], "R2": []}
    assert any(prefix in v for v in _runs_on_hosts(inv).values()), "expected the SIGKILL to leave run directories"
    res = _cli("clean-testbed", "--testbed", str(lab), timeout=120)
    assert res.returncode == 0, res.stderr
    assert f"removed {inv.deploy_dir}/runs/{prefix}" in res.stdout
    assert _runs_on_hosts(inv) == {r: [] for r in ROLES}


def test_chaos_on_the_lab_kills_runs_and_finds_nothing_left(lab, tmp_path):
    """make chaos TESTBED=: a SIGKILLed lab run leaves no process or domain on any host, and
    clean-testbed removes its run directories; a SIGTERMed one leaves nothing at all."""
    import random

    from migrate.campaigns import chaos
    from migrate.labs.where import where_for

    inv = load(lab)
    before = _runs_on_hosts(inv)
    totals = chaos.run_hv("kvm", 2, random.Random("lab-chaos"), tmp_path, where=where_for(lab))
    assert totals.trials == 2 and totals.signals == 2, totals
    assert totals.signals_sent >= 1, "no signal reached a running orchestrator"
    assert (totals.leaks, totals.lost_results, totals.problems) == (0, 0, [])
    assert _runs_on_hosts(inv) == before


def test_chaos_on_the_lab_finds_a_leaked_container_and_criu_trials_leave_none(lab, tmp_path):
    """A process rooted elsewhere than its host's root, started after the trial began, is a leak
    (what a router container left running would be); a SIGKILL trial of HV=criu leaves none."""
    import random

    from migrate.campaigns import chaos
    from migrate.labs.leaks import LabLeaks
    from migrate.labs.where import where_for

    inv = load(lab)
    jail = f"{inv.deploy_dir}/jail-{secrets.token_hex(3)}"
    assert _ssh(inv, "R1", "mkdir", "-p", jail).returncode == 0
    with LabLeaks(lab) as watch:
        watch.before_trial()
        t = inv.host("R1").ssh
        jailed = subprocess.Popen(
            ["ssh", "-i", str(t.key), "-o", f"UserKnownHostsFile={t.known_hosts}", "-o", "BatchMode=yes",
             "-o", "StrictHostKeyChecking=yes", "-p", str(t.port), f"{t.user}@{t.host}", "--",
             "python3", "-c", f"'import os, sys, time; os.chroot(\"{jail}\"); print(1, flush=True); time.sleep(4)'"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            assert jailed.stdout is not None and jailed.stdout.readline().strip() == b"1"
            found = watch.live("no-such-run")
            assert any(f.startswith("R1: container process") and "time.sleep(4)" in f for f in found), found
        finally:  # it ends by itself (a process started over SSH outlives its channel)
            jailed.wait(timeout=30)
        deadline = time.monotonic() + GRACE_S
        while watch.live("no-such-run") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert watch.live("no-such-run") == []
        totals = chaos.run_hv("criu", 1, random.Random("lab-chaos-criu"), tmp_path, where=where_for(lab), watch=watch)
    _ssh(inv, "R1", "rmdir", jail)
    assert totals.trials == 1 and (totals.leaks, totals.lost_results, totals.problems) == (0, 0, []), totals
    assert _processes_with("vrmig-ct-init") == []


def test_calibrate_on_the_lab_cuts_r1s_port_over_ssh_and_meets_its_targets(lab, tmp_path):
    """make calibrate TESTBED=: cuts of R1's tap through one SSH session, QMP pauses through the
    forwarded socket; every event is seen and within the cut targets fixed before the run, as on
    the embedded testbed (``assert_cut_rows_meet_their_targets``), with the sink's gaps
    on the orchestrator's clock; nothing is left on the hosts."""
    import csv

    inv = load(lab)
    res = _cli(
        "calibrate", "--testbed", str(lab), "--kind", "cut,pause", "--durations", "50,200", "--reps", "3",
        "--results", str(tmp_path), timeout=900,
    )  # fmt: skip
    run_dir = Path(res.stdout.strip().splitlines()[-1])
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "completed" and meta["testbed"]["inventory"] == str(lab)
    assert set(meta["lab"]["offsets_ns"]) == set(ROLES)
    rows = list(csv.DictReader((run_dir / "calibration.csv").open()))
    assert all(r["n"] == "3" and r["detected"] == "3" for r in rows), rows
    cuts = [r for r in rows if r["kind"] == "cut"]
    assert {r["estimator"] for r in cuts} == {"packets", "counters"}
    assert_cut_rows_meet_their_targets(rows)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert any(r["kind"] == "pause" for r in rows)
    assert _runs_on_hosts(inv) == {r: [] for r in ROLES}
    assert _processes_with(f"/runs/{meta['testbed']['prefix']}") == []
