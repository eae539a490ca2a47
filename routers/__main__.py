"""``python -m routers``: build and inspect router guest images.

    python -m routers build [--profile frr|bird|xorp|all] [--cache DIR] [--force] [--kernel-package PKG]
    python -m routers show [--profile P] [--cache DIR]      # paths + manifest of a built image
    python -m routers check [--profile P] [--timeout S]     # boot it under QEMU until VRMIG-READY
    python -m routers profiles                               # the registry and what is available
    python -m routers xen [--cache DIR] [--force] [--profiles frr bird]  # nested Xen host (make xen)
    python -m routers criuvm [--cache DIR] [--force]  # CRIU host VM for CRIU_HOST=vm (make criu)
    python -m routers disk RECIPE [--cache DIR] [--force]   # a bootable disk image (routers/recipes)
    python -m routers oci RECIPE [--cache DIR] [--force]    # an OCI image layout (container routers)
    python -m routers seed OUT --user-data F --meta-data F [--network-config F]  # NoCloud seed
    python -m routers host-packages                          # Debian packages the build needs

Errors print one line and exit non-zero (3: something missing, e.g. XORP or the image).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from routers import build as build_mod
from routers import guest, profiles
from routers.errors import RouterError, SeedError


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def _cmd_build(a: argparse.Namespace) -> int:
    names = profiles.names() if a.profile == "all" else [a.profile]
    for name in names:
        prof = profiles.get(name)
        if a.profile == "all" and not prof.debian:
            ok, reason = prof.available()
            if not ok:
                print(f"{name}: skipped: {reason}")
                continue
        res = build_mod.build(name, a.cache, force=a.force, kernel_package=a.kernel_package)
        files = res.image.manifest["files"]
        state = f"built in {res.seconds:.1f} s" if res.built else "up to date"
        print(
            f"{name}: {state}: {res.image.kernel} ({_mb(files['vmlinuz']['bytes'])}), "
            f"{res.image.initrd} ({_mb(files['initrd.img']['bytes'])})"
        )
    return 0


def _cmd_xen(a: argparse.Namespace) -> int:
    from routers import xen_image as xen

    image, built, seconds = xen.build(a.cache, force=a.force)
    state = f"built in {seconds:.1f} s" if built else "up to date"
    print(f"xen: {state}: {image.xen.parent} (dom0 initrd {_mb(image.manifest['files']['dom0-initrd.img']['bytes'])})")
    for name in a.profiles:
        print(f"xen: router {name}: {xen.host_initrd(name, a.cache)}")
    return 0


def _cmd_criuvm(a: argparse.Namespace) -> int:
    from routers import criu_vm_image as criuvm

    image, built, seconds = criuvm.build(a.cache, force=a.force)
    state = f"built in {seconds:.1f} s" if built else "up to date"
    print(f"criu-vm: {state}: {image.kernel.parent} (kernel {image.release}, modules {image.modules_dir})")
    return 0


def _cmd_disk(a: argparse.Namespace) -> int:
    from routers import disk_image

    res = disk_image.build(a.recipe, a.cache, force=a.force)
    disk = res.image.manifest["disk"]
    state = f"built in {res.seconds:.1f} s" if res.built else "up to date"
    versions = " ".join(f"{k}={v}" for k, v in res.image.manifest["versions"].items())
    print(f"{res.image.manifest['recipe']}: {state}: {res.image.disk} ({_mb(disk['bytes'])}) {versions}")
    return 0


def _cmd_oci(a: argparse.Namespace) -> int:
    from routers import oci_image

    res = oci_image.build(a.recipe, a.cache, force=a.force)
    img = res.image.manifest["image"]
    state = f"built in {res.seconds:.1f} s" if res.built else "up to date"
    versions = " ".join(f"{k}={v}" for k, v in res.image.manifest["versions"].items())
    print(
        f"{res.image.manifest['recipe']}: {state}: {res.image.layout}:{res.image.tag} {res.image.digest} "
        f"({_mb(img['bytes'])}) {versions}"
    )
    return 0


def _cmd_seed(a: argparse.Namespace) -> int:
    from routers import disk_image

    def text(p: Path | None) -> str | None:
        try:
            return p.read_text() if p is not None else None
        except OSError as err:
            raise SeedError(f"{p}: cannot read it ({err.strerror}): give an existing file") from None

    try:
        out = disk_image.nocloud_seed(a.out, text(a.user_data) or "", text(a.meta_data) or "", text(a.network_config))
    except SeedError as err:
        raise SeedError(f"{a.user_data}: {err}") from None
    print(f"seed: {out} (label {disk_image.SEED_LABEL})")
    return 0


def _cmd_show(a: argparse.Namespace) -> int:
    img = guest.guest_image(a.profile, a.cache)
    print(json.dumps({"kernel": str(img.kernel), "initrd": str(img.initrd), "manifest": img.manifest}, indent=2))
    return 0


def _cmd_check(a: argparse.Namespace) -> int:
    from routers import smoke

    names = (
        [n for n in profiles.names() if n != "xorp" or profiles.get(n).available()[0]]
        if a.profile == "all"
        else [a.profile]
    )
    for name in names:
        booted = smoke.check(name, a.cache, a.timeout)
        print(f"{name}: {booted.ready_line} after {booted.seconds:.1f} s (QEMU TCG, 256 MiB, 1 vCPU)")
    return 0


def _cmd_profiles(_a: argparse.Namespace) -> int:
    for name in profiles.names():
        p = profiles.get(name)
        ok, reason = p.available()
        print(f"{name:8} {'available  ' if ok else 'unavailable'} daemons={','.join(p.daemons)}  {reason}")
    for name in profiles.release_names():
        p = profiles.get(name)
        ok, reason = p.available()
        print(f"{name:8} {'available  ' if ok else 'unavailable'} daemons={','.join(p.daemons)}  {reason}")
    return 0


def _cmd_host_packages(_a: argparse.Namespace) -> int:
    print(" ".join(build_mod.HOST_PACKAGES))
    return 0


PROFILE_HELP = (
    f"{'|'.join(profiles.names())}, a release ({', '.join(profiles.release_names())}) or all "
    f"(default {profiles.DEFAULT_PROFILE})"
)


def _profile_arg(value: str) -> str:
    """``--profile``: a profile, ``<software>@<release>`` or ``all``, as its image name."""
    if value == "all":
        return value
    try:
        return profiles.canonical(value)
    except RouterError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    p = argparse.ArgumentParser(prog="python -m routers", description="Router guest images for vrmig.")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress")
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build the guest image of a profile (idempotent)")
    b.add_argument("--profile", default=profiles.DEFAULT_PROFILE, type=_profile_arg, help=PROFILE_HELP)
    b.add_argument("--cache", type=Path, default=None, help="cache directory (default $VRMIG_CACHE or ~/.cache/vrmig)")
    b.add_argument("--force", action="store_true", help="rebuild even if up to date")
    b.add_argument(
        "--kernel-package",
        default=build_mod.KERNEL_META_PACKAGE,
        help=f"Debian kernel package (default {build_mod.KERNEL_META_PACKAGE}; linux-image-amd64 has e1000)",
    )
    b.set_defaults(func=_cmd_build)
    s = sub.add_parser("show", help="print the paths and manifest of a built image")
    s.add_argument("--profile", default=profiles.DEFAULT_PROFILE, type=_profile_arg, help=PROFILE_HELP)
    s.add_argument("--cache", type=Path, default=None)
    s.set_defaults(func=_cmd_show)
    c = sub.add_parser("check", help="boot the guest under QEMU (TCG) and wait for its READY line")
    c.add_argument("--profile", default=profiles.DEFAULT_PROFILE, type=_profile_arg, help=PROFILE_HELP)
    c.add_argument("--cache", type=Path, default=None)
    c.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for READY (default 60)")
    c.set_defaults(func=_cmd_check)
    x = sub.add_parser("xen", help="build the nested Xen host image (dom0 + hypervisor; idempotent)")
    x.add_argument("--cache", type=Path, default=None)
    x.add_argument("--force", action="store_true", help="rebuild even if up to date")
    x.add_argument("--profiles", nargs="*", default=["frr"], help="router domUs to put into dom0 (default frr)")
    x.set_defaults(func=_cmd_xen)
    v = sub.add_parser("criuvm", help="build the CRIU host VM image (Debian kernel with soft-dirty; idempotent)")
    v.add_argument("--cache", type=Path, default=None)
    v.add_argument("--force", action="store_true", help="rebuild even if up to date")
    v.set_defaults(func=_cmd_criuvm)
    d = sub.add_parser("disk", help="build a bootable disk image from a recipe (mmdebstrap; idempotent)")
    d.add_argument("recipe", help="a recipe name in routers/recipes/ or a directory holding recipe.toml")
    d.add_argument("--cache", type=Path, default=None)
    d.add_argument("--force", action="store_true", help="rebuild even if up to date")
    d.set_defaults(func=_cmd_disk)
    o = sub.add_parser("oci", help="build an OCI image layout from a container recipe (mmdebstrap, umoci; idempotent)")
    o.add_argument("recipe", help="a recipe name in routers/recipes/ or a directory holding recipe.toml")
    o.add_argument("--cache", type=Path, default=None)
    o.add_argument("--force", action="store_true", help="rebuild even if up to date")
    o.set_defaults(func=_cmd_oci)
    sd = sub.add_parser("seed", help="write a NoCloud seed disk (FAT, label CIDATA) for a disk image")
    sd.add_argument("out", type=Path, help="the seed image to write (raw)")
    sd.add_argument("--user-data", type=Path, required=True)
    sd.add_argument("--meta-data", type=Path, required=True)
    sd.add_argument("--network-config", type=Path, default=None)
    sd.set_defaults(func=_cmd_seed)
    sub.add_parser("profiles", help="list the router profiles").set_defaults(func=_cmd_profiles)
    sub.add_parser("host-packages", help="Debian packages the build needs").set_defaults(func=_cmd_host_packages)
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    try:
        return a.func(a)
    except RouterError as err:
        print(f"routers: error: {err}", file=sys.stderr)
        return getattr(err, "exit_code", 1)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
