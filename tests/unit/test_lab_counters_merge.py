"""The merged counters.tsv of a lab run (migrate.testbed.labbed.merge_counters) on SYNTHETIC
per-host sampler files: every host's samples on the orchestrator's clock, and one closing line
whose missed rounds and read errors count every host's, or none when a host's line is missing."""

from __future__ import annotations

from pathlib import Path

from analysis.load import load_counters
from analysis.metrics.counters import sampler_health
from migrate.testbed.labbed import COUNTERS_HEADER, merge_counters

T0 = 1_700_000_000_000_000_000
TAIL = ("# cpu_user_s={cpu:.6f} cpu_sys_s=0.010000 cpu_sched_ns=5000000 wall_s={wall} rounds=100 missed={missed} "
        "samples=200 max_late_ns={late} max_read_ns=9000 read_errors={errors} method=netlink rt=1")  # fmt: skip


def _host_file(path: Path, role: str, offset_ns: int, tail: str | None) -> tuple[str, Path]:
    lines = ["# vrmig-sampler 1 clock=CLOCK_REALTIME period_ns=10000000", COUNTERS_HEADER]
    for k in range(3):  # this host's own clock: the orchestrator's plus its offset
        lines.append(f"{T0 + offset_ns + k * 10_000_000} 1000 vrt-{role} eth0 {k} {k * 100} 0 0")
    path.write_text("\n".join(lines + ([tail] if tail else [])) + "\n")
    return role, path


def test_missed_rounds_and_read_errors_count_every_host(tmp_path):
    parts = [
        _host_file(tmp_path / "a.tsv", "A", 2_000_000, TAIL.format(cpu=0.5, wall=10.1, missed=0, late=400, errors=0)),
        _host_file(tmp_path / "b.tsv", "B", -3_000_000, TAIL.format(cpu=0.25, wall=10.4, missed=3, late=900, errors=2)),
    ]  # fmt: skip
    out = tmp_path / "counters.tsv"
    merge_counters(parts, {"A": (2_000_000, 50_000), "B": (-3_000_000, 40_000)}, "vm123456", out)
    c = load_counters(out)
    assert c.tail["missed"] == 3 and c.tail["read_errors"] == 2  # B's, not hidden behind A's zeros
    assert c.tail["cpu_user_s"] == 0.75 and c.tail["samples"] == 400 and c.tail["hosts"] == 2
    assert c.tail["wall_s"] == 10.4 and c.tail["max_late_ns"] == 900
    assert out.read_text().count("cpu_user_s=") == 1
    for role in ("A", "B"):  # both hosts' samples, on the orchestrator's clock
        assert c.get(role, "eth0").t_ns.tolist() == [T0, T0 + 10_000_000, T0 + 20_000_000]
    h = sampler_health(c.get("B", "eth0").t_ns, c.late_ns, 10_000_000, c.tail)
    assert (h.missed_rounds, h.read_errors) == (3, 2)


def test_a_host_without_its_closing_line_makes_the_counts_unknown(tmp_path):
    parts = [
        _host_file(tmp_path / "a.tsv", "A", 0, TAIL.format(cpu=0.5, wall=10.1, missed=0, late=400, errors=0)),
        _host_file(tmp_path / "b.tsv", "B", 0, None),  # its sampler was killed before writing it
    ]
    out = tmp_path / "counters.tsv"
    merge_counters(parts, {"A": (0, 1), "B": (0, 1)}, "vm123456", out)
    c = load_counters(out)
    assert c.tail == {}
    h = sampler_health(c.get("A", "eth0").t_ns, c.late_ns, 10_000_000, c.tail)
    assert (h.missed_rounds, h.read_errors) == (None, None)  # unknown, not A's 0


def test_a_labs_own_interface_names_become_the_ports_names_the_analysis_reads(tmp_path):
    """A real lab calls B's NIC ens1f0 and R1's migration NIC ens2: the merged file names them
    eth0 and mig0, as the embedded testbed does, and its header says so."""
    from migrate.testbed.inventory import load
    from migrate.testbed.labbed import canonical_ifnames

    example = Path(__file__).resolve().parents[2] / "docs" / "lab.example.toml"
    text = example.read_text().replace('interface = "eth0"', 'interface = "ens1f0"', 3)
    text = text.replace('migration = { interface = "mig0"', 'migration = { interface = "ens2"', 1)
    (tmp_path / "lab.toml").write_text(text)
    names = canonical_ifnames(load(tmp_path / "lab.toml"))
    assert names["B"] == {"ens1f0": "eth0"} and names["R1"]["ens2"] == "mig0" and names["R2"]["mig0"] == "mig0"
    b = _host_file(tmp_path / "b.tsv", "B", 0, None)
    b[1].write_text(b[1].read_text().replace(" eth0 ", " ens1f0 "))
    out = tmp_path / "counters.tsv"
    merge_counters([b], {"B": (0, 1)}, "vm123456", out, names)
    c = load_counters(out)
    assert c.get("B", "eth0") is not None and c.get("B", "ens1f0") is None
    assert "B:ens1f0=eth0" in out.read_text() and "R1:ens2=mig0" in out.read_text()
