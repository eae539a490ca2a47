"""Sub-commands ``worker`` and ``scheduler`` of the vrmig CLI: a campaign's runs spread over many
labs by Dask distributed (migrate.campaigns.distributed; docs/many-labs.md)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from migrate.core.errors import ConfigError, Interrupted

DEFAULT_PORT = 8786


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Add ``worker`` and ``scheduler``."""
    w = sub.add_parser("worker", help="one Dask worker holding one lab (make worker TESTBED=... SCHEDULER=...)")
    w.add_argument("--testbed", type=Path, required=True, help="the lab inventory this worker holds")
    w.add_argument("--scheduler", required=True, help="SCHEDULER: the Dask scheduler's address, tcp://host:port")
    w.add_argument("--results", type=Path, default=Path("results"), help="results root (runs kept in worker-<lab>/)")
    w.set_defaults(handler=cmd_worker)
    s = sub.add_parser("scheduler", help="a Dask scheduler for lab workers (make scheduler)")
    s.add_argument("--host", default="127.0.0.1", metavar="SCHEDULER_HOST", help="the address it listens on")
    s.add_argument("--port", type=int, default=DEFAULT_PORT, metavar="SCHEDULER_PORT", help="its TCP port (0: any)")
    s.set_defaults(handler=cmd_scheduler)


def cmd_worker(a: argparse.Namespace) -> int:
    """``vrmig worker``: hosts-check the lab, then serve the scheduler until stopped."""
    from migrate.campaigns.distributed import worker_main

    if not a.testbed.is_file():
        raise ConfigError(f"TESTBED={a.testbed}: no such inventory file (make lab-up prints one)")
    return worker_main(a.testbed, a.scheduler, a.results)


def cmd_scheduler(a: argparse.Namespace) -> int:
    """``vrmig scheduler``: Dask's own scheduler, in this process, until stopped; prints its address."""
    from distributed import Scheduler

    async def serve() -> None:
        try:
            s = await Scheduler(host=a.host, port=a.port, dashboard=False)
        except OSError as err:
            raise ConfigError(f"SCHEDULER_HOST={a.host} SCHEDULER_PORT={a.port}: cannot listen ({err})") from None
        print(f"scheduler at {s.address}: start a worker per lab with make worker TESTBED=... SCHEDULER={s.address}")
        print(s.address, flush=True)
        await s.finished()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        raise Interrupted("scheduler stopped") from None
    return 0
