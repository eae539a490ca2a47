"""HV=kvm DRIVER=libvirt: the driver, its libvirtd, the domain XML and the migration flags."""
