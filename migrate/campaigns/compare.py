"""``vrmig report`` (= ``make report RUNS=...``) and ``vrmig compare`` (= ``make compare A= B=``):
reports rebuilt from existing results, never re-running anything."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from analysis.present import html as rh
from analysis.stats.inference import MAX_EXACT_SPLITS, mann_whitney_p
from migrate.campaigns import sweepdir as sd
from migrate.campaigns.reporting import REPORT_MARKER, Outputs, Source, build_outputs, collect, load_source, sweep_title
from migrate.campaigns.sweep import prepare_results_root
from migrate.core.errors import ConfigError

COMPARE_METRICS = (
    ("downtime_counters_s", "downtime counters [ms]", 1e3),
    ("downtime_packets_s", "downtime packets [ms]", 1e3),
    ("duration_link_s", "duration link [s]", 1.0),
    ("volume_link_bytes", "volume link [MB]", 1e-6),
    ("rtt_increase_median_ms", "RTT increase [ms]", 1.0),
    ("forwarded_ratio", "forwarded/offered", 1.0),
)


def _out_dir(results_root: Path, kind: str, out: Path | None) -> Path:
    """A new report directory (never an existing one) under the results root, or ``out``."""
    if out is not None:
        if out.exists() and (not out.is_dir() or any(out.iterdir())) and not (out / REPORT_MARKER).exists():
            raise ConfigError(f"OUT={out} exists and is not an empty or vrmig report directory")
        out.mkdir(parents=True, exist_ok=True)
        (out / REPORT_MARKER).write_text("vrmig report directory\n")
        return out
    prepare_results_root(results_root)
    path = results_root / f"{sd.stamp_utc()}-{kind}"
    path.mkdir()
    (path / REPORT_MARKER).write_text("vrmig report directory\n")
    return path


def report(dirs: Sequence[Path], results_root: Path, out: Path | None = None) -> Outputs:
    """Rebuild the report of ``dirs``: in place for a single sweep directory, else (several
    directories, runs, or a night, whose report.html also holds the regression checks) in a new
    ``<results>/<stamp>-report/`` (or ``out``)."""
    if not dirs:
        raise ConfigError("RUNS is empty: give one or more sweep, run or results directories")
    sources = [load_source(Path(d)) for d in dirs]
    if len(sources) == 1 and sources[0].kind == "sweep" and out is None:
        return build_outputs(sources[0].path, sources, sweep_title(sources[0]))
    if sum(len(s.runs) for s in sources) == 0:
        raise ConfigError("RUNS: no finished runs in " + ", ".join(str(d) for d in dirs))
    out_dir = _out_dir(results_root, "report", out)
    if len(sources) > 1:
        for s, label in zip(sources, _labels(len(sources)), strict=True):
            s.label = label
    title = f"vrmig report of {', '.join(s.path.name for s in sources)}"
    return build_outputs(out_dir, sources, title, subtitle=_legend(sources))


def _labels(n: int) -> list[str]:
    return [chr(ord("A") + i) if n <= 26 else f"S{i + 1}" for i in range(n)]


def _legend(sources: Sequence[Source]) -> str:
    return " · ".join(f"**{s.label}** = `{s.path}`" for s in sources if s.label) or ""


def _median(recs: list[dict[str, Any]], metric: str) -> list[float]:
    return [r[metric] for r in recs if r.get("status") == "completed" and isinstance(r.get(metric), int | float)]


def compare_table(recs_a: list[dict[str, Any]], recs_b: list[dict[str, Any]]) -> rh.Table:
    """Per grid point and metric: medians of A and B, ratio B/A and the two-sided Mann–Whitney U p
    (:func:`analysis.stats.inference.mann_whitney_p`)."""
    keys_a = {(r.get("accel"), r.get("rate_bps"), r.get("frame_bytes")) for r in recs_a}
    keys_b = {(r.get("accel"), r.get("rate_bps"), r.get("frame_bytes")) for r in recs_b}
    keys = sorted(keys_a & keys_b, key=lambda k: (str(k[0]), -(k[2] or 0), k[1] or 0))
    header = ["rate [Mbit/s]", "frame [B]", "metric", "A median", "B median", "B/A", "p (two-sided)", "n A", "n B"]
    rows, classes = [], []
    for accel, rate, frame in keys:
        pa = [r for r in recs_a if (r.get("accel"), r.get("rate_bps"), r.get("frame_bytes")) == (accel, rate, frame)]
        pb = [r for r in recs_b if (r.get("accel"), r.get("rate_bps"), r.get("frame_bytes")) == (accel, rate, frame)]
        for metric, label, scale in COMPARE_METRICS:
            a, b = _median(pa, metric), _median(pb, metric)
            ma = float(np.median(a)) * scale if a else None
            mb = float(np.median(b)) * scale if b else None
            ratio = mb / ma if ma and mb is not None else None
            p = None
            if a and b:
                p = mann_whitney_p(b, a, "two-sided")
            rows.append([
                f"{(rate or 0) / 1e6:g}", frame, label,
                "–" if ma is None else f"{ma:.4g}", "–" if mb is None else f"{mb:.4g}",
                "–" if ratio is None or not math.isfinite(ratio) else f"{ratio:.3g}",
                "–" if p is None else f"{p:.3g}", len(a), len(b),
            ])  # fmt: skip
            classes.append("regression" if p is not None and p <= 0.05 else "")
    note = (
        "Medians over completed runs; p from the two-sided Mann–Whitney U test (scipy.stats.mannwhitneyu): "
        f"exact, except for tied samples with more than {MAX_EXACT_SPLITS:,} splits "
        "(normal approximation with tie correction). "
        "Rows with p ≤ 0.05 are shaded; with many rows some will be shaded by chance."
    )
    return rh.Table("A vs B per grid point", header, rows, classes, note, id="compare")


def compare(a: Path, b: Path, results_root: Path, out: Path | None = None) -> Outputs:
    """Overlay sweeps ``a`` and ``b`` in one report in a new ``<results>/<stamp>-compare/``."""
    if Path(a).resolve() == Path(b).resolve():
        raise ConfigError("A and B are the same directory")
    src_a, src_b = load_source(Path(a), "A", "A"), load_source(Path(b), "B", "B")
    col_a, col_b = collect(src_a), collect(src_b)
    from migrate.campaigns.reporting import check_same_accelerator  # a point never mixes accelerators, nor does A vs B

    check_same_accelerator(col_a[0], col_b[0])
    out_dir = _out_dir(results_root, "compare", out)
    title = f"vrmig compare: A = {src_a.path.name} vs B = {src_b.path.name}"
    return build_outputs(
        out_dir,
        [src_a, src_b],
        title,
        extra_tables=[compare_table(col_a[0], col_b[0])],
        subtitle=_legend([src_a, src_b]),
        collected=[col_a, col_b],
    )
