"""One experiment: scenario, run, instruments, recorder, faults, console."""
