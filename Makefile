# vrmig — see README.md.  Make variables map 1:1 to `python -m migrate` flags (migrate/cli/make.py).
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
RESULTS ?= results
# plain make lists the targets; it installs nothing (make setup does)
.DEFAULT_GOAL := help

# Make variable -> CLI flag (only variables that are set are passed)
flag = $(if $(strip $($(1))),--$(2) $($(1)))
.PHONY: chaos setup apt venv helpers guest migrate test test-unit test-integration lint clean-testbed clean \
        bench-traffic bench-sampler bench-qmp bench-qmp-client check-helpers

setup: apt venv helpers qemu libvirt guest criu xen

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

# HV=xen: the nested Xen host image (Xen 4.17 + dom0 from Debian packages, ~/.cache/vrmig/xen)
.PHONY: xen
xen: guest
	$(PY) -m routers xen --profiles frr bird

# make migrate|sweep|ab|baseline|calibrate VAR=value: every variable is an option of the target's
# command (migrate/cli/make.py reads them from the environment: no value reaches a shell line, and
# a variable the target does not know is refused); make help T=<target> lists them
MAKE_BRIDGE = $(PY) -m migrate.cli.make

migrate:
	$(MAKE_BRIDGE) migrate

.PHONY: help
help:
	@$(if $(T),,echo "make setup | migrate | sweep | ab | baseline | calibrate | campaign | report | compare | nightly | test; make help T=<target> lists a target's variables (README.md)")
	@$(MAKE_BRIDGE) --list $(or $(T),migrate)

# make baseline: forwarding performance without migration (docs/campaigns.md "make baseline")
.PHONY: baseline
baseline:
	$(MAKE_BRIDGE) baseline

# make calibrate: every downtime estimator against cuts and pauses of known length (docs/metrics.md "Calibration")
.PHONY: calibrate
calibrate:
	$(MAKE_BRIDGE) calibrate

# make hosts-check TESTBED=lab.toml: is every host of a lab inventory ready? (docs/testbed.md "make hosts-check")
.PHONY: hosts-check bench-ssh
hosts-check:
	@if [ -z "$(TESTBED)" ]; then echo "make hosts-check: set TESTBED=<inventory.toml> (docs/testbed.md)" >&2; exit 2; fi
	$(PY) -m migrate hosts-check --testbed $(TESTBED) $(call flag,MAX_OFFSET_MS,max-offset-ms) $(if $(JSON),--json)

# make bench-ssh: per-command latency of the SSH transports (docs/measurements/2026-11-24-ssh-latency.md)
bench-ssh:
	$(PY) -m tests.bench.bench_ssh $(call flag,TESTBED,testbed) --out $(RESULTS)/bench/ssh-latency.json

# make hosts-setup TESTBED=lab.toml [PROFILES=frr,bird]: prepare a lab's machines with Ansible (docs/testbed.md)
.PHONY: hosts-setup
hosts-setup:
	@if [ -z "$(TESTBED)" ]; then echo "make hosts-setup: set TESTBED=<lab inventory, e.g. lab.toml>" >&2; exit 2; fi
	$(PY) -m migrate hosts-setup --testbed $(TESTBED) $(call flag,PROFILES,profiles) --results $(RESULTS)

# make campaign FILE=campaigns/<name>.toml [REPS=] [SEED=] [RESUME=<dir>] [CHECK=1] (docs/campaigns.md)
.PHONY: campaign campaign-check
campaign:
	@if [ -z "$(FILE)$(RESUME)" ]; then echo "make campaign: set FILE=campaigns/<name>.toml (or RESUME=<campaign dir>)" >&2; exit 2; fi
	$(PY) -m migrate campaign $(FILE) $(call flag,REPS,reps) $(call flag,SEED,seed) $(call flag,RESUME,resume) \
	  $(call flag,TESTBED,testbed) $(if $(filter 1 yes true,$(CHECK)),--check) --results $(RESULTS)

# every shipped campaign file parses and expands into valid points (nothing is run)
campaign-check:
	$(PY) -m migrate campaign --check campaigns/*.toml

# make paper [REPS=3] [FIG2=<baseline dir>] [FIG3=<campaign dir>] [PARTS=fig2,fig3]: paper 004 side by side
.PHONY: paper
paper:
	$(PY) -m migrate paper $(call flag,REPS,reps) $(call flag,FIG2,fig2) $(call flag,FIG3,fig3) \
	  $(call flag,PARTS,parts) $(call flag,TESTBED,testbed) --results $(RESULTS)

.PHONY: sweep report compare nightly nightly-accept
sweep:
	@if [ -n "$$RATE$$SIZE" ]; then echo "make sweep: use RATES=... SIZES=... (RATE and SIZE are for make migrate)" >&2; exit 2; fi
	$(MAKE_BRIDGE) sweep

report:
	$(PY) -m migrate report $(RUNS) $(call flag,OUT,out) --results $(RESULTS)

# make ab A="QEMU=system" B="QEMU=10.0" [REPS=30] [SEED=] + make migrate's variables: two settings
# side by side, interleaved; exit 1 if B regressed (docs/stack.md "make ab"; A and B reach the CLI
# through the environment, never through a shell line)
.PHONY: ab
ab:
	@if [ -z "$$A" ] || [ -z "$$B" ]; then echo 'make ab: set A="VAR=value ..." and B="VAR=value ...", e.g. A="QEMU=system" B="QEMU=10.0"' >&2; exit 2; fi
	$(MAKE_BRIDGE) ab

compare:
	@if [ -z "$(A)" ] || [ -z "$(B)" ]; then echo "make compare: set A=<sweep dir> B=<sweep dir>" >&2; exit 2; fi
	$(PY) -m migrate compare $(A) $(B) $(call flag,OUT,out) --results $(RESULTS)

nightly:
	$(PY) -m migrate nightly $(call flag,MATRIX,matrix) $(call flag,HISTORY,history) $(call flag,TESTBED,testbed) \
	  $(call flag,AB,ab) --results $(RESULTS)

nightly-accept:
	$(PY) -m migrate nightly-accept $(call flag,NIGHT,night) $(call flag,HISTORY,history) --results $(RESULTS)

clean-testbed:
	$(PY) -m migrate clean-testbed $(call flag,TESTBED,testbed)

# make lab-up: the emulated lab, hosts reached only over SSH; prints its inventory last (docs/testbed.md)
.PHONY: lab-up lab-down
lab-up:
	$(PY) -m migrate lab-up $(call flag,LAB_NAME,name) $(call flag,LAB_DIR,dir) $(call flag,DEPLOY_DIR,deploy-dir) $(if $(filter 1,$(XEN)),--xen)

lab-down:
	@if [ -z "$(TESTBED)" ]; then echo "make lab-down: set TESTBED=<the lab.toml make lab-up printed>" >&2; exit 2; fi
	$(PY) -m migrate lab-down $(TESTBED)

test: lint test-unit check-helpers test-integration

test-unit:
	$(PYTEST) -q tests/unit

test-integration:
	$(PYTEST) -q -rs --durations=25 tests/integration

lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

bench-traffic: helpers
	mkdir -p $(RESULTS)/bench
	$(PY) -m crosstraffic.bench.traffic --out $(RESULTS)/bench/traffic.csv

# make chaos HVS=kvm,kvm-libvirt,criu,xen TRIALS=10 XEN_TRIALS=2 SEED=1 (TRIALS per HV; xen ~2 min a trial)
# [TESTBED=lab.toml: on a lab's hosts, the same HVs, signals only]
chaos:
	$(PY) -m migrate.campaigns.chaos --trials $(or $(TRIALS),10) --xen-trials $(or $(XEN_TRIALS),2) --seed $(or $(SEED),1) \
	  $(call flag,HVS,hvs) $(call flag,TESTBED,testbed) --results $(RESULTS)/chaos

# the same migrations on the embedded testbed and on a lab, interleaved (docs/testbed.md)
.PHONY: bench-lab
bench-lab: venv
	@if [ -z "$(TESTBED)" ]; then echo "make bench-lab: give TESTBED=<inventory> (make lab-up prints one)" >&2; exit 2; fi
	$(PY) -m migrate.cli.bench_lab --testbed $(TESTBED) $(call flag,HV,hv) $(call flag,REPS,reps) $(call flag,MODES,modes) $(call flag,DRIVERS,drivers) \
	  $(call flag,RATE,rate) $(call flag,DURATION,duration) $(call flag,MEM,mem) --results $(RESULTS)

# make bench-lab-baseline TESTBED=<lab> [ROUNDS=3]: make baseline embedded and on the lab, alternating (docs/campaigns.md)
.PHONY: bench-lab-baseline bench-lab-peering
bench-lab-baseline: venv
	@if [ -z "$(TESTBED)" ]; then echo "make bench-lab-baseline: give TESTBED=<inventory> (make lab-up prints one)" >&2; exit 2; fi
	$(PY) -m tests.bench.bench_baseline_lab --testbed $(TESTBED) $(call flag,ROUNDS,rounds) $(call flag,HV,hv) --out $(RESULTS)/bench/lab-baseline

# make bench-lab-peering TESTBED=<lab> [REPS=3]: PEERING=bgp,bfd runs embedded and on the lab, alternating
bench-lab-peering: venv
	@if [ -z "$(TESTBED)" ]; then echo "make bench-lab-peering: give TESTBED=<inventory> (make lab-up prints one)" >&2; exit 2; fi
	$(PY) -m tests.bench.bench_peering_lab --testbed $(TESTBED) $(call flag,REPS,reps) --out $(RESULTS)/bench/lab-peering

bench-sampler: venv
	$(MAKE) -C probes
	$(PY) -m probes.bench sampler --out $(RESULTS)/bench/sampler.csv

# make bench-qmp RUNS="results/a results/b": arrival minus QEMU timestamp of the QMP events of
# existing HV=kvm runs (run directories or roots), per event kind; default every run in $(RESULTS)
bench-qmp: venv
	$(PY) -m analysis.hypervisors.qmp_arrival --out $(RESULTS)/bench/qmp.csv $(or $(RUNS),$(RESULTS))

# make bench-qmp-client: the QMP client's arrival stamp against a fake QEMU, with and without the
# arrival watch and beside a thread blocked in recv, side by side (no QEMU, no root)
bench-qmp-client: venv
	$(MAKE) -C probes
	$(PY) -m tests.bench.bench_qmp_client --out $(RESULTS)/bench/qmp-client.json

clean:
	$(MAKE) -C crosstraffic clean
	$(MAKE) -C probes clean
