"""Crash lines quoted from a router console (captured: a TCG guest that panicked on R2 right
after a precopy migration QEMU reported completed, nightly 20261123T184447Z r03)."""

from pathlib import Path

from migrate.experiment.console import crash_excerpt, crash_in

FIXTURE = Path(__file__).parent.parent / "fixtures" / "console" / "kvm_tcg_panic_after_precopy.log"


def test_captured_panic_names_cause_and_panic():
    got = crash_in(FIXTURE)
    assert got is not None
    cause, panic = got.split(" | ")
    assert cause.startswith("list_add corruption.")
    assert panic == "Kernel panic - not syncing: Fatal exception in interrupt"


def test_a_healthy_console_has_no_crash():
    text = "[    1.0] VRMIG-BOOT kernel=6.1.0 profile=frr\nVRMIG-READY router=frr version=8.4.4\n"
    assert crash_excerpt(text) is None


def test_panic_without_named_cause_and_missing_file(tmp_path):
    assert crash_excerpt("[ 3.1] Kernel panic - not syncing: VFS: Unable to mount root fs") == (
        "Kernel panic - not syncing: VFS: Unable to mount root fs"
    )
    assert crash_in(tmp_path / "absent.log") is None
