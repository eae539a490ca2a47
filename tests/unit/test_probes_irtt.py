"""probes.irtt: command lines, address handling, ss parsing and the loader, on captured real irtt
0.9.0 output (tests/fixtures/probes/README.md)."""

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from probes.irtt import (
    LOST_DOWN,
    LOST_NO,
    LOST_UP,
    _rfc3339_ns,
    _ss_has_socket,
    client_argv,
    join_host_port,
    load_irtt,
    server_argv,
    split_host_port,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "probes"
LOSS = FIX / "irtt_10ms_loss.json.gz"
ONE_MS = FIX / "irtt_1ms.json"


@pytest.fixture(scope="module")
def loss():
    return load_irtt(LOSS)


def test_loss_trace_shape(loss):
    raw = json.loads(gzip.decompress(LOSS.read_bytes()))
    n = len(raw["round_trips"])
    assert len(loss) == n == loss.packets_sent
    assert loss.seqno.tolist() == list(range(n))
    assert loss.interval_ns == 10_000_000
    assert loss.remote == "198.18.2.11:2112"
    assert loss.send_ns.dtype == np.int64 and loss.rtt_ns.dtype == np.float64
    assert loss.seqno.dtype == np.int64


def test_send_times_are_realtime_and_match_raw(loss):
    raw = json.loads(gzip.decompress(LOSS.read_bytes()))["round_trips"]
    assert loss.send_ns.tolist() == [r["timestamps"]["client"]["send"]["wall"] for r in raw]
    assert (np.diff(loss.send_ns) > 0).all()
    assert 9e6 < np.median(np.diff(loss.send_ns)) < 11e6
    assert 1.5e18 < loss.send_ns[0] < 4.1e18  # a wall-clock date, not a monotonic offset


def test_lost_probes_are_nan_with_direction(loss):
    received = loss.received
    assert np.isnan(loss.rtt_ns[~received]).all()
    assert np.isfinite(loss.rtt_ns[received]).all()
    assert (loss.rtt_ns[received] > 0).all()
    # the capture blackholed the forward path, then the return path
    up = np.flatnonzero(loss.lost == LOST_UP)
    down = np.flatnonzero(loss.lost == LOST_DOWN)
    assert len(up) > 5 and len(down) > 5
    assert (np.diff(up) == 1).all() and (np.diff(down) == 1).all()  # one outage each
    assert up[-1] < down[0]
    assert set(np.unique(loss.lost)) == {LOST_NO, LOST_UP, LOST_DOWN}


def test_receive_times(loss):
    rec = loss.received
    assert (loss.recv_ns[~rec] == 0).all()
    wall_rtt = loss.recv_ns[rec] - loss.send_ns[rec]
    # irtt's rtt excludes the server's processing time: never more than client recv - send
    assert (loss.rtt_ns[rec] <= wall_rtt + 1000).all()
    assert (wall_rtt > 0).all()


def test_rtt_is_irtt_delay_rtt(loss):
    raw = json.loads(gzip.decompress(LOSS.read_bytes()))["round_trips"]
    want = [r["delay"]["rtt"] if r["lost"] == "false" else None for r in raw]
    got = [None if np.isnan(x) else int(x) for x in loss.rtt_ns]
    assert got == want


def test_gzip_detected_by_content(tmp_path, loss):
    p = tmp_path / "irtt.json"  # gzip'd bytes under a .json name
    shutil.copy(LOSS, p)
    assert len(load_irtt(p)) == len(loss)


def test_one_ms_trace_records_timer_misses():
    t = load_irtt(ONE_MS)
    assert t.interval_ns == 1_000_000
    assert t.timer_misses > 0  # irtt 0.9's default timer skips sends at 1 ms on this machine
    assert len(t) == t.packets_sent
    assert t.seqno.tolist() == list(range(len(t)))  # skipped sends are not numbered
    assert np.isfinite(t.rtt_ns).all()
    assert np.median(np.diff(t.send_ns)) > 1_000_000


def test_start_time_parses_to_first_send():
    raw = json.loads(ONE_MS.read_text())
    start = _rfc3339_ns(raw["stats"]["start_time"])
    first = raw["round_trips"][0]["timestamps"]["client"]["send"]["wall"]
    assert 0 <= first - start < 50_000_000
    assert load_irtt(ONE_MS).start_ns == start
    assert _rfc3339_ns("2026-11-22T01:57:38.5+01:00") == _rfc3339_ns("2026-11-22T00:57:38.500000000Z")


def test_missing_wall_clock_is_an_error(tmp_path):
    raw = json.loads(ONE_MS.read_text())
    del raw["round_trips"][3]["timestamps"]["client"]["send"]["wall"]
    p = tmp_path / "x.json"
    p.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="wall-clock"):
        load_irtt(p)


def test_not_irtt_output(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"tool": "vrgen"}')
    with pytest.raises(ValueError, match="not irtt"):
        load_irtt(p)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("198.18.2.11:2112", ("198.18.2.11", 2112)),
        ("198.18.2.11", ("198.18.2.11", 2112)),
        ("[2001:2:0:2::11]:2113", ("2001:2:0:2::11", 2113)),
        ("[2001:2:0:2::11]", ("2001:2:0:2::11", 2112)),
        ("2001:2:0:2::11:2112", ("2001:2:0:2::11", 2112)),  # f"{v6}:{port}" as migrate/ builds it
        ("2001:2:0:2::11", ("2001:2:0:2::11", 2112)),
        ("2001:0002:0:2::0011:9", ("2001:2:0:2::11", 9)),
    ],
)
def test_split_host_port(text, want):
    assert split_host_port(text) == want


@pytest.mark.parametrize("text", ["d.example:2112", "198.18.2.11:99999", "[2001::1", ""])
def test_split_host_port_rejects(text):
    with pytest.raises(ValueError):
        split_host_port(text)


def test_join_host_port():
    assert join_host_port("198.18.2.11", 2112) == "198.18.2.11:2112"
    assert join_host_port("2001:2:0:2::11", 2112) == "[2001:2:0:2::11]:2112"


def test_server_argv():
    assert server_argv("198.18.2.11:2112") == ["irtt", "server", "-b", "198.18.2.11:2112", "-i", "0", "--timeout=60s"]
    a = server_argv("2001:2:0:2::11:2112")
    assert a[3] == "[2001:2:0:2::11]:2112"
    a = server_argv("198.18.2.11", 4000, min_interval_ms=2, timeout_s=0.5)
    assert a[3:] == ["198.18.2.11:4000", "-i", "2ms", "--timeout=500ms"]
    for bad in ("0.0.0.0:2112", "[::]:2112"):
        with pytest.raises(ValueError, match="testbed address"):
            server_argv(bad)


def test_client_argv():
    a = client_argv("198.18.2.11:2112", 10, 608.0, Path("/r/irtt.json.gz"))
    assert a == [
        "irtt", "client", "-i", "10ms", "-d", "608s", "-Q", "-o", "/r/irtt.json.gz",
        "--timeouts=3s,3s,3s,3s", "198.18.2.11:2112",
    ]  # fmt: skip
    a = client_argv("2001:2:0:2::11:2112", 1.5, 2.25, Path("o.json"), timer="busy", length=172, open_timeouts=None)
    assert a == [
        "irtt", "client", "-i", "1500us", "-d", "2250ms", "-Q", "-o", "o.json",
        "-l", "172", "--timer=busy", "[2001:2:0:2::11]:2112",
    ]  # fmt: skip
    with pytest.raises(ValueError, match=r"\.json"):
        client_argv("198.18.2.11", 10, 1, Path("irtt.gz"))
    with pytest.raises(ValueError, match="interval"):
        client_argv("198.18.2.11", 0, 1, Path("o.json"))


def test_ss_output_parsing():
    out = (FIX / "ss_Hlunp_irtt.txt").read_text()
    assert _ss_has_socket(out, ("198.18.2.11", 2112), None)
    assert _ss_has_socket(out, ("2001:2:0:1::1", 2113), None)
    assert not _ss_has_socket(out, ("198.18.2.11", 2113), None)
    assert not _ss_has_socket(out, ("198.18.2.12", 2112), None)
    pid = int(out.split("pid=")[1].split(",")[0])
    assert _ss_has_socket(out, ("2001:2:0:1::1", 2113), pid)
    assert not _ss_has_socket(out, ("2001:2:0:1::1", 2113), pid + 100000)
    assert not _ss_has_socket("", ("198.18.2.11", 2112), None)
