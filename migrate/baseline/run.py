"""``make baseline``: forwarding performance of the router without migration (papers 004 Fig. 2,
001 and 000) over hypervisor, NIC, IP version, frame size, offered rate, co-located routers and
neighbour load.

For each configuration (hv, nic, routers, load) a fresh testbed is built (namespaces
``<prefix>-*``, registered first), the routers and the neighbour are started, then every point
(ip, frame size, rate, repetition; plus the NDR search with SEARCH=ndr) is measured by
:mod:`migrate.baseline.point`.  Raw data lands in ``<results>/<time>-baseline-<hvs>/points/``;
``analysis.baseline.summary`` turns it into baseline.csv, summary.json and the plots.  A run that
stopped can be resumed (RESUME=<dir>): points whose point.json says ``ok`` are not redone."""

from __future__ import annotations

import datetime as dt
import logging
import shutil
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from migrate.baseline import gencap
from migrate.baseline.config import ConfigJob, ConfigRun
from migrate.baseline.spec import LOAD_FRAME_BYTES, BaselineSpec, Config
from migrate.core.atomic import write_json
from migrate.core.errors import DependencyError, Interrupted, VrmigError
from migrate.core.progress import Progress
from migrate.core.runctx import open_run
from migrate.core.rundir import GEN_JSON, INSTRUMENT_FORMAT, KIND_BASELINE, SINK_JSON, read_meta, write_meta
from migrate.core.sighold import Abort
from migrate.testbed.results import check_results_root, new_run_dir

log = logging.getLogger(__name__)

TOOLS = ("ip", "ping", "irtt", "ss", "unshare", "chroot")
NOTES = {
    "rates": "Ethernet-frame bits incl. 4 B FCS, no preamble/IFG; RATES are per router (each router has its own flow)",
    "forwarded": "packets received at the flow's sink / the generator's send span",
    "cpu": "CPU-seconds per second between snapshots around the generators (/proc/stat, /proc/<pid>/stat)",
    "softirq": (
        "host-wide /proc/stat softirq only: forwarding between namespaces runs in the softirq context of the "
        "sending CPU (often inside the generator's system time), so it cannot be attributed to one namespace"
    ),
    "rtt": "irtt C -> D through router 0, probes sent while the generators ran",
    "ndr": "RFC 2544-style binary search per (configuration, IP, size, repetition), loss <= 0.1 %",
    "load_cpu_kvm": "LOAD=cpu with HV=kvm: the busy loop is a host process in R1 (the guest has no agent to run one)",
    "load_cpu_criu": (
        "LOAD=cpu with HV=criu: the busy loop runs inside the neighbour container's mount/uts/ipc/net namespaces "
        "(nsenter, no pid namespace so that its PID is the spinning process)"
    ),
    "cpu_criu": (
        "HV=criu: cpu_router_daemons = every process of the container (init, daemons, helpers, found below its "
        "init at each snapshot); forwarding runs in the shared kernel's softirq, as for HV=none; cpu_hv is empty "
        "(no hypervisor process)"
    ),
}


def _kvm_facts(spec: BaselineSpec) -> dict[str, Any]:
    from migrate.core.stack import DEFAULT_QEMU
    from migrate.drivers.kvm.accel import detect_accel
    from migrate.drivers.kvm.driver import QEMU, qemu_build, qemu_version

    if shutil.which(QEMU) is None:
        raise DependencyError(f"{QEMU} not found: run `make setup` (Debian package qemu-system-x86)")
    auto, reason = detect_accel()
    if spec.accel == "kvm" and auto != "kvm":
        raise DependencyError(f"ACCEL=kvm requested but KVM is unusable here: {reason}")
    accel = auto if spec.accel == "auto" else spec.accel
    facts: dict[str, Any] = {"qemu": qemu_version(), "accel": accel, "accel_reason": reason}
    if "kvm" in spec.hvs:  # the router VM runs the default stack's QEMU (HV=xen's nested hosts the host's)
        build = qemu_build(DEFAULT_QEMU)
        facts |= {"qemu": build.version, "qemu_argv": list(build.argv), "stack": {"qemu": build.to_meta()}}
    return facts


def _check_e1000(manifest: dict[str, Any], profile: str) -> None:
    mods = manifest.get("modules", {})
    if "e1000" in mods.get("load_order", []) or "e1000" in mods.get("builtin", []):
        return
    kernel = manifest.get("kernel_package", {}).get("name", "?")
    raise DependencyError(
        f"NIC=e1000: the {profile} guest image's kernel ({kernel}) has no e1000 driver (Debian's cloud kernel "
        f"lacks it): rebuild the image with `python -m routers build --profile {profile} --kernel-package "
        "linux-image-amd64 --force` (VRMIG_CACHE=<dir> keeps it apart), or use NIC=virtio"
    )


def _criu_facts(spec: BaselineSpec, rootfs: Path | None) -> dict[str, Any]:
    """HV=criu: the container is built from the image's rootfs with its own busybox (no CRIU
    needed: nothing is checkpointed); LOAD=cpu enters the neighbour container with nsenter."""
    from routers.container_image import BUSYBOX, NAMESPACES

    if rootfs is None or not (rootfs / BUSYBOX).exists():
        raise DependencyError(f"HV=criu needs the {spec.router} image's rootfs/ with {BUSYBOX}: run `make setup`")
    if "cpu" in spec.loads and shutil.which("nsenter") is None:
        raise DependencyError("HV=criu with LOAD=cpu needs nsenter (util-linux): run `make setup`")
    return {
        "container": {
            "rootfs_source": str(rootfs),
            "namespaces": [n.lstrip("-") for n in NAMESPACES],
            "how": "routers.container_image.container_argv (unshare, own busybox, pivot_root) started by "
            "migrate.drivers.criu.container.Container; one rootfs copy per router; never checkpointed in a baseline",
        }
    }


def preflight(spec: BaselineSpec) -> dict[str, Any]:
    """Side-effect-free checks: root, tools, the router image (and its rootfs), QEMU and the
    accelerator, e1000 support, the container's rootfs.  Returns facts for meta.json."""
    import os

    from migrate.experiment.instruments import VRGEN, VRSINK
    from routers.errors import RouterError
    from routers.guest import guest_image

    if os.geteuid() != 0:
        raise DependencyError("make baseline must run as root (it creates network namespaces)")
    missing = [str(p) for p in (VRGEN, VRSINK) if not p.exists()] + [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        raise DependencyError(f"missing {', '.join(missing)}: run `make setup`")
    try:
        image = guest_image(spec.router)
    except RouterError as err:
        raise DependencyError(str(err)) from err
    if "none" in spec.hvs and image.rootfs is None:
        raise DependencyError(f"HV=none needs the {spec.router} image's rootfs/: rebuild it with `make setup`")
    facts: dict[str, Any] = {
        "router_image": {
            "kernel": str(image.kernel),
            "rootfs": str(image.rootfs) if image.rootfs else None,
            "router": image.manifest.get("router"),
            "kernel_package": image.manifest.get("kernel_package"),
            "modules": image.manifest.get("modules"),
        },
        "accel": None,
    }
    if "criu" in spec.hvs:
        facts.update(_criu_facts(spec, image.rootfs))
    if "kvm" in spec.hvs or "xen" in spec.hvs:
        facts.update(_kvm_facts(spec))
    if "xen" in spec.hvs:
        from routers.xen_image import xen_image

        try:
            facts["xen_image"] = xen_image(verify=False).manifest.get("hypervisor")
        except RouterError as err:
            raise DependencyError(str(err)) from err
    if "kvm" in spec.hvs:
        if "e1000" in spec.nics:
            _check_e1000(image.manifest, spec.router)
    return facts


def check_generator(spec: BaselineSpec) -> dict[str, Any] | None:
    """Measure the generator's unpaced capability and refuse rates above it (GEN_CHECK=1)."""
    if not spec.gen_check:
        return None
    needs: list[tuple[int, int, int, str]] = []
    hi = spec.ndr_hi_bps
    if hi is not None and "udp" in spec.protos:  # PROTO=tcp: vrtcp, not vrgen, sends
        needs += [(ip, size, hi, "RATES") for ip in spec.ips for size in spec.sizes]
    if "smallpkts" in spec.loads:
        needs.append((4, LOAD_FRAME_BYTES, spec.load_rate_bps, "LOAD_RATE"))
    if not needs:
        return None
    scratch = Path(tempfile.mkdtemp(prefix="vrmig-gencap-"))
    try:
        log.info("measuring the generator's capability (%d frame size/IP combination(s))", len({n[:2] for n in needs}))
        caps = gencap.measure([(ip, f, bps) for ip, f, bps, _ in needs], scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    gencap.require(needs, caps)
    return {
        f"ip{c.ip}-{c.frame_bytes}B": {"max_bps": c.max_bps, "max_pps": c.max_pps, "trials_bps": c.trials_bps}
        for c in caps.values()
    }


class Plan(Protocol):
    """Where a baseline runs, checked before anything starts: this machine's embedded testbed
    (:class:`LocalPlan`) or a lab's hosts (:class:`migrate.baseline.lab.LabPlan`)."""

    def preflight(self) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The facts for meta.json and the generator's measured capability (None: not measured)."""
        ...

    def add_meta(self, meta: dict[str, Any]) -> None:
        """What a new baseline on this testbed adds to its meta.json after the common fields."""
        ...

    def config_run(self, job: ConfigJob) -> ConfigRun:
        """The run of one configuration (not started yet)."""
        ...


class LocalPlan:
    """A baseline on the embedded testbed: namespaces, routers and helpers of this machine."""

    def __init__(self, spec: BaselineSpec) -> None:
        self.spec = spec

    def preflight(self) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """This machine's checks (:func:`preflight`), then the generator's capability (GEN_CHECK=1)."""
        facts = preflight(self.spec)
        return facts, check_generator(self.spec)

    def add_meta(self, meta: dict[str, Any]) -> None:
        """Nothing beyond the common fields."""

    def config_run(self, job: ConfigJob) -> ConfigRun:
        """``job``'s configuration in fresh namespaces of this machine."""
        return ConfigRun(job)


def choose_plan(spec: BaselineSpec, testbed: Path | None) -> Plan:
    """The plan of a baseline on the lab inventory ``testbed`` (checked now: bad input, an
    unreachable host or a missing tool is one line, nothing started), or on the embedded testbed."""
    from migrate.baseline import lab as labmod

    return labmod.plan(spec, testbed) if testbed is not None else LocalPlan(spec)


def _new_run_dir(results_root: Path, spec: BaselineSpec, fill: Callable[[Path], None] | None = None) -> Path:
    return new_run_dir(results_root, f"baseline-{'+'.join(spec.hvs)}", "baseline", fill)


def load_resume(run_dir: Path) -> tuple[BaselineSpec, dict[str, Any]]:
    """The spec and meta of an earlier baseline run (RESUME=<dir>)."""
    from migrate.core.errors import ConfigError

    try:
        meta = read_meta(run_dir)
    except (OSError, ValueError) as err:
        raise ConfigError(f"RESUME={run_dir}: no readable meta.json ({err})") from None
    if meta.get("kind") != "baseline":
        raise ConfigError(f"RESUME={run_dir} is not a baseline results directory (kind={meta.get('kind')!r})")
    return BaselineSpec.from_dict(meta["spec"]), meta


def _initial_meta(spec: BaselineSpec, facts: dict[str, Any], gen: dict[str, Any] | None) -> dict[str, Any]:
    """A new baseline's own meta.json fields, after the opening every run kind shares."""
    from migrate.baseline.plan import __doc__ as plan_doc

    accel = facts.get("accel")
    notes = dict(NOTES)
    if accel == "tcg":
        notes["accel"] = "accel=tcg: no usable KVM here, so every HV=kvm figure describes QEMU's TCG emulator, not KVM"
    return {
        "spec": spec.to_dict(),
        "accel": accel,
        "hypervisor": {k: v for k, v in facts.items() if k != "router_image"},
        "stack": facts.get("stack"),  # the router VM's QEMU (docs/stack.md)
        "router_image": facts["router_image"],
        "hv_none_router": (
            "the router image's rootfs chrooted (unshare --mount, private proc/sys/tmpfs) inside network namespace "
            "RT<k>: the image's own vrmig-router script starts the same zebra+staticd (FRR) or bird binaries and "
            "libraries as the VM; IPv4/IPv6 forwarding on in that namespace (routers.guest.namespace_argv)"
        ),
        "hv_criu_router": (
            "the router container of HV=criu's migrations (routers.container_image, "
            "migrate.drivers.criu.container): its own copy of the image's rootfs, "
            "mount/pid/uts/ipc/net namespaces, pivot_root, the same vrmig-router as PID 1's child; "
            " eth0/eth1 are veths whose host ends tapL<k>/tapR<k> hang off R1's bridges; not migrated"
        ),
        "address_plan": plan_doc,
        "generator_capability": gen,
        "tools": _tool_versions(),
        "notes": notes,
        "configs": {},
        "resumed_utc": [],
        "loadavg_start": _loadavg(),
    }


def _tool_versions() -> dict[str, str | None]:
    """Versions of the baseline's own tools (host_facts has irtt, iproute2, pyroute2, numpy)."""
    import subprocess
    from importlib.metadata import version

    from migrate.experiment.instruments import VRGEN

    def first_line(argv: list[str]) -> str | None:
        try:
            res = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return (res.stdout or res.stderr).strip().splitlines()[0] if (res.stdout or res.stderr).strip() else None

    return {
        "unshare": first_line(["unshare", "--version"]),
        "ping": first_line(["ping", "-V"]),
        "vrgen": f"{VRGEN} ({GEN_JSON}/{SINK_JSON} format {INSTRUMENT_FORMAT})",
        "matplotlib": version("matplotlib"),
    }


def _loadavg() -> list[float]:
    """1/5/15-minute load averages: the machine may be shared, and the figures move with its load."""
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def run_baseline(
    spec: BaselineSpec,
    results_root: Path,
    resume_dir: Path | None = None,
    campaign: tuple[dict[str, Any], str] | None = None,
    testbed: Path | None = None,
) -> Path:
    """Run (or resume) the baseline matrix; return its results directory.  ``campaign``: the
    (meta.json record, file text) of the campaign file this baseline runs, kept in the directory;
    ``testbed``: a lab inventory whose hosts run it (:mod:`migrate.baseline.lab`)."""
    plan = choose_plan(spec, testbed)  # bad input: nothing started
    if resume_dir is None:
        check_results_root(results_root)
    facts, gen = plan.preflight()

    def describe(meta: dict[str, Any], run_dir: Path) -> None:
        if resume_dir is not None:
            meta["resumed_utc"] = [*meta.get("resumed_utc", []), dt.datetime.now(dt.UTC).isoformat()]
            meta.setdefault("generator_capability_resumed", []).append(gen)
            return
        meta.update(_initial_meta(spec, facts, gen))
        plan.add_meta(meta)
        if campaign is not None:
            meta["campaign"] = campaign[0]
            (run_dir / "campaign.toml").write_text(campaign[1])

    def on_close(meta: dict[str, Any]) -> None:
        meta["loadavg_end"] = _loadavg()

    # a failed configuration is recorded in its own entry and fails the baseline as "setup"; an
    # error outside the configurations ends the command with its own exit status
    def make_dir(fill: Callable[[Path], None]) -> Path:
        return resume_dir or _new_run_dir(results_root, spec, fill)

    with open_run(KIND_BASELINE, make_dir, describe, logger=log, failure_class="setup", records_errors=False,
                  resumable=True, reopen=resume_dir is not None, on_close=on_close,
                  analyse=_analyse) as opened:  # fmt: skip
        meta = opened.meta
        configs = spec.configs()
        with Progress("baseline", sum(spec.sweep_points(c) for c in configs), "points") as progress:
            for config in configs:
                _run_config(spec, config, facts, opened.dir, meta, opened.abort, progress, plan)
        failed = [n for n, c in meta["configs"].items() if c.get("status") != "completed"]
        if failed:
            opened.fail(f"configuration(s) failed: {', '.join(failed)}")
        else:
            opened.complete()
    return opened.dir


def _run_config(
    spec: BaselineSpec,
    config: Config,
    facts: dict[str, Any],
    run_dir: Path,
    meta: dict[str, Any],
    abort: Abort,
    progress: Progress,
    plan: Plan,
) -> None:
    info: dict[str, Any] = {"status": "running", "started_utc": dt.datetime.now(dt.UTC).isoformat()}
    meta["configs"][config.name] = info
    run = plan.config_run(ConfigJob(spec, config, facts, run_dir, abort, info, progress))
    info["prefix"] = run.registry.prefix  # in meta.json before anything is created under it
    write_meta(run_dir, meta)
    try:
        run.execute()
        info["status"] = "completed"
        progress.skip(run.unfinished())  # found finished on resume
    except Interrupted:
        info["status"] = "interrupted"
        raise
    except VrmigError as err:
        info["status"], info["failure"] = "failed", str(err)
        log.error("configuration %s failed: %s", config.name, err)
        progress.skip(run.unfinished(), failed_reason="configuration failed")
    except Exception as err:
        info["status"], info["failure"] = "failed", f"internal error: {type(err).__name__}: {err}"
        log.exception("internal error in configuration %s (a bug in vrmig)", config.name)
        progress.skip(run.unfinished(), failed_reason="configuration failed")
    finally:
        info["finished_utc"] = dt.datetime.now(dt.UTC).isoformat()
        write_meta(run_dir, meta)
        if run.out.is_dir():
            write_json(run.out / "config.json", {"config": config.__dict__, **info})
        if abort.signum is not None and info["status"] != "interrupted":
            raise Interrupted(f"interrupted by {signal.Signals(abort.signum).name}")


def _analyse(run_dir: Path) -> None:
    try:
        from analysis.baseline.summary import analyse_baseline

        analyse_baseline(run_dir)
    except Exception as err:  # analysis must never lose raw data
        log.exception(
            "analysis failed: %s (raw data kept; re-run `python -m analysis.baseline.summary %s`)", err, run_dir
        )
