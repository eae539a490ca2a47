"""Started with every Python process whose PYTHONPATH holds this directory (tests.nswatch.child_env):
when VRMIG_NSWATCH names a file, the process is watched for namespace entries from its start and
appends each to that file (tests/nswatch.py)."""

import os

if os.environ.get("VRMIG_NSWATCH"):
    from tests import nswatch

    nswatch.install_to_file(os.environ["VRMIG_NSWATCH"])
