"""A router's disk moved with it when the two hosts do not share storage (a lab's hosts).

What libvirt does for ``virsh migrate --copy-storage-inc``, over QMP: the destination's QEMU,
waiting for the incoming migration, exports its own overlay of the same base image over NBD on
the migration link (``nbd-server-start``, ``block-export-add``, writable); the source mirrors
the top layer of its overlay (``drive-mirror`` ``sync=top``: only what the router wrote since it
booted; the base images are identical, placed by content hash) into that export, and every
later guest write synchronously as well (``copy-mode=write-blocking``), so that the copy
converges and stays in step.  Once the mirror is ready the memory migration starts as usual.
When it has completed (the source paused, no more writes) the mirror job is cancelled, which
for a ready mirror ends it cleanly with both sides identical, and the export and the NBD server
are stopped.  The mirrored bytes travel over the migration link beside the memory; the job's
figures are recorded (meta.json ``hypervisor.storage_mirror``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from migrate.core.errors import MigrationError

NBD_PORT = 10809
JOB_ID = "vrmig-mirror0"
EXPORT_ID = "vrmig-export0"
POLL_S = 0.05
READY_TIMEOUT_S = 300.0
FINISH_TIMEOUT_S = 60.0


def node_name(index: int) -> str:
    """The block node name of the router VM's disk ``index`` (its ``-drive node-name``)."""
    return f"vrmig-disk{index}"


def nbd_target(address: str, export: str, port: int = NBD_PORT) -> str:
    """The NBD URI of ``export`` on ``address`` (IPv6 in brackets)."""
    host = f"[{address}]" if ":" in address else address
    return f"nbd://{host}:{port}/{export}"


def mirror_args(address: str, node: str) -> dict[str, Any]:
    """drive-mirror's arguments: the top layer of ``node`` into the export of the same name on
    ``address``, every later write synchronously."""
    return {
        "job-id": JOB_ID,
        "device": node,
        "target": nbd_target(address, node),
        "format": "raw",  # the export presents the destination disk's guest-visible bytes
        "sync": "top",
        "mode": "existing",
        "copy-mode": "write-blocking",
    }


def find_job(jobs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The mirror's entry of a query-block-jobs reply."""
    return next((j for j in jobs if j.get("device") == JOB_ID), None)


@dataclass
class StorageMirror:
    """The mirror of one disk between two QEMUs (``cmd_src``/``cmd_dst``: their QMP ``cmd``)."""

    cmd_src: Callable[..., Any]
    cmd_dst: Callable[..., Any]
    address: str  # the destination's address on the migration link
    action: Callable[..., None]
    abort: Callable[[], bool]
    node: str = node_name(0)

    def start(self) -> dict[str, Any]:
        """Export the destination's disk, start the mirror and wait until it is ready."""
        started = time.monotonic()
        self.cmd_dst("nbd-server-start", addr={"type": "inet", "data": {"host": self.address, "port": str(NBD_PORT)}})
        self.cmd_dst("block-export-add", type="nbd", id=EXPORT_ID, **{"node-name": self.node}, writable=True)
        self.action("storage-mirror-start", side="src", target=nbd_target(self.address, self.node))
        self.cmd_src("drive-mirror", **mirror_args(self.address, self.node))
        deadline = started + READY_TIMEOUT_S
        while True:
            job = find_job(self.cmd_src("query-block-jobs"))
            if job is None:
                raise MigrationError("the storage mirror ended before it was ready (see qmp_events.jsonl)")
            if job.get("ready"):
                break
            if self.abort():
                raise MigrationError("interrupted while the storage mirror converged")
            if time.monotonic() > deadline:
                raise MigrationError(f"the storage mirror was not ready within {READY_TIMEOUT_S:.0f} s: {job}")
            time.sleep(POLL_S)
        ready_s = time.monotonic() - started
        self.action("storage-mirror-ready", side="src", bytes=job.get("offset"), seconds=round(ready_s, 3))
        return {"ready_s": ready_s, "bytes_at_ready": job.get("offset"), "len_at_ready": job.get("len")}

    def finish(self) -> dict[str, Any]:
        """End the ready mirror (the source is paused: nothing more to copy) and stop the export."""
        job = find_job(self.cmd_src("query-block-jobs")) or {}
        self.action("storage-mirror-cancel", side="src", bytes=job.get("offset"))
        self.cmd_src("block-job-cancel", device=JOB_ID)
        deadline = time.monotonic() + FINISH_TIMEOUT_S
        while find_job(self.cmd_src("query-block-jobs")) is not None:
            if time.monotonic() > deadline:
                raise MigrationError(f"the storage mirror did not end within {FINISH_TIMEOUT_S:.0f} s")
            time.sleep(POLL_S)
        self.stop_export()
        self.action("storage-mirror-done", side="src", bytes=job.get("offset"))
        return {"bytes": job.get("offset"), "len": job.get("len")}

    def stop_export(self) -> None:
        """Remove the destination's export and stop its NBD server."""
        self.cmd_dst("block-export-del", id=EXPORT_ID)
        self.cmd_dst("nbd-server-stop")
