"""What a testbed host has, read on the host itself in one round trip: sent as the text of
``python3 -c`` by :mod:`migrate.testbed.hosts` and :mod:`migrate.labs.check`, so it uses only
the standard library (Python 3.7 or later) and imports nothing of the project.

``facts <json>``: kernel, Python, the tools and their versions, whether KVM can create a VM, the
deployed helpers under ``deploy_dir``, and every interface with its flags and addresses
(``ip -j addr``).  ``sync``: how the clock is synchronised (chrony, ptp4l, systemd-timesyncd,
and the kernel's own unsynchronised flag).  Both print one JSON object."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

KVM_GET_API_VERSION = 0xAE00
KVM_CREATE_VM = 0xAE01
TIME_ERROR = 5  # adjtimex(2): the clock is not synchronised (STA_UNSYNC)
VERSION_ARGS = {
    "qemu-system-x86_64": ["--version"],
    "irtt": ["version"],
    "virsh": ["--version"],
    "libvirtd": ["--version"],
    "python3": ["--version"],
    "chronyc": ["--version"],
}


def source() -> str:
    """This module's text, to send as ``python3 -c``."""
    return Path(__file__).read_text()


def _out(argv: list[str], timeout: float = 5.0, env: dict | None = None) -> tuple[int, str, str]:
    try:
        cp = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, env=env)
    except FileNotFoundError:
        return 127, "", f"{argv[0]}: not found"
    except OSError as err:
        return 126, "", f"{argv[0]}: {err.strerror}"
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]}: no answer within {timeout:g} s"
    return cp.returncode, cp.stdout.decode(errors="replace"), cp.stderr.decode(errors="replace")


def kvm() -> dict:
    """Whether KVM can create a VM here (as migrate.drivers.kvm.accel decides it)."""
    flags: set = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    if not flags & {"vmx", "svm"}:
        return {"ok": False, "reason": "CPU has no vmx/svm flag (no hardware virtualization visible)"}
    import fcntl

    try:
        fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    except OSError as err:
        return {"ok": False, "reason": f"cannot open /dev/kvm: {err.strerror}"}
    try:
        vm = fcntl.ioctl(fd, KVM_CREATE_VM, 0)
        os.close(vm)
    except OSError as err:
        return {"ok": False, "reason": f"KVM_CREATE_VM failed: {err.strerror}"}
    finally:
        os.close(fd)
    return {"ok": True, "reason": "vmx/svm present and /dev/kvm creates VMs"}


def _deployed(deploy: str, sub: str, record: str, how: Callable[[dict], tuple], timeout: float) -> dict:
    """The releases hosts-setup deployed under ``<deploy>/<sub>/<spec>/<record>``: per spec, the
    record, the first line ``--version`` prints now (None if it does not run), and its exit
    status and stderr; ``how(record)`` gives the (argv, environment) to ask (a record it cannot
    read is left out)."""
    out = {}
    base = os.path.join(deploy, sub)
    for spec in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        try:
            with open(os.path.join(base, spec, record)) as f:
                rec = json.load(f)
            argv, env = how(rec)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        rc, so, se = _out([*argv, "--version"], timeout, env)
        first = so.strip().splitlines()[:1]
        out[spec] = {"record": rec, "version": first[0] if rc == 0 and first else None, "rc": rc, "stderr": se}
    return out


def stacks(deploy: str) -> dict:
    """The QEMU releases hosts-setup deployed (``<deploy>/qemu/<spec>/qemu.json``): per spec, the
    record, the first line its binary's ``--version`` prints now (None if it does not run) and
    whether its libvirt ``<emulator>`` script is there and executable."""
    out = {}
    how = lambda rec: (rec["argv"][: rec["argv"].index(rec["binary"]) + 1], None)  # noqa: E731
    for spec, d in _deployed(deploy, "qemu", "qemu.json", how, 5.0).items():
        emu = d["record"].get("emulator")
        out[spec] = {"record": d["record"], "version": d["version"],
                     "error": None if d["rc"] == 0 else (d["stderr"].strip() or f"exit {d['rc']}"),
                     "emulator_ok": bool(emu) and os.path.isfile(emu) and os.access(emu, os.X_OK)}  # fmt: skip
    return out


def libvirt_stacks(deploy: str) -> dict:
    """The libvirt releases hosts-setup deployed (``<deploy>/libvirt/<spec>/libvirt.json``): per
    spec, the record and the first line its libvirtd's ``--version`` prints now (None if it does
    not run, with the error)."""

    def how(rec: dict) -> tuple:
        env = {str(k): str(v) for k, v in (rec.get("env") or {}).items()}
        return [str(a) for a in rec["argv"]], {**os.environ, **env}

    out = {}
    for spec, d in _deployed(deploy, "libvirt", "libvirt.json", how, 30.0).items():
        last = d["stderr"].strip().splitlines()[-1:] or [f"exit {d['rc']}"]
        out[spec] = {"record": d["record"], "version": d["version"], "error": None if d["rc"] == 0 else last[0]}
    return out


def images(deploy: str) -> dict:
    """The router guest images hosts-setup put there (``<deploy>/images/<profile>/manifest.json``):
    per profile, the SHA-256 of its manifest (hosts-setup copies it byte for byte, so it equals
    the orchestrator's for the same build) and the router version it names."""
    import hashlib

    out = {}
    base = os.path.join(deploy, "images")
    for profile in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        if profile == "xen":  # HV=xen's nested host files, not a router image
            continue
        try:
            with open(os.path.join(base, profile, "manifest.json"), "rb") as f:
                raw = f.read()
            router = json.loads(raw).get("router") or {}
        except (OSError, ValueError, AttributeError):
            continue
        out[profile] = {"manifest_sha256": hashlib.sha256(raw).hexdigest(),
                        "router_version": router.get("version") if isinstance(router, dict) else None}  # fmt: skip
    return out


def cpu_model() -> str | None:
    """The first ``model name`` of /proc/cpuinfo (None where it has none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and ":" in line:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def nics(names: list) -> dict:
    """Per interface of ``names``: its driver (the bound device driver, or for a virtual one its
    link kind from ``ip -d -j link``), its MTU and its speed in Mbit/s (None where the kernel
    reports none)."""
    kinds = {}
    rc, out, _ = _out(["ip", "-d", "-j", "link", "show"])
    if rc == 0:
        for link in json.loads(out):
            kinds[link.get("ifname")] = (link.get("linkinfo") or {}).get("info_kind")
    out_d = {}
    for name in names:
        base = Path("/sys/class/net") / name
        driver = None
        if (base / "device" / "driver").exists():
            driver = os.path.basename(os.path.realpath(base / "device" / "driver"))
        speed = None
        try:
            speed = int((base / "speed").read_text().strip())
        except (OSError, ValueError):
            pass
        mtu = None
        try:
            mtu = int((base / "mtu").read_text().strip())
        except (OSError, ValueError):
            pass
        out_d[name] = {"present": base.exists(), "driver": driver or kinds.get(name), "mtu": mtu,
                       "speed_mbps": speed if speed is not None and speed > 0 else None}  # fmt: skip
    return out_d


def facts(args: dict) -> dict:
    """Everything hosts-check compares with the inventory."""
    tools = {t: shutil.which(t) for t in args.get("tools", [])}
    versions = {}
    for t, path in tools.items():
        if path and t in VERSION_ARGS:
            rc, out, err = _out([path, *VERSION_ARGS[t]])
            first = (out or err).strip().splitlines()[:1]
            versions[t] = first[0] if rc == 0 and first else None
    deploy = args.get("deploy_dir") or ""
    helpers = {}
    for h in args.get("helpers", []):
        p = os.path.join(deploy, "bin", h)
        helpers[h] = {"path": p, "ok": os.path.isfile(p) and os.access(p, os.X_OK)}
    links = None
    links_error = None
    if tools.get("ip") or shutil.which("ip"):
        rc, out, err = _out(["ip", "-j", "addr", "show"])
        if rc == 0:
            links = json.loads(out)
        else:
            links_error = err.strip() or f"ip exited {rc}"
    else:
        links_error = "ip not installed"
    return {
        "kernel": os.uname().release,
        "hostname": os.uname().nodename,
        "cpu_model": cpu_model(),
        "nics": nics(args.get("nics", [])),
        "python": sys.version.split()[0],
        "tools": tools,
        "versions": versions,
        "kvm": kvm() if args.get("kvm") else None,
        "helpers": helpers,
        "stacks": stacks(deploy) if deploy else {},
        "libvirt_stacks": libvirt_stacks(deploy) if deploy and args.get("kvm") else {},
        "images": images(deploy) if deploy and args.get("kvm") else {},
        "links": links,
        "links_error": links_error,
    }


def _running(comm: str) -> bool:
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if Path("/proc", d, "comm").read_text().strip() == comm[:15]:
                    return True
            except OSError:
                continue
    return False


def _kernel_synchronised() -> dict:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        buf = ctypes.create_string_buffer(512)  # struct timex, modes = 0: read only
        state = libc.adjtimex(buf)
    except (OSError, AttributeError) as err:
        return {"synchronised": None, "reason": f"adjtimex unavailable: {err}"}
    if state < 0:
        return {"synchronised": None, "reason": f"adjtimex failed: {os.strerror(ctypes.get_errno())}"}
    return {"synchronised": state != TIME_ERROR, "state": state}


def _chrony() -> dict | None:
    if not shutil.which("chronyc"):
        return None
    rc, out, err = _out(["chronyc", "-n", "tracking"])
    if rc != 0:
        return {"running": False, "reason": (err or out).strip() or f"chronyc exited {rc}"}
    fields = {}
    for line in out.splitlines():
        k, sep, v = line.partition(":")
        if sep:
            fields[k.strip()] = v.strip()
    offset_s = None
    words = fields.get("System time", "").split()
    if len(words) >= 3 and words[1] == "seconds":
        try:
            offset_s = float(words[0]) * (1 if words[2] == "fast" else -1)
        except ValueError:
            offset_s = None
    leap = fields.get("Leap status")
    return {
        "running": True,
        "reference": fields.get("Reference ID"),
        "stratum": fields.get("Stratum"),
        "leap_status": leap,
        "synchronised": None if leap is None else leap != "Not synchronised",
        "system_offset_s": offset_s,
    }


def sync() -> dict:
    """The clock's synchronisation: the first of chrony, ptp4l, systemd-timesyncd that runs."""
    chrony = _chrony()
    ptp4l = {"running": _running("ptp4l"), "phc2sys_running": _running("phc2sys")}
    timesyncd = {
        "running": _running("systemd-timesyncd"),
        "synchronised_flag": os.path.exists("/run/systemd/timesync/synchronized"),
    }
    kernel = _kernel_synchronised()
    out = {
        "chrony": chrony,
        "chrony_reason": None if chrony is not None else "chronyc not installed",
        "ptp4l": ptp4l,
        "timesyncd": timesyncd,
        "kernel": kernel,
    }
    if chrony and chrony.get("running"):
        out.update(method="chrony", synchronised=chrony.get("synchronised"))
    elif ptp4l["running"]:
        # ptp4l disciplines the NIC's clock; the system clock follows it only through phc2sys
        out.update(method="ptp4l", synchronised=kernel["synchronised"] if ptp4l["phc2sys_running"] else None)
        if not ptp4l["phc2sys_running"]:
            out["reason"] = "ptp4l runs but phc2sys does not: the system clock may not follow PTP"
    elif timesyncd["running"]:
        out.update(method="timesyncd", synchronised=timesyncd["synchronised_flag"])
    else:
        out.update(method="none", synchronised=False, reason="no chrony, ptp4l or systemd-timesyncd running")
    return out


def main(argv: list) -> int:
    """``facts <json>`` or ``sync``: print one JSON object."""
    mode = argv[0] if argv else ""
    if mode == "facts":
        print(json.dumps(facts(json.loads(argv[1]) if len(argv) > 1 else {})))
    elif mode == "sync":
        print(json.dumps(sync()))
    else:
        print(f"usage: probe_host facts <json> | sync (got {argv!r})", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
