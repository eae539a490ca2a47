"""HV=xen: the driver and the dom0 channel."""
