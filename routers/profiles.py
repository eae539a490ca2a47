"""Router profiles: which routing software runs in the guest and where it comes from.

=======  ======================  =============================================================
name     software                source
=======  ======================  =============================================================
frr      FRRouting (default)     Debian package ``frr``: ``zebra`` + ``staticd``, ``vtysh``;
                                 ``bgpd`` + ``ospfd`` + ``bfdd`` for routing sessions (PEERING=)
bird     BIRD 2                  Debian package ``bird2``: ``bird``, ``birdc``
xorp     XORP                    not packaged in Debian: an existing installation on the host
                                 (``xorp_rtrmgr`` on ``PATH``, or ``$XORP_ROOT``)
=======  ======================  =============================================================

Debian-based profiles are never installed on the host (Debian's ``frr`` postinst would start
FRR in the host's root namespace): the build downloads the .debs and extracts them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from routers.errors import ProfileUnavailableError, UnknownProfileError

DEFAULT_PROFILE = "frr"
XORP_RTRMGR = "xorp_rtrmgr"


@dataclass(frozen=True)
class Profile:
    """One router profile.

    ``daemons`` are started in the guest (in this order); ``files`` are the paths, inside the
    Debian package ``package`` (or inside the XORP installation), that are copied into the
    guest together with every shared library they need."""

    name: str
    software: str
    description: str
    daemons: tuple[str, ...]
    package: str | None
    files: tuple[str, ...]

    @property
    def debian(self) -> bool:
        """True if the router software comes from a Debian package."""
        return self.package is not None

    def available(self) -> tuple[bool, str]:
        """Whether this profile can be built here, and why (or why not)."""
        if self.name == "xorp":
            root = xorp_root()
            if root is None:
                return False, xorp_missing_reason()
            return True, f"XORP installation found at {root}"
        assert self.package is not None
        if shutil.which("apt-cache") is None:
            return False, f"the {self.name} profile is built from the Debian package {self.package}: no apt-cache"
        try:
            out = subprocess.run(
                ["apt-cache", "policy", self.package], capture_output=True, text=True, check=False, timeout=60
            ).stdout
        except (OSError, subprocess.TimeoutExpired) as err:
            return False, f"apt-cache policy {self.package} failed: {err}"
        cand = next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.strip().startswith("Candidate:")), "")
        if not cand or cand == "(none)":
            return False, (
                f"Debian package {self.package} has no installation candidate: run `apt-get update` (or `make setup`)"
            )
        return True, f"Debian package {self.package} {cand}"

    def require_available(self) -> None:
        """Raise :class:`ProfileUnavailableError` (with the reason) unless :meth:`available`."""
        ok, reason = self.available()
        if not ok:
            raise ProfileUnavailableError(f"router profile {self.name!r} is unavailable: {reason}")


def xorp_missing_reason() -> str:
    """The one message that explains how to make the xorp profile usable."""
    return (
        "XORP is not packaged in Debian, so the xorp profile needs an existing XORP installation: "
        f"install XORP so that `{XORP_RTRMGR}` is on PATH (or set XORP_ROOT to the installation prefix "
        "containing sbin/xorp_rtrmgr), then run `python -m routers build --profile xorp`"
    )


def xorp_root() -> Path | None:
    """The prefix of the host's XORP installation (the directory holding ``sbin/xorp_rtrmgr``)."""
    env = os.environ.get("XORP_ROOT")
    if env:
        cand = Path(env) / "sbin" / XORP_RTRMGR
        return Path(env) if cand.is_file() and os.access(cand, os.X_OK) else None
    found = shutil.which(XORP_RTRMGR)
    if found is None:
        return None
    return Path(found).resolve().parent.parent


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(
            name="frr",
            software="FRRouting",
            description="FRRouting zebra + staticd, bgpd + ospfd + bfdd with PEERING= (Debian package frr)",
            daemons=("zebra", "staticd"),
            package="frr",
            files=(
                "usr/lib/frr/zebra",
                "usr/lib/frr/staticd",
                "usr/lib/frr/bgpd",
                "usr/lib/frr/ospfd",
                "usr/lib/frr/bfdd",
                "usr/bin/vtysh",
            ),
        ),
        Profile(
            name="bird",
            software="BIRD",
            description="BIRD 2 with direct + kernel protocols (Debian package bird2)",
            daemons=("bird",),
            package="bird2",
            files=("usr/sbin/bird", "usr/sbin/birdc"),
        ),
        Profile(
            name="xorp",
            software="XORP",
            description="XORP rtrmgr (not packaged in Debian: uses the host's XORP installation)",
            daemons=("xorp_rtrmgr",),
            package=None,
            files=("sbin/xorp_rtrmgr", "sbin/xorpsh"),
        ),
    )
}


def names() -> list[str]:
    """All profile names, default first."""
    return list(PROFILES)


def get(name: str) -> Profile:
    """The profile called ``name``; :class:`UnknownProfileError` lists the valid names."""
    try:
        return PROFILES[name]
    except KeyError:
        raise UnknownProfileError(f"unknown router profile {name!r}: choose one of {', '.join(PROFILES)}") from None
