"""The vrgen/vrsink self-test (the one ``make -C crosstraffic check`` runs on sanitizer builds), here on
the normal builds over loopback: argument errors, paced/unpaced IPv4/IPv6, signal stops, crafted
sequence numbers (loss, reordering, duplicates, gaps).  Needs no root; skips if not built."""

from __future__ import annotations

import pytest

from crosstraffic.runner import BIN_DIR
from crosstraffic.selftest import main as selftest_main
from tests.integration.conftest import require_root_and

pytestmark = pytest.mark.integration


def test_selftest_over_loopback(capsys):
    for exe in ("vrgen", "vrsink"):
        if not (BIN_DIR / exe).exists():
            pytest.fail(f"crosstraffic/bin/{exe} not built: run `make -C crosstraffic`", pytrace=False)
    rc = selftest_main(["--bin", str(BIN_DIR)])
    out = capsys.readouterr()
    assert rc == 0, out.err


def test_require_root_helper_is_importable():
    assert callable(require_root_and)
