"""Router profiles: which routing software runs in the guest and where it comes from.

=======  ======================  =============================================================
name     software                source
=======  ======================  =============================================================
frr      FRRouting (default)     Debian package ``frr``: ``zebra`` + ``staticd``, ``vtysh``
                                 (FRR 9+: and ``mgmtd``); ``bgpd`` + ``ospfd`` + ``bfdd`` for
                                 routing sessions (PEERING=)
bird     BIRD 2                  Debian package ``bird2``: ``bird``, ``birdc``
xorp     XORP                    not packaged in Debian: an existing installation on the host
                                 (``xorp_rtrmgr`` on ``PATH``, or ``$XORP_ROOT``)
=======  ======================  =============================================================

Debian-based profiles are never installed on the host (Debian's ``frr`` postinst would start
FRR in the host's root namespace): the build downloads the .debs and extracts them.

Releases (``ROUTER=<software>@<release>``, :data:`RELEASES`): each Debian-based profile comes in
the releases of the Debian suites that serve it, today's (Debian 13, fetched through a private
apt configuration, :mod:`migrate.core.privapt`) by default and Debian 12's (the host's own apt
sources) on request.  ``frr`` and ``frr@10.3`` name the same image; ``frr@8.4`` is another one
(its own directory ``guest/frr@8.4``).  The kernel and busybox of every image stay Debian 12's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from routers.errors import ProfileUnavailableError, UnknownProfileError

DEFAULT_PROFILE = "frr"
XORP_RTRMGR = "xorp_rtrmgr"


@dataclass(frozen=True)
class Release:
    """One release of a Debian-packaged router: its upstream ``major.minor`` and the Debian
    suite that serves it (None: the host's own apt sources, Debian 12)."""

    version: str
    suite: str | None
    debian: str  # "Debian 13", for messages

    @property
    def source(self) -> str:
        """Where its packages come from, for messages and meta.json."""
        return f"{self.debian} ({self.suite})" if self.suite else f"{self.debian} (the host's apt sources)"


#: the releases each Debian-based profile can be built from, the default first
RELEASES: dict[str, tuple[Release, ...]] = {
    "frr": (Release("10.3", "trixie", "Debian 13"), Release("8.4", None, "Debian 12")),
    "bird": (Release("2.17", "trixie", "Debian 13"), Release("2.0", None, "Debian 12")),
}


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
    release: Release | None = None  # None: xorp (the host's installation)
    optional_files: tuple[str, ...] = ()  # copied when the release has them (FRR 9+: mgmtd)

    @property
    def family(self) -> str:
        """The routing software's profile name without a release (``frr@8.4`` -> ``frr``)."""
        return family_of(self.name)

    @property
    def debian(self) -> bool:
        """True if the router software comes from a Debian package."""
        return self.package is not None

    def available(self) -> tuple[bool, str]:
        """Whether this profile can be built here, and why (or why not)."""
        if self.family == "xorp":
            root = xorp_root()
            if root is None:
                return False, xorp_missing_reason()
            return True, f"XORP installation found at {root}"
        assert self.package is not None
        if shutil.which("apt-cache") is None:
            return False, f"the {self.name} profile is built from the Debian package {self.package}: no apt-cache"
        if self.release is not None and self.release.suite is not None:
            return (
                True,
                f"Debian package {self.package} {self.release.version} of {self.release.source}, fetched privately",
            )
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
            release=RELEASES["frr"][0],
            files=(
                "usr/lib/frr/zebra",
                "usr/lib/frr/staticd",
                "usr/lib/frr/bgpd",
                "usr/lib/frr/ospfd",
                "usr/lib/frr/bfdd",
                "usr/bin/vtysh",
            ),
            optional_files=("usr/lib/frr/mgmtd",),
        ),
        Profile(
            name="bird",
            software="BIRD",
            description="BIRD 2 with direct + kernel protocols (Debian package bird2)",
            daemons=("bird",),
            package="bird2",
            release=RELEASES["bird"][0],
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
    """All profile names (each at its default release), default first."""
    return list(PROFILES)


def release_names() -> list[str]:
    """Every ``<software>@<release>`` that is not a default (the other buildable images)."""
    return [f"{fam}@{r.version}" for fam, rels in RELEASES.items() for r in rels[1:]]


def family_of(name: str) -> str:
    """The software of a ROUTER value without parsing it further (``frr@8.4`` -> ``frr``)."""
    return name.split("@", 1)[0]


def get(name: str) -> Profile:
    """The profile called ``name`` (``<software>[@<release>]``; the default release's name is the
    plain software name); :class:`UnknownProfileError` lists the valid names or releases."""
    fam, sep, rel = name.partition("@")
    try:
        base = PROFILES[fam]
    except KeyError:
        raise UnknownProfileError(
            f"unknown router profile {name!r}: choose one of {', '.join(PROFILES)} "
            f"(or a release: {', '.join(release_names())})"
        ) from None
    if not sep:
        return base
    rels = RELEASES.get(fam, ())
    if not rels:
        raise UnknownProfileError(
            f"ROUTER={name}: {base.software} has no packaged releases to choose from (it runs the host's "
            f"installation): use ROUTER={fam}"
        )
    for i, r in enumerate(rels):
        if rel == r.version:
            if i == 0:
                return base
            return replace(base, name=f"{fam}@{r.version}", release=r, description=f"{base.description}, {r.debian}")
    choices = ", ".join(f"{fam}@{r.version} ({r.debian})" for r in rels)
    raise UnknownProfileError(f"ROUTER={name}: {base.software} {rel} is not served here: choose one of {choices}")


def canonical(name: str) -> str:
    """The image name of a ROUTER value (``frr@10.3`` -> ``frr``); UnknownProfileError if invalid."""
    return get(name).name
