"""DIRTY= and the dirty-rate measurement: the guest's command line and load line, the scenario's
checks, QEMU's and libvirt's replies (captured real ones, tests/fixtures/dirty/README.md), the
summary figure and its qualifier, the sweep columns, the image check, the orchestrator's wait and
measurement loop, and the guest's load program itself (compiled here, run for a second)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from analysis.metrics import dirty as ad
from analysis.stats.aggregate import RUN_COLUMNS, aggregate, point_columns, point_row, run_record
from analysis.summary import Summary
from migrate.core.errors import ConfigError, DependencyError, GuestError
from migrate.model import dirty as md
from migrate.model.scenario import Scenario
from routers import build
from routers.errors import RouterError
from routers.guest import DIRTY_TOOL, GuestImage, kernel_cmdline, parse_dirty

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "dirty"
IF0, IF1 = ["198.18.1.1/24"], ["198.18.2.1/24"]


def _jsonl(name: str) -> list[dict]:
    return [json.loads(x) for x in (FIX / name).read_text().splitlines()]


def _meta(name: str) -> dict:
    return json.loads((FIX / name).read_text())


# ------------------------------------------------------------------ guest command line and load line
def test_cmdline_carries_the_rate_only_when_asked():
    assert "vrmig.dirty" not in kernel_cmdline("frr", IF0, IF1)
    assert kernel_cmdline("frr", IF0, IF1, dirty_mb_s=30.0).split()[-2] == "vrmig.dirty=30"
    assert "vrmig.dirty=12.5 " in kernel_cmdline("frr", IF0, IF1, dirty_mb_s=12.5)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(RouterError, match="must be above 0"):
            kernel_cmdline("frr", IF0, IF1, dirty_mb_s=bad)


def test_load_line_of_a_real_console():
    lines = (FIX / "console_dirty30.log").read_text().splitlines()
    got = [parse_dirty(x) for x in lines]
    assert got[:3] == [None, None, None]  # BOOT, the routes line, READY
    assert got[3] == {"rate_mb_s": 30.0, "wss_mib": 84.5, "wss_s": 2.82, "pid": 164.0}
    assert parse_dirty("VRMIG-DIRTY-LAG behind by more than 100 ms of writes at 30 MB/s") is None
    assert parse_dirty("VRMIG-DIRTY-FAIL cannot map 84 MiB: Cannot allocate memory") is None


# ------------------------------------------------------------------ scenario and command line
def test_scenario_takes_a_rate_and_names_the_run_after_it():
    assert Scenario().dirty_mbps is None and "dirty" not in Scenario().name
    assert Scenario(dirty_mbps=30).name == "kvm-precopy-100M-1500-dirty30"
    assert Scenario(dirty_mbps=128, mem_mib=256).dirty_mbps == 128  # MEM/2: the largest


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"dirty_mbps": 0}, "DIRTY=0 must be above 0 MB/s"),
        ({"dirty_mbps": -5}, "DIRTY=-5 must be above 0"),
        ({"dirty_mbps": float("nan")}, "DIRTY=nan must be above 0"),
        ({"dirty_mbps": 20_000, "mem_mib": 16384}, "above 10000 MB/s"),
        ({"dirty_mbps": 129}, r"at most 128 MB/s with MEM=256 \(raise MEM\)"),
        ({"dirty_mbps": 30, "hv": "criu"}, "DIRTY runs with HV=kvm so far .not HV=criu.: .*CRIU.*Xen"),
        ({"dirty_mbps": 30, "hv": "openvz"}, "DIRTY runs with HV=kvm so far"),
    ],
)
def test_scenario_refuses_bad_rates_in_one_line(kw, match):
    with pytest.raises(ConfigError, match=match) as exc:
        Scenario(**kw)
    assert "\n" not in str(exc.value)


def test_cli_flag_reaches_the_scenario():
    from migrate.cli.main import build_parser
    from migrate.experiment.args import scenario_from_args

    a = build_parser().parse_args(["run", "--dirty", "42.5"])
    assert scenario_from_args(a).dirty_mbps == 42.5
    assert scenario_from_args(build_parser().parse_args(["run"])).dirty_mbps is None
    with pytest.raises(ConfigError, match="DIRTY='x' is not a number of MB/s"):
        build_parser().parse_args(["run", "--dirty", "x"])


def test_make_passes_dirty_to_run_and_sweep():
    from migrate.cli.make import argv_for

    for target, extra in (("migrate", {}), ("sweep", {"RATES": "0", "REPS": "1"})):
        argv = argv_for(target, {"DIRTY": "30", **extra})
        assert argv[argv.index("--dirty") + 1] == "30", argv


# ------------------------------------------------------------------ QEMU's and libvirt's replies
def test_query_dirty_rate_replies_of_a_loaded_guest():
    rows = _jsonl("qmp_dirty30.jsonl")
    before, error, measuring, measured = rows
    r = ad.parse_query_dirty_rate(before["return"])
    assert (r.status, r.mb_s, r.measured) == ("unstarted", None, False)
    assert "sample-pages is out of range[128, 16384]" in error["error"]
    r = ad.parse_query_dirty_rate(measuring["return"])
    assert (r.status, r.mb_s, r.sample_pages, r.calc_time_s, r.measured) == ("measuring", None, 16384, 1.0, False)
    r = ad.parse_query_dirty_rate(measured["return"])
    assert (r.status, r.mb_s, r.mode, r.sample_pages, r.measured) == ("measured", 30, "page-sampling", 16384, True)
    assert r.start_time_s == ad.parse_query_dirty_rate(measuring["return"]).start_time_s


def test_query_dirty_rate_of_an_idle_guest_reads_0():
    measured = _jsonl("qmp_idle.jsonl")[-1]["return"]
    r = ad.parse_query_dirty_rate(measured)
    assert r.measured and r.mb_s == 0


def test_libvirt_dirtyrate_statistics():
    stats = _meta("meta_libvirt_stopcopy_dirty30.json")["dirty_rate"]["reply"]
    r = ad.parse_libvirt_dirtyrate(stats)
    assert (r.status, r.mb_s, r.mode, r.calc_time_s, r.measured) == ("measured", 28, "page-sampling", 1.0, True)
    assert r.sample_pages == ad.QEMU_DEFAULT_SAMPLE_PAGES  # libvirt passes none: QEMU's default
    # the other states of dirtyrate.calc_status (libvirt's VIR_DOMAIN_DIRTYRATE_*: 0, 1)
    for code, status in ((0, "unstarted"), (1, "measuring")):
        r = ad.parse_libvirt_dirtyrate({**stats, "dirtyrate.calc_status": code})
        assert (r.status, r.mb_s, r.measured) == (status, None, False)
    assert ad.parse_libvirt_dirtyrate({}).status is None


# ------------------------------------------------------------------ the summary figure
def test_figure_of_a_dirty_run():
    meta = _meta("meta_qmp_precopy_dirty30.json")
    rec = meta["dirty_rate"]
    fig, notes = ad.dirty_rate(meta, rec["ended_ns"] + 500_000_000, "VRMIG-DIRTY rate_mb_s=30 ...\n")
    assert (fig.requested_mb_s, fig.measured_mb_s, fig.why_absent) == (30.0, 29.0, None)
    assert (fig.method, fig.calc_time_s, fig.sample_pages, fig.interface) == ("page-sampling", 1.0, 16384, "qmp")
    assert fig.before_migration_s == pytest.approx(0.5) and fig.delayed_migration_s == 0.0
    assert fig.load == {"rate_mb_s": 30.0, "wss_mib": 84.5, "wss_s": 2.82, "pid": 164.0}
    assert fig.load_lagged is False
    # page sampling: 4096 of the 256 MiB guest's pages, 29/256 of them changed
    assert fig.sampling_error_mb_s == pytest.approx(256 * (29 / 256 * 227 / 256 / 4096) ** 0.5)
    assert any("QEMU before 9.0 can lose pages" in n for n in notes), notes  # pre-copy, TCG, QEMU 7.2


def test_figure_of_an_idle_run_is_a_bound_not_0():
    fig, notes = ad.dirty_rate(_meta("meta_qmp_stopcopy_idle.json"))
    assert fig.requested_mb_s is None and fig.measured_mb_s is None
    assert (fig.why_absent, fig.upper_mb_s, fig.load, fig.load_lagged) == ("below_rate_resolution", 1.0, None, None)
    assert notes == []
    quals = Summary("completed", None, "kvm", "stopcopy", "tcg", 1e7, 1500, dirty_rate=fig).qualifiers()
    q = quals["dirty_rate.measured_mb_s"]
    assert (q.state, q.upper, q.reasons) == ("censored", 1.0, ("below_rate_resolution",))


def test_figure_of_libvirt_has_the_larger_sampling_error():
    fig, _ = ad.dirty_rate(_meta("meta_libvirt_stopcopy_dirty30.json"))
    assert (fig.measured_mb_s, fig.interface, fig.sample_pages) == (28.0, "libvirt", 512)
    assert 6 < fig.sampling_error_mb_s < 8


def test_figure_when_not_measured_says_why():
    meta = _meta("meta_qmp_precopy_dirty30.json")
    rec = meta["dirty_rate"]
    cases = [
        ({k: v for k, v in meta.items() if k != "dirty_rate"}, ad.NOT_RECORDED),
        ({**meta, "dirty_rate": md.unsupported("criu")}, ad.UNSUPPORTED),
        ({**meta, "dirty_rate": {**rec, "reply": None, "error": "QEMU (src) connection lost"}}, ad.FAILED),
        ({**meta, "dirty_rate": {**rec, "reply": {**rec["reply"], "status": "measuring"}}}, ad.UNFINISHED),
    ]
    for m, why in cases:
        fig, _ = ad.dirty_rate(m)
        assert (fig.measured_mb_s, fig.why_absent) == (None, why), (why, fig)
        q = Summary("completed", None, "kvm", "precopy", "tcg", 1e7, 1500, dirty_rate=fig).qualifiers()
        assert q["dirty_rate.measured_mb_s"].state == "absent" and q["dirty_rate.measured_mb_s"].reasons == (why,)
    assert fig.requested_mb_s == 30.0


def test_lag_and_a_small_working_set_are_noted():
    meta = _meta("meta_qmp_precopy_dirty30.json")
    meta["dirty_rate"]["load"] = {**meta["dirty_rate"]["load"], "wss_mib": 40.0, "wss_s": 0.66}
    fig, notes = ad.dirty_rate(meta, None, "VRMIG-DIRTY-LAG behind by more than 100 ms of writes at 30 MB/s\n")
    assert fig.load_lagged is True and fig.before_migration_s is None
    assert any("VRMIG-DIRTY-LAG" in n for n in notes) and any("holds 0.66 s of writes" in n for n in notes), notes


def test_summary_json_always_has_the_figure():
    s = Summary("failed", "x", "kvm", "precopy", None, None, None).to_dict()
    assert s["dirty_rate"] == {"requested_mb_s": None, "measured_mb_s": None, "why_absent": "failed"}
    fig, _ = ad.dirty_rate(_meta("meta_qmp_stopcopy_idle.json"))
    s = Summary("completed", None, "kvm", "stopcopy", "tcg", 1e7, 1500, dirty_rate=fig).to_dict()
    assert s["dirty_rate"]["measured_mb_s"] is None and s["dirty_rate"]["upper_mb_s"] == 1.0
    assert s["qualifiers"]["dirty_rate.measured_mb_s"]["upper"] == 1.0


# ------------------------------------------------------------------ sweep tables
def _summary(meta: dict) -> dict:
    fig, _ = ad.dirty_rate(meta)
    return Summary("completed", None, "kvm", meta["scenario"]["mode"], "tcg", 1e7, 1500, dirty_rate=fig).to_dict()


def test_runs_and_points_carry_requested_and_measured():
    assert {"dirty_requested_mb_s", "dirty_measured_mb_s"} <= set(RUN_COLUMNS)
    assert {"dirty_requested_mb_s", "dirty_measured_mb_s_mean", "dirty_measured_mb_s_n_censored"} <= set(
        point_columns()
    )
    loaded, idle = _meta("meta_libvirt_stopcopy_dirty30.json"), _meta("meta_qmp_stopcopy_idle.json")
    recs = [
        run_record(_summary(m), {**m, "status": "completed"}, run_id=f"r{i}", series=f"s{i}")
        for i, m in enumerate((loaded, idle))
    ]
    assert (recs[0]["dirty_requested_mb_s"], recs[0]["dirty_measured_mb_s"]) == (30.0, 28.0)
    assert (recs[1]["dirty_requested_mb_s"], recs[1]["dirty_measured_mb_s"]) == (None, None)
    assert recs[1]["quals"]["dirty_measured_mb_s"]["reasons"] == ["below_rate_resolution"]
    rows = {p.series: point_row(p) for p in aggregate(recs)}
    assert rows["s0"]["dirty_requested_mb_s"] == 30.0 and rows["s0"]["dirty_measured_mb_s_mean"] == 28.0
    assert rows["s1"]["dirty_requested_mb_s"] is None and rows["s1"]["dirty_measured_mb_s_n_censored"] == 1


def test_series_name_carries_dirty():
    from migrate.campaigns.reporting import series_name

    assert (
        series_name("A", {"hv": "kvm", "mode": "precopy", "dirty_requested_mb_s": 30.0}, {}) == "A kvm precopy DIRTY=30"
    )
    assert series_name("A", {"hv": "kvm", "mode": "precopy", "dirty_requested_mb_s": None}, {}) == "A kvm precopy"


# ------------------------------------------------------------------ the image and the orchestrator
def _image(tools: dict | None) -> GuestImage:
    manifest = {"format": 1} if tools is None else {"format": 1, "tools": tools}
    return GuestImage(kernel=Path("k"), initrd=Path("i"), manifest=manifest)


def test_dirty_refuses_an_image_without_the_tool():
    from migrate.drivers.kvm.driver import require_dirty_tool

    with pytest.raises(
        DependencyError, match=r"^DIRTY=30: the frr guest image has no vrmig-dirty: rebuild with `make guest`$"
    ):
        require_dirty_tool(Scenario(dirty_mbps=30), _image(None))
    require_dirty_tool(Scenario(dirty_mbps=30), _image({DIRTY_TOOL: {"path": "/usr/sbin/vrmig-dirty"}}))
    require_dirty_tool(Scenario(), _image(None))  # without DIRTY an old image is fine


def test_wait_load_reads_the_line_or_says_why(tmp_path):
    console = tmp_path / "console-R1.log"
    console.write_text((FIX / "console_dirty30.log").read_text())
    assert md.wait_load(console, 1.0, lambda: True)["wss_mib"] == 84.5
    console.write_text("VRMIG-READY router=frr version=8.4.4\nVRMIG-DIRTY-FAIL this image has no vrmig-dirty\n")
    with pytest.raises(GuestError, match="did not start: VRMIG-DIRTY-FAIL this image has no vrmig-dirty"):
        md.wait_load(console, 1.0, lambda: True)
    console.write_text("VRMIG-READY router=frr version=8.4.4\n")
    with pytest.raises(GuestError, match="stopped before"):
        md.wait_load(console, 1.0, lambda: False)
    with pytest.raises(GuestError, match=r"no 'VRMIG-DIRTY' line within 0 s.*make guest"):
        md.wait_load(console, 0.05, lambda: True)


class _FakeQmp:
    """Replays the captured replies: calc-dirty-rate, then query-dirty-rate measuring, measured."""

    def __init__(self, replies: list[dict], fail: str | None = None) -> None:
        self.replies, self.fail, self.calls = list(replies), fail, []

    def __call__(self, name: str, **args):
        self.calls.append((name, args))
        if name == "calc-dirty-rate":
            if self.fail:
                raise RuntimeError(self.fail)
            return {}
        return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]


def _actions():
    rows: list[dict] = []

    def action(name: str, **info) -> int:
        rows.append({"action": name, **info})
        return 1_000 + len(rows)

    return rows, action


def test_measure_qmp_polls_until_measured():
    rows = _jsonl("qmp_dirty30.jsonl")
    # QEMU may still answer with the state before the command ("unstarted") on the first query
    qmp = _FakeQmp([rows[0]["return"], rows[2]["return"], rows[3]["return"]])
    actions, action = _actions()
    rec = md.measure_qmp(qmp, action)
    assert qmp.calls[0] == ("calc-dirty-rate", {"calc-time": 1, "mode": "page-sampling", "sample-pages": 16384})
    assert [c[0] for c in qmp.calls[1:]] == ["query-dirty-rate"] * 3
    assert rec["reply"]["dirty-rate"] == 30 and rec["polls"] == 3 and "error" not in rec
    assert [a["action"] for a in actions] == ["calc-dirty-rate", "dirty-rate-measured"]
    assert rec["started_ns"] == 1001 and rec["ended_ns"] > rec["started_ns"]
    fig, _ = ad.dirty_rate({"scenario": {"dirty_mbps": 30, "mem_mib": 256}, "dirty_rate": rec})
    assert fig.measured_mb_s == 30.0


def test_measure_qmp_records_a_refusal():
    _, action = _actions()
    rec = md.measure_qmp(_FakeQmp([], fail="'calc-dirty-rate': the dirty rate is already being measured"), action)
    assert "already being measured" in rec["error"] and "reply" not in rec
    assert ad.dirty_rate({"dirty_rate": rec})[0].why_absent == ad.FAILED


def test_measurement_is_timed_to_end_before_migrate_at(monkeypatch):
    import time

    slept: list[float] = []

    class Driver:
        def __init__(self) -> None:
            self.dirty_load = {"rate_mb_s": 30.0}

        def measure_dirty_rate(self):
            return {"interface": "qmp"}

    now = time.monotonic()
    rec = md.measure_before_migration(Driver(), 30.0, now + 10, slept.append)
    assert slept == [pytest.approx(now + 10 - md.CALC_TIME_S - md.LEAD_MARGIN_S)]
    assert rec["requested_mb_s"] == 30.0 and rec["load"] == {"rate_mb_s": 30.0} and rec["delayed_migration_s"] == 0.0
    late = md.measure_before_migration(Driver(), None, time.monotonic() - 0.5, slept.append)
    assert late["delayed_migration_s"] >= 0.5


# ------------------------------------------------------------------ the build and the load program
needs_cc = pytest.mark.skipif(shutil.which(build.CC) is None, reason=f"{build.CC} not installed")


@needs_cc
def test_tool_is_built_static_and_listed(tmp_path):
    rootfs = build.Rootfs(tmp_path / "rootfs")
    tools = build._add_tools(rootfs, build.compiler_version())
    t = tools[DIRTY_TOOL]
    binary = rootfs.host(t["path"])
    assert t["sha256"] == build.sha256_file(binary) and t["bytes"] == binary.stat().st_size
    assert "-static" in t["cflags"] and "-Werror" in t["cflags"]
    assert t["source_sha256"] == build.sha256_file(build.GUESTSRC / "vrmig-dirty.c")
    from routers import elf

    assert elf.dynamic_info(binary).interpreter is None  # static: nothing from the guest's libraries


def test_recipe_follows_the_tool_source(tmp_path, monkeypatch):
    before = build._recipe_sha256()
    src = tmp_path / "guestsrc"
    shutil.copytree(build.GUESTSRC, src)
    monkeypatch.setattr(build, "GUESTSRC", src)
    assert build._recipe_sha256() == before
    (src / "vrmig-dirty.c").write_text((src / "vrmig-dirty.c").read_text() + "\n")
    assert build._recipe_sha256() != before


@needs_cc
def test_load_program_writes_distinct_pages_at_the_rate(tmp_path):
    binary = tmp_path / "vrmig-dirty"
    subprocess.run([build.CC, *build.TOOL_CFLAGS, "-o", str(binary), str(build.GUESTSRC / "vrmig-dirty.c")],
                   check=True)  # fmt: skip
    out = subprocess.run([str(binary), "--seconds", "0.5", "40"], capture_output=True, text=True, check=True).stdout
    start, end = out.splitlines()
    assert parse_dirty(start) == {"rate_mb_s": 40.0, "wss_mib": 160.0, "wss_s": 4.0, "pid": pytest.approx(1, abs=1e9)}
    got = dict(kv.split("=") for kv in end.split())
    # 40 MB/s = 10240 pages/s: 5120 in 0.5 s (the last tick's pages written at the end)
    assert int(got["pages"]) == 5120 and got["skipped"] == "0", end
    small = subprocess.run([str(binary), "--seconds", "0.2", "--wss-mib", "1", "5"], capture_output=True,
                           text=True, check=True).stdout.splitlines()[0]  # fmt: skip
    assert parse_dirty(small)["wss_s"] == pytest.approx(0.2)
    for args in (["0"], ["x"], ["--wss-mib", "0", "5"], []):
        res = subprocess.run([str(binary), *args], capture_output=True, text=True)
        assert res.returncode == 2, (args, res)
    assert "VRMIG-DIRTY-FAIL bad rate '0'" in subprocess.run([str(binary), "0"], capture_output=True, text=True).stdout


def test_run_table_line():
    from analysis.present.table import format_table

    def line(meta: dict) -> list[str]:
        return [x for x in format_table(_summary(meta)).splitlines() if x.startswith("  dirty rate")]

    loaded = _meta("meta_libvirt_stopcopy_dirty30.json")
    assert line(loaded) == [
        "  dirty rate       measured 28 ±7.1 MB/s (page-sampling over 1 s, ended – s before the migration)"
        "   requested 30 MB/s"
    ]
    assert line(_meta("meta_qmp_stopcopy_idle.json")) == [
        "  dirty rate       measured <= 1 MB/s (below_rate_resolution)   (no load)"
    ]
    assert line({"scenario": {"mode": "precopy"}, "dirty_rate": md.unsupported("criu")}) == []


def test_nightly_fingerprint_of_a_point_without_dirty_is_unchanged():
    import dataclasses
    import hashlib

    from migrate.campaigns import nightly as nt

    s = Scenario(mode="stopcopy", rate_bps=10_000_000)
    # the fingerprint of the history rows written before DIRTY= existed
    before = {k: v for k, v in dataclasses.asdict(s).items() if k in nt.FINGERPRINT_FIELDS}
    want = hashlib.sha256(json.dumps({**before, "accel_used": "tcg"}, sort_keys=True).encode()).hexdigest()[:16]
    assert nt.fingerprint(s, "tcg") == want
    assert nt.fingerprint(dataclasses.replace(s, dirty_mbps=30.0), "tcg") != want
