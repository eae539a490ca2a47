"""What a chaos trial's run can leave on the hosts beyond this machine: on a lab, its processes,
containers, libvirt and Xen domains and run directories on the lab's hosts (:class:`LabLeaks`);
on the embedded testbed nothing (:class:`NoHostLeaks`: this machine's leftovers are searched by
migrate.campaigns.chaos itself).  Both are context managers with the same methods
(:class:`LeakWatch`); migrate.labs.where picks one."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger("vrmig.chaos")


class LeakWatch(Protocol):
    """Noted before a trial, searched after it: what the trial's run left on the hosts beyond
    this machine.  A context manager: what it opened closes at its end."""

    def __enter__(self) -> LeakWatch: ...

    def __exit__(self, *exc: object) -> None: ...

    def before_trial(self) -> set[tuple[str, str]]:
        """Note what is there before a trial; returns what ``leaks`` compares with."""
        ...

    def leaks(self, before: set[tuple[str, str]], prefix: str | None, grace_s: float, killed: bool) -> list[str]:
        """What the trial's run (``prefix``) left, one line each (``killed``: it was SIGKILLed)."""
        ...


class NoHostLeaks:
    """The embedded testbed has no hosts beyond this machine: nothing to note, nothing found."""

    def __enter__(self) -> NoHostLeaks:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def before_trial(self) -> set[tuple[str, str]]:
        """Nothing to note."""
        return set()

    def leaks(self, before: set[tuple[str, str]], prefix: str | None, grace_s: float, killed: bool) -> list[str]:
        """Nothing beyond this machine."""
        return []


#: prints JSON [[pid, command line]] of the processes whose root directory is not the host's
#: (containers: a router container's processes name nothing of the run, but their root is
#: the run's rootfs copy, so they are found by that)
ROOTED_ELSEWHERE_SOURCE = r"""
import json, os
r = os.stat("/")
out = []
for n in os.listdir("/proc"):
    if not n.isdigit():
        continue
    try:
        st = os.stat("/proc/%s/root" % n)
        if (st.st_dev, st.st_ino) == (r.st_dev, r.st_ino):
            continue
        with open("/proc/%s/cmdline" % n, "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        continue
    out.append([int(n), cmd[:160]])
print(json.dumps(out))
"""


class LabLeaks:
    """What a trial's run can leave on a lab's hosts, looked for over SSH as the inventory reaches
    them (nothing assumes the hosts share this machine): processes whose command line names the
    run's directory on the host or its QEMUs (``vrmig-<prefix>``), processes rooted elsewhere than
    the host's root that were not there before the trial (the router containers of HV=criu),
    libvirt domains named after the run on R1's and R2's libvirtds, and run directories under the
    deploy directory.  A context manager: the SSH connections close at its end."""

    def __init__(self, testbed: Path) -> None:
        import tempfile

        from migrate.testbed.hosts import connect
        from migrate.testbed.inventory import load

        self.inv = load(testbed)
        self._tmp = tempfile.TemporaryDirectory(prefix="vrmig-chaos-")
        self.hosts = connect(self.inv, Path(self._tmp.name))
        self.rooted_before: dict[str, set[int]] = {}
        #: a lab whose R1 and R2 are Xen hosts: their dom0s, searched for domains and guards
        self.dom0s: dict[str, Any] = {}
        from migrate.testbed.hosts import SshHost

        for role in ("R1", "R2"):
            x = self.inv.host(role).xen
            if x is not None:
                self.dom0s[role] = SshHost(x.host_spec(role), Path(self._tmp.name))
                self.dom0s[role].open()

    def __enter__(self) -> LabLeaks:
        return self

    def __exit__(self, *exc: object) -> None:
        for h in [*self.hosts.values(), *self.dom0s.values()]:
            h.close()
        self._tmp.cleanup()

    def rooted_elsewhere(self) -> dict[str, dict[int, str]]:
        """Per host: PID -> command line of the processes not rooted at the host's root."""
        out: dict[str, dict[int, str]] = {}
        for role, h in self.hosts.items():
            res = h.run(["python3", "-c", ROOTED_ELSEWHERE_SOURCE], check=False)
            try:
                out[role] = {int(p): str(c) for p, c in json.loads(res.stdout or b"[]")}
            except (ValueError, TypeError):
                out[role] = {}
        return out

    def before_trial(self) -> set[tuple[str, str]]:
        """Note what is there before a trial: the processes rooted elsewhere (``live`` reports
        only new ones) and the run directories (returned, for ``leaks``)."""
        self.rooted_before = {r: set(p) for r, p in self.rooted_elsewhere().items()}
        return self.run_dirs()

    def run_dirs(self) -> set[tuple[str, str]]:
        """(role, name) of every run directory on the hosts."""
        out = set()
        for role, h in self.hosts.items():
            res = h.run(["ls", "-A", f"{self.inv.deploy_dir}/runs"], check=False)
            out |= {(role, name) for name in res.stdout.decode().split()}
        return out

    def live(self, prefix: str) -> list[str]:
        """The run's processes on every host and its libvirt domains."""
        from migrate.labs.emulated import virsh

        found = []
        marks = (f"/runs/{prefix}", f"vrmig-{prefix}")
        for role, h in self.hosts.items():
            res = h.run(["ps", "-eo", "pid=,args="], check=False)
            for line in res.stdout.decode(errors="replace").splitlines():
                if any(m in line for m in marks):
                    found.append(f"{role}: process {line.strip()[:160]}")
        for role, procs in self.rooted_elsewhere().items():
            for pid, cmd in sorted(procs.items()):
                if pid not in self.rooted_before.get(role, set()):
                    found.append(f"{role}: container process {pid} {cmd}")
        for role in ("R1", "R2"):
            uri = self.inv.host(role).libvirt_uri
            if uri:
                names = virsh(uri, "list", "--all", "--name").stdout.split()
                found += [f"{role}: libvirt domain {n}" for n in names if prefix in n]
        found += self.dom0_leftovers(prefix)
        return found

    def dom0_leftovers(self, prefix: str) -> list[str]:
        """In each Xen host's dom0: the router's domains and the run's guards still there."""
        from migrate.drivers.xen.dom0 import GUARD_DIR
        from migrate.drivers.xen.xl import router_domains

        found = []
        for role, h in self.dom0s.items():
            domains = router_domains(h.run(["xl", "list"], check=False).stdout.decode(errors="replace"))
            found += [f"{role} dom0: domain {d}" for d in domains]
            guards = h.run(["ls", GUARD_DIR], check=False).stdout.decode().split()
            found += [f"{role} dom0: guard {g}" for g in guards if g.startswith(f"{prefix}-")]
        return found

    def leaks(self, before: set[tuple[str, str]], prefix: str | None, grace_s: float, killed: bool) -> list[str]:
        """After a trial: the run's processes and domains must be gone within ``grace_s``; its
        run directories too, unless the orchestrator was SIGKILLed (``killed``): then
        ``clean-testbed`` must remove them, and it is run here to check that."""
        from migrate.testbed.labbed import clean_lab

        deadline = time.monotonic() + grace_s
        while True:
            left = self.live(prefix) if prefix else []
            if not killed:
                new = sorted(self.run_dirs() - before)
                left += [f"{role}: run directory {self.inv.deploy_dir}/runs/{name}" for role, name in new]
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if killed:
            done = clean_lab(self.hosts, self.inv.deploy_dir)
            log.info("clean-testbed after the SIGKILL: %s", "; ".join(done) or "nothing to do")
            left += [f"{role}: {self.inv.deploy_dir}/runs/{name} survived clean-testbed"
                     for role, name in sorted(self.run_dirs() - before)]  # fmt: skip
        return left
