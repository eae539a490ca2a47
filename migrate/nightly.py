"""``vrmig nightly`` (= ``make nightly``) and ``vrmig nightly-accept``.

A night runs the fixed matrix of a checked-in TOML file (migrate/nightly.toml) as a sweep of
kind ``nightly`` under ``<RESULTS>/nightly/<stamp>-night/`` within a time budget, stores every
run in the SQLite history, compares each metric of each point with the baseline night
(analysis.regression: exact Mann–Whitney U + minimum effect; Fisher for failure rates), writes
``junit.xml`` and ``report.html`` (regressions marked) and exits 1 on a regression.
``nightly-accept`` promotes the latest finished night to the baseline."""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis import report_html as rh
from analysis.aggregate import DONE_STATUSES, METRIC_BY_NAME
from analysis.junit import junit_xml
from analysis.regression import FAILURE_RATE, Rule, Verdict, check_failures, check_metric, detectable, holm
from analysis.stats import min_p_value
from migrate import sweep as sw
from migrate import sweepdir as sd
from migrate.atomic import write_text
from migrate.errors import ConfigError
from migrate.history import History, history_fields, scenario_column
from migrate.meta import REPO
from migrate.scenario import Scenario
from migrate.units import format_rate, parse_rate_bps

log = logging.getLogger(__name__)

DEFAULT_MATRIX = REPO / "migrate" / "nightly.toml"
NIGHTLY_SUBDIR = "nightly"
HISTORY_NAME = "history.sqlite"
JUNIT_NAME = "junit.xml"
SUITE = "vrmig.nightly"
EXIT_REGRESSION = 1
_SECTIONS = {"nightly", "defaults", "point", "metrics"}
_NIGHTLY_KEYS = {"reps", "budget_s", "expected_run_s", "alpha", "seed"}
_RULE_KEYS = {"worse", "min_rel", "min_abs"}


@dataclass(frozen=True)
class Matrix:
    """The parsed nightly matrix."""

    path: Path
    sha256: str
    text: str
    reps: int
    budget_s: float
    expected_run_s: float
    alpha: float
    points: tuple[sw.PlanPoint, ...]
    rules: tuple[Rule, ...]

    @property
    def n_runs(self) -> int:
        """Runs per night."""
        return len(self.points) * self.reps

    @property
    def n_checks(self) -> int:
        """Checks per night (points × metrics)."""
        return len(self.points) * len(self.rules)


def _bad(path: Path, msg: str) -> ConfigError:
    return ConfigError(f"MATRIX={path}: {msg}")


def _number(path: Path, where: str, v: Any, positive: bool = True) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or (positive and v <= 0) or v < 0:
        raise _bad(path, f"{where}={v!r} must be a {'positive' if positive else 'non-negative'} number")
    return float(v)


def _point(path: Path, defaults: dict[str, Any], raw: Any, i: int) -> sw.PlanPoint:
    if not isinstance(raw, dict):
        raise _bad(path, f"point {i + 1} is not a table")
    spec = {**defaults, **raw}
    label = spec.pop("label", None)
    if "rate" in spec:
        spec["rate_bps"] = parse_rate_bps(str(spec.pop("rate")), f"point {i + 1} rate")
    unknown = set(spec) - set(Scenario.field_names())
    if unknown:
        raise _bad(path, f"point {i + 1}: unknown parameter(s) {', '.join(sorted(unknown))}")
    try:
        scenario = Scenario(**spec)
    except ConfigError as err:
        raise _bad(path, f"point {i + 1}: {err}") from None
    if label is None:
        label = f"{scenario.mode}-{format_rate(scenario.rate_bps)}-{scenario.frame_bytes}"
    return sw.PlanPoint(str(label), scenario)


def _rules(path: Path, raw: Any) -> tuple[Rule, ...]:
    if not isinstance(raw, dict) or not raw:
        raise _bad(path, "[metrics] must list at least one metric")
    out = []
    for name, r in raw.items():
        if name != FAILURE_RATE and name not in METRIC_BY_NAME:
            raise _bad(
                path, f"[metrics] {name!r} is not a metric: choose from {', '.join([*METRIC_BY_NAME, FAILURE_RATE])}"
            )
        if not isinstance(r, dict) or set(r) - _RULE_KEYS:
            raise _bad(path, f"[metrics] {name}: use keys {', '.join(sorted(_RULE_KEYS))}")
        try:
            out.append(Rule(name, r.get("worse", "higher"), float(r.get("min_rel", 0.0)), float(r.get("min_abs", 0.0))))
        except (TypeError, ValueError) as err:
            raise _bad(path, f"[metrics] {name}: {err}") from None
    return tuple(out)


def load_matrix(path: Path) -> Matrix:
    """Parse and validate the matrix file (every point is a valid Scenario; with REPS runs on each
    side, the first step of Holm's procedure, alpha / number of checks, is reachable)."""
    path = Path(path)
    try:
        text = path.read_text()
        doc = tomllib.loads(text)
    except OSError as err:
        raise _bad(path, f"cannot read it ({err.strerror})") from None
    except tomllib.TOMLDecodeError as err:
        raise _bad(path, f"not valid TOML ({err})") from None
    if set(doc) - _SECTIONS:
        raise _bad(path, f"unknown section(s) {', '.join(sorted(set(doc) - _SECTIONS))}")
    night = doc.get("nightly", {})
    if set(night) - _NIGHTLY_KEYS:
        raise _bad(path, f"[nightly] unknown key(s) {', '.join(sorted(set(night) - _NIGHTLY_KEYS))}")
    reps = night.get("reps")
    if not isinstance(reps, int) or isinstance(reps, bool) or not 1 <= reps <= sw.MAX_REPS:
        raise _bad(path, f"[nightly] reps={reps!r} must be a whole number from 1 to {sw.MAX_REPS}")
    alpha = _number(path, "alpha", night.get("alpha", 0.05))
    if alpha >= 1:
        raise _bad(path, f"[nightly] alpha={alpha:g} must be below 1")
    budget = _number(path, "budget_s", night.get("budget_s"))
    expected = _number(path, "expected_run_s", night.get("expected_run_s", 45))
    raw_points = doc.get("point")
    if not isinstance(raw_points, list) or not raw_points:
        raise _bad(path, "no [[point]] entries")
    points = tuple(_point(path, dict(doc.get("defaults", {})), p, i) for i, p in enumerate(raw_points))
    if len({p.label for p in points}) != len(points):
        raise _bad(path, "two points have the same label")
    rules = _rules(path, doc.get("metrics"))
    first_level = alpha / (len(points) * len(rules))
    if not detectable(reps, reps, first_level):
        raise _bad(
            path,
            f"reps={reps} is too few: {len(points) * len(rules)} checks at alpha={alpha:g} need p <= "
            f"{first_level:.3g}, but {reps} vs {reps} runs cannot go below p = {min_p_value(reps, reps):.3g}; "
            "add reps or drop checks",
        )
    if len(points) * reps * expected > budget:
        raise _bad(path, f"{len(points) * reps} runs × expected_run_s={expected:g} exceed budget_s={budget:g}")
    sha = hashlib.sha256(text.encode()).hexdigest()
    return Matrix(path, sha, text, reps, budget, expected, alpha, points, rules)


def fingerprint(scenario: Scenario) -> str:
    """Identifies a point's parameters: a baseline measured with other parameters is not comparable."""
    return hashlib.sha256(json.dumps(scenario.to_dict(), sort_keys=True).encode()).hexdigest()[:16]


def _run_row(night_id: str, fps: dict[str, str], item: dict[str, Any], run_dir: Path, rec: dict[str, Any]) -> dict:
    from analysis.aggregate import run_record
    from analysis.run import analyse_run

    summary = analyse_run(run_dir).to_dict()
    meta = sd.read_json(run_dir / "meta.json", f"run {item['run_id']}")
    flat = run_record(summary, meta)
    hv = meta.get("hypervisor") or {}
    image = hv.get("guest_image") or {}
    row: dict[str, Any] = {
        "night_id": night_id, "run_id": item["run_id"], "point": item["point"], "rep": item["rep"],
        "point_fingerprint": fps[item["point"]], "run_dir": str(run_dir.resolve()), "status": rec["status"],
        "failure": rec.get("failure"), "migration_attempted": int(bool(flat["migration_attempted"])),
        "started_utc": rec.get("started_utc"), "finished_utc": rec.get("finished_utc"),
        "elapsed_s": rec.get("elapsed_s"), "accel_used": flat.get("accel"), "qemu": hv.get("qemu"),
        "router_version": (image.get("router") or {}).get("version"),
        "guest_kernel": (image.get("kernel_package") or {}).get("release"),
        "host_kernel": (meta.get("host") or {}).get("kernel"), "hostname": (meta.get("host") or {}).get("hostname"),
        "git_commit": meta.get("git_commit"),
    }  # fmt: skip
    fields = Scenario.field_names()
    row.update({scenario_column(k): v for k, v in (meta.get("scenario") or {}).items() if k in fields})
    row.update(history_fields(flat))  # metrics (NULL when absent or a bound), bounds, failure class, qualifiers
    row["summary_json"] = json.dumps(summary)
    return row


def judge(hist: History, night_id: str, matrix: Matrix, baseline: str | None) -> list[tuple[str, Verdict]]:
    """Every check of every point of tonight against the baseline night, decided together with
    Holm's procedure at the matrix's alpha (the false-alarm rate of a whole night)."""
    tonight = hist.runs(night_id)
    base = hist.runs(baseline) if baseline else []
    out: list[tuple[str, Verdict]] = []
    for p in matrix.points:
        fp = fingerprint(p.scenario)
        cand = [r for r in tonight if r["point"] == p.label]
        ref = [r for r in base if r["point"] == p.label and r["point_fingerprint"] == fp
               and r["accel_used"] in {c["accel_used"] for c in cand}]  # fmt: skip
        skip = None
        if baseline is None:
            skip = "no baseline yet: run `make nightly-accept` to promote a night"
        elif not ref:
            other = any(r["point"] == p.label for r in base)
            skip = (
                f"baseline {baseline} measured this point with other parameters: accept a night run with this matrix"
                if other
                else f"baseline {baseline} has no runs of this point"
            )
        for rule in matrix.rules:
            if skip:
                out.append((p.label, Verdict(rule.metric, "skipped", skip, n_cand=len(cand))))
            elif rule.metric == FAILURE_RATE:
                done_c = [r for r in cand if r["status"] in DONE_STATUSES]
                done_b = [r for r in ref if r["status"] in DONE_STATUSES]
                k_c = sum(r["status"] == "failed" for r in done_c)
                k_b = sum(r["status"] == "failed" for r in done_b)
                out.append((p.label, check_failures(rule, k_b, len(done_b), k_c, len(done_c), matrix.alpha)))
            else:
                vals_c = [r[rule.metric] for r in cand if r["status"] == "completed"]
                vals_b = [r[rule.metric] for r in ref if r["status"] == "completed"]
                out.append((p.label, check_metric(rule, vals_b, vals_c, matrix.alpha)))
    decided = holm([v for _, v in out], matrix.alpha)
    return [(pt, v) for (pt, _), v in zip(out, decided, strict=True)]


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.4g}"


def checks_table(checks: list[tuple[str, Verdict]], baseline: str | None) -> rh.Table:
    """The regression table of the report (regressions shaded red)."""
    header = [
        "point",
        "metric",
        "verdict",
        "baseline median",
        "tonight median",
        "worse by",
        "p",
        "n base",
        "n tonight",
        "why",
    ]
    rows = [
        [pt, v.metric, v.status, _fmt(v.median_base), _fmt(v.median_cand), _fmt(v.worse_by), _fmt(v.p_value),
         v.n_base, v.n_cand, v.reason]
        for pt, v in checks
    ]  # fmt: skip
    classes = [v.status for _, v in checks]
    return rh.Table(f"Regression checks against baseline {baseline or '(none)'}", header, rows, classes, id="checks")


def _rules_md(matrix: Matrix) -> str:
    lines = [
        f"Matrix `{matrix.path}` (sha256 {matrix.sha256[:12]}…): {len(matrix.points)} points × {matrix.reps} "
        f"repetitions, budget {matrix.budget_s:g} s. A check fails the night when tonight is worse than the baseline "
        "night by the one-sided exact Mann–Whitney U test (rank-sum permutation distribution, ties exact; "
        "Fisher's exact test for the failure rate), significant after Holm's step-down procedure over all "
        f"checks of the night at family-wise alpha {matrix.alpha:g} (the chance that pure noise fails a night), "
        "**and** the medians differ by at least the minimum effect (absolute and relative). Rules:",
        "",
    ]
    for r in matrix.rules:
        lines.append(f"- `{r.metric}`: {r.worse} is worse, min_abs {r.min_abs:g}, min_rel {r.min_rel:.0%}")
    return "\n".join(lines)


@dataclass
class NightResult:
    """Outcome of one night."""

    night_dir: Path
    night_id: str
    status: str
    baseline: str | None
    checks: list[tuple[str, Verdict]]
    n_runs: int
    n_failed: int
    elapsed_s: float
    budget_stop: dict[str, Any] | None

    @property
    def exit_code(self) -> int:
        """1 on a regression, else 0."""
        return EXIT_REGRESSION if self.status == "regression" else 0


def run_nightly(matrix_path: Path, results_root: Path, history_path: Path | None) -> NightResult:
    """Run one night end to end (see the module docstring)."""
    matrix = load_matrix(matrix_path)
    nightly_root = results_root / NIGHTLY_SUBDIR
    history_path = history_path or nightly_root / HISTORY_NAME
    vers = sw.versions(matrix.points[0].scenario)
    sw.prepare_results_root(results_root)
    sw.prepare_results_root(nightly_root)
    with History(history_path) as hist:
        plan = sw.Plan("nightly", matrix.points, matrix.reps, sw.new_seed(), _grid(matrix, history_path))
        night_dir = sw.create_sweep_dir(nightly_root, f"{sd.stamp_utc()}-night", sw.plan_meta(plan, vers, sys.argv))
        night_id = night_dir.name
        baseline = hist.baseline()
        est = hist.mean_elapsed_s() or matrix.expected_run_s
        if est * matrix.n_runs > matrix.budget_s:
            log.warning(
                "%d runs × %.0f s (history mean) may exceed the %g s budget", matrix.n_runs, est, matrix.budget_s
            )
        night_row = {
            "night_id": night_id, "night_dir": str(night_dir.resolve()), "started_utc": sd.now_utc(),
            "status": "running", "baseline_night": baseline, "matrix_path": str(matrix.path),
            "matrix_sha256": matrix.sha256, "git_commit": vers.get("git_commit"),
            "qemu": vers["hypervisor"].get("qemu"), "accel": vers["hypervisor"].get("accel"),
            "host_kernel": vers["host"].get("kernel"), "hostname": vers["host"].get("hostname"), "versions_json": vers,
        }  # fmt: skip
        hist.upsert("nights", night_row)
        fps = {p.label: fingerprint(p.scenario) for p in matrix.points}
        t0 = time.monotonic()
        meta, state = sd.open_sweep(night_dir, "nightly")

        def on_run(item: dict[str, Any], run_dir: Path, rec: dict[str, Any]) -> None:
            hist.upsert("runs", _run_row(night_id, fps, item, run_dir, rec))

        try:
            with sw.locked(night_dir):
                sw.start_session(night_dir, state, vers)
                state = sw.execute(night_dir, meta, state, deadline_mono=t0 + matrix.budget_s, on_run=on_run)
        except BaseException:
            hist.upsert("nights", {**night_row, "status": "interrupted", "finished_utc": sd.now_utc()})
            raise
        checks = judge(hist, night_id, matrix, baseline)
        hist.add_checks(night_id, baseline, checks)
        n_reg = sum(v.regression for _, v in checks)
        status = "regression" if n_reg else ("no-baseline" if baseline is None else "pass")
        n_failed = sum(1 for r in state["runs"].values() if r["status"] == "failed")
        elapsed = time.monotonic() - t0
        hist.upsert(
            "nights",
            {**night_row, "status": status, "finished_utc": sd.now_utc(), "n_runs": len(state["runs"]),
             "n_failed": n_failed, "n_regressions": n_reg},
        )  # fmt: skip
    result = NightResult(night_dir, night_id, status, baseline, checks, len(state["runs"]), n_failed, elapsed,
                         state.get("budget_stop"))  # fmt: skip
    _write_night_outputs(result, matrix, vers)
    return result


def _grid(matrix: Matrix, history_path: Path) -> dict[str, Any]:
    return {
        "matrix": {"path": str(matrix.path), "sha256": matrix.sha256, "text": matrix.text},
        "budget_s": matrix.budget_s,
        "history": str(Path(history_path).resolve()),
    }


def _write_night_outputs(res: NightResult, matrix: Matrix, vers: dict[str, Any]) -> None:
    from migrate.reporting import build_outputs, load_source

    props = {
        "night": res.night_id,
        "baseline": res.baseline or "",
        "matrix_sha256": matrix.sha256,
        "qemu": str(vers["hypervisor"].get("qemu")),
        "accel": str(vers["hypervisor"].get("accel")),
        "git_commit": str(vers.get("git_commit")),
        "host_kernel": str(vers["host"].get("kernel")),
    }
    xml = junit_xml(SUITE, res.checks, props, sd.now_utc(), str(vers["host"].get("hostname")), res.elapsed_s)
    write_text(res.night_dir / JUNIT_NAME, xml)
    n_reg = sum(v.regression for _, v in res.checks)
    if res.status == "regression":
        banner = ("bad", f"REGRESSION: {n_reg} check(s) failed against baseline {res.baseline}")
    elif res.status == "no-baseline":
        banner = ("info", "No baseline yet: nothing compared. `make nightly-accept` promotes this night.")
    else:
        banner = ("good", f"No regression against baseline {res.baseline}")
    if res.budget_stop:
        banner = (
            banner[0],
            banner[1] + f" — time budget reached, {res.budget_stop['runs_not_started']} run(s) not started",
        )
    src = load_source(res.night_dir, "", "nightly")
    build_outputs(
        res.night_dir,
        [src],
        f"vrmig nightly {res.night_id}",
        lead_tables=[checks_table(res.checks, res.baseline)],
        banner=banner,
        extra_definitions=[("Regression checks", _rules_md(matrix))],
    )


def format_night(res: NightResult) -> str:
    """What ``make nightly`` prints (the caller prints the night directory last)."""
    n_skip = sum(v.status == "skipped" for _, v in res.checks)
    n_reg = sum(v.regression for _, v in res.checks)
    m, s = divmod(int(res.elapsed_s), 60)
    lines = [
        f"nightly {res.night_id}: {res.n_runs} runs ({res.n_failed} failed) in {m}m{s:02d}s; "
        f"baseline {res.baseline or '(none)'}"
    ]
    if res.budget_stop:
        lines.append(f"  time budget reached: {res.budget_stop['runs_not_started']} run(s) not started")
    for point, v in res.checks:
        mark = {"regression": "FAIL", "skipped": "skip", "pass": "ok"}[v.status]
        lines.append(f"  {mark:<4} {point:<22} {v.metric:<24} {v.reason}")
    lines.append(
        f"result: {res.status.upper()} — {n_reg} regression(s), {len(res.checks) - n_reg - n_skip} passed, "
        f"{n_skip} skipped; junit {res.night_dir / JUNIT_NAME}; report {res.night_dir / 'report.html'}"
    )
    return "\n".join(lines)


def accept(results_root: Path, history_path: Path | None, night: str | None) -> dict[str, Any]:
    """Promote ``night`` (an id or a night directory; default: the latest finished night) to baseline."""
    history_path = history_path or results_root / NIGHTLY_SUBDIR / HISTORY_NAME
    if not Path(history_path).is_file():
        raise ConfigError(f"HISTORY={history_path} does not exist: run `make nightly` first")
    with History(history_path) as hist:
        if night:
            row = hist.night(Path(night).name)
            if row is None:
                raise ConfigError(f"NIGHT={night} is not a night in {history_path}")
        else:
            row = hist.latest_night()
            if row is None:
                raise ConfigError(f"{history_path} has no finished night to accept")
        if row["status"] not in ("pass", "regression", "no-baseline"):
            raise ConfigError(f"night {row['night_id']} did not finish (status {row['status']}): not accepted")
        runs = hist.runs(row["night_id"])
        if not any(r["status"] == "completed" for r in runs):
            raise ConfigError(f"night {row['night_id']} has no completed run: not accepted")
        row["previous_baseline"] = hist.baseline()
        hist.promote(row["night_id"], sd.now_utc())
        row["n_completed"] = sum(r["status"] == "completed" for r in runs)
        return row
