"""HV=kvm over QMP: the driver, its QMP connections (over qemu.qmp) and the accelerator choice."""
