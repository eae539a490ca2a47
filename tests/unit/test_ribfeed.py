"""The RIB feed generator (migrate.model.ribfeed): apportionment, determinism, the address policy,
the probe block, the writers and the refusals of bad input.

The distributions below are made up for the tests (the shape of a table, not a source's
counts); the shipped ones are tested for what they are: unavailable, with a reason."""

from __future__ import annotations

import dataclasses
import io
import ipaddress
from collections import Counter
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crosstraffic.bench.bed import BridgeBed
from crosstraffic.runner import VethPair
from migrate.core.errors import ConfigError
from migrate.experiment import churn
from migrate.model import ribfeed as rf
from migrate.testbed import topology as topo

#: test shapes: most prefixes long, a few short, some lengths empty
V4 = rf.Distribution(4, tuple((n, 0 if n == 9 else 2 ** (n - 8)) for n in range(8, 25)), "test", "", "")
V6 = rf.Distribution(6, tuple((n, 900 if n == 48 else 400 if n == 32 else 7) for n in range(16, 49)), "test", "", "")
DIST = {4: V4, 6: V6}
NEXTHOP = {4: "198.18.2.10", 6: "2001:2:0:2::10"}


def _feed(n: int, family: int, seed: int = 0, probe: int = 0) -> rf.RibFeed:
    return rf.generate(n, family, seed=seed, probe=probe, distribution=DIST[family])


def _one_line(err: pytest.ExceptionInfo[ConfigError]) -> str:
    msg = str(err.value)
    assert msg and "\n" not in msg
    return msg


# -- apportionment ---------------------------------------------------------------------------


def test_apportion_is_largest_remainder():
    # 10 over 5:3:2 with m=7: exact 3.5, 2.1, 1.4 -> floors 3, 2, 1, the one left goes to 3.5
    assert rf.apportion(7, [(22, 5), (23, 3), (24, 2)]) == ((22, 4), (23, 2), (24, 1))
    # equal remainders: the larger count first, then the shorter length
    assert rf.apportion(1, [(24, 1), (22, 1)]) == ((24, 0), (22, 1))
    assert rf.apportion(0, [(24, 3)]) == ((24, 0),)


@given(m=st.integers(0, 2_000_000), counts=st.lists(st.integers(0, 10**6), min_size=1, max_size=33))
def test_apportion_sums_to_m_and_stays_within_one_of_the_share(m, counts):
    pairs = list(enumerate(counts))
    out = rf.apportion(m, pairs)
    total = sum(counts)
    if total == 0:
        assert all(k == 0 for _, k in out)
        return
    assert sum(k for _, k in out) == m
    for (_, c), (_, k) in zip(pairs, out, strict=True):
        assert abs(k - Fraction(m * c, total)) < 1


# -- generate --------------------------------------------------------------------------------


@pytest.mark.parametrize("family", [4, 6])
@pytest.mark.parametrize("n", [0, 1, 5, 16, 1000, 20_011])
def test_counts_per_length_equal_the_apportionment(family, n):
    probe = min(n, 3)
    feed = _feed(n, family, seed=2, probe=probe)
    want = {length: k for length, k in rf.apportion(n - probe, DIST[family].counts) if k}
    assert dict(feed.length_counts) == want
    seen = Counter(int(p.rsplit("/", 1)[1]) for p in feed.prefixes if p not in feed.probes)
    assert dict(seen) == want
    assert len(feed) == n and len(feed.probes) == probe


def test_n_smaller_than_the_number_of_lengths():
    feed = _feed(5, 4)
    assert len(feed) == 5 and sum(k for _, k in feed.length_counts) == 5
    assert feed.length_counts == tuple((n, k) for n, k in rf.apportion(5, V4.counts) if k)


def test_n_zero_is_an_empty_feed():
    feed = _feed(0, 6)
    assert feed.prefixes == () and feed.probes == () and feed.length_counts == ()
    assert list(rf.frr_static(feed, NEXTHOP[6])) == []


@pytest.mark.parametrize("family", [4, 6])
def test_deterministic_for_the_same_arguments_and_not_across_seeds(family):
    a, b = _feed(3000, family, seed=7, probe=2), _feed(3000, family, seed=7, probe=2)
    assert a == b and a.prefixes == b.prefixes
    assert _feed(3000, family, seed=8, probe=2).prefixes != a.prefixes


@pytest.mark.parametrize("family", [4, 6])
def test_prefixes_are_distinct_canonical_and_in_address_order(family):
    feed = _feed(30_000, family, seed=3, probe=5)
    assert len(set(feed.prefixes)) == len(feed.prefixes)
    nets = [ipaddress.ip_network(p) for p in feed.prefixes]
    assert [str(n) for n in nets] == list(feed.prefixes)  # strict: host bits clear, RFC 5952 form
    keys = [(int(n.network_address), n.prefixlen) for n in nets]
    assert keys == sorted(keys)


#: the brief's lists, written out here so that an entry dropped from the module fails the test
EXCLUDED = {
    4: "0/8 10/8 100.64/10 127/8 169.254/16 172.16/12 192.0.0/24 192.0.2/24 192.88.99/24 192.168/16 "
    "198.18/15 198.51.100/24 203.0.113/24 224/4 240/4 255.255.255.255/32",
    6: "2001::/23 2001:db8::/32 2002::/16 2001:2::/48",
}


def _excluded(family):
    out = []
    for p in EXCLUDED[family].split():
        addr, length = p.split("/")
        addr += ".0" * (3 - addr.count(".")) if family == 4 else ""
        out.append(ipaddress.ip_network(f"{addr}/{length}"))
    return out


@pytest.mark.parametrize("family", [4, 6])
@pytest.mark.parametrize("seed", [0, 11])
def test_no_distributed_prefix_overlaps_an_excluded_block(family, seed):
    feed = _feed(40_000, family, seed=seed, probe=4)
    probes = set(feed.probes)
    bad = []
    for p in feed.prefixes:
        if p in probes:
            continue
        net = ipaddress.ip_network(p)
        if family == 6 and not net.subnet_of(ipaddress.ip_network("2000::/3")):
            bad.append(p)
        bad += [f"{p} in {ex}" for ex in _excluded(family) if net.overlaps(ex)]
    assert bad == []


def test_the_short_lengths_too_avoid_the_excluded_blocks():
    # every /8 and /16 that fits, so the edges of the excluded blocks are reached
    only_short = rf.Distribution(4, ((8, 1), (16, 1)), "test", "", "")
    feed = rf.generate(2 * 200, 4, distribution=only_short)
    for p in feed.prefixes:
        assert not any(ipaddress.ip_network(p).overlaps(ex) for ex in rf.EXCLUDED_V4), p


def test_a_length_asked_for_more_prefixes_than_fit_is_refused():
    only_8 = rf.Distribution(4, ((8, 1),), "test", "", "")
    assert len(rf.generate(200, 4, distribution=only_8)) == 200
    with pytest.raises(ConfigError) as err:
        rf.generate(300, 4, distribution=only_8)
    assert "IPv4 /8s" in _one_line(err)


# -- probes ----------------------------------------------------------------------------------


def _used_in_the_testbed() -> dict[int, list[ipaddress.IPv4Network | ipaddress.IPv6Network]]:
    """Addresses other code uses inside the probe blocks' neighbourhood."""
    used: dict[int, list] = {4: [], 6: []}
    for h in (*topo.END_HOSTS, *topo.ROUTER_PORTS):
        used[4].append(ipaddress.ip_interface(h.ipv4).network)
        used[6].append(ipaddress.ip_interface(h.ipv6).network)
    used[4] += [ipaddress.ip_network(a) for a in topo.ANNOUNCED.values()]
    used[4] += [ipaddress.ip_interface(a).network for a in topo.MIGRATION_ADDR.values()]
    used[4].append(ipaddress.ip_network(f"{churn.POOL.network_address}/22"))
    assert churn.POOL_SIZE <= 1024  # the /22 above holds every churned /32
    for cls in (VethPair, BridgeBed):
        d = {f.name: f.default for f in dataclasses.fields(cls)}
        used[4] += [ipaddress.ip_network(d["a4"]), ipaddress.ip_network(d["b4"])]
        used[6] += [ipaddress.ip_network(d["a6"]), ipaddress.ip_network(d["b6"])]
    return used


@pytest.mark.parametrize("family", [4, 6])
def test_probes_lie_in_their_block_and_clear_of_every_testbed_address(family):
    every = rf.probe_prefixes(family)
    assert len(every) == {4: 124, 6: 254}[family]
    used = _used_in_the_testbed()[family]
    for p in every:
        net = ipaddress.ip_network(p)
        assert net.subnet_of(rf.PROBE_BLOCK[family]) and net.prefixlen == rf.PROBE_LENGTH[family]
        assert not [u for u in used if net.overlaps(u)], p
    feed = _feed(500, family, probe=len(every))
    assert feed.probes == every and set(every) <= set(feed.prefixes)


def test_probes_count_toward_n_and_come_first_in_block_order():
    feed = _feed(10, 4, probe=3)
    assert feed.probes == ("198.19.4.0/24", "198.19.5.0/24", "198.19.6.0/24")
    assert sum(k for _, k in feed.length_counts) == 7 and len(feed) == 10


def test_a_probe_only_feed_needs_no_distribution():
    feed = rf.generate(2, 6, probe=2)
    assert feed.prefixes == ("2001:2:0:101::/64", "2001:2:0:102::/64") and feed.length_counts == ()


# -- the shipped distributions ---------------------------------------------------------------


@pytest.mark.parametrize("family", [4, 6])
def test_a_shipped_distribution_is_usable_or_says_why_not(family):
    dist = rf.DISTRIBUTIONS[family]
    assert dist.family == family and dist.title
    if dist.unavailable:
        assert dist.counts == ()
        with pytest.raises(ConfigError) as err:
            rf.generate(10, family)
        msg = _one_line(err)
        assert dist.unavailable in msg and "migrate/model/ribfeed.py" in msg
    else:  # copied from a source: it must say which, and cover the family's lengths
        assert dist.url and dist.date and {n for n, _ in dist.counts} <= set(rf.LENGTHS[family])
        assert len(rf.generate(1000, family)) == 1000


def test_a_distribution_with_bad_counts_is_refused():
    for counts in (((7, 1),), ((24, -1),), ((24, 1), (24, 2)), ((24, 0),)):
        with pytest.raises(ConfigError) as err:
            rf.Distribution(4, counts, "t", "", "")
        _one_line(err)
    with pytest.raises(ConfigError):
        rf.generate(10, 6, distribution=V4)


# -- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"n": -1, "family": 4}, "n=-1"),
        ({"n": 1_100_001, "family": 4}, "give 0 to 1100000"),
        ({"n": 250_001, "family": 6}, "give 0 to 250000"),
        ({"n": 2.5, "family": 4}, "n=2.5"),
        ({"n": True, "family": 4}, "n=True"),
        ({"n": 10, "family": 5}, "family=5"),
        ({"n": 10, "family": 4, "seed": -3}, "seed=-3"),
        ({"n": 2, "family": 4, "probe": 3}, "probe=3"),
        ({"n": 1000, "family": 4, "probe": 125}, "the 124 /24s of 198.19.0.0/17"),
        ({"n": 10, "family": 6, "probe": -1}, "probe=-1"),
    ],
)
def test_bad_arguments_give_one_line(kwargs, says):
    with pytest.raises(ConfigError) as err:
        rf.generate(**kwargs, distribution=DIST.get(kwargs["family"]))
    assert says in _one_line(err)


# -- writers ---------------------------------------------------------------------------------


@pytest.mark.parametrize("family", [4, 6])
def test_bird_static_blackholes_the_table_and_routes_the_probes(family):
    feed = _feed(50, family, probe=2)
    lines = list(rf.bird_static(feed, NEXTHOP[family]))
    assert lines[0] == f"protocol static ribfeed{family} {{\n" and lines[1] == f"  ipv{family};\n"
    assert lines[-1] == "}\n" and len(lines) == 50 + 3
    routes = lines[2:-1]
    assert [r.split()[1] for r in routes] == list(feed.prefixes)
    for r in routes:
        p = r.split()[1]
        assert r == (f"  route {p} via {NEXTHOP[family]};\n" if p in feed.probes else f"  route {p} blackhole;\n")


@pytest.mark.parametrize("family", [4, 6])
def test_frr_static_lines(family):
    feed = _feed(40, family, probe=1)
    cmd = {4: "ip route", 6: "ipv6 route"}[family]
    out = io.StringIO()
    assert rf.write_lines(rf.frr_static(feed, NEXTHOP[family]), out) == 40
    lines = out.getvalue().splitlines()
    assert lines[0].startswith(cmd + " ") and len(lines) == 40
    assert f"{cmd} {feed.probes[0]} {NEXTHOP[family]}" in lines
    assert sum(line.endswith(" blackhole") for line in lines) == 39


def test_writers_stream_and_refuse_a_next_hop_of_the_other_family():
    feed = _feed(10, 4)
    gen = rf.frr_static(feed, NEXTHOP[4])
    assert iter(gen) is gen  # a generator: nothing is built before it is read
    for bad in ("2001:2:0:2::10", "nexthop", ""):
        with pytest.raises(ConfigError) as err:
            list(rf.bird_static(feed, bad))
        assert f"nexthop={bad!r}" in _one_line(err)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(0, 400), seed=st.integers(0, 2**32), family=st.sampled_from([4, 6]), probe=st.integers(0, 5))
def test_any_feed_is_n_distinct_prefixes_of_its_family(n, seed, family, probe):
    probe = min(probe, n)
    feed = _feed(n, family, seed=seed, probe=probe)
    assert len(feed) == n == len(set(feed.prefixes))
    assert all(ipaddress.ip_network(p).version == family for p in feed.prefixes)
