"""MarkerScan: readiness read from a growing console or log file."""

from __future__ import annotations

from migrate.core.procs import MarkerScan


def test_a_marker_split_across_two_writes_is_found_and_a_missing_file_is_not_seen(tmp_path):
    path = tmp_path / "console.log"
    scan = MarkerScan(path, "VRMIG-READY")
    assert not scan.seen()  # no file yet
    path.write_bytes(b"booting\nVRMIG-RE")
    assert not scan.seen()
    with open(path, "ab") as fh:
        fh.write(b"ADY routes=2\n")
    assert scan.seen()


def test_only_new_bytes_are_read(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b"x" * 10_000)
    scan = MarkerScan(path, "DONE")
    assert not scan.seen()
    assert scan._offset == 10_000
    with open(path, "ab") as fh:
        fh.write(b"..DONE")
    assert scan.seen() and scan._offset == 10_006
