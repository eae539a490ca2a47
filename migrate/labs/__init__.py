"""Lab tooling, above the drivers: what prepares and checks a lab's hosts and what builds the
emulated one (``check``: make hosts-check; ``provision`` and ``bundles``: make hosts-setup;
``emulated``: make lab-up/lab-down, with ``emulated_xen`` its Xen hosts and ``sshd`` their
sshd; ``cleanup``: clean-testbed on a lab's Xen dom0s; ``where``: where a campaign's runs go,
the embedded testbed or a lab, as one object; ``leaks``: what a chaos trial's run leaves on a
lab's hosts).  A run on a lab uses the testbed layer's ``labbed`` and ``hosts``; the drivers
import nothing of this package (tests/unit/test_layout.py)."""
