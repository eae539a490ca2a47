#!/usr/bin/python3
"""Ansible module ``vrmig_unpack``: a directory that holds exactly the contents of a tar archive
on the host.

The archive's SHA-256 is kept beside the directory (``<dest>.sha256``); the directory is replaced
(removed, made afresh, the archive extracted with ``tar``) only when that digest differs or the
directory is missing, so ``changed`` is true exactly when the host was changed, and an
interrupted earlier run is finished by the next (the digest is written last).  Ansible's own
``unarchive`` compares file by file with the archive on every run and leaves files the archive
no longer has; a container's rootfs and a criu tree must be exactly the archive's."""

from __future__ import annotations

import hashlib
import os
import shutil

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: vrmig_unpack
short_description: a directory holding exactly a tar archive's contents
options:
  archive: {description: the tar archive on the host, required: true, type: path}
  dest: {description: the directory, required: true, type: path}
"""


def _digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main() -> None:
    """Unpack ``archive`` into ``dest`` unless ``dest`` already holds it."""
    module = AnsibleModule(
        argument_spec={"archive": {"type": "path", "required": True}, "dest": {"type": "path", "required": True}},
        supports_check_mode=True,
    )
    archive, dest = module.params["archive"], module.params["dest"].rstrip("/")
    if not os.path.isfile(archive):
        module.fail_json(msg=f"{archive} does not exist on the host")
    digest = _digest(archive)
    stamp = dest + ".sha256"
    try:
        with open(stamp) as f:
            have = f.read().strip()
    except OSError:
        have = ""
    if have == digest and os.path.isdir(dest):
        module.exit_json(changed=False, sha256=digest)
    if not module.check_mode:
        if os.path.lexists(stamp):
            os.unlink(stamp)
        if os.path.isdir(dest) and not os.path.islink(dest):
            shutil.rmtree(dest)
        os.makedirs(dest, mode=0o755)
        module.run_command(["tar", "-xpf", archive, "-C", dest, "--numeric-owner"], check_rc=True)
        with open(stamp + ".tmp", "w") as f:
            f.write(digest + "\n")
        os.replace(stamp + ".tmp", stamp)
    module.exit_json(changed=True, sha256=digest)


if __name__ == "__main__":
    main()
