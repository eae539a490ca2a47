"""``vrmig paper`` (= ``make paper``): paper 004's two campaigns, then a report that puts each of
the paper's stated results beside the measured one, with the conditions that differ, and Figs. 2
and 3 re-drawn: the measured points over the rate beside the values the paper states
(:mod:`analysis.present.paper_plot`), saved beside the report and embedded in report.html.

The campaigns are the shipped files ``campaigns/paper004-fig2.toml`` (a baseline) and
``campaigns/paper004-fig3.toml`` (migrations); ``REPS`` overrides their repetitions for a quick
look.  ``FIG2=<baseline dir>`` / ``FIG3=<campaign dir>`` reuse finished (or resume interrupted)
ones instead of running them again.  The comparison itself is :mod:`analysis.paper`."""

from __future__ import annotations

import csv
import io
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis import paper as ap
from analysis.present import html as rh
from analysis.present import paper_plot as pp
from migrate.campaigns import campaign as cp
from migrate.campaigns import sweepdir as sd
from migrate.core.atomic import write_json, write_text
from migrate.core.errors import ConfigError
from migrate.core.rundir import BASELINE_CSV, META_JSON, REPORT_HTML, SUMMARY_JSON, read_meta, read_summary
from migrate.labs.where import where_for

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
FIG2 = REPO / "campaigns" / "paper004-fig2.toml"
FIG3 = REPO / "campaigns" / "paper004-fig3.toml"
COLUMNS = ("id", "figure", "statement", "paper", "measured", "comparison", "n", "why_absent", "conditions")


def _fig2(reps: int | None, results: Path, given: Path | None, testbed: Path | None = None) -> Path:
    """The Fig. 2 baseline directory: ``given`` (finished or resumed on the testbed it ran on),
    else a new run of the campaign (``testbed``: on a lab's hosts)."""
    from migrate.baseline.lab import resume_testbed
    from migrate.baseline.run import load_resume, run_baseline

    if given is not None:
        if not (given / META_JSON).is_file():
            raise ConfigError(f"FIG2={given} is not a baseline results directory (no meta.json)")
        meta = read_meta(given)
        if meta.get("kind") != "baseline":
            raise ConfigError(f"FIG2={given} is a {meta.get('kind')!r} directory, not a baseline")
        where = resume_testbed(given, meta, testbed)
        if meta.get("status") == "completed":
            return given
        stored, _ = load_resume(given)
        return run_baseline(stored, results, resume_dir=given, testbed=where)
    c = cp.load(FIG2, reps)
    return run_baseline(cp.baseline_spec(c), results, campaign=(c.record(), c.text), testbed=testbed)


def _fig3(reps: int | None, results: Path, given: Path | None, testbed: Path | None = None) -> Path:
    """The Fig. 3 campaign directory: ``given`` (resumed to its end on the testbed it ran on),
    else a new run of the campaign (``testbed``: on a lab's hosts)."""
    from migrate.campaigns import sweep as sw

    if given is not None:
        meta, _ = sd.open_sweep(given, "FIG3")
        if (meta.get("campaign") or {}).get("name") != "paper004-fig3":
            raise ConfigError(f"FIG3={given} is not a run of campaigns/paper004-fig3.toml")
        sw.run_sweep(given, testbed)
        return given
    c = cp.load(FIG3, reps)
    d = sw.new_campaign(c, results, testbed)
    sw.run_sweep(d, testbed)
    return d


@dataclass(frozen=True)
class Inputs:
    """What the report is made of: the baseline's summary.json and per-repetition rows (Fig. 2),
    the migration campaign's run records and metas (Fig. 3); None / empty where a part did not run."""

    fig2_dir: Path | None
    fig3_dir: Path | None
    summary: dict[str, Any] | None
    rows: list[dict[str, Any]] | None
    records: list[dict[str, Any]]
    metas: list[dict[str, Any]]


_INT_COLUMNS = ("ip", "frame_bytes", "routers", "rate_bps", "rep")
_TEXT_COLUMNS = ("hv", "nic", "load", "phase", "status")


def _row(raw: dict[str, str]) -> dict[str, Any]:
    """A baseline.csv row with the types :func:`analysis.baseline.points.analyse_point` gives it:
    an empty field is None (absent, never 0)."""
    out: dict[str, Any] = {}
    for k, v in raw.items():
        if v == "" or v is None:
            out[k] = None
        elif k in _TEXT_COLUMNS:
            out[k] = v
        elif k in _INT_COLUMNS:
            out[k] = int(v)
        elif k == "gen_limited":
            out[k] = v == "True"
        else:
            try:
                out[k] = float(v)
            except ValueError:
                out[k] = v
    return out


def baseline_rows(fig2_dir: Path) -> list[dict[str, Any]]:
    """The baseline's per-repetition rows: its baseline.csv, else recomputed from the raw points."""
    path = fig2_dir / BASELINE_CSV
    if path.is_file():
        with path.open(newline="") as f:
            return [_row(r) for r in csv.DictReader(f)]
    from analysis.baseline.summary import collect as collect_points

    return collect_points(fig2_dir)[0]


def load(fig2_dir: Path | None, fig3_dir: Path | None) -> Inputs:
    """The inputs from finished directories (either may be None)."""
    from migrate.campaigns.reporting import collect, load_source

    summary, rows = None, None
    if fig2_dir is not None:
        summary = read_summary(fig2_dir) if (fig2_dir / SUMMARY_JSON).is_file() else None
        rows = baseline_rows(fig2_dir)
    records: list[dict[str, Any]] = []
    metas: list[dict[str, Any]] = []
    if fig3_dir is not None:
        records, metas = collect(load_source(fig3_dir, what="FIG3"))
    return Inputs(fig2_dir, fig3_dir, summary, rows, records, metas)


def claims_of(inp: Inputs) -> tuple[list[ap.Claim], dict[str, Any]]:
    """The claims and the sources' description."""
    facts = ap.facts_of(inp.metas)
    if inp.summary is not None and facts["accel"] == "?":
        facts["accel"] = str(inp.summary.get("accel") or "?")
    claims = ap.fig2_claims(inp.summary, facts) + ap.fig3_claims(inp.records, facts)
    return claims, {"fig2": str(inp.fig2_dir) if inp.fig2_dir else None,
                    "fig3": str(inp.fig3_dir) if inp.fig3_dir else None, **facts}  # fmt: skip


def build(fig2_dir: Path | None, fig3_dir: Path | None) -> tuple[list[ap.Claim], dict[str, Any]]:
    """The claims from finished directories (either may be None: its claims are then absent)."""
    return claims_of(load(fig2_dir, fig3_dir))


def panels(inp: Inputs) -> dict[str, pp.PanelData]:
    """Every panel of the re-drawn Figs. 2 and 3, by claim id."""
    return {**pp.fig2_panels(inp.rows), **pp.fig3_panels(inp.records if inp.fig3_dir is not None else None)}


def figures(out_dir: Path, data: dict[str, pp.PanelData], claims: list[ap.Claim]) -> list[rh.Plot]:
    """Draw the figures of :data:`analysis.present.paper_plot.FIGURES` into ``out_dir`` (PNG, and
    SVG/PDF as ``VRMIG_PLOT_FORMATS`` says) and return them for the report."""
    conditions = {c.id: c.conditions for c in claims}
    out = []
    for spec in pp.FIGURES:
        png = pp.save(pp.render(spec, data), out_dir / f"{spec.name}.png")
        out.append(rh.Plot(spec.title, png, f"file {spec.name}.png. " + pp.caption(spec, data, conditions)))
    return out


def csv_text(claims: list[ap.Claim]) -> str:
    """paper.csv: one row per claim."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(COLUMNS), lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    for c in claims:
        w.writerow({k: "" if v is None else v for k, v in c.to_dict().items()})
    return buf.getvalue()


def markdown(claims: list[ap.Claim], sources: dict[str, Any], command: str) -> str:
    """paper.md: the side-by-side table, the sources and the command."""
    where = sources.get("testbed", "an unrecorded testbed")
    lines = [
        "# Paper 004 side by side",
        "",
        f"Command: `{command}`. Baseline (Fig. 2): `{sources['fig2']}`. Migrations (Fig. 3): `{sources['fig3']}`.",
        f"QEMU {sources['qemu']}, accelerator {sources['accel']}, on {where}.",
        "",
        "| id | figure | the paper states | paper | measured here | comparison | conditions that differ |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in claims:
        measured = c.measured if c.measured is not None else f"— ({c.why_absent})"
        lines.append(f"| {c.id} | {c.figure} | {c.statement} | {c.paper} | {measured} | {c.comparison or '—'} | "
                     f"{c.conditions} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def write(out_dir: Path, claims: list[ap.Claim], sources: dict[str, Any], command: str,
          data: dict[str, pp.PanelData] | None = None) -> None:  # fmt: skip
    """paper.md, paper.csv, claims.json, the re-drawn figures (``data``: their panels; None: no
    figures) and report.html in ``out_dir``.  The tables are written first: a figure that fails
    to draw is logged and left out of the report, with a note saying so."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text(out_dir / "paper.md", markdown(claims, sources, command))
    write_text(out_dir / "paper.csv", csv_text(claims))
    write_json(out_dir / "claims.json", {"sources": sources, "command": command,
                                         "claims": [c.to_dict() for c in claims]})  # fmt: skip
    plots: list[rh.Plot] = []
    notes: list[str] = []
    if data is not None:
        try:
            plots = figures(out_dir, data, claims)
        except Exception as err:  # a figure must never lose the tables
            log.exception("drawing the paper's figures failed: %s", err)
            notes.append(f"The figures could not be drawn: {err}")
    rows = [[c.id, c.figure, c.statement, c.paper, c.measured if c.measured is not None else f"— ({c.why_absent})",
             c.comparison or "—", c.conditions] for c in claims]  # fmt: skip
    table = rh.Table("Paper 004: stated vs measured",
                     ["id", "figure", "the paper states", "paper", "measured here", "comparison", "conditions"],
                     rows, note="Magnitudes as measured/paper ratios; (in)dependence on the rate by Spearman's rank "
                     f"correlation at alpha={ap.ALPHA}. Absent measurements say why.")  # fmt: skip
    report = rh.Report(title="vrmig: paper 004 side by side", subtitle=f"`{command}`", plots=plots, tables=[table],
                       metadata=[("sources", sources)], generated_utc=sd.now_utc(),
                       extra_notes=tuple(notes))  # fmt: skip
    write_text(out_dir / REPORT_HTML, rh.render(report))


def format_claims(claims: list[ap.Claim]) -> str:
    """The printed table: one line per claim."""
    out = []
    for c in claims:
        got = c.measured if c.measured is not None else f"absent: {c.why_absent}"
        out.append(f"{c.id} {c.figure}: {c.statement}\n    paper: {c.paper}\n    here:  {got}"
                   + (f"\n    {c.comparison}" if c.comparison else ""))  # fmt: skip
    return "\n".join(out)


def run_paper(results: Path, reps: int | None, fig2: Path | None, fig3: Path | None, command: str,
              only: str = "fig2,fig3", testbed: Path | None = None) -> tuple[Path, list[ap.Claim]]:  # fmt: skip
    """Run (or reuse) the two campaigns and write the side-by-side report; returns its directory
    (``testbed``: both campaigns on a lab's hosts, as the paper's four physical nodes ran them)."""
    from migrate.campaigns.sweep import prepare_results_root

    parts = {p.strip() for p in only.split(",") if p.strip()}
    if not parts or parts - {"fig2", "fig3"}:
        raise ConfigError(f"PARTS={only!r}: use fig2, fig3 or fig2,fig3")
    cp.load(FIG2, reps)  # both files valid before anything runs
    cp.load(FIG3, reps)
    prepare_results_root(results)
    d2 = _fig2(reps, results, fig2, testbed) if "fig2" in parts or fig2 is not None else None
    d3 = _fig3(reps, results, fig3, testbed) if "fig3" in parts or fig3 is not None else None
    inp = load(d2, d3)
    claims, sources = claims_of(inp)
    sources["testbed"] = where_for(testbed).description()
    out = results / f"{sd.stamp_utc()}-paper004"
    write(out, claims, sources, command, panels(inp))
    return out, claims
