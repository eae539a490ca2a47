"""Every target of the Makefile: its line in ``make help`` and, for a target that takes variables,
the module it runs (migrate.cli.make bridges the variables to that module's parser; ``vrmig
bench`` reaches the benchmarks by the same table, migrate.cli.delegate).  Imports nothing of the
CLI, so that both can read it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

#: ``python -m migrate``: the targets whose module is this run ``vrmig <subcommand>``
VRMIG = "migrate"


@dataclass(frozen=True)
class Target:
    """A make target: its line in ``make help`` and, when it takes variables, the command it runs."""

    summary: str
    module: str = ""  # run as ``python -m <module>``; "" = a plain recipe without variables
    command: tuple[str, ...] = ()  # the subcommand words
    fixed: tuple[str, ...] = ()  # arguments always passed ("{RESULTS}": the results root)
    defaults: Mapping[str, str] = field(default_factory=dict)  # values of unset variables, as ``fixed``

    @property
    def bridged(self) -> bool:
        return bool(self.module)


def _vrmig(command: str, summary: str) -> Target:
    return Target(summary, VRMIG, (command,))


def _bench(
    summary: str, module: str, out: str, command: tuple[str, ...] = (), defaults: Mapping[str, str] | None = None
) -> Target:
    """A benchmark target: ``module`` (with ``command``) writing its results to ``{RESULTS}/bench/<out>``."""
    return Target(summary, module, command, fixed=("--out", f"{{RESULTS}}/bench/{out}"), defaults=dict(defaults or {}))


#: every target of the Makefile, in the order ``make help`` lists them
TARGETS: dict[str, Target] = {
    "setup": Target("everything marked (setup): apt, venv, helpers, qemu, libvirt, guest, images, criu, xen"),
    "migrate": _vrmig("run", "one live migration, measured; prints a table and the results directory"),
    "baseline": _vrmig("baseline", "forwarding performance without migration"),
    "calibrate": _vrmig("calibrate", "every downtime estimator against cuts and pauses of known length"),
    "sweep": _vrmig("sweep", "repeated migrations over RATES x SIZES (x MODES x BFDS): CIs, plots, report.html"),
    "campaign": _vrmig("campaign", "runs (CHECK=1: validates) a campaign file"),
    "campaign-check": Target("validates every shipped campaign in campaigns/"),
    "paper": _vrmig("paper", "paper 004's Fig. 2 and Fig. 3 campaigns, stated beside measured"),
    "report": _vrmig("report", "re-analyses runs from their raw traces: tables, plots, report.html"),
    "ab": _vrmig("ab", "two stacks or settings of one scenario, interleaved; exit 1 if B regressed"),
    "compare": _vrmig("compare", "overlays two sweeps: B - A per point and metric, with CIs"),
    "nightly": _vrmig("nightly", "the regression matrix against the accepted nights; exit 1 on a regression"),
    "nightly-accept": _vrmig("nightly-accept", "adds the latest (or NIGHT=) finished night to the accepted ones"),
    "chaos": Target(
        "seeded faults and signals at random points: checks for leaks and lost results",
        "migrate.campaigns.chaos",
        fixed=("--results", "{RESULTS}/chaos"),
    ),
    "bench-traffic": _bench(
        "every cross-traffic backend on an A -> bridge -> B bed", "crosstraffic.bench.traffic", "traffic.csv"
    ),
    "bench-sampler": _bench(
        "lateness and CPU of the 10 ms counter sampler, idle and under load",
        "probes.bench",
        "sampler.csv",
        command=("sampler",),
    ),
    "bench-qmp": _bench(
        "how late QMP events are stamped, in existing HV=kvm runs",
        "analysis.hypervisors.qmp_arrival",
        "qmp.csv",
        defaults={"RUNS": "{RESULTS}"},
    ),
    "bench-qmp-client": _bench(
        "the QMP client's arrival stamp against a fake QEMU", "tests.bench.bench_qmp_client", "qmp-client.json"
    ),
    "bench-ssh": _bench("per-command latency of the SSH transports", "tests.bench.bench_ssh", "ssh-latency.json"),
    "clean-testbed": _vrmig("clean-testbed", "removes what crashed runs left behind (TESTBED=: also on a lab)"),
    "hosts-setup": _vrmig("hosts-setup", "prepares a lab's hosts with Ansible"),
    "hosts-check": _vrmig("hosts-check", "one row per lab host: ready for a run? exit 2 on a problem"),
    "scheduler": _vrmig("scheduler", "a Dask scheduler for campaigns spread over many labs"),
    "worker": _vrmig("worker", "a Dask worker holding one lab (TESTBED=), serving SCHEDULER="),
    "lab-up": _vrmig("lab-up", "an emulated lab on this machine; prints its inventory"),
    "lab-down": _vrmig("lab-down", "removes an emulated lab"),
    "bench-lab": Target("the same migrations on the embedded testbed and on a lab", "migrate.cli.bench_lab"),
    "bench-lab-baseline": _bench(
        "make baseline embedded and on a lab, alternating", "tests.bench.bench_baseline_lab", "lab-baseline"
    ),
    "bench-lab-peering": _bench(
        "PEERING=bgp,bfd runs embedded and on a lab, alternating", "tests.bench.bench_peering_lab", "lab-peering"
    ),
    "test": Target("lint, test-unit, check-helpers, test-integration"),
    "test-unit": Target("pytest tests/unit (no root)"),
    "test-integration": Target("pytest tests/integration (root, real tools; skips say why)"),
    "lint": Target("ruff check and ruff format --check"),
    "apt": Target("(setup) the Debian packages (root)"),
    "venv": Target("(setup) .venv with the suite installed"),
    "helpers": Target("(setup) builds vrgen/vrsink and vrsampler"),
    "check-helpers": Target("ASan/UBSan builds of the C helpers and their self-tests"),
    "qemu": Target("(setup) fetches the default QEMU release (or QEMU=, QEMU_FIRMWARE=) into ~/.cache/vrmig/qemu"),
    "libvirt": Target("(setup) fetches DRIVER=libvirt's libvirt release (or LIBVIRT=) into ~/.cache/vrmig/qemu"),
    "guest": Target("(setup) the router guest images (FRR and BIRD; another release with ROUTER=)"),
    "criu": Target("(setup) a criu that works on this kernel, and the CRIU host VM image"),
    "xen": Target("(setup) the nested Xen host image"),
    "images": Target("(setup) the router disk images of profiles/ that the tests migrate (routers/recipes/)"),
    "clean": Target("removes the built C helpers"),
    "help": Target("this list; make help T=<target> lists a target's variables"),
}
