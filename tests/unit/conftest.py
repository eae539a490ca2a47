"""Unit tests run the commands quietly: no progress lines on stderr (``VRMIG_PROGRESS=0``), so
that a bad input's message is the one line the tests read; the tests of the progress itself
switch it on."""

import os

os.environ.setdefault("VRMIG_PROGRESS", "0")
