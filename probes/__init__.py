"""Probes of a vrmig run: the 10 ms interface-counter sampler (``probes/bin/vrsampler``) and RTT
probes with irtt — command lines, readiness, and pure loaders of their raw output."""

from probes.irtt import (
    LOST_DOWN,
    LOST_NO,
    LOST_UNKNOWN,
    LOST_UP,
    RttTrace,
    client_argv,
    load_irtt,
    server_argv,
    wait_irtt_server,
)
from probes.sampler import VRSAMPLER, Counters, Series, load_counters, sampler_argv

__all__ = [
    "LOST_DOWN",
    "LOST_NO",
    "LOST_UNKNOWN",
    "LOST_UP",
    "VRSAMPLER",
    "Counters",
    "RttTrace",
    "Series",
    "client_argv",
    "load_counters",
    "load_irtt",
    "sampler_argv",
    "server_argv",
    "wait_irtt_server",
]
