"""The sshd configuration of the emulated lab's hosts (:mod:`migrate.labs.emulated`, one sshd per
namespace) and of its Xen hosts' dom0s (:mod:`migrate.labs.emulated_xen`): key-only root logins,
no PAM or DNS, and room for the many sessions a run multiplexes over one connection."""

from __future__ import annotations

SSHD_CONFIG = """\
# {comment}
ListenAddress {address}
Port {port}
HostKey {host_key}
PidFile {pid_file}
AuthorizedKeysFile {authorized_keys}
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
UseDNS no
MaxSessions 64
MaxStartups 64:30:128
"""


def sshd_config(
    comment: str, *, address: str, port: int, host_key: str, pid_file: str, authorized_keys: str, sftp: bool
) -> str:
    """The configuration text; ``sftp``: with OpenSSH's internal sftp server."""
    text = SSHD_CONFIG.format(
        comment=comment, address=address, port=port, host_key=host_key, pid_file=pid_file,
        authorized_keys=authorized_keys,
    )  # fmt: skip
    return text + ("Subsystem sftp internal-sftp\n" if sftp else "")
