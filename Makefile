# vrmig — see README.md.  A target's Make variables are the options of the command it runs
# (migrate/cli/make.py); `make help` lists the targets, `make help T=<target>` a target's variables.
SHELL := /bin/bash
PY := .venv/bin/python
PYTEST := .venv/bin/pytest
APT_PACKAGES := qemu-system-x86 qemu-utils iproute2 iputils-ping irtt iperf3 busybox-static cpio zstd \
                gcc make python3-venv ca-certificates kmod \
                libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients libvirt-dev pkg-config python3-dev
APT_PACKAGES += chromium  # headless-browser check of the sweep/nightly report.html (tests)
APT_PACKAGES += iptables util-linux tar  # HV=criu: CRIU's network lock, the container's namespaces, tmpfs images
APT_PACKAGES += d-itg netsniff-ng  # crosstraffic backends ditg (ITGSend/ITGRecv/ITGDec) and trafgen
APT_PACKAGES += openssh-server  # make lab-up: each emulated lab host runs its own sshd (docs/testbed.md)
APT_PACKAGES += ansible-core  # make hosts-setup: prepares a lab's machines (ansible/hosts-setup.yml)
APT_PACKAGES += tcpdump  # PEERING=: the peers' capture of BGP and BFD packets
APT_PACKAGES += mmdebstrap e2fsprogs dosfstools mtools syslinux syslinux-common fdisk  # python -m routers disk/seed: a Debian disk image (mmdebstrap, mkfs.ext4 -d, FAT boot via mtools+syslinux, sfdisk) and its NoCloud seed (FAT CIDATA via mtools); docs/own-router-recipes.md
APT_PACKAGES += umoci skopeo  # python -m routers oci: an OCI image layout from a recipe (umoci init/new/insert/config, raw unpack) and docker save archives converted by skopeo; docs/own-router-recipes.md
APT_PACKAGES += ovmf  # a UEFI router image (a profile's [image] firmware = "uefi"): EDK II's OVMF code and variable-store template
# plain make lists the targets; it installs nothing (make setup does)
.DEFAULT_GOAL := help

# Make variable -> CLI flag (only variables that are set are passed), for make qemu
flag = $(if $(strip $($(1))),--$(2) $($(1)))
.PHONY: chaos setup apt venv helpers guest images migrate test test-unit test-integration lint clean-testbed clean \
        bench-traffic bench-sampler bench-qmp bench-qmp-client bench-ssh check-helpers

setup: apt venv helpers qemu libvirt guest images criu xen

apt:
	@if [ "$$(id -u)" != 0 ]; then echo "make setup: run as root (installs Debian packages)"; exit 2; fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(APT_PACKAGES) \
	  $$(python3 -c 'import sys; sys.path.insert(0, "."); from routers.build import HOST_PACKAGES; print(" ".join(HOST_PACKAGES))')

venv: .venv/.installed
.venv/.installed: pyproject.toml
	python3 -m venv .venv
	.venv/bin/pip install -q --upgrade pip
	.venv/bin/pip install -q -e '.[dev,libvirt]'
	touch $@

helpers:
	$(MAKE) -C crosstraffic
	$(MAKE) -C probes

check-helpers:
	$(MAKE) -C crosstraffic check
	$(MAKE) -C probes check

# HV=criu: a criu that works on this kernel (system's, else Debian trixie's/forky's unpacked into
# ~/.cache/vrmig/criu with a private apt configuration; see migrate/drivers/criu/setup.py)
.PHONY: criu
criu: venv
	$(PY) -m migrate.drivers.criu.setup
	$(PY) -m routers criuvm

# QEMU=: the default QEMU release (or the one named) fetched from Debian into ~/.cache/vrmig/qemu,
# never installed (migrate/core/stack.py, docs/stack.md)
.PHONY: qemu
qemu: venv
	$(PY) -m migrate.core.stack qemu $(QEMU) $(call flag,QEMU_FIRMWARE,firmware)

# LIBVIRT=: DRIVER=libvirt's default libvirt release (or the one named) fetched from Debian into
# ~/.cache/vrmig/qemu/libvirt-<release>, never installed (migrate/core/stack.py, docs/stack.md)
.PHONY: libvirt
libvirt: venv
	$(PY) -m migrate.core.stack libvirt $(LIBVIRT)

# the default releases (FRR 10.3, BIRD 2.17); another with ROUTER=, e.g. make guest ROUTER=frr@8.4
guest: venv
	$(PY) -m routers build --profile frr
	$(PY) -m routers build --profile bird
	if [ -n "$$ROUTER" ]; then $(PY) -m routers build --profile "$$ROUTER"; fi

# ROUTER=profiles/debian-frr-cloudinit.toml, profiles/debian-bird-console.toml: disk images built from its recipe by Debian's own
# tools (mmdebstrap, mkfs.ext4 -d, syslinux), ~/.cache/vrmig/images (docs/own-router-recipes.md);
# profiles/debian-frr-oci.toml (HV=criu): an OCI image layout (mmdebstrap, umoci)
images: venv
	$(PY) -m routers disk debian-frr-cloudinit
	$(PY) -m routers disk debian-bird-console
	$(PY) -m routers oci debian-frr-oci

# HV=xen: the nested Xen host image (Xen 4.17 + dom0 from Debian packages, ~/.cache/vrmig/xen)
.PHONY: xen
xen: guest
	$(PY) -m routers xen --profiles frr bird

# make <target> VAR=value: every variable of a target that runs a command is an option of that
# command (migrate/cli/make.py reads them from the environment: no value reaches a shell line, and
# a variable that no goal of the command line takes is refused before anything runs); make help
# T=<target> lists them.  Targets without such a line take no variables and do not check them.
MAKE_BRIDGE = $(PY) -m migrate.cli.make
export VRMIG_MAKE_GOALS := $(MAKECMDGOALS)

.PHONY: help
help:
	@$(MAKE_BRIDGE) --list

migrate:
	$(MAKE_BRIDGE) migrate

# make baseline: forwarding performance without migration (docs/campaigns.md "make baseline")
.PHONY: baseline
baseline:
	$(MAKE_BRIDGE) baseline

# make calibrate: every downtime estimator against cuts and pauses of known length (docs/metrics.md "Calibration")
.PHONY: calibrate
calibrate:
	$(MAKE_BRIDGE) calibrate

# make hosts-check TESTBED=lab.toml: is every host of a lab inventory ready? (docs/testbed.md "make hosts-check")
.PHONY: hosts-check
hosts-check:
	$(MAKE_BRIDGE) hosts-check

# campaigns over many labs (docs/many-labs.md): make scheduler; make worker TESTBED=lab.toml
# SCHEDULER=tcp://host:8786 (one per lab); make campaign FILE=... SCHEDULER=tcp://host:8786 [LABS=axis]
.PHONY: scheduler worker
scheduler:
	$(MAKE_BRIDGE) scheduler

worker:
	$(MAKE_BRIDGE) worker

# make bench-ssh: per-command latency of the SSH transports (docs/measurements/2026-11-24-ssh-latency.md)
bench-ssh:
	$(MAKE_BRIDGE) bench-ssh

# make hosts-setup TESTBED=lab.toml [PROFILES=frr,bird]: prepare a lab's machines with Ansible (docs/testbed.md)
.PHONY: hosts-setup
hosts-setup:
	$(MAKE_BRIDGE) hosts-setup

# make campaign FILE=campaigns/<name>.toml [REPS=] [SEED=] [RESUME=<dir>] [CHECK=1] (docs/campaigns.md)
.PHONY: campaign campaign-check
campaign:
	$(MAKE_BRIDGE) campaign

# every shipped campaign file parses and expands into valid points (nothing is run)
campaign-check:
	$(PY) -m migrate campaign --check campaigns/*.toml

# make paper [REPS=3] [FIG2=<baseline dir>] [FIG3=<campaign dir>] [PARTS=fig2,fig3]: paper 004 side by side
.PHONY: paper
paper:
	$(MAKE_BRIDGE) paper

.PHONY: sweep report compare nightly nightly-accept
sweep:
	@if [ -n "$$RATE$$SIZE" ]; then echo "make sweep: use RATES=... SIZES=... (RATE and SIZE are for make migrate)" >&2; exit 2; fi
	$(MAKE_BRIDGE) sweep

# make report RUNS="<sweep, night or run dirs>" [OUT=<dir>]
report:
	$(MAKE_BRIDGE) report

# make ab A="QEMU=system" B="QEMU=10.0" [REPS=30] [SEED=] + make migrate's variables: two settings
# side by side, interleaved; exit 1 if B regressed (docs/stack.md "make ab"; A and B reach the CLI
# through the environment, never through a shell line)
.PHONY: ab
ab:
	@if [ -z "$$A" ] || [ -z "$$B" ]; then echo 'make ab: set A="VAR=value ..." and B="VAR=value ...", e.g. A="QEMU=system" B="QEMU=10.0"' >&2; exit 2; fi
	$(MAKE_BRIDGE) ab

# make compare A=<sweep dir> B=<sweep dir> [OUT=<dir>]
compare:
	$(MAKE_BRIDGE) compare

nightly:
	$(MAKE_BRIDGE) nightly

nightly-accept:
	$(MAKE_BRIDGE) nightly-accept

clean-testbed:
	$(MAKE_BRIDGE) clean-testbed

# make lab-up: the emulated lab, hosts reached only over SSH; prints its inventory last (docs/testbed.md)
.PHONY: lab-up lab-down
lab-up:
	$(MAKE_BRIDGE) lab-up

# make lab-down TESTBED=<the lab.toml make lab-up printed>
lab-down:
	$(MAKE_BRIDGE) lab-down

test: lint test-unit check-helpers test-integration

test-unit:
	$(PYTEST) -q tests/unit

test-integration:
	$(PYTEST) -q -rs --durations=25 tests/integration

lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

# make bench-traffic: the variables are checked before the helpers are built
bench-traffic:
	$(MAKE_BRIDGE) --check bench-traffic
	$(MAKE) helpers
	$(MAKE_BRIDGE) bench-traffic

# make chaos HVS=kvm,kvm-libvirt,criu,xen TRIALS=10 XEN_TRIALS=2 SEED=1 (TRIALS per HV; xen ~2 min a trial)
# [TESTBED=lab.toml: on a lab's hosts, the same HVs, signals only]; runs go to $(RESULTS)/chaos
chaos:
	$(MAKE_BRIDGE) chaos

# the same migrations on the embedded testbed and on a lab, interleaved (docs/testbed.md)
.PHONY: bench-lab
bench-lab: venv
	$(MAKE_BRIDGE) bench-lab

# make bench-lab-baseline TESTBED=<lab> [ROUNDS=3]: make baseline embedded and on the lab, alternating (docs/campaigns.md)
.PHONY: bench-lab-baseline bench-lab-peering
bench-lab-baseline: venv
	$(MAKE_BRIDGE) bench-lab-baseline

# make bench-lab-peering TESTBED=<lab> [REPS=3]: PEERING=bgp,bfd runs embedded and on the lab, alternating
bench-lab-peering: venv
	$(MAKE_BRIDGE) bench-lab-peering

bench-sampler: venv
	$(MAKE_BRIDGE) --check bench-sampler
	$(MAKE) -C probes
	$(MAKE_BRIDGE) bench-sampler

# make bench-qmp RUNS="results/a results/b": arrival minus QEMU timestamp of the QMP events of
# existing HV=kvm runs (run directories or roots), per event kind; default every run in $(RESULTS)
bench-qmp: venv
	$(MAKE_BRIDGE) bench-qmp

# make bench-qmp-client: the QMP client's arrival stamp against a fake QEMU, with and without the
# arrival watch and beside a thread blocked in recv, side by side (no QEMU, no root)
bench-qmp-client: venv
	$(MAKE_BRIDGE) --check bench-qmp-client
	$(MAKE) -C probes
	$(MAKE_BRIDGE) bench-qmp-client

clean:
	$(MAKE) -C crosstraffic clean
	$(MAKE) -C probes clean
