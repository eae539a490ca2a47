"""Inside the CRIU host VM (``CRIU_HOST=vm``): run the job the host wrote with
:func:`migrate.experiment.run.run` and print the markers the host side reads from the console
(:mod:`migrate.drivers.criu.hostvm`).  The VM's /init starts ``python -m migrate.experiment.vm_job <job>``."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

from migrate.core.errors import VrmigError
from migrate.drivers.criu.hostvm import ERROR_MARK, RUNDIR_MARK, in_vm
from migrate.experiment.run import run
from migrate.model.scenario import Scenario


def main(argv: list[str] | None = None) -> int:
    """Inside the VM: run the job's scenario with :func:`migrate.experiment.run.run`."""
    args = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="vrmig: %(message)s", stream=sys.stdout)
    logging.getLogger("pyroute2").setLevel(logging.WARNING)
    if len(args) != 1 or not in_vm():
        print("usage: python -m migrate.experiment.vm_job <job.json> (inside the CRIU host VM only)", file=sys.stderr)
        return 2
    job = json.loads(Path(args[0]).read_text())
    os.environ.update(job.get("env") or {})
    try:
        run_dir = run(Scenario(**job["scenario"]), Path(job["results_root"]), {"criu_host": job["criu_host"]})
    except VrmigError as err:
        print(f"{ERROR_MARK} {err.exit_code} {err}", flush=True)
        return err.exit_code
    print(f"{RUNDIR_MARK} {run_dir}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
