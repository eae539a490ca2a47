# vrmig — see README.md.  Make variables map 1:1 to `python -m migrate run` flags.
SHELL := /bin/bash
PY := .venv/bin/python
PYTEST := .venv/bin/pytest
APT_PACKAGES := qemu-system-x86 qemu-utils iproute2 iputils-ping irtt iperf3 busybox-static cpio zstd \
                gcc make python3-venv ca-certificates kmod
RESULTS ?= results

# Make variable -> CLI flag (only variables that are set are passed)
flag = $(if $(strip $($(1))),--$(2) $($(1)))
MIGRATE_FLAGS = $(call flag,HV,hv) $(call flag,MODE,mode) $(call flag,RATE,rate) $(call flag,SIZE,size) \
  $(call flag,IP,ip) $(call flag,DURATION,duration) $(call flag,MIGRATE_AT,migrate-at) $(call flag,AFTER,after) \
  $(call flag,SAMPLE_MS,sample-ms) $(call flag,PROBE_MS,probe-ms) $(call flag,MEM,mem) \
  $(call flag,ROUTER,router) $(call flag,NIC,nic) $(call flag,ACCEL,accel) $(call flag,GEN,gen) \
  $(call flag,MIGLINK,miglink) $(call flag,DOWNTIME_LIMIT,downtime-limit) $(call flag,MIGBW,max-bandwidth) \
  $(call flag,AUTO_CONVERGE,auto-converge) $(call flag,XBZRLE,xbzrle) $(call flag,POSTCOPY,postcopy) \
  $(call flag,MIGRATE_TIMEOUT,migrate-timeout) $(call flag,BOOT_TIMEOUT,boot-timeout) \
  $(call flag,FAULT,fault) --results $(RESULTS)

.PHONY: setup apt venv helpers guest migrate test test-unit test-integration lint clean-testbed clean \
        bench-traffic bench-sampler check-helpers

setup: apt venv helpers guest

apt:
	@if [ "$$(id -u)" != 0 ]; then echo "make setup: run as root (installs Debian packages)"; exit 2; fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(APT_PACKAGES) \
	  $$(python3 -c 'import sys; sys.path.insert(0, "."); from routers.build import HOST_PACKAGES; print(" ".join(HOST_PACKAGES))')

venv: .venv/.installed
.venv/.installed: pyproject.toml
	python3 -m venv .venv
	.venv/bin/pip install -q --upgrade pip
	.venv/bin/pip install -q -e '.[dev]'
	touch $@

helpers:
	$(MAKE) -C crosstraffic
	$(MAKE) -C probes

check-helpers:
	$(MAKE) -C crosstraffic check
	$(MAKE) -C probes check

guest: venv
	$(PY) -m routers build --profile frr
	$(PY) -m routers build --profile bird

migrate:
	$(PY) -m migrate run $(MIGRATE_FLAGS)

clean-testbed:
	$(PY) -m migrate clean-testbed

test: lint test-unit test-integration

test-unit:
	$(PYTEST) -q tests/unit

test-integration:
	$(PYTEST) -q -rs tests/integration

lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

bench-sampler: venv
	$(MAKE) -C probes
	$(PY) -m probes.bench sampler --out $(RESULTS)/bench/sampler.csv

clean:
	$(MAKE) -C crosstraffic clean
	$(MAKE) -C probes clean
