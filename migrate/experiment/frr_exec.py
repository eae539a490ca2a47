"""Start one FRR daemon of a routing peer with the frr image's user database (docs/peering.md).

``python -m migrate.experiment.frr_exec GROUP_FILE TMP_DIR -- ARGV...``: in a mount namespace
of its own, bind-mounts ``GROUP_FILE`` (the frr image's ``/etc/group``) on ``/etc/group`` and
``TMP_DIR`` (the peer's private state directory) on ``/var/tmp``, then executes ``ARGV`` in
place (same PID, so the process registered by the orchestrator is the daemon itself).

Why: FRR's ``privs_init`` exits when its vty group (``frrvty``) does not exist, and the host
has no such group (nothing of FRR is installed on it); and every FRR daemon keeps a directory
``/var/tmp/frr/<daemon>.<pid>`` (crash logs) that would otherwise land on the host.  The
namespace changes the view of this one process tree only; the host's files are untouched.
"""

from __future__ import annotations

import ctypes
import os
import sys

CLONE_NEWNS = 0x00020000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def private_view(group_file: str, tmp_dir: str) -> None:
    """Unshare the mount namespace, make it private, bind ``group_file`` on /etc/group and
    ``tmp_dir`` on /var/tmp."""
    libc = _libc()
    _check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    _check(libc.mount(group_file.encode(), b"/etc/group", None, MS_BIND, None), f"bind {group_file} on /etc/group")
    _check(libc.mount(tmp_dir.encode(), b"/var/tmp", None, MS_BIND, None), f"bind {tmp_dir} on /var/tmp")


def main(argv: list[str]) -> int:
    """``GROUP_FILE TMP_DIR -- ARGV...``: see the module's docstring."""
    if len(argv) < 4 or argv[2] != "--":
        print("usage: python -m migrate.experiment.frr_exec GROUP_FILE TMP_DIR -- ARGV...", file=sys.stderr)
        return 2
    group_file, tmp_dir, cmd = argv[0], argv[1], argv[3:]
    try:
        private_view(group_file, tmp_dir)
        os.execvp(cmd[0], cmd)
    except OSError as err:
        print(f"frr_exec: {err}", file=sys.stderr)
        return 1
    return 1  # not reached: execvp does not return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
