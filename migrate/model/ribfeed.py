"""A full-table generator for a BGP feed: N IPv4 or IPv6 prefixes whose prefix lengths follow a
published distribution of the Internet routing table, and the static-route configuration that
lets a routing peer (BIRD 2 or FRR) originate them (docs/rib-feed.md).

The distribution is data (:data:`DISTRIBUTIONS`), one per family, copied from one published
source with its title, address and date.  **Neither family has its counts yet**: the per-length
section of the weekly "Routing Table Report" (Philip Smith's bgp-stats mailing to routing-wg,
apnic-talk and afnog, "Number of prefixes announced per prefix length (Global)"; the report is
produced from APNIC's router at DIX-IE, http://thyme.apnic.net/about.html) was the chosen
source, but no stored copy of a report's per-length section could be read when this module was
written (only the reports' opening "Analysis Summary" was), and no other source with per-length
counts for either family was found.  Counts are never made up here: each family is marked
unavailable with that reason, and :func:`generate` refuses it until the counts of one report
are copied into its :class:`Distribution` (how: docs/rib-feed.md "Regenerating").  A feed of
probe prefixes only (``n == probe``) needs no distribution.  Every function takes an explicit
``distribution`` as well, which is how the unit tests exercise the generator.

Method (:func:`apportion`): the ``n - probe`` distributed prefixes are shared among the lengths
by largest-remainder (Hamilton) apportionment of the source's counts, in exact integer
arithmetic: each length gets ``floor(m * c / C)``, and the seats left go one each to the
lengths with the largest remainders ``m * c mod C`` (ties: the larger source count, then the
shorter length).  The counts then sum to ``m`` for every ``m`` and each differs from its exact
share by less than one.

Addresses: the prefixes of one length are distinct network numbers drawn uniformly (numpy's
PCG64, seeded by ``(seed, family, length)``) from the global unicast space less the testbed's
own ranges and the special-purpose blocks (:data:`EXCLUDED_V4`, RFC 6890; :data:`ALLOWED_V6`
less :data:`EXCLUDED_V6`); a prefix is drawn only where it overlaps none of them.  No traffic
is ever sent to these.  Prefixes of different lengths may nest, as more-specifics do in the
real table; no two are equal.  The ``probe`` prefixes are separate: /24s (IPv4) or /64s (IPv6)
taken in order from a testbed block that traffic may reach (:data:`PROBE_BLOCK`), skipping the
parts of it other code already uses (:data:`PROBE_AVOID`); they count toward ``n``.

Writers (:func:`bird_static`, :func:`frr_static`) are generators of configuration lines, so a
million routes stream to a file (:func:`write_lines`) without a second copy in memory.  The
distributed routes are ``blackhole`` routes: that is how a BIRD or FRR speaker usually
originates a prefix it has no real next hop for (a ``protocol static`` blackhole, FRR's
``ip route ... blackhole``): the route is always resolved, never forwards a packet, and eBGP
announces it with the speaker's own address as next hop.  Only the probe routes point at
``nexthop``, because only traffic to them is meant to be delivered.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TextIO

import numpy as np

from migrate.core.errors import ConfigError

#: the largest feeds :func:`generate` makes (about today's full tables, with headroom)
MAX_ROUTES = {4: 1_100_000, 6: 250_000}
#: the prefix lengths the distribution covers per family
LENGTHS = {4: tuple(range(8, 25)), 6: tuple(range(16, 49))}
#: the probe prefixes' length per family
PROBE_LENGTH = {4: 24, 6: 64}
#: where the probe prefixes lie: testbed blocks (inside 198.18.0.0/15 and 2001:2::/48) that
#: traffic may reach.  198.19.0.0/17 holds no testbed address (migrate/testbed/topology.py: the
#: hosts and router ports are in 198.18.1-2.0/24, the announced loopbacks in 198.18.3-4.0/24,
#: the migration link 198.19.255.0/30, the labs' management 198.19.128-191.0/24)
PROBE_BLOCK = {4: ipaddress.ip_network("198.19.0.0/17"), 6: ipaddress.ip_network("2001:2:0:100::/56")}
#: parts of PROBE_BLOCK other code uses, never handed out as probes: the route churn's /32s
#: (migrate/experiment/churn.py POOL, its first POOL_SIZE = 1024 addresses), and the veth
#: pairs of the cross-traffic runner and bench (crosstraffic/runner.py, crosstraffic/bench/bed.py)
PROBE_AVOID = {
    4: (ipaddress.ip_network("198.19.0.0/22"),),
    6: (ipaddress.ip_network("2001:2:0:100::/64"), ipaddress.ip_network("2001:2:0:120::/64")),
}
#: never in a distributed prefix (IPv4): RFC 6890's special-purpose blocks and the testbed's range
EXCLUDED_V4 = tuple(
    ipaddress.ip_network(p)
    for p in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "192.88.99.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",  # the testbed
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",
        "240.0.0.0/4",  # holds 255.255.255.255/32
    )
)
#: the IPv6 distributed prefixes lie in global unicast ...
ALLOWED_V6 = ipaddress.ip_network("2000::/3")
#: ... less these (2001::/23 holds the testbed's 2001:2::/48)
EXCLUDED_V6 = tuple(ipaddress.ip_network(p) for p in ("2001::/23", "2001:db8::/32", "2002::/16"))
#: IPv6 prefixes are handled as their top 64 bits (every length here is /64 or shorter)
_V6_SHIFT = 64
_WIDTH = {4: 32, 6: 64}

_NO_REPORT = (
    "no per-length counts could be read from a published report: the stored copies of the weekly "
    "'Routing Table Report' reach only its 'Analysis Summary', not its 'Number of prefixes announced "
    "per prefix length' section"
)


@dataclass(frozen=True)
class Distribution:
    """Prefix counts per length of one family, from one published source.

    ``counts`` holds ``(length, count in the source)`` pairs, copied exactly; it is empty and
    ``unavailable`` says why when no source could be read."""

    family: int
    counts: tuple[tuple[int, int], ...]
    title: str
    url: str
    date: str
    unavailable: str = ""

    def __post_init__(self) -> None:
        """Refuse counts outside :data:`LENGTHS`, negative, repeated, or all zero."""
        if self.family not in LENGTHS:
            raise ConfigError(f"RIB feed distribution: family={self.family!r} is not 4 or 6")
        lengths = [length for length, _ in self.counts]
        bad = [length for length in lengths if length not in LENGTHS[self.family]]
        if bad or len(set(lengths)) != len(lengths) or any(c < 0 for _, c in self.counts):
            raise ConfigError(
                f"RIB feed distribution (IPv{self.family}): counts {self.counts!r} must be distinct lengths "
                f"/{LENGTHS[self.family][0]}../{LENGTHS[self.family][-1]} with counts >= 0"
            )
        if not self.unavailable and sum(c for _, c in self.counts) == 0:
            raise ConfigError(f"RIB feed distribution (IPv{self.family}): no counts and no reason why")

    @property
    def total(self) -> int:
        """The number of prefixes the source counted over :data:`LENGTHS`."""
        return sum(c for _, c in self.counts)

    def shares(self) -> tuple[tuple[int, float], ...]:
        """``(length, share of the total)`` per length (empty when unavailable)."""
        return tuple((length, c / self.total) for length, c in self.counts) if self.total else ()


#: the distribution per family (see the module docstring: both unavailable for now)
DISTRIBUTIONS = {
    family: Distribution(
        family=family,
        counts=(),
        title=f"Weekly Routing Table Report (IPv{family} section), bgp-stats / routing-wg",
        url="http://thyme.apnic.net/about.html",
        date="",
        unavailable=_NO_REPORT,
    )
    for family in (4, 6)
}


@dataclass(frozen=True)
class RibFeed:
    """A generated table.  ``prefixes``: all ``n`` prefixes (probes included) in address order,
    then length; ``probes``: the probe prefixes among them; ``length_counts``: ``(length,
    count)`` of the distributed (non-probe) prefixes, which equal :func:`apportion`'s."""

    family: int
    seed: int
    prefixes: tuple[str, ...] = field(repr=False)
    probes: tuple[str, ...]
    length_counts: tuple[tuple[int, int], ...]
    source: Distribution

    def __len__(self) -> int:
        """The number of prefixes (``n``)."""
        return len(self.prefixes)


def apportion(m: int, counts: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Largest-remainder apportionment of ``m`` prefixes over ``(length, count)``: ``(length,
    share)`` pairs in the order given, summing to ``m`` (exact integers; ties of the remainder
    go to the larger count, then the shorter length)."""
    total = sum(c for _, c in counts)
    if m == 0 or total == 0:
        return tuple((length, 0) for length, _ in counts)
    floors = [m * c // total for _, c in counts]
    left = m - sum(floors)
    order = sorted(range(len(counts)), key=lambda i: (-(m * counts[i][1] % total), -counts[i][1], counts[i][0]))
    for i in order[:left]:
        floors[i] += 1
    return tuple((length, k) for (length, _), k in zip(counts, floors, strict=True))


def probe_prefixes(family: int) -> tuple[str, ...]:
    """Every probe prefix of ``family`` in the order :func:`generate` hands them out."""
    avoid = PROBE_AVOID[family]
    subnets = PROBE_BLOCK[family].subnets(new_prefix=PROBE_LENGTH[family])
    return tuple(str(s) for s in subnets if not any(s.overlaps(a) for a in avoid))


def generate(n: int, family: int, seed: int = 0, probe: int = 0, distribution: Distribution | None = None) -> RibFeed:
    """``n`` distinct prefixes of ``family`` (4 or 6), ``probe`` of them probe prefixes and the
    rest following ``distribution`` (default :data:`DISTRIBUTIONS`), deterministic for
    ``(n, family, seed, probe)``.  Bad arguments raise :class:`ConfigError` (one line)."""
    _check(n, family, seed, probe)
    dist = distribution if distribution is not None else DISTRIBUTIONS[family]
    if dist.family != family:
        raise ConfigError(f"RIB feed: the distribution is for IPv{dist.family}, not IPv{family}")
    m = n - probe
    if m and dist.unavailable:
        raise ConfigError(
            f"RIB feed: no IPv{family} prefix-length distribution ({dist.unavailable}): copy one report's "
            "counts into DISTRIBUTIONS in migrate/model/ribfeed.py (docs/rib-feed.md), or ask for probes only"
        )
    shares = apportion(m, dist.counts)
    values, lengths = [], []
    for length, k in shares:
        if k:
            values.append(_draw(family, length, k, seed))
            lengths.append(np.full(k, length, dtype=np.int64))
    probes = probe_prefixes(family)[:probe]
    for p in probes:
        net = ipaddress.ip_network(p)
        values.append(np.array([_top(family, int(net.network_address))], dtype=np.uint64))
        lengths.append(np.array([net.prefixlen], dtype=np.int64))
    v = np.concatenate(values) if values else np.empty(0, dtype=np.uint64)
    ln = np.concatenate(lengths) if lengths else np.empty(0, dtype=np.int64)
    order = np.lexsort((ln, v))
    text = _format(family, v[order].tolist(), ln[order].tolist())
    return RibFeed(
        family=family,
        seed=seed,
        prefixes=tuple(text),
        probes=probes,
        length_counts=tuple((length, k) for length, k in shares if k),
        source=dist,
    )


def bird_static(feed: RibFeed, nexthop: str, name: str | None = None) -> Iterator[str]:
    """A BIRD 2 ``protocol static`` block originating ``feed``, line by line (each ending in a
    newline): ``route <prefix> blackhole;`` for the distributed prefixes, ``route <probe> via
    <nexthop>;`` for the probes.  The peer announces it with its BGP export (e.g. ``export
    where proto = "<name>"``)."""
    _check_nexthop(feed, nexthop)
    probes = frozenset(feed.probes)
    yield f"protocol static {name or f'ribfeed{feed.family}'} {{\n"
    yield f"  ipv{feed.family};\n"
    for p in feed.prefixes:
        yield f"  route {p} via {nexthop};\n" if p in probes else f"  route {p} blackhole;\n"
    yield "}\n"


def frr_static(feed: RibFeed, nexthop: str) -> Iterator[str]:
    """FRR static routes originating ``feed``, line by line: ``ip route`` (``ipv6 route``)
    ``<prefix> blackhole`` for the distributed prefixes, ``<probe> <nexthop>`` for the probes.
    The peer announces them with ``redistribute static`` in its BGP address family."""
    _check_nexthop(feed, nexthop)
    probes = frozenset(feed.probes)
    cmd = "ip route" if feed.family == 4 else "ipv6 route"
    for p in feed.prefixes:
        yield f"{cmd} {p} {nexthop}\n" if p in probes else f"{cmd} {p} blackhole\n"


def write_lines(lines: Iterable[str], out: TextIO) -> int:
    """Write ``lines`` (from :func:`bird_static` or :func:`frr_static`) to ``out``; the count."""
    count = 0
    for line in lines:
        out.write(line)
        count += 1
    return count


def _check(n: int, family: int, seed: int, probe: int) -> None:
    """One :class:`ConfigError` line for the first bad argument of :func:`generate`."""
    if family not in MAX_ROUTES:
        raise ConfigError(f"RIB feed: family={family!r} is not 4 or 6")
    cap = MAX_ROUTES[family]
    if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= cap:
        raise ConfigError(f"RIB feed: n={n!r} is not a number of IPv{family} routes: give 0 to {cap}")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ConfigError(f"RIB feed: seed={seed!r} is not a non-negative integer")
    most = min(n, len(probe_prefixes(family)))
    if not isinstance(probe, int) or isinstance(probe, bool) or not 0 <= probe <= most:
        raise ConfigError(
            f"RIB feed: probe={probe!r} is not a number of IPv{family} probe prefixes: give 0 to {most} "
            f"(at most n={n} and the {len(probe_prefixes(family))} /{PROBE_LENGTH[family]}s of "
            f"{PROBE_BLOCK[family]})"
        )


def _check_nexthop(feed: RibFeed, nexthop: str) -> None:
    """Refuse a next hop that is not an address of the feed's family."""
    try:
        ok = ipaddress.ip_address(nexthop).version == feed.family
    except ValueError:
        ok = False
    if not ok:
        raise ConfigError(f"RIB feed: nexthop={nexthop!r} is not an IPv{feed.family} address")


def _top(family: int, address: int) -> int:
    """The value prefixes are handled as: the address (IPv4) or its top 64 bits (IPv6)."""
    return address if family == 4 else address >> _V6_SHIFT


def _allowed(family: int) -> list[tuple[int, int]]:
    """The address intervals ``[lo, hi)`` (in :func:`_top` units) distributed prefixes may use."""
    if family == 4:
        space, excluded = ipaddress.ip_network("0.0.0.0/0"), EXCLUDED_V4
    else:
        space, excluded = ALLOWED_V6, EXCLUDED_V6
    width = _WIDTH[family]
    bounds = [
        (
            _top(family, int(space.network_address)),
            _top(family, int(space.network_address)) + (1 << (width - (space.prefixlen))),
        )
    ]
    for ex in sorted(excluded, key=lambda e: int(e.network_address)):
        lo = _top(family, int(ex.network_address))
        hi = lo + (1 << (width - ex.prefixlen))
        out = []
        for a, b in bounds:
            if hi <= a or b <= lo:
                out.append((a, b))
                continue
            if a < lo:
                out.append((a, lo))
            if hi < b:
                out.append((hi, b))
        bounds = out
    return bounds


def _draw(family: int, length: int, k: int, seed: int) -> np.ndarray:
    """``k`` distinct network values of ``length`` inside :func:`_allowed`, uniformly drawn."""
    step = _WIDTH[family] - length
    # network numbers (value >> step) whose whole prefix lies in an allowed interval
    ranges = [(-(-a >> step), b >> step) for a, b in _allowed(family)]
    starts = np.array([a for a, b in ranges if b > a], dtype=np.int64)
    sizes = np.array([b - a for a, b in ranges if b > a], dtype=np.int64)
    total = int(sizes.sum())
    if k > total:
        raise ConfigError(
            f"RIB feed: {k} distinct IPv{family} /{length}s asked for, but only {total} fit outside the "
            "excluded blocks: give a smaller n"
        )
    rng = np.random.default_rng(np.random.SeedSequence([seed, family, length]))
    ranks = _distinct(rng, total, k)
    ends = np.cumsum(sizes)
    where = np.searchsorted(ends, ranks, side="right")
    nums = starts[where] + ranks - (ends[where] - sizes[where])
    return nums.astype(np.uint64) << np.uint64(step)


def _distinct(rng: np.random.Generator, total: int, k: int) -> np.ndarray:
    """``k`` distinct integers of ``[0, total)``, a uniform random subset."""
    if 2 * k >= total:
        return rng.permutation(total)[:k]
    got = np.empty(0, dtype=np.int64)
    while got.size < k:
        need = k - got.size
        got = np.unique(np.concatenate([got, rng.integers(0, total, size=need + need // 8 + 16, dtype=np.int64)]))
    return rng.permutation(got)[:k] if got.size > k else got


def _format(family: int, values: list[int], lengths: list[int]) -> list[str]:
    """Prefix strings in ipaddress's (RFC 5952) form for :func:`_top` values and lengths."""
    if family == 4:
        return [
            f"{v >> 24}.{(v >> 16) & 255}.{(v >> 8) & 255}.{v & 255}/{ln}"
            for v, ln in zip(values, lengths, strict=True)
        ]
    out = []
    for v, ln in zip(values, lengths, strict=True):
        # the low 64 bits are zero, so the longest run of zero groups is the trailing one
        groups = [v >> 48, (v >> 32) & 0xFFFF, (v >> 16) & 0xFFFF, v & 0xFFFF]
        while groups and groups[-1] == 0:
            groups.pop()
        out.append(":".join(f"{g:x}" for g in groups) + f"::/{ln}")
    return out
