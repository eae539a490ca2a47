"""Where a campaign's runs go, as one object: the embedded testbed (network namespaces of this
machine) or the lab whose inventory ``--testbed``/``TESTBED=`` names.

:func:`where_for` is the one place that tells the two apart (:func:`recorded_where` reads a
sweep's meta.json back into one); :class:`Embedded` and :class:`Lab` answer the same questions
(:class:`Where`) for the campaigns and the command line: the argv that hands the testbed on to a
child command, the line a report names it by, the meta.json and history records, whether this
machine's QEMU and libvirt are the runs', what a chaos trial may inject and what it may leave on
hosts beyond this machine, what ``clean-testbed`` does there, and whether a sweep may be resumed
with the TESTBED= given.  A single run's own differences live in migrate.experiment.place and
the testbed layer."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from migrate.core.errors import ConfigError
from migrate.labs.leaks import LabLeaks, LeakWatch, NoHostLeaks

T = TypeVar("T")

#: how the history and meta.json name the embedded testbed
EMBEDDED_ID = "embedded"


def testbed_record(testbed: Path) -> dict[str, Any]:
    """meta.json ``testbed`` of a lab sweep: the inventory's absolute path and its SHA-256 (a
    RESUME uses that file again and refuses one that changed)."""
    path = testbed.resolve()
    return {"kind": "lab", "inventory": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


class Where(Protocol):
    """Where a campaign's runs go."""

    @property
    def inventory(self) -> Path | None:
        """The lab inventory (None: the embedded testbed), as the single run and the baseline take it."""
        ...

    @property
    def runs_here(self) -> bool:
        """This machine's own QEMU, libvirt and checkout are the ones the runs use."""
        ...

    def argv(self) -> list[str]:
        """The options that hand this testbed on to a child ``vrmig`` command."""
        ...

    def description(self) -> str:
        """One line naming the testbed, for a report."""
        ...

    def record(self, meta: dict[str, Any]) -> None:
        """Add the testbed to a sweep's meta.json (nothing for the embedded testbed)."""

    def history_id(self) -> str:
        """The testbed as the nightly history records it: runs of another id are never compared."""
        ...

    def faults(self, faults: Iterable[str]) -> list[str]:
        """Those of ``faults`` a run here can be given."""
        ...

    def either(self, embedded: T, lab: T) -> T:
        """The one of two per-testbed values (a table's column) that applies here."""
        ...

    def check_exists(self) -> None:
        """ConfigError (one line) if the inventory named is no file."""

    def leak_watch(self) -> LeakWatch:
        """The watch (a context manager, not yet entered) of what a chaos trial's run leaves on
        hosts beyond this machine."""
        ...

    def clean_hosts(self) -> list[str]:
        """``clean-testbed`` beyond this machine: what dead runs of this machine left on the
        testbed's hosts, removed; the lines to print."""
        ...

    def check_resume(self, sweep_dir: Path, meta: dict[str, Any], given: Path | None) -> None:
        """Refuse (ConfigError, one line) to resume the sweep that ran here (``meta``: its
        meta.json) on ``given`` (a TESTBED= of the resuming command), or when its testbed
        changed since: its points would mix testbeds."""


@dataclass(frozen=True)
class Embedded:
    """The embedded one-machine testbed: every run's namespaces, QEMU and libvirt are this machine's."""

    @property
    def inventory(self) -> Path | None:
        """None: no inventory."""
        return None

    @property
    def runs_here(self) -> bool:
        """True: the runs are this machine's."""
        return True

    def argv(self) -> list[str]:
        """No option: a child command runs on the embedded testbed by default."""
        return []

    def description(self) -> str:
        """The embedded testbed's line."""
        return "the embedded one-machine testbed"

    def record(self, meta: dict[str, Any]) -> None:
        """meta.json without ``testbed`` is the embedded testbed."""

    def history_id(self) -> str:
        """``embedded``."""
        return EMBEDDED_ID

    def faults(self, faults: Iterable[str]) -> list[str]:
        """Every fault: the embedded testbed injects them all."""
        return list(faults)

    def either(self, embedded: T, lab: T) -> T:
        """``embedded``."""
        return embedded

    def check_exists(self) -> None:
        """No inventory to check."""

    def leak_watch(self) -> LeakWatch:
        """No hosts beyond this machine: a watch that finds nothing."""
        return NoHostLeaks()

    def clean_hosts(self) -> list[str]:
        """No hosts beyond this machine: nothing to do, nothing to print."""
        return []

    def check_resume(self, sweep_dir: Path, meta: dict[str, Any], given: Path | None) -> None:
        """A sweep of the embedded testbed resumes there only: refuses any TESTBED=."""
        if given is not None:
            raise ConfigError(
                f"RESUME={sweep_dir} ran on the embedded testbed: drop TESTBED={given} or start a new sweep"
            )


@dataclass(frozen=True)
class Lab:
    """The lab of the inventory at ``inventory``: the runs go to its hosts over SSH."""

    inventory: Path

    @property
    def runs_here(self) -> bool:
        """False: the lab's hosts run their own QEMU and libvirt (hosts-setup deployed them)."""
        return False

    def argv(self) -> list[str]:
        """``--testbed <inventory>``."""
        return ["--testbed", str(self.inventory)]

    def description(self) -> str:
        """The lab's line, naming its inventory."""
        return f"the lab of {self.inventory}"

    def record(self, meta: dict[str, Any]) -> None:
        """meta.json ``testbed``: :func:`testbed_record` of the inventory."""
        meta["testbed"] = testbed_record(self.inventory)

    def history_id(self) -> str:
        """``lab:`` and the first 16 hex digits of the inventory's SHA-256 (another inventory, or
        an edited one, is another testbed)."""
        return f"lab:{testbed_record(self.inventory)['sha256'][:16]}"

    def faults(self, faults: Iterable[str]) -> list[str]:
        """None: a lab run takes no FAULT (the lab's own links are measured as they are)."""
        return []

    def either(self, embedded: T, lab: T) -> T:
        """``lab``."""
        return lab

    def check_exists(self) -> None:
        """ConfigError (one line) if the inventory is no file."""
        if not self.inventory.is_file():
            raise ConfigError(f"TESTBED={self.inventory}: no such inventory (docs/testbed.md)")

    def leak_watch(self) -> LeakWatch:
        """:class:`migrate.labs.leaks.LabLeaks` of the inventory (it connects to the hosts)."""
        return LabLeaks(self.inventory)

    def clean_hosts(self) -> list[str]:
        """The run directories dead runs of this machine left under the lab's deploy directory,
        and on Xen hosts their dom0s' guards and router domains; then a line of totals."""
        import tempfile

        from migrate.labs.cleanup import clean_xen_dom0s
        from migrate.testbed.hosts import connect
        from migrate.testbed.inventory import load
        from migrate.testbed.labbed import clean_lab

        inv = load(self.inventory)
        with tempfile.TemporaryDirectory(prefix="vrmig-clean-") as d:
            hosts = connect(inv, Path(d))
            try:
                done = clean_lab(hosts, inv.deploy_dir)
                done += clean_xen_dom0s(inv, Path(d))
            finally:
                for h in hosts.values():
                    h.close()
        return [*done, f"{inv.name}: {'nothing left by dead runs' if not done else f'{len(done)} action(s)'}"]

    def check_resume(self, sweep_dir: Path, meta: dict[str, Any], given: Path | None) -> None:
        """A lab sweep resumes on its inventory only (``given`` None, or that file), and only
        while the file is there with the SHA-256 meta.json recorded."""
        path = self.inventory
        if given is not None and given.resolve() != path:
            raise ConfigError(f"RESUME={sweep_dir} ran on TESTBED={path}: drop TESTBED={given} or start a new sweep")
        if not path.is_file():
            raise ConfigError(
                f"RESUME={sweep_dir} ran on TESTBED={path}, which is gone: restore it or start a new sweep"
            )
        if testbed_record(path)["sha256"] != meta["testbed"].get("sha256"):
            raise ConfigError(
                f"RESUME={sweep_dir}: its inventory {path} changed since the sweep started: its points would mix "
                "testbeds; restore the file or start a new sweep"
            )


#: the embedded testbed: what a command without ``--testbed`` runs on (:func:`where_for` of None)
NO_TESTBED = Embedded()


def where_for(testbed: Path | None) -> Embedded | Lab:
    """The embedded testbed (``testbed`` None) or the lab of the inventory at ``testbed`` (not
    loaded here: what needs its hosts loads it)."""
    if testbed is None:
        return NO_TESTBED
    return Lab(testbed)


def recorded_where(meta: dict[str, Any]) -> Embedded | Lab:
    """Where a sweep ran, from its meta.json (what :meth:`Where.record` wrote): no ``testbed``,
    the embedded testbed; else the lab of the inventory recorded (its absolute path)."""
    return where_for(Path(meta["testbed"]["inventory"]) if meta.get("testbed") is not None else None)
