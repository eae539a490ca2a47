"""HV=kvm over QMP: the driver, the QMP client and the accelerator choice."""
