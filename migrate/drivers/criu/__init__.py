"""HV=criu: the driver, pre-dump rounds, CRIU itself, image transfer, announce, the container and
the CRIU host VM."""
