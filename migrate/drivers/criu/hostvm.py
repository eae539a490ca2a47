"""CRIU_HOST=vm: run a whole ``HV=criu`` experiment inside a VM that boots Debian's generic kernel.

Why: ``criu pre-dump --track-mem`` (MODE=precopy) needs soft-dirty page tracking
(``CONFIG_MEM_SOFT_DIRTY``), which some host kernels lack (this machine's 6.18 among them).  The VM
(:mod:`routers.criu_vm_image`) boots Debian's kernel, which has it, with *this machine's own root file
system* read-only over 9p under a tmpfs overlay: the suite, its venv, criu and the router rootfs
are the host's; only the kernel differs.  The results root is shared read-write, so the run's
directory appears where a local run would put it.

Outer side (:func:`run_in_vm`, on the host): writes the job (scenario, results root, the host's
facts) into the run's private state directory, boots QEMU with four 9p exports (hostroot, modules,
results, job), follows the VM's console (``criuvm-console.log`` in the run directory at the end),
and stops QEMU by PID in ``finally``.  Inside the VM, ``python -m migrate.experiment.vm_job <job>``
(:func:`main`) runs the usual :func:`migrate.experiment.run.run`: the whole testbed (namespaces, container,
traffic, probes, sampler) lives in the VM, on the VM's one clock, and ``meta.json`` says so
(``criu_host``).  The analysis (summary.json and the plot, derived from the raw traces alone)
runs on the outer host once the VM has stopped: the same code on the host's CPU, where under
TCG it took ~40 s a run inside the VM.  Everything in the VM is emulated where the host has no KVM, so its figures
describe that VM, not this machine's kernel."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from migrate.core import meta as metamod
from migrate.core.errors import ConfigError, DependencyError, Interrupted, MigrationError, VrmigError
from migrate.core.procs import LineTail, Proc
from migrate.core.registry import Registry, mark_dead_run
from migrate.core.rundir import (
    ACTIONS_JSONL,
    CRIUVM_CONSOLE_LOG,
    META_JSON,
    QMP_EVENTS_JSONL,
    QMP_SAMPLES_JSONL,
    read_meta,
    write_meta,
)
from migrate.core.sighold import interruptible
from migrate.drivers.kvm.accel import detect_accel
from migrate.model.scenario import Scenario
from migrate.testbed.results import check_results_root, is_opening, mark_results_root

log = logging.getLogger(__name__)

INNER_ENV = "VRMIG_CRIUVM_INNER"  # set by the VM's /init: run() executes locally there
BOOT_MARK, EXIT_MARK, FAIL_MARK = "VRMIG-CRIUVM-BOOT", "VRMIG-CRIUVM-EXIT", "VRMIG-CRIUVM-FAIL"
RUNDIR_MARK, ERROR_MARK = "VRMIG-CRIUVM-RUNDIR", "VRMIG-CRIUVM-ERROR"
CONSOLE_NAME = CRIUVM_CONSOLE_LOG
VM_MEM_MIB = 3072
VM_CPUS_MAX = 4
BOOT_TIMEOUT_S = 180.0  # kernel + modules + 9p root under TCG: ~10 s here
OVERHEAD_S = 900.0  # Python start-up over 9p and the testbed inside the VM (TCG)
POLL_S = 0.05
ERRORS: dict[int, type[VrmigError]] = {2: ConfigError, 3: DependencyError, 130: Interrupted}


#: where a VM run's summary comes from (meta.json's ``criu_host.analysis``)
ANALYSIS_WHERE = "on the outer host after the VM stopped, from the run's raw traces"


def in_vm() -> bool:
    """True inside the CRIU host VM (``run()`` then executes locally)."""
    return os.environ.get(INNER_ENV) == "1"


def _qemu_argv(image: Any, accel: str, job_dir: Path, results_root: Path, repo: Path) -> list[str]:
    cpus = max(1, min(os.cpu_count() or 1, VM_CPUS_MAX))
    p9 = "security_model=none,multidevs=remap"
    exports = (
        ("hostroot", Path("/"), True),
        ("modules", image.modules_dir, True),
        ("job", job_dir, True),
        ("results", results_root, False),
    )
    argv = [
        "qemu-system-x86_64", "-name", "vrmig-criu-host", "-machine", "q35",
        "-accel", "kvm" if accel == "kvm" else "tcg,thread=multi", "-cpu", "host" if accel == "kvm" else "max",
        "-m", str(VM_MEM_MIB), "-smp", str(cpus), "-nodefaults", "-no-user-config", "-display", "none",
        "-vga", "none", "-no-reboot", "-serial", "stdio", "-monitor", "none",
        "-kernel", str(image.kernel), "-initrd", str(image.initrd),
        "-append", f"console=ttyS0 panic=-1 quiet vrmig.repo={repo} vrmig.python={sys.executable} "
                   f"vrmig.results={results_root}",
    ]  # fmt: skip
    for i, (tag, path, ro) in enumerate(exports):
        argv += ["-fsdev", f"local,id=fs{i},path={path},{p9}" + (",readonly=on" if ro else "")]
        argv += ["-device", f"virtio-9p-pci,fsdev=fs{i},mount_tag={tag}"]
    return argv


@dataclass
class _Watch:
    """What the host saw on the VM's console."""

    lines: list[str] = field(default_factory=list)
    run_dir: Path | None = None
    error: tuple[int, str] | None = None  # (exit code, message) of a VRMIG-CRIUVM-ERROR line
    fail: str | None = None

    def last(self, n: int = 8) -> str:
        """The last ``n`` console lines, for messages."""
        return " | ".join(line for line in self.lines[-n:] if line.strip())


def _watch(proc: Proc, console: LineTail, scenario: Scenario) -> _Watch:
    """Follow the VM's console until QEMU exits (or the VM overruns its time): markers are
    recorded, the suite's own lines logged."""
    w = _Watch()
    booted = False
    deadline = time.monotonic() + BOOT_TIMEOUT_S
    while True:
        alive = proc.alive()  # read after this: the lines of an exited VM are all there
        for line in console.new_lines(final=not alive):
            w.lines.append(line)
            if line.startswith(BOOT_MARK):
                booted = True
                deadline = time.monotonic() + scenario.boot_timeout_s + scenario.duration_s
                deadline += scenario.migrate_timeout_s + OVERHEAD_S
                log.info("CRIU host VM up: %s", line.removeprefix(BOOT_MARK).strip())
            elif line.startswith(RUNDIR_MARK):
                w.run_dir = Path(line.removeprefix(RUNDIR_MARK).strip())
            elif line.startswith(ERROR_MARK):
                code, _, msg = line.removeprefix(ERROR_MARK).strip().partition(" ")
                w.error = (int(code) if code.isdigit() else 1, msg)
            elif line.startswith(FAIL_MARK):
                w.fail = line.removeprefix(FAIL_MARK).strip()
            elif booted and line.strip() and not line.startswith(EXIT_MARK):
                log.info("vm: %s", line)
        if not alive:
            return w
        if time.monotonic() > deadline:
            w.fail = w.fail or f"the CRIU host VM did not {'finish' if booted else 'boot'} in time ({w.last()})"
            return w
        time.sleep(POLL_S)


def _image_and_accel() -> tuple[Any, str, str]:
    """Checks before anything is created: root, the VM image, QEMU; the accelerator and why."""
    from routers.criu_vm_image import criuvm_image
    from routers.errors import NotBuiltError

    if os.geteuid() != 0:
        raise DependencyError("vrmig must run as root (it creates network namespaces): run it as root")
    try:
        image = criuvm_image()
    except NotBuiltError as err:
        raise DependencyError(str(err)) from None
    if shutil.which("qemu-system-x86_64") is None:
        raise DependencyError("qemu-system-x86_64 not found: run `make setup`")
    accel, why = detect_accel()
    return image, accel, why


def run_in_vm(scenario: Scenario, results_root: Path, analyse: Callable[[Path], None]) -> Path:
    """Run ``scenario`` inside the CRIU host VM; return its results directory (on the host).
    ``analyse(run_dir)`` derives each run directory's summary here, after the VM stopped (the
    VM's run skips it: :data:`ANALYSIS_WHERE`)."""
    from migrate.testbed.builder import new_prefix

    check_results_root(results_root)
    image, accel, why = _image_and_accel()
    results_root = results_root.resolve()
    mark_results_root(results_root)
    before = {p.name for p in results_root.iterdir()}
    registry = Registry(new_prefix())
    registry.open()  # private (0700); exported read-only as the job: job.json, state, console log
    console = LineTail(registry.dir / "console.log")
    try:
        job = {
            "scenario": scenario.to_dict(),
            "results_root": str(results_root),
            "env": {k: v for k, v in os.environ.items() if k in ("VRMIG_CACHE", "VRMIG_STATE")},
            "criu_host": {
                "kind": "vm",
                "why": "criu pre-dump needs soft-dirty page tracking; the VM boots a kernel that has it",
                "kernel": image.manifest["kernel"],
                "accel": accel,
                "accel_reason": why,
                "vm_mem_mib": VM_MEM_MIB,
                "root": "this machine's root file system, read-only over 9p under a tmpfs overlay",
                "analysis": ANALYSIS_WHERE,
                "outer_host": metamod.host_facts(),
            },
        }
        (registry.dir / "job.json").write_text(json.dumps(job, indent=1))
        argv = _qemu_argv(image, accel, registry.dir, results_root, metamod.REPO)
        with interruptible():
            log.info("booting the CRIU host VM (kernel %s, accel=%s)", image.release, accel)
            proc = Proc("criu-host-vm", argv, registry, registry.dir, stdout_name="console.log").start()
            w = _watch(proc, console, scenario)
    except Interrupted as err:
        _mark_new_runs(results_root, before, f"{err}: the CRIU host VM was stopped mid-run", interrupted=True)
        for made in _new_run_dirs(results_root, before):
            analyse(made)
        raise Interrupted(f"{err}; the CRIU host VM was stopped") from None
    finally:
        console_bytes = console.path.read_bytes() if console.path.exists() else b""
        problems = registry.teardown()
        if problems:
            log.warning("CRIU host VM teardown: %s", "; ".join(problems))
    run_dir = w.run_dir or _new_run_dir(results_root, before)
    if run_dir is None:
        if w.error is not None:
            raise ERRORS.get(w.error[0], VrmigError)(w.error[1])
        raise MigrationError(f"the CRIU host VM produced no run: {w.fail or w.last()}")
    # a run the VM left 'running' (the VM died or timed out)
    _mark_new_runs(results_root, before, f"the CRIU host VM ended mid-run: {w.fail or w.last(3)}")
    (run_dir / CONSOLE_NAME).write_bytes(console_bytes)
    if w.fail:
        log.error("CRIU host VM: %s", w.fail)
    for made in _new_run_dirs(results_root, before):
        analyse(made)
    return run_dir


def _new_run_dirs(results_root: Path, before: set[str]) -> list[Path]:
    return sorted(
        p for p in results_root.iterdir() if p.name not in before and (p / META_JSON).exists() and not is_opening(p)
    )


def _new_run_dir(results_root: Path, before: set[str]) -> Path | None:
    new = _new_run_dirs(results_root, before)
    return new[-1] if new else None


def reached_phase(run_dir: Path, mode: str | None) -> str:
    """The phase a run had reached by its records (its failure class if it ended there), with the
    migration window of ``analysis.metrics.window``: no ``migrate`` action yet: setup; no completed end
    yet: migration; else post-migration."""
    from analysis.load import read_jsonl
    from analysis.metrics.window import migration_window

    def rows(name: str) -> list[dict[str, Any]]:
        try:
            return read_jsonl(run_dir / name)
        except OSError:
            return []

    window = migration_window(rows(ACTIONS_JSONL), rows(QMP_EVENTS_JSONL), rows(QMP_SAMPLES_JSONL), mode)
    if window is None:
        return "setup"
    if window.end_ns is None or window.end_status != "completed" or window.end_source == "last-sample":
        return "migration"
    return "post-migration"


def _mark_new_runs(results_root: Path, before: set[str], why: str, interrupted: bool = False) -> None:
    """Close the runs the VM left 'running': interrupted (an operator stop) or failed (the VM died
    or overran its time), classed by the phase their records reached."""
    for p in results_root.iterdir():
        if p.name in before or not (p / META_JSON).exists() or is_opening(p):
            continue
        try:
            meta = read_meta(p)
        except (OSError, ValueError):
            meta = None
        if not isinstance(meta, dict):
            mark_dead_run(p, why)  # logs why it cannot
        elif meta.get("status") in (None, "running"):
            mode = (meta.get("scenario") or {}).get("mode")
            cls = "interrupted" if interrupted else reached_phase(p, mode)
            meta.update(status="interrupted" if interrupted else "failed", failure=why, failure_class=cls)
            write_meta(p, meta)
