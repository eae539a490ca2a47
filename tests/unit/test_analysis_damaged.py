"""analyse_and_write never raises, and always writes a summary.json that keeps the results
contract (migrate.core.rundir: a null headline figure has its reason in ``qualifiers``), on run
directories damaged at random: fields removed, files truncated, values mistyped.

The undamaged directory is assembled from captured real output: meta.json of a real run
(tests/fixtures/rundir/kvm-precopy-100M-1500) with the ``peering`` record, the peers' FRR logs
and BGP/OSPF/BFD captures of a real PEERING=bgp,ospf,bfd run
(tests/fixtures/peering/frr-bgp-ospf-bfd-stopcopy), and vrgen's, vrsink's, vrsampler's and
irtt's real loopback output (tests/fixtures/analysis).  Their clocks differ; the migrate action
and QMP's completion event are the PEERING run's recorded window (run.json ``window``), so that
the control plane is analysed."""

from __future__ import annotations

import copy
import functools
import gzip
import hashlib
import itertools
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import analysis.load  # noqa: E402
import analysis.run  # noqa: E402
from migrate.core.rundir import HEADLINES, read_summary, summary_problems  # noqa: E402

FIX = Path(__file__).resolve().parents[1] / "fixtures"
PEERING = FIX / "peering" / "frr-bgp-ospf-bfd-stopcopy"
LOOPBACK = FIX / "analysis"
MAX_EXAMPLES = 150
#: mistyped values put in place of a field
WRONG = (None, "x", "", -1, 0, 1.5, True, [], {}, [1, 2], {"a": 1}, 2**70)
JSON_FILES = ("meta.json", "sink.json", "gen.json")
TEXT_FILES = (
    "actions.jsonl", "qmp_events.jsonl", "counters.tsv", "irtt.json.gz", "peer-A.log", "peer-B.log",
    "control-A.pcap", "control-B.pcap", *JSON_FILES,
)  # fmt: skip


def _base() -> dict[str, bytes]:
    """The undamaged run directory: file name -> content."""
    meta = json.loads((FIX / "rundir" / "kvm-precopy-100M-1500" / "meta.json").read_text())
    run = json.loads((PEERING / "run.json").read_text())
    meta["peering"] = run["peering"]
    meta["scenario"] |= {"mode": "stopcopy", "rate_bps": 10_000_000, "peering": "bgp,ospf,bfd", "peer_daemon": "frr"}
    w = run["window"]
    actions = [{"t_ns": w["start_ns"], "action": "migrate", "side": "src"}]
    events = [{"t_ns": w["end_ns"], "side": "src", "event": "MIGRATION", "data": {"status": "completed"}}]
    files = {
        "meta.json": json.dumps(meta).encode(),
        "actions.jsonl": "".join(json.dumps(a) + "\n" for a in actions).encode(),
        "qmp_events.jsonl": "".join(json.dumps(e) + "\n" for e in events).encode(),
        "sink.json": (LOOPBACK / "sink_loopback_gen_paused.json").read_bytes(),
        "gen.json": (LOOPBACK / "gen_loopback_gen_paused.json").read_bytes(),
        "irtt.json.gz": (LOOPBACK / "irtt_loopback_server_paused.json.gz").read_bytes(),
        "counters.tsv": (LOOPBACK / "vrsampler_loopback_300ms.tsv").read_bytes(),
    }
    for name in ("peer-A.log", "peer-B.log", "control-A.pcap", "control-B.pcap"):
        files[name] = (PEERING / name).read_bytes()
    return files


BASE = _base()


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path of a JSON document (dict keys and list indices), parents before children."""
    out: list[tuple[Any, ...]] = []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        out.append((*prefix, k))
        if len(prefix) < 4:
            out.extend(_paths(v, (*prefix, k)))
    return out


PATHS = {name: _paths(json.loads(gzip.decompress(BASE[name]) if name.endswith(".gz") else BASE[name]))
         for name in JSON_FILES}  # fmt: skip


def _at(doc: Any, path: tuple[Any, ...]) -> tuple[Any, Any] | None:
    """(container, key) of ``path`` in ``doc``, None when an earlier change removed it."""
    for k in path[:-1]:
        try:
            doc = doc[k]
        except (KeyError, IndexError, TypeError):
            return None
    if (isinstance(doc, dict) and path[-1] in doc) or (
        isinstance(doc, list) and isinstance(path[-1], int) and path[-1] < len(doc)
    ):
        return doc, path[-1]
    return None


# one change: (file, what, which path or fraction, the wrong value)
CHANGE = st.one_of(
    st.tuples(st.sampled_from(JSON_FILES), st.sampled_from(("remove", "mistype")), st.integers(0, 10**6),
              st.sampled_from(WRONG)),
    st.tuples(st.sampled_from(TEXT_FILES), st.sampled_from(("truncate", "delete")), st.floats(0.0, 1.0),
              st.none()),
)  # fmt: skip


def _damage(changes: list[tuple[str, str, Any, Any]]) -> dict[str, bytes]:
    files = dict(BASE)
    docs = {name: json.loads(files[name]) for name in JSON_FILES}
    for name, what, where, value in changes:
        if what in ("remove", "mistype"):
            if name not in docs:
                continue  # deleted or truncated before
            path = PATHS[name][where % len(PATHS[name])]
            hit = _at(docs[name], path)
            if hit is None:
                continue
            container, key = hit
            if what == "remove":
                del container[key]
            else:
                container[key] = copy.deepcopy(value)
            files[name] = json.dumps(docs[name]).encode()
        elif what == "delete":
            files.pop(name, None)
            docs.pop(name, None)
        elif name in files:
            files[name] = files[name][: int(len(files[name]) * where)]
            docs.pop(name, None)  # later changes of this file: none (it is no longer JSON)
    return files


@functools.cache
def _packets(digest: str, path: str) -> list[Any]:
    return _read_pcap(Path(path))


_read_pcap = analysis.load.read_pcap


def _cached_read_pcap(path: Path) -> list[Any]:
    """scapy's reading of a capture, once per content (the undamaged captures are read again
    and again; a truncated one is read afresh)."""
    return _packets(hashlib.sha256(Path(path).read_bytes()).hexdigest(), str(path))


def test_damaged_run_directories_always_get_a_valid_summary(monkeypatch):
    monkeypatch.setattr(analysis.load, "read_pcap", _cached_read_pcap)
    monkeypatch.setattr(analysis.run, "plot_run", lambda path, plot: None)  # matplotlib: slow, and guarded
    seen = []
    runs = itertools.count()
    root = Path(tempfile.mkdtemp(prefix="vrmig-damaged-"))

    @settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
    @given(st.lists(CHANGE, min_size=0, max_size=5))
    def check(changes):
        run_dir = root / f"run-{next(runs)}"
        run_dir.mkdir()
        for name, content in _damage(changes).items():
            (run_dir / name).write_bytes(content)
        analysis.run.analyse_and_write(run_dir)
        summary = read_summary(run_dir)
        problems = summary_problems(summary, "migrate")
        assert not problems, (changes, problems)
        for path in HEADLINES:
            head, *rest = path.split(".")
            value = summary[head]
            for k in rest:
                value = value[k]
            if value is None:
                assert summary["qualifiers"][path]["reasons"], (changes, path)
        for proto, figures in (summary.get("control_plane") or {}).items():
            if figures is None:
                assert summary["control_plane"].get("why_absent"), (changes, proto)
        seen.append(changes)
        shutil.rmtree(run_dir)

    t0 = time.monotonic()
    try:
        check()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"hypothesis: {len(seen)} damaged run directories analysed in {time.monotonic() - t0:.1f} s")
    assert len(seen) >= MAX_EXAMPLES // 2


def test_the_undamaged_directory_is_analysed_whole(tmp_path, monkeypatch):
    """The base the damage starts from: the control plane of all three protocols, a window, no failure note."""
    monkeypatch.setattr(analysis.run, "plot_run", lambda path, plot: None)
    for name, content in BASE.items():
        (tmp_path / name).write_bytes(content)
    s = analysis.run.analyse_and_write(tmp_path).to_dict()
    assert not summary_problems(s, "migrate")
    assert s["details"]["window"] is not None
    assert set(s["control_plane"]) == {"bgp", "ospf", "bfd"} and all(s["control_plane"].values())
    assert not [n for n in s["details"]["notes"] if "failed" in n], s["details"]["notes"]


def test_peering_without_timers_or_a_router_address_keeps_the_control_plane(tmp_path, monkeypatch):
    """meta.json without ospf_dead_s and bgp_hold_s, and a peer without router_addr: the
    protocols are analysed, a missing limit is a missing margin (not a 0 ms limit that every
    silence exceeds), and that peer has no silence (it raised KeyError before)."""
    monkeypatch.setattr(analysis.run, "plot_run", lambda path, plot: None)
    meta = json.loads(BASE["meta.json"])
    del meta["peering"]["timers"]["ospf_dead_s"], meta["peering"]["timers"]["bgp_hold_s"]
    del meta["peering"]["peers"]["A"]["router_addr"]
    for name, content in {**BASE, "meta.json": json.dumps(meta).encode()}.items():
        (tmp_path / name).write_bytes(content)
    s = analysis.run.analyse_and_write(tmp_path).to_dict()
    assert not [n for n in s["details"]["notes"] if "failed" in n], s["details"]["notes"]
    for proto in ("bgp", "ospf"):
        cp = s["control_plane"][proto]
        assert cp["limit_ms"] is None and cp["margin_ms"] is None and cp["silence_ms"] is not None
        assert set(cp["silence_by_peer"]) == {"B"} and "no router address at A" in " ".join(cp["notes"])
    assert s["control_plane"]["bfd"]["limit_ms"] == 150.0
    assert read_summary(tmp_path) == s
