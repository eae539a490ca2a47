"""``vrmig report`` (= ``make report RUNS=...``) and ``vrmig compare`` (= ``make compare A= B=``):
reports rebuilt from existing results, never re-running anything.  ``compare`` matches the grid
points of A and B and compares every metric of :data:`COMPARE_METRICS` at every point with
:mod:`analysis.stats.compare` (Hodges–Lehmann shift with its exact interval, Cliff's delta,
Mann–Whitney p, Holm over the table)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from analysis import qualify as q
from analysis.present import html as rh
from analysis.stats import compare as cmp
from analysis.stats.aggregate import METRIC_BY_NAME
from analysis.stats.inference import MAX_EXACT_SPLITS
from migrate.campaigns import sweepdir as sd
from migrate.campaigns.reporting import (
    REPORT_MARKER,
    Outputs,
    Source,
    build_outputs,
    collect,
    csv_text,
    load_source,
    sweep_title,
)
from migrate.campaigns.sweep import prepare_results_root
from migrate.core.atomic import write_text
from migrate.core.errors import ConfigError

COMPARE_CSV = "compare.csv"
#: (metric, label, display unit, scale from the record's unit to the display unit)
COMPARE_METRICS = (
    ("downtime_counters_s", "downtime counters", "ms", 1e3),
    ("downtime_packets_s", "downtime packets", "ms", 1e3),
    ("outage_s", "outage (anatomy)", "ms", 1e3),
    ("duration_link_s", "duration link", "s", 1.0),
    ("volume_link_bytes", "volume link", "MB", 1e-6),
    ("rtt_increase_median_ms", "RTT increase", "ms", 1.0),
    ("forwarded_ratio", "forwarded/offered", "1", 1.0),
)
#: compared only where a run of A or B has the figure (a value or a bound): runs recorded before
#: the outage anatomy existed have none, and a row of two empty sides says nothing
OPTIONAL_METRICS = frozenset({"outage_s"})
#: what, besides rate and frame size, tells points of one side apart (:func:`setting_parts`)
SETTING_PARTS = ("setup", "mode", "peering", "bfd")


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


def setting_parts(rec: dict[str, Any], label: str = "") -> dict[str, str]:
    """The parts of a run's series (:func:`migrate.campaigns.reporting.series_name`) other than the
    source's ``label``: its mode, PEERING, BFD setting, and ``setup`` = the rest (the hypervisor
    with its driver, the lab)."""
    tokens = str(rec.get("series") or "").split()
    if label and tokens[:1] == [label]:
        tokens = tokens[1:]
    mode, peering, bfd = (str(rec.get(k) or "") for k in ("mode", "peering", "bfd"))
    if mode in tokens:
        tokens.remove(mode)
    rest = [t for t in tokens if not t.startswith(("PEERING=", "BFD="))]
    return {
        "setup": " ".join(rest),
        "mode": mode,
        "peering": f"PEERING={peering}" if peering else "",
        "bfd": f"BFD={bfd}" if bfd else "",
    }


def varying_parts(recs_a: Sequence[dict[str, Any]], recs_b: Sequence[dict[str, Any]],
                  labels: tuple[str, str] = ("A", "B")) -> tuple[str, ...]:  # fmt: skip
    """The setting parts that differ between the runs of one side (a MODES or BFDS sweep, a night of
    several modes): points are matched on them.  Parts constant within each side are what A and B
    are compared on (another mode, driver, lab, BFD setting ...) and are not matched."""
    return tuple(
        part
        for part in SETTING_PARTS
        if any(
            len({setting_parts(r, lab)[part] for r in recs}) > 1
            for recs, lab in zip((recs_a, recs_b), labels, strict=True)
        )
    )


@dataclass(frozen=True)
class CompareRow:
    """One metric at one matched point: both sides' samples and their comparison."""

    point: str
    setting: tuple[tuple[str, str], ...]
    accel: str | None
    rate_bps: float | None
    frame_bytes: int | None
    series_a: str
    series_b: str
    metric: str
    label: str
    unit: str
    scale: float
    a: cmp.Side
    b: cmp.Side
    result: cmp.Comparison


def _side(recs: Sequence[dict[str, Any]], metric: str, unit: str, scale: float) -> cmp.Side:
    """One side's sample of ``metric`` at a point: the values of its completed runs, the bounds
    (censored: ``analysis.qualify``) and why the others have no figure."""
    completed = [r for r in recs if r.get("status") == "completed"]
    values, bounds, absent, incomplete = [], [], [], 0
    for r in completed:
        v, qual = r.get(metric), (r.get("quals") or {}).get(metric) or {}
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
            values.append(float(v))
            incomplete += qual.get("state") == q.INCOMPLETE
        elif qual.get("state") == q.CENSORED:
            lower, upper = qual.get("lower"), qual.get("upper")
            bounds.append(f"≥ {lower * scale:.4g}" if lower is not None else f"≤ {upper * scale:.4g}" if upper else "?")
        else:
            codes = qual.get("reasons") or []  # the reasons' sentences without the run's details, once each
            text = q.reason_text(codes) if codes else str(qual.get("text") or "no figure recorded")
            absent += [] if text in absent else [text]
    note = f"{', '.join(bounds)} {unit}" if bounds else ""
    return cmp.Side(tuple(values), len(recs), len(completed), len(bounds), note, tuple(absent), incomplete)


def _point_label(key: tuple[Any, ...]) -> str:
    rate, frame, *parts = key
    rate_s = "?" if rate is None else f"{rate / 1e6:g}M"
    return " ".join(str(x) for x in (*parts, rate_s, f"{frame} B") if x)


def _metrics(recs: Sequence[dict[str, Any]]) -> list[tuple[str, str, str, float]]:
    """:data:`COMPARE_METRICS`, the optional ones only where a run has the figure or a bound."""

    def present(m: str) -> bool:
        return any(r.get(m) is not None or m in (r.get("quals") or {}) for r in recs)

    return [row for row in COMPARE_METRICS if row[0] not in OPTIONAL_METRICS or present(row[0])]


def compare_rows(
    recs_a: Sequence[dict[str, Any]],
    recs_b: Sequence[dict[str, Any]],
    labels: tuple[str, str] = ("A", "B"),
    alpha: float = cmp.ALPHA,
    confidence: float = cmp.CONFIDENCE,
) -> list[CompareRow]:
    """Every point of A or B × every compared metric (:func:`analysis.stats.compare.compare_sides`),
    decided together by Holm over Tarone's family (:func:`analysis.stats.compare.adjust`).  Points are matched by rate,
    frame size and the :func:`varying_parts` of their series; a point of one side only gets rows
    that say the other side has no runs there."""
    varying = varying_parts(recs_a, recs_b, labels)

    def key(r: dict[str, Any], label: str) -> tuple[Any, ...]:
        parts = setting_parts(r, label)
        return (r.get("rate_bps"), r.get("frame_bytes"), *(parts[p] for p in varying))

    groups: dict[tuple[Any, ...], tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
    for side, (recs, label) in enumerate(zip((recs_a, recs_b), labels, strict=True)):
        for r in recs:
            groups.setdefault(key(r, label), ([], []))[side].append(r)
    order = sorted(groups, key=lambda k: (tuple(str(x) for x in k[2:]), -(k[1] or 0), k[0] or 0))
    metrics = _metrics([*recs_a, *recs_b])
    pending: list[tuple[CompareRow, cmp.Comparison]] = []
    for k in order:
        pa, pb = groups[k]
        accels = [sorted({str(r["accel"]) for r in recs if r.get("accel") is not None}) for recs in (pa, pb)]
        clash = accels[0] and accels[1] and accels[0] != accels[1]
        series = [", ".join(sorted({str(r.get("series") or "") for r in recs})) for recs in (pa, pb)]
        for metric, label, unit, scale in metrics:
            a, b = _side(pa, metric, unit, scale), _side(pb, metric, unit, scale)
            if clash:
                why = f"A ran with accel={','.join(accels[0])}, B with accel={','.join(accels[1])} at this point"
                res = cmp.Comparison(len(a.values), len(b.values), verdict=cmp.NOT_COMPARED, reason=why)
            else:
                res = cmp.compare_sides(a, b, alpha, confidence)
            row = CompareRow(
                point=_point_label(k), setting=tuple(zip(varying, k[2:], strict=True)),
                accel=",".join(accels[0] or accels[1]) or None, rate_bps=k[0], frame_bytes=k[1],
                series_a=series[0], series_b=series[1], metric=metric, label=label, unit=unit, scale=scale,
                a=a, b=b, result=res,
            )  # fmt: skip
            pending.append((row, res))
    decided = cmp.adjust([res for _, res in pending], alpha)
    return [replace(row, result=res) for (row, _), res in zip(pending, decided, strict=True)]


def _g(x: float | None, scale: float = 1.0, fmt: str = ".4g") -> str:
    return "–" if x is None else format(x * scale, fmt)


def _n(n: int, s: cmp.Side) -> str:
    extra = [f"+{s.n_censored} bound"] if s.n_censored else []
    extra += [f"+{s.n_absent} absent"] if s.n_absent > 0 else []
    return " ".join([str(n), *extra])


def verdict_text(c: cmp.Comparison) -> str:
    """The verdict cell: the verdict, why when it was not decided, what the samples left out."""
    if c.verdict == cmp.UNDECIDABLE and c.reason.startswith(cmp.IN_THIS_TABLE):
        text = f"undecidable in this table with n={c.n_a} vs {c.n_b} (smallest p {_g(c.min_p, fmt='.3g')})"
    elif c.verdict == cmp.UNDECIDABLE:
        text = f"undecidable with n={c.n_a} vs {c.n_b} (smallest p {_g(c.min_p, fmt='.3g')})"
    elif c.verdict == cmp.NOT_COMPARED:
        text = f"not compared: {c.reason}"
    else:
        text = c.verdict
    return "; ".join(x for x in (text, c.notes) if x)


COMPARE_HEADER = ["point", "metric", "n A", "n B", "A median", "B median", "B − A (HL)", "95 % CI of B − A",
                  "Cliff's δ", "effect", "p", "p Holm", "verdict"]  # fmt: skip


def row_cells(row: CompareRow) -> list[str]:
    """One row of the comparison table (terminal and report.html)."""
    c, s = row.result, row.scale
    ci = f"[{_g(c.ci_low, s)}, {_g(c.ci_high, s)}]" if c.ci_low is not None else "–"
    delta = "–" if c.cliffs_delta is None else f"{c.cliffs_delta:+.2f}"
    return [
        row.point, f"{row.label} [{row.unit}]", _n(c.n_a, row.a), _n(c.n_b, row.b),
        _g(c.median_a, s), _g(c.median_b, s), _g(c.shift, s, "+.4g"), ci, delta, c.effect or "–",
        _g(c.p, fmt=".3g"), _g(c.p_adjusted, fmt=".3g"), verdict_text(c),
    ]  # fmt: skip


def summary_line(rows: Sequence[CompareRow]) -> str:
    """How many comparisons were decided, and how."""
    res = [r.result for r in rows]
    count = {v: sum(1 for c in res if c.verdict == v) for v in cmp.VERDICTS}
    alpha = res[0].alpha if res else cmp.ALPHA
    family = res[0].family if res else 0
    in_table = sum(1 for c in res if c.verdict == cmp.UNDECIDABLE and c.reason.startswith(cmp.IN_THIS_TABLE))
    compared = len(res) - count[cmp.NOT_COMPARED]
    hint = ""
    if count[cmp.UNDECIDABLE]:
        need = cmp.runs_needed(compared, alpha)
        hint = f"; {need} completed runs a point on each side would make all {compared} decidable"
    return (
        f"{len(res)} comparisons; Holm over the {family} decidable ones at family-wise alpha {alpha:g}: "
        f"{count[cmp.SIGNIFICANT]} significant, {count[cmp.NOT_SIGNIFICANT]} not significant; "
        f"{count[cmp.UNDECIDABLE] - in_table} undecidable with their n, {in_table} in this table (Tarone{hint}); "
        f"{count[cmp.NOT_COMPARED]} not compared"
    )


COMPARE_NOTE = (
    "Per matched grid point and metric, over the completed runs: medians; **B − A (HL)**, the Hodges–Lehmann "
    "shift (median of all pairwise differences B − A) with its exact distribution-free 95 % interval from the "
    "Mann–Whitney U distribution (none when the n are too small for one); **Cliff's δ** = P(B > A) − P(B < A) "
    "(|δ| < 0.147 negligible, < 0.33 small, < 0.474 medium, else large; Romano et al. 2006); **p**, the "
    "two-sided Mann–Whitney U p-value (scipy.stats.mannwhitneyu, exact; the exact permutation distribution "
    f"for tied samples of at most {MAX_EXACT_SPLITS:,} splits); **p Holm**, adjusted by Holm's step-down "
    "procedure over the decidable comparisons of this table; rows **significant** at family-wise 0.05 after "
    "it are shaded. *Undecidable*: with these n no p could reach 0.05, or, *in this table*, the level 0.05/K "
    "of Tarone (1990) for the comparisons whose n can reach it (the others are left out of Holm's family); not "
    "evidence of no difference. The intervals are per row, not corrected. "
    "*Not compared*: a side without runs, completed runs or figures, or with runs known only by a bound "
    "(censored), which a rank comparison would take for values; runs without the figure are left out and "
    "counted ('+k absent'). compare.csv has every number. "
)


def comparison_table(rows: Sequence[CompareRow]) -> rh.Table:
    """The report.html table of :func:`compare_rows`."""
    classes = [
        "significant" if r.result.significant else "skipped" if r.result.verdict in (cmp.UNDECIDABLE, cmp.NOT_COMPARED)
        else "" for r in rows
    ]  # fmt: skip
    note = COMPARE_NOTE + summary_line(rows) + "."
    return rh.Table("A vs B per grid point", COMPARE_HEADER, [row_cells(r) for r in rows], classes, note, id="compare")


def compare_table(recs_a: list[dict[str, Any]], recs_b: list[dict[str, Any]]) -> rh.Table:
    """:func:`comparison_table` of :func:`compare_rows`."""
    return comparison_table(compare_rows(recs_a, recs_b))


def format_comparison(rows: Sequence[CompareRow]) -> str:
    """The comparison as plain text for the terminal, with the summary line."""
    cells = [COMPARE_HEADER, *(row_cells(r) for r in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COMPARE_HEADER))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join([*lines, summary_line(rows)])


COMPARE_COLUMNS = (
    "point", "accel", "rate_bps", "frame_bytes", "setting", "series_a", "series_b", "metric", "unit",
    "n_runs_a", "n_completed_a", "n_a", "n_censored_a", "n_absent_a",
    "n_runs_b", "n_completed_b", "n_b", "n_censored_b", "n_absent_b",
    "median_a", "median_b", "shift_hl", "ci_low", "ci_high", "ci_nominal", "ci_confidence", "ci_note",
    "cliffs_delta", "effect", "p", "min_p", "correction", "family", "alpha", "p_adjusted", "significant",
    "verdict", "reason", "notes",
)  # fmt: skip


#: compare.csv columns that are fields of :class:`analysis.stats.compare.Comparison` as they are
COMPARISON_FIELDS = (
    "median_a", "median_b", "ci_low", "ci_high", "ci_confidence", "ci_note", "cliffs_delta", "effect",
    "p", "min_p", "correction", "family", "alpha", "p_adjusted", "verdict", "reason", "notes",
)  # fmt: skip


def csv_rows(rows: Sequence[CompareRow]) -> list[dict[str, Any]]:
    """compare.csv rows: every figure in the metric's unit of runs.csv (``unit``), not scaled;
    ``significant`` is empty where nothing was decided (undecidable, not compared)."""
    out = []
    for r in rows:
        c = r.result
        row: dict[str, Any] = {
            "point": r.point,
            "accel": r.accel,
            "rate_bps": r.rate_bps,
            "frame_bytes": r.frame_bytes,
            "setting": " ".join(v for _, v in r.setting if v),
            "series_a": r.series_a,
            "series_b": r.series_b,
            "metric": r.metric,
            "unit": METRIC_BY_NAME[r.metric].unit,
            "shift_hl": c.shift,
            "ci_nominal": c.confidence,
            "significant": c.significant if c.verdict in (cmp.SIGNIFICANT, cmp.NOT_SIGNIFICANT) else None,
        }
        for name, side, n in (("a", r.a, c.n_a), ("b", r.b, c.n_b)):
            row.update({
                f"n_runs_{name}": side.n_runs, f"n_completed_{name}": side.n_completed, f"n_{name}": n,
                f"n_censored_{name}": side.n_censored, f"n_absent_{name}": side.n_absent,
            })  # fmt: skip
        for k in COMPARISON_FIELDS:
            row[k] = getattr(c, k)
        out.append(row)
    return out


@dataclass
class CompareOutputs(Outputs):
    """:class:`Outputs` of a comparison, with its rows (written to compare.csv)."""

    rows: list[CompareRow] = field(default_factory=list)


def compare(a: Path, b: Path, results_root: Path, out: Path | None = None) -> CompareOutputs:
    """Overlay sweeps ``a`` and ``b`` in one report in a new ``<results>/<stamp>-compare/``, with the
    comparison of :func:`compare_rows` in report.html and compare.csv.  Sweeps without a grid point
    in common are refused (ConfigError) before anything is written."""
    if Path(a).resolve() == Path(b).resolve():
        raise ConfigError("A and B are the same directory")
    src_a, src_b = load_source(Path(a), "A", "A"), load_source(Path(b), "B", "B")
    col_a, col_b = collect(src_a), collect(src_b)
    from migrate.campaigns.reporting import check_same_accelerator  # a point never mixes accelerators, nor does A vs B

    check_same_accelerator(col_a[0], col_b[0])
    rows = compare_rows(col_a[0], col_b[0])
    if not any(r.a.n_runs and r.b.n_runs for r in rows):
        points = [", ".join(sorted({r.point for r in rows if getattr(r, side).n_runs})) or "none" for side in "ab"]
        raise ConfigError(f"A and B have no grid point in common (A: {points[0]}; B: {points[1]}): nothing to compare")
    out_dir = _out_dir(results_root, "compare", out)
    title = f"vrmig compare: A = {src_a.path.name} vs B = {src_b.path.name}"
    res = build_outputs(
        out_dir,
        [src_a, src_b],
        title,
        extra_tables=[comparison_table(rows)],
        subtitle=_legend([src_a, src_b]),
        collected=[col_a, col_b],
    )
    write_text(out_dir / COMPARE_CSV, csv_text(COMPARE_COLUMNS, csv_rows(rows)))
    return CompareOutputs(res.out_dir, res.records, res.points, rows)
