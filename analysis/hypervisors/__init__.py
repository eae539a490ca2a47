"""Each hypervisor's own figures (QEMU, libvirt, CRIU, Xen, OpenVZ)."""
