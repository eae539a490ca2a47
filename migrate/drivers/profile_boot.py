"""A profile router's boot, configuration and readiness, the same under every VM driver.

The QMP driver (migrate.drivers.kvm) and the libvirt driver (migrate.drivers.libvirt) start
QEMU their own way; what happens around that for a router image the suite did not build is
one sequence, here:

1. :meth:`ProfileBoot.media`: the per-run overlay and the configuration medium
   (migrate.drivers.disk_boot.prepare), the rendered configuration kept in the run's directory;
   when the hosts share storage (the embedded testbed) both hosts' QEMU open these files, else
   (a lab) each host gets the image once by content hash, its own overlay on it made there and
   a copy of the seed, and the source's writes follow the router (migrate.drivers.storage_mirror);
2. the driver starts QEMU with those disks and, for ``[config] method = "console"``, the serial
   console on the Unix socket :meth:`ProfileBoot.console_socket` names;
3. :meth:`ProfileBoot.wait_ready`: type the configuration on that console
   (migrate.drivers.console_config), wait for the profile's console marker if it names one, then
   for forwarding between both segments (migrate.drivers.readiness) — all within the profile's
   ``[readiness] timeout_s`` or BOOT_TIMEOUT."""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from migrate.core.errors import DependencyError
from migrate.drivers.console_config import command_lines, connect, type_config
from migrate.drivers.disk_boot import (
    CONFIG_NAMES,
    EFIVARS_NAME,
    OVERLAY_NAME,
    SEED_NAME,
    BootMedia,
    make_overlay_argv,
    prepare,
)
from migrate.drivers.readiness import wait_forwarding

CONSOLE_CONNECT_TIMEOUT_S = 30.0


@functools.cache
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    """SHA-256 of ``path``, computed once per process for each size and modification time."""
    st = path.stat()
    return _sha256(str(path.resolve()), st.st_size, st.st_mtime_ns)


def place(tb: Any, host: str, profile: Any, local: BootMedia, run_dir: Path) -> BootMedia:
    """``local`` (the run's media on this machine) as ``host`` opens it on its own storage: the
    profile's image placed there by content hash, a new overlay on it in the host's run
    directory (qemu-img there), the seed copied beside it."""
    image = Path(profile.image.disk)
    base = tb.place_image(host, image, file_sha256(image))
    overlay = tb.out_path(host, run_dir, OVERLAY_NAME)
    done = tb.run(host, make_overlay_argv(base, profile.image.format, overlay), timeout_s=60.0)
    if getattr(done, "returncode", 1) != 0:
        err = getattr(done, "stderr", b"") or b""
        raise DependencyError(f"qemu-img on {host} cannot make the overlay {overlay}: {err.decode(errors='replace')}")
    copies: dict[str, str] = {}
    for name, path in ((SEED_NAME, local.seed), (EFIVARS_NAME, local.efivars)):
        if path is not None:
            copies[name] = tb.out_path(host, run_dir, name)
            tb.write_atomic(host, copies[name], path.read_bytes())
    seed, efivars = copies.get(SEED_NAME), copies.get(EFIVARS_NAME)
    return BootMedia(
        Path(overlay),
        Path(seed) if seed is not None else None,
        local.config_text,
        Path(efivars) if efivars is not None else None,
    )


class ProfileBoot:
    """The boot of ``profile`` in the run of ``ctx`` (a migrate.drivers.base.RunContext)."""

    def __init__(self, ctx: Any, profile: Any) -> None:
        self.ctx = ctx
        self.profile = profile
        self.media_: BootMedia | None = None
        self.placed: dict[str, BootMedia] = {}

    @property
    def typed(self) -> bool:
        """Whether the configuration is typed on the serial console."""
        return bool(self.profile.config.method == "console")

    def timeout_s(self) -> float:
        """The profile's ``[readiness] timeout_s``, or BOOT_TIMEOUT."""
        own = self.profile.readiness.timeout_s
        return float(own if own is not None else self.ctx.scenario.boot_timeout_s)

    def media(self, host: str = "R1") -> BootMedia:
        """The overlay and configuration medium ``host``'s QEMU opens: the run's own (made once,
        the rendered configuration written into the run's directory), or, where the hosts do not
        share storage, their copies on ``host`` (:func:`place`)."""
        if self.media_ is None:
            self.ctx.recorder.action("boot-media", host=host, method=self.profile.config.method)
            self.media_ = prepare(self.profile, self.ctx.scenario, self.ctx.registry.dir, self.ctx.run_dir.name)
            if self.media_.config_text is not None:
                name = CONFIG_NAMES[self.profile.config.method]
                (self.ctx.run_dir / name).write_text(self.media_.config_text)
        tb = self.ctx.testbed
        if tb.shares_storage:
            return self.media_
        if host not in self.placed:
            started = time.monotonic()
            self.placed[host] = place(tb, host, self.profile, self.media_, self.ctx.run_dir)
            self.ctx.recorder.action("boot-media-placed", host=host, seconds=round(time.monotonic() - started, 3))
        return self.placed[host]

    def console_socket(self, host: str) -> tuple[Path, str] | None:
        """(here, on ``host``) paths of ``host``'s QEMU console socket when the configuration is
        typed, else None."""
        if not self.typed:
            return None
        name = f"con-{host}.sock"
        return self.ctx.registry.dir / name, self.ctx.testbed.out_path(host, self.ctx.registry.dir, name)

    def wait_ready(
        self,
        host: str,
        alive: Callable[[], bool],
        console: Path,
        wait_marker: Callable[[str, float], None],
    ) -> None:
        """Configure (typed on the console) and wait until the router on ``host`` forwards.
        ``wait_marker(marker, timeout_s)``: the driver's wait for a console line."""
        rec = self.ctx.recorder
        timeout_s = self.timeout_s()
        started = time.monotonic()

        def left() -> float:
            return max(0.0, timeout_s - (time.monotonic() - started))

        sockets = self.console_socket(host)
        if sockets is not None:
            local, remote = sockets
            self.ctx.testbed.forward_socket(host, local, remote, CONSOLE_CONNECT_TIMEOUT_S, alive, "QEMU", "console")
            cfg = self.profile.config
            lines = command_lines(self.media(host).config_text or "")
            with connect(local, CONSOLE_CONNECT_TIMEOUT_S, alive) as sock:
                typed = type_config(
                    sock, lines, login=cfg.login or "", password=cfg.password, prompt=cfg.prompt, errors=cfg.errors,
                    timeout_s=left(), alive=alive, abort=self.ctx.abort,
                )  # fmt: skip
            rec.action("router-console-config", host=host, **typed.to_dict())
        marker = self.profile.readiness.console_marker
        if marker:
            wait_marker(marker, left())
        ready = wait_forwarding(self.ctx.testbed, self.ctx.scenario.ip, left(), alive, self.ctx.abort, console)
        rec.action("router-forwarding", host=host, **ready.to_dict())
