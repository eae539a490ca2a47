#!/usr/bin/python3
"""Ansible module ``vrmig_tap``: a persistent tap device enslaved to a bridge and up.

Each of the three steps (``ip tuntap add``, ``ip link set master``, ``ip link set up``) runs only
when ``ip -j -d link show`` says it is missing, so ``changed`` is true exactly when the host was
changed.  The bridge must exist (it carries a segment of the lab; the playbook does not make it)."""

from __future__ import annotations

import json

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: vrmig_tap
short_description: a persistent tap device enslaved to a bridge and up
options:
  name: {description: the tap's name, required: true, type: str}
  bridge: {description: the bridge it joins, required: true, type: str}
"""


def _link(module: AnsibleModule, name: str) -> dict | None:
    rc, out, _ = module.run_command(["ip", "-j", "-d", "link", "show", "dev", name])
    if rc != 0:
        return None
    links = json.loads(out)
    return links[0] if links else None


def main() -> None:
    """Check the tap and the bridge; create, enslave and bring up what is missing."""
    module = AnsibleModule(
        argument_spec={"name": {"type": "str", "required": True}, "bridge": {"type": "str", "required": True}},
        supports_check_mode=True,
    )
    name, bridge = module.params["name"], module.params["bridge"]
    br = _link(module, bridge)
    if br is None or br.get("linkinfo", {}).get("info_kind") != "bridge":
        module.fail_json(msg=f"{bridge} is not a bridge on this host (create the segment's bridge or fix `bridges`)")
    dev = _link(module, name)
    steps: list[list[str]] = []
    if dev is None:
        steps.append(["ip", "tuntap", "add", "dev", name, "mode", "tap"])
    else:
        info = dev.get("linkinfo", {})
        if info.get("info_kind") != "tun" or info.get("info_data", {}).get("type") != "tap":
            module.fail_json(msg=f"{name} exists and is not a tap device (remove it or fix `taps`)")
    if dev is None or dev.get("master") != bridge:
        steps.append(["ip", "link", "set", "dev", name, "master", bridge])
    if dev is None or "UP" not in dev.get("flags", []):
        steps.append(["ip", "link", "set", "dev", name, "up"])
    if not module.check_mode:
        for argv in steps:
            module.run_command(argv, check_rc=True)
    module.exit_json(changed=bool(steps), steps=[" ".join(s) for s in steps])


if __name__ == "__main__":
    main()
