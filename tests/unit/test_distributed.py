"""The pure parts of campaigns across labs (migrate.campaigns.distributed): fingerprints and
their differences, the submitting side's refusals from the workers' reports, the engine's
overhead, packing a run directory home.  Every report and check document here is synthetic."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from migrate.campaigns import distributed as dd
from migrate.core.errors import ConfigError


def _check(qemu: str = "10.0.2", mtu: int = 1500, images: dict | None = None) -> dict:
    """A synthetic hosts-check document of a lab (two end hosts, two hypervisor hosts, a dom0 row)."""
    nic = {"eth0": {"present": True, "driver": "veth", "mtu": mtu, "speed_mbps": 10000}}
    rows = [{"role": r, "kernel": "6.1", "cpu_model": "Xeon", "nics": nic} for r in ("A", "B")]
    for r in ("R1", "R2"):
        rows.append({"role": r, "kernel": "6.1", "cpu_model": "Xeon", "nics": {"tapL": {"present": False}},
                     "kvm": False, "stacks": {"10.0": {"version": qemu}}, "versions": {"libvirtd": "9.0.0"},
                     "images": images if images is not None else {"bird": {"router_version": "2.17"}}})  # fmt: skip
    rows.append({"role": "R1.xen", "kernel": "xen"})
    return {"hosts": rows, "problems": []}


STACKS = {"criu/qmp/-/-/bird": {"hypervisor": {"accel": "none", "qemu": None}, "router": None}}


def test_fingerprint_is_flat_per_role_and_leaves_out_dom0_rows_absent_nics_and_other_images():
    fp = dd.fingerprint(_check(images={"bird": {"router_version": "2.17"}, "frr": {"router_version": "10"}}),
                        STACKS, ["bird"])  # fmt: skip
    assert fp["A.nics"] == "veth mtu 1500 10000Mb/s" and fp["R1.nics"] == ""
    assert fp["R1.qemu"] == "10.0.2" and fp["R1.images"] == "bird=2.17"
    assert fp["stack[criu/qmp/-/-/bird].accel"] == "none"
    assert not any(k.startswith("R1.xen") for k in fp)


def test_labs_alike_have_one_digest_and_no_differences():
    a, b = dd.fingerprint(_check(), STACKS, ["bird"]), dd.fingerprint(_check(), STACKS, ["bird"])
    assert dd.fingerprint_digest(a) == dd.fingerprint_digest(b)
    assert dd.differences({"lab1": a, "lab2": b}) == {}
    # an image the campaign does not use changes nothing
    c = dd.fingerprint(_check(images={"bird": {"router_version": "2.17"}, "frr": {}}), STACKS, ["bird"])
    assert dd.differences({"lab1": a, "lab3": c}) == {}


def test_differences_name_each_field_and_each_labs_value():
    fps = {
        "lab1": dd.fingerprint(_check(), STACKS, ["bird"]),
        "lab2": dd.fingerprint(_check(qemu="9.2.0", mtu=9000), STACKS, ["bird"]),
    }
    diff = dd.differences(fps)
    assert set(diff) == {"A.nics", "B.nics", "R1.qemu", "R2.qemu"}
    text = dd.describe_differences(diff, limit=2)
    assert text == ("A.nics (lab1: veth mtu 1500 10000Mb/s; lab2: veth mtu 9000 10000Mb/s), "
                    "B.nics (lab1: veth mtu 1500 10000Mb/s; lab2: veth mtu 9000 10000Mb/s) and 2 more")  # fmt: skip


def _report(lab: str, endpoints: list[str], check: dict | None = None, stacks: dict | None = None, **kw) -> dict:
    check = check or _check()
    st = STACKS if stacks is None else stacks
    ok = {k: v for k, v in st.items() if "error" not in v}
    fp = dd.fingerprint(check, ok, ["bird"])
    return {"lab": lab, "endpoints": endpoints, "problems": check["problems"], "stacks": st, "fingerprint": fp,
            "fingerprint_sha256": dd.fingerprint_digest(fp), **kw}  # fmt: skip


def test_alike_labs_are_admitted_and_pool():
    reports = {"w1": _report("lab1", ["10.0.0.1:22"]), "w2": _report("lab2", ["10.0.1.1:22"])}
    dd.check_reports(reports, STACKS, "refuse")
    labs = dd.Labs(reports, "refuse")
    assert labs.admitting("criu/qmp/-/-/bird") == ["w1", "w2"]


@pytest.mark.parametrize(
    ("reports", "choice", "says"),
    [
        ({"w1": _report("lab1", ["h:22"], error="hosts-check: exit 2")}, "refuse",
         "lab lab1: its worker could not report"),
        ({"w1": _report("lab1", ["h:22"], check={**_check(), "problems": [
            {"role": "B", "severity": "error", "message": "helper missing"}]})}, "refuse",
         "lab lab1 fails hosts-check (B: helper missing)"),
        ({"w1": _report("lab1", ["h:22"]), "w2": _report("lab2", ["h:22"])}, "refuse",
         "labs lab1 and lab2 share the host h:22: one worker per lab"),
        ({"w1": _report("lab1", ["a:22"], stacks={"criu/qmp/-/-/bird": {"error": "no criu"}})}, "refuse",
         "no lab can run the campaign's criu/qmp/-/-/bird points (lab1: no criu)"),
        ({"w1": _report("lab1", ["a:22"]), "w2": _report("lab2", ["b:22"], check=_check(qemu="9.2.0"))}, "refuse",
         "the labs differ: R1.qemu (lab1: 10.0.2; lab2: 9.2.0), R2.qemu (lab1: 10.0.2; lab2: 9.2.0); "),
        # the labs named in their names' order, whatever order their workers answered in
        ({"w2": _report("lab2", ["b:22"], check=_check(qemu="9.2.0")), "w1": _report("lab1", ["a:22"])}, "refuse",
         "the labs differ: R1.qemu (lab1: 10.0.2; lab2: 9.2.0), R2.qemu (lab1: 10.0.2; lab2: 9.2.0); "),
    ],
)  # fmt: skip
def test_the_submitting_side_refuses_with_one_line(reports, choice, says):
    with pytest.raises(ConfigError) as err:
        dd.check_reports(reports, STACKS, choice)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_labs_that_differ_are_admitted_as_an_axis():
    reports = {"w1": _report("lab1", ["a:22"]), "w2": _report("lab2", ["b:22"], check=_check(qemu="9.2.0"))}
    dd.check_reports(reports, STACKS, "axis")


def test_overhead_counts_dispatch_from_the_later_of_submission_and_the_workers_previous_result():
    synthetic = [
        {"engine": {"worker": "w1", "submitted": 100.0, "started": 100.010, "finished": 110.0, "unpacked": 110.050}},
        {"engine": {"worker": "w1", "submitted": 100.0, "started": 110.020, "finished": 120.0, "unpacked": 120.030}},
        {"engine": {"worker": "w2", "submitted": 100.0, "started": 100.015, "finished": 111.0, "unpacked": 111.040}},
        {"note": "a run without engine timestamps (in-process) is left out"},
    ]
    o = dd.overhead(synthetic)
    assert o.n == 3
    assert sorted(o.dispatch_ms) == pytest.approx([10.0, 15.0, 20.0])
    assert sorted(o.home_ms) == pytest.approx([30.0, 40.0, 50.0])
    assert o.summary()["dispatch_ms"] == {"median": pytest.approx(15.0), "max": pytest.approx(20.0)}
    assert dd.overhead([]).summary()["home_ms"] == {"median": None, "max": None}


def test_a_packed_run_directory_comes_home_whole_and_never_overwrites(tmp_path: Path):
    run = tmp_path / "worker" / "20261207T000000Z-criu"
    (run / "traces").mkdir(parents=True)
    (run / "meta.json").write_text("{}")
    (run / "traces" / "b.tsv").write_bytes(b"\x00" * 1000)
    data = dd.pack(run)
    home = tmp_path / "runs"
    home.mkdir()
    first = dd.unpack(data, run.name, home)
    second = dd.unpack(data, run.name, home)
    assert first == home / run.name and second == home / f"{run.name}.1"
    assert (second / "traces" / "b.tsv").read_bytes() == b"\x00" * 1000
    assert [p.name for p in home.iterdir() if p.name.startswith(".")] == []  # no unpacking directory left


def test_a_result_with_a_member_outside_its_run_directory_is_refused(tmp_path: Path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("elsewhere/meta.json")
        tar.addfile(info, io.BytesIO(b""))
    with pytest.raises(ConfigError, match="outside its run directory"):
        dd.unpack(buf.getvalue(), "run", tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_stack_key_names_what_each_preflight_checks():
    assert dd.stack_key({"hv": "kvm", "driver": "libvirt", "qemu": "10.0", "router": "frr"}) == "kvm/libvirt/10.0/-/frr"


def test_nics_no_run_of_the_campaign_uses_stay_out_of_the_fingerprint():
    check = _check()
    check["hosts"][2]["nics"] = {"upL": {"present": True, "driver": "veth", "mtu": 1500},
                                 "xenL": {"present": True, "driver": "tun", "mtu": 1500}}  # fmt: skip
    assert dd.fingerprint(check, STACKS)["R1.nics"] == "tun mtu 1500, veth mtu 1500"
    assert dd.fingerprint(check, STACKS, unused_nics={"R1": ["xenL"]})["R1.nics"] == "veth mtu 1500"


def test_per_lab_table_compares_each_run_with_its_points_median_over_every_lab():
    from migrate.campaigns.reporting import labs_rows

    def run(lab: str, point: str, down: float, status: str = "completed") -> dict:
        return {"lab": lab, "series": "s", "point": point, "status": status,
                "downtime_packets_s": down, "duration_link_s": 1.0}  # fmt: skip

    # synthetic: lab2 drew the slow point twice but is as fast as lab1 on each point; lab3 is 0.1 s slow
    records = [run("lab1", "fast", 0.1), run("lab1", "slow", 1.0), run("lab2", "slow", 1.0), run("lab2", "slow", 1.0),
               run("lab3", "fast", 0.2), run("lab3", "slow", 1.1), run("lab3", "fast", None, "failed")]  # fmt: skip
    _, rows = labs_rows(records)
    by = {r[0]: r for r in rows}
    assert by["lab1"][1:3] == [2, 0] and by["lab3"][1:3] == [3, 1]
    assert by["lab2"][3] == pytest.approx(0.0) and by["lab3"][3] > by["lab1"][3]
    assert labs_rows([run("lab1", "fast", 0.1)]) == ([], [])  # one lab: no table
