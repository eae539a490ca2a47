"""Cross-traffic loss by send time: the packets the migration cost.

vrgen counts the packets it sent per millisecond of their send stamp (gen.json ``sent_hist_ms``);
vrsink counts the unique packets it received per millisecond of the same stamps (sink.json
``tx_hist_ms``).  Their difference is the number lost per send millisecond, whatever the order
in which packets arrived, without interpolation.

Why the sequence numbers around the longest gap are not enough: in a stop-and-copy migration
the frames already in the stopped guest's receive ring travel with its memory and are forwarded
from R2 after the outage, so the packets on either side of the gap have consecutive sequence
numbers (``lost_in_gap`` 0) while everything sent during the outage is lost right after them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

NS_PER_MS = 1_000_000


@dataclass(frozen=True)
class SentLost:
    """Packets sent in a span of send time and how many of them never arrived."""

    sent: int
    lost: int
    loss_ratio: float | None  # lost / sent (None when nothing was sent)


def _sent_lost(sent: int, lost: int) -> SentLost:
    return SentLost(sent, lost, lost / sent if sent else None)


@dataclass(frozen=True)
class SendTimeLoss:
    """Loss by send time (whole 1 ms buckets that overlap each span; see ``send_time_loss``)."""

    resolution_s: float
    migration: SentLost
    outage: SentLost | None
    outside: SentLost
    excess_lost: float | None
    inconsistent_ms: int


@dataclass(frozen=True)
class LossPerMs:
    """Sent and lost packets per send millisecond, from ``start_ms`` on."""

    start_ms: int
    sent: np.ndarray
    lost: np.ndarray
    inconsistent_ms: int


def lost_per_ms(sent_start_ms: int, sent: np.ndarray, rx_start_ms: int, rx: np.ndarray) -> LossPerMs:
    """Align the generator's and the sink's histograms on the generator's span.

    A bucket with more received than sent packets cannot happen with vrgen's stamps; it is
    counted in ``inconsistent_ms`` and its loss taken as 0.  Received packets stamped outside
    the generator's span are ignored (and counted there too, per bucket)."""
    sent = np.asarray(sent, dtype=np.int64)
    rx = np.asarray(rx, dtype=np.int64)
    aligned = np.zeros_like(sent)
    off = rx_start_ms - sent_start_ms
    lo, hi = max(off, 0), min(off + rx.size, sent.size)
    if hi > lo:
        aligned[lo:hi] = rx[lo - off : hi - off]
    outside = int(np.count_nonzero(rx[: max(0, min(rx.size, -off))]))
    outside += int(np.count_nonzero(rx[max(0, sent.size - off) :]))
    diff = sent - aligned
    return LossPerMs(sent_start_ms, sent, np.maximum(diff, 0), int(np.count_nonzero(diff < 0)) + outside)


def between(loss: LossPerMs, t0_ns: int, t1_ns: int) -> SentLost:
    """Buckets whose millisecond overlaps [t0_ns, t1_ns]."""
    i0 = max(t0_ns // NS_PER_MS - loss.start_ms, 0)
    i1 = min(t1_ns // NS_PER_MS + 1 - loss.start_ms, loss.sent.size)
    if i1 <= i0:
        return _sent_lost(0, 0)
    return _sent_lost(int(loss.sent[i0:i1].sum()), int(loss.lost[i0:i1].sum()))


def send_time_loss(loss: LossPerMs, migration: tuple[int, int], outage: tuple[int, int] | None) -> SendTimeLoss:
    """Loss of the packets sent during the migration span, during the outage, and outside.

    migration = (start, end) of the span searched for the migration's effects (migration start
    to end + margin, ns); outage = (t_before, t_after) of the longest packet gap (the packets
    downtime), or None.  excess_lost = migration.lost − migration.sent × outside's loss ratio:
    the loss beyond what the router lost anyway (None without traffic outside the span)."""
    mig = between(loss, *migration)
    outside = _sent_lost(int(loss.sent.sum()) - mig.sent, int(loss.lost.sum()) - mig.lost)
    excess = None
    if outside.loss_ratio is not None:
        excess = max(0.0, mig.lost - mig.sent * outside.loss_ratio)
    gap = between(loss, *outage) if outage is not None else None
    return SendTimeLoss(NS_PER_MS / 1e9, mig, gap, outside, excess, loss.inconsistent_ms)


def _int_list(d: Mapping[str, Any], key: str) -> Sequence[int] | None:
    v = d.get(key)
    if isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return v
    return None


def unavailable_reason(gen: Mapping[str, Any] | None, sink: Mapping[str, Any] | None) -> str | None:
    """Why ``loss_from_raw`` gives None (a reason code of analysis.qualify), or None if it does not."""
    if not gen:
        return "no_generator"
    if not sink:
        return "no_sink"
    sent, rx = _int_list(gen, "sent_hist_ms"), _int_list(sink, "tx_hist_ms")
    s0, r0 = gen.get("sent_hist_start_ms"), sink.get("tx_hist_start_ms")
    if sent is None or rx is None or not isinstance(s0, int) or not isinstance(r0, int):
        return "no_send_histograms"
    if gen.get("sent_hist_dropped"):
        return "sent_hist_dropped"
    if sink.get("tx_hist_dropped"):
        return "tx_hist_dropped"
    return None


def loss_from_raw(gen: Mapping[str, Any] | None, sink: Mapping[str, Any] | None) -> LossPerMs | None:
    """LossPerMs from gen.json and sink.json (None where either lacks its histogram: other
    backends, older vrgen/vrsink, ``--seq-crt`` payloads without send stamps; or where a histogram
    overflowed its span, ``sent_hist_dropped``/``tx_hist_dropped`` > 0: the counts are incomplete).
    :func:`unavailable_reason` says which."""
    if unavailable_reason(gen, sink) is not None:
        return None
    assert gen is not None and sink is not None
    sent, rx = _int_list(gen, "sent_hist_ms"), _int_list(sink, "tx_hist_ms")
    s0, r0 = gen["sent_hist_start_ms"], sink["tx_hist_start_ms"]
    assert sent is not None and rx is not None
    return lost_per_ms(s0, np.asarray(sent), r0, np.asarray(rx))
