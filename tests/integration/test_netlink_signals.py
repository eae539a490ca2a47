"""migrate.core.netlink under SIGINTs: a signal handler that raises (as the suite's do) must
never run inside pyroute2's asyncio loop, where asyncio swallows the exception together with
the reply the loop had just read, and the request then waits for ever (root: a namespace)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.integration.conftest import require_root_and

REPO = Path(__file__).resolve().parents[2]
REQUESTS = 300

# a loop of requests in a namespace of its own; each SIGINT raises Interrupted, which the loop
# counts; the last line says how many requests completed and how many signals came through
CHILD = textwrap.dedent(
    """
    import signal, subprocess, sys
    from migrate.core.errors import Interrupted
    from migrate.core.netlink import iproute

    ns, n = sys.argv[1], int(sys.argv[2])
    done = caught = 0
    armed = False  # raise at every signal while a request (and pyroute2's clean-up of it) runs

    def handler(signum, frame):
        if armed:
            raise Interrupted("SIGINT")

    def clean():
        with iproute(ns) as ipr:
            for i in ipr.link_lookup(ifname="b0"):
                ipr.link("del", index=i)

    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        signal.signal(signal.SIGINT, handler)
        print("READY", flush=True)
        while done < n:
            try:
                try:
                    armed = True
                    with iproute(ns) as ipr:
                        ipr.link("add", ifname="b0", kind="bridge")
                        ipr.link("del", index=ipr.link_lookup(ifname="b0")[0])
                    armed = False
                    done += 1
                except Interrupted:
                    armed = False
                    caught += 1
            except Interrupted:  # a second one, before the first's handler disarmed
                armed = False
                caught += 1
            clean()
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        subprocess.run(["ip", "netns", "del", ns])
    print("DONE", done, caught, flush=True)
    """
)


def test_sigints_into_requests_lose_no_reply(tmp_path):
    require_root_and("ip")
    ns = f"vrmignl-{os.getpid()}"
    p = subprocess.Popen(
        [sys.executable, "-c", CHILD, ns, str(REQUESTS)], cwd=REPO, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "READY"
        rng = random.Random(4)
        sent = 0
        while p.poll() is None and sent < 3000:
            p.send_signal(signal.SIGINT)
            sent += 1
            time.sleep(rng.uniform(0.0005, 0.004))  # at random points of the requests
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:  # hung in a request: the failure this test is for
            p.kill()
            p.wait()
            subprocess.run(["ip", "netns", "del", ns], check=False)
    assert p.returncode == 0, err[-2000:]
    assert "Exception in callback" not in err, err[-2000:]
    done, caught = (int(x) for x in out.split()[-2:])
    assert done == REQUESTS and caught > 0, (out, sent)
