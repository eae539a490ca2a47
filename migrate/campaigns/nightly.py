"""``vrmig nightly`` (= ``make nightly``) and ``vrmig nightly-accept``.

A night runs the fixed matrix of a checked-in TOML file (migrate/campaigns/nightly.toml) as a sweep of
kind ``nightly`` under ``<RESULTS>/nightly/<stamp>-night/`` within a time budget, stores every
run in the SQLite history and judges each point against the pooled runs of the accepted nights
(analysis.stats.regression.decide_night: Mann–Whitney U with Holm and minimum effects per metric, an
exact binomial tail for migration failures, setup failures as errors), writes ``junit.xml`` and
``report.html`` (regressions marked) and exits 1 on a regression.  ``nightly-accept`` adds a
finished night to the accepted history.  Runs of different accelerators, or of different testbeds
(``TESTBED=``: the embedded one or a lab inventory, see :func:`testbed_id`), are never compared."""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import time
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from analysis.present import html as rh
from analysis.present.junit import junit_xml
from analysis.stats.aggregate import METRIC_BY_NAME
from analysis.stats.regression import FailureRule, PointRuns, Rule, Verdict, decide_night, detectable, min_p_value
from migrate.campaigns import ab as ab_mod
from migrate.campaigns import sweep as sw
from migrate.campaigns import sweepdir as sd
from migrate.campaigns.ab import AbSpec
from migrate.campaigns.history import History, history_fields, scenario_column
from migrate.core.atomic import write_text
from migrate.core.errors import ConfigError, VrmigError
from migrate.core.rundir import META_JSON
from migrate.core.units import format_rate
from migrate.labs.where import EMBEDDED_ID, Where, where_for
from migrate.model.scenario import Scenario

log = logging.getLogger(__name__)

DEFAULT_MATRIX = Path(__file__).resolve().parent / "nightly.toml"
NIGHTLY_SUBDIR = "nightly"
HISTORY_NAME = "history.sqlite"
JUNIT_NAME = "junit.xml"
SUITE = "vrmig.nightly"
EXIT_REGRESSION = 1
#: the matrix loader requires every metric check to be decidable once this many nights are accepted
DECIDABLE_AFTER_NIGHTS = 2
_SECTIONS = {"nightly", "defaults", "point", "metrics", "failures", "ab"}
_AB_KEYS = {"point", "reps", "alpha", "budget_s", "metrics"}
_NIGHTLY_KEYS = {"reps", "budget_s", "expected_run_s", "alpha", "seed", "history_nights"}
_RULE_KEYS = {"worse", "min_rel", "min_abs"}
_OVERRIDE_KEYS = {"min_rel", "min_abs"}
_FAILURE_KEYS = {"min_failures", "alpha", "min_rate"}


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
    failures: FailureRule
    history_nights: int
    point_rules: tuple[tuple[str, tuple[Rule, ...]], ...]
    ab: AbSpec | None = None  # the in-night A/B (migrate.campaigns.ab); None: the matrix has no [ab]

    @property
    def n_runs(self) -> int:
        """Runs per night."""
        return len(self.points) * self.reps

    @property
    def n_checks(self) -> int:
        """Metric checks per night (points × metrics), decided together by Holm."""
        return len(self.points) * len(self.rules)

    def rules_for(self, label: str) -> tuple[Rule, ...]:
        """The rules of one point ([metrics] with the point's own minimum effects)."""
        return dict(self.point_rules).get(label, self.rules)

    @property
    def false_alarm_bound(self) -> float:
        """Nominal chance that an unchanged night fails: alpha (metric checks, family-wise) plus
        each point's failure level, plus the A/B's level."""
        return self.alpha + len(self.points) * self.failures.alpha + (self.ab.alpha if self.ab else 0.0)


def _bad(path: Path, msg: str) -> ConfigError:
    return ConfigError(f"MATRIX={path}: {msg}")


def _number(path: Path, where: str, v: Any, positive: bool = True) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or (positive and v <= 0) or v < 0:
        raise _bad(path, f"{where}={v!r} must be a {'positive' if positive else 'non-negative'} number")
    return float(v)


def _level(path: Path, where: str, v: Any) -> float:
    """A test's level: a positive number below 1."""
    alpha = _number(path, where, v)
    if alpha >= 1:
        raise _bad(path, f"{where}={alpha:g} must be below 1")
    return alpha


def _whole(path: Path, where: str, v: Any, lo: int, hi: int) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise _bad(path, f"{where}={v!r} must be a whole number from {lo} to {hi}")
    return v


def _point(
    path: Path, defaults: dict[str, Any], raw: Any, i: int
) -> tuple[sw.PlanPoint, Any, tuple[tuple[str, str], ...]]:
    """One ``[[point]]``: Make variables over [defaults] (as in a campaign file), parsed by
    ``vrmig run``'s own parser (migrate.campaigns.campaign); ``label`` and ``metrics`` are the
    matrix's own keys.  Returns the point, its metric overrides and its variables as make passes
    them."""
    from migrate.campaigns import campaign as cp

    if not isinstance(raw, dict):
        raise _bad(path, f"point {i + 1} is not a table")
    spec = {**defaults, **raw}
    label = spec.pop("label", None)
    overrides = spec.pop("metrics", None)
    known = cp.variables("migrate")
    try:
        for var, value in spec.items():
            cp.check_known(var, known, f"point {i + 1}", "migrate")
            cp.variable_text(value, var, "migrate")
        texts = {k: cp.variable_text(v, k, "migrate") for k, v in spec.items()}
        scenario, _ = cp.scenario_of("migrate", texts)
    except ConfigError as err:
        raise _bad(path, f"point {i + 1}: {err}") from None
    assert scenario is not None
    if label is None:
        label = f"{scenario.mode}-{format_rate(scenario.rate_bps)}-{scenario.frame_bytes}"
    return sw.PlanPoint(str(label), scenario), overrides, tuple(texts.items())


def _rule(path: Path, where: str, name: str, r: Any, keys: set[str], base: Rule | None = None) -> Rule:
    if not isinstance(r, dict) or set(r) - keys:
        raise _bad(path, f"{where} {name}: use keys {', '.join(sorted(keys))}")
    base = base or Rule(name)
    try:
        return Rule(
            name,
            r.get("worse", base.worse),
            _number(path, f"{where} {name} min_rel", r.get("min_rel", base.min_rel), positive=False),
            _number(path, f"{where} {name} min_abs", r.get("min_abs", base.min_abs), positive=False),
        )
    except ValueError as err:
        raise _bad(path, f"{where} {name}: {err}") from None


def _rules(path: Path, raw: Any, where: str = "[metrics]") -> tuple[Rule, ...]:
    if not isinstance(raw, dict) or not raw:
        raise _bad(path, f"{where} must list at least one metric")
    for name in raw:
        if name == "failure_rate":
            raise _bad(path, f"{where} failure_rate: migration failures are judged by [failures]; remove it here")
        if name not in METRIC_BY_NAME:
            raise _bad(path, f"{where} {name!r} is not a metric: choose from {', '.join(METRIC_BY_NAME)}")
    return tuple(_rule(path, where, name, r, _RULE_KEYS) for name, r in raw.items())


def _overrides(path: Path, label: str, raw: Any, rules: tuple[Rule, ...]) -> tuple[Rule, ...]:
    """The point's rules: [metrics] with this point's ``metrics = { <metric> = { min_rel, min_abs } }``."""
    where = f"point {label} metrics"
    if not isinstance(raw, dict):
        raise _bad(path, f"{where} must be a table of metric = {{ min_rel = ..., min_abs = ... }}")
    by_name = {r.metric: r for r in rules}
    for name in raw:
        if name not in by_name:
            raise _bad(path, f"{where}: {name!r} is not in [metrics] ({', '.join(by_name)})")
    return tuple(_rule(path, where, r.metric, raw[r.metric], _OVERRIDE_KEYS, r) if r.metric in raw else r
                 for r in rules)  # fmt: skip


def _ab(path: Path, raw: Any, variables: dict[str, tuple[tuple[str, str], ...]]) -> AbSpec:
    """``[ab]``: the in-night A/B of one point (migrate.campaigns.ab)."""
    if not isinstance(raw, dict) or set(raw) - _AB_KEYS or "point" not in raw:
        raise _bad(path, f"[ab]: use keys {', '.join(sorted(_AB_KEYS))} (point is required)")
    if raw["point"] not in variables:
        raise _bad(path, f"[ab] point={raw['point']!r} is not a point label: choose from {', '.join(variables)}")
    reps = _whole(path, "[ab] reps", raw.get("reps"), 2, sw.MAX_REPS)
    alpha = _level(path, "[ab] alpha", raw.get("alpha", 0.01))
    budget = _number(path, "[ab] budget_s", raw.get("budget_s"))
    rules = _rules(path, raw.get("metrics"), "[ab] metrics")
    if not detectable(reps, reps, alpha):
        raise _bad(path, f"[ab] reps={reps} per arm cannot reach p <= alpha={alpha:g} (smallest p "
                         f"{min_p_value(reps, reps):.3g}): add reps")  # fmt: skip
    return AbSpec(str(raw["point"]), variables[raw["point"]], reps, alpha, budget, rules)


def _failure_rule(path: Path, raw: Any) -> FailureRule:
    if not isinstance(raw, dict) or set(raw) - _FAILURE_KEYS:
        raise _bad(path, f"[failures]: use keys {', '.join(sorted(_FAILURE_KEYS))}")
    d = FailureRule()
    alpha = _number(path, "[failures] alpha", raw.get("alpha", d.alpha))
    rate = _number(path, "[failures] min_rate", raw.get("min_rate", d.min_rate), positive=False)
    if alpha >= 1 or rate >= 1:
        raise _bad(path, f"[failures] alpha={alpha:g} and min_rate={rate:g} must be below 1")
    return FailureRule(_whole(path, "[failures] min_failures", raw.get("min_failures", d.min_failures), 1, 1000),
                       alpha, rate)  # fmt: skip


def load_matrix(path: Path) -> Matrix:
    """Parse and validate the matrix file (every point is a valid Scenario; once
    DECIDABLE_AFTER_NIGHTS nights are accepted, the first step of Holm's procedure, alpha / number
    of metric checks, is reachable by REPS runs against the accepted runs)."""
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
    reps = _whole(path, "[nightly] reps", night.get("reps"), 1, sw.MAX_REPS)
    alpha = _level(path, "[nightly] alpha", night.get("alpha", 0.03))
    budget = _number(path, "budget_s", night.get("budget_s"))
    expected = _number(path, "expected_run_s", night.get("expected_run_s", 45))
    history_nights = _whole(path, "[nightly] history_nights", night.get("history_nights", 20), 1, 10000)
    raw_points = doc.get("point")
    if not isinstance(raw_points, list) or not raw_points:
        raise _bad(path, "no [[point]] entries")
    parsed = [_point(path, dict(doc.get("defaults", {})), p, i) for i, p in enumerate(raw_points)]
    points = tuple(p for p, _, _ in parsed)
    if len({p.label for p in points}) != len(points):
        raise _bad(path, "two points have the same label")
    rules = _rules(path, doc.get("metrics"))
    point_rules = tuple((p.label, _overrides(path, p.label, o, rules)) for p, o, _ in parsed if o is not None)
    ab = _ab(path, doc["ab"], {p.label: v for p, _, v in parsed}) if "ab" in doc else None
    failures = _failure_rule(path, doc.get("failures", {}))
    n_checks = len(points) * len(rules)
    first_level = alpha / n_checks
    n_acc = DECIDABLE_AFTER_NIGHTS * reps
    if not detectable(n_acc, reps, first_level):
        raise _bad(
            path,
            f"reps={reps} is too few: {n_checks} metric checks at alpha={alpha:g} need p <= {first_level:.3g}, but "
            f"{reps} runs against {DECIDABLE_AFTER_NIGHTS} accepted nights ({n_acc} runs) cannot go below p = "
            f"{min_p_value(reps, n_acc):.3g}; add reps or drop checks",
        )
    if len(points) * reps * expected > budget:
        raise _bad(path, f"{len(points) * reps} runs × expected_run_s={expected:g} exceed budget_s={budget:g}")
    sha = hashlib.sha256(text.encode()).hexdigest()
    return Matrix(path, sha, text, reps, budget, expected, alpha, points, rules, failures, history_nights,
                  point_rules, ab)  # fmt: skip


EMBEDDED = EMBEDDED_ID


def row_testbed(row: dict[str, Any]) -> str:
    """The testbed of a history row (rows written before the column existed ran embedded)."""
    return row.get("testbed") or EMBEDDED


def testbed_id(testbed: Path | None) -> str:
    """Where a night's runs ran, as the history records it: ``embedded``, or ``lab:`` and the first
    16 hex digits of the lab inventory's SHA-256 (another inventory, or an edited one, is another
    testbed: its runs are never compared with these)."""
    return where_for(testbed).history_id()


#: the Scenario's fields when the history's fingerprints were first written: a field added later
#: enters a point's fingerprint only when it differs from its default, so that a new parameter
#: (a QEMU knob, say) left alone keeps every accepted night comparable
FINGERPRINT_FIELDS = (
    "hv", "mode", "rate_bps", "frame_bytes", "ip", "duration_s", "migrate_at_s", "after_s", "sample_ms", "probe_ms",
    "mem_mib", "vcpus", "router", "nic", "accel", "gen", "miglink_bps", "downtime_limit_ms", "max_bandwidth_bps",
    "auto_converge", "xbzrle", "postcopy", "migrate_timeout_s", "boot_timeout_s", "fault", "driver", "xen_guest",
    "xen_mig_mtu", "criu_host", "rib_routes", "peering", "bfd_interval_ms", "bfd_multiplier", "bgp_hold_s",
)  # fmt: skip


def fingerprint(scenario: Scenario, accel: str | None = None) -> str:
    """Identifies a point's parameters and the accelerator its runs used (``accel``; None for
    history rows written before the accelerator was part of it): runs measured with other
    parameters or under another accelerator are not comparable."""
    default = Scenario().to_dict()
    d = {k: v for k, v in scenario.to_dict().items() if k in FINGERPRINT_FIELDS or v != default.get(k)}
    if accel is not None:
        d = {**d, "accel_used": accel}
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def _run_row(night_id: str, scenarios: dict[str, Scenario], item: dict[str, Any], run_dir: Path,
             rec: dict[str, Any], testbed: str = EMBEDDED) -> dict:  # fmt: skip
    from analysis.run import analyse_run
    from analysis.stats.aggregate import run_record

    summary = analyse_run(run_dir).to_dict()
    meta = sd.read_json(run_dir / META_JSON, f"run {item['run_id']}")
    flat = run_record(summary, meta)
    hv = meta.get("hypervisor") or {}
    image = hv.get("guest_image") or {}
    row: dict[str, Any] = {
        "night_id": night_id, "run_id": item["run_id"], "point": item["point"], "rep": item["rep"],
        "point_fingerprint": fingerprint(scenarios[item["point"]], flat.get("accel")),
        "run_dir": str(run_dir.resolve()), "status": rec["status"],
        "failure": rec.get("failure"), "migration_attempted": int(bool(flat["migration_attempted"])),
        "started_utc": rec.get("started_utc"), "finished_utc": rec.get("finished_utc"),
        "elapsed_s": rec.get("elapsed_s"), "accel_used": flat.get("accel"), "qemu": hv.get("qemu"),
        "router_version": (image.get("router") or {}).get("version"),
        "guest_kernel": (image.get("kernel_package") or {}).get("release"),
        "host_kernel": (meta.get("host") or {}).get("kernel"), "hostname": (meta.get("host") or {}).get("hostname"),
        "git_commit": meta.get("git_commit"), "testbed": testbed,
    }  # fmt: skip
    fields = Scenario.field_names()
    row.update({scenario_column(k): v for k, v in (meta.get("scenario") or {}).items() if k in fields})
    row.update(history_fields(flat))  # metrics (NULL when absent or a bound), bounds, failure class, qualifiers
    row["summary_json"] = json.dumps(summary)
    return row


def accepted_nights(hist: History, limit: int | None = None) -> list[str]:
    """The accepted nights, most recently accepted first (at most ``limit``)."""
    rows = hist.db.execute("SELECT night_id, MAX(seq) AS s FROM baseline GROUP BY night_id ORDER BY s DESC")
    ids = [r[0] for r in rows]
    return ids[:limit] if limit else ids


def check_accel(hist: History, accel: str | None, nights: Sequence[str]) -> None:
    """Refuse a night whose accelerator differs from that of the accepted runs."""
    _check_same(hist, nights, "accel_used", accel, "accel", "accelerators", "this accelerator")


def check_testbed(hist: History, testbed: str, nights: Sequence[str]) -> None:
    """Refuse a night whose testbed (:func:`testbed_id`) differs from that of the accepted runs."""
    _check_same(hist, nights, f"COALESCE(testbed, '{EMBEDDED}')", testbed, "testbed", "testbeds", "this testbed")


def check_qemu(hist: History, qemu: str | None, nights: Sequence[str]) -> None:
    """Refuse a night whose QEMU (its --version line: release and build) differs from that of the
    accepted runs: another stack is not the same experiment (docs/stack.md)."""
    _check_same(hist, nights, "qemu", qemu, "QEMU", "QEMU builds", "this QEMU (or set QEMU= in the matrix)")


def _check_same(hist: History, nights: Sequence[str], column: str, value: str | None, name: str, plural: str,
                this: str) -> None:  # fmt: skip
    """ConfigError (one line) if the runs of the accepted ``nights`` have another ``column`` than
    ``value``: their figures are not comparable with tonight's."""
    if not nights:
        return
    marks = ",".join("?" * len(nights))
    rows = hist.db.execute(
        f"SELECT {column}, COUNT(*) FROM runs WHERE night_id IN ({marks}) GROUP BY 1", tuple(nights)
    ).fetchall()
    other = {str(a): n for a, n in rows if a != value}
    if other:
        seen = ", ".join(f"{name}={a} ({n} runs)" for a, n in sorted(other.items()))
        raise ConfigError(
            f"HISTORY={hist.path}: the accepted nights ran with {seen} but this night would run with {name}={value}; "
            f"runs of different {plural} are not compared: use a new HISTORY= (or RESULTS=) for {this}"
        )


def judge(
    hist: History, night_id: str, matrix: Matrix, accepted: str | Sequence[str] | None = None
) -> list[tuple[str, Verdict]]:
    """Every check of every point of tonight against the pooled runs of the accepted nights
    (``accepted``: one night id, a list, or None for the ``history_nights`` most recently accepted
    ones), see analysis.stats.regression.decide_night.  A point is compared only with accepted runs of the
    same parameters and the same accelerator."""
    if accepted is None:
        accepted = accepted_nights(hist, matrix.history_nights)
    elif isinstance(accepted, str):
        accepted = [accepted]
    accepted = [n for n in accepted if n != night_id]
    tonight = hist.runs(night_id)
    pool = [r for n in accepted for r in hist.runs(n)]
    points = []
    for p in matrix.points:
        cand = [r for r in tonight if r["point"] == p.label]
        accels = {r["accel_used"] for r in cand}
        testbeds = {row_testbed(r) for r in cand}
        legacy = fingerprint(p.scenario)  # rows written before the accelerator was part of the fingerprint
        same = [r for r in pool if r["point"] == p.label
                and r["point_fingerprint"] in (legacy, fingerprint(p.scenario, r["accel_used"]))]  # fmt: skip
        here = [r for r in same if row_testbed(r) in testbeds]
        ref = [r for r in here if r["accel_used"] in accels]
        skip = None
        if not accepted:
            skip = "no accepted night yet: run `make nightly-accept` to accept a night"
        elif not here and same:
            seen = ", ".join(sorted({row_testbed(r) for r in same}))
            skip = f"the accepted runs of this point ran on testbed {seen}, tonight's on {', '.join(sorted(testbeds))}"
        elif not ref and here:
            seen = ", ".join(sorted({str(r["accel_used"]) for r in here}))
            skip = (
                f"the accepted runs of this point ran with accel={seen}, tonight's with {', '.join(map(str, accels))}"
            )
        elif not ref:
            other = any(r["point"] == p.label for r in pool)
            skip = (
                "the accepted nights measured this point with other parameters: accept a night run with this matrix"
                if other
                else "the accepted nights have no runs of this point"
            )
        points.append(PointRuns(p.label, matrix.rules_for(p.label), ref, cand, skip))
    return decide_night(points, matrix.alpha, matrix.failures)


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.4g}"


_ROW_CLASS = {"regression": "regression", "error": "failed", "skipped": "skipped", "pass": ""}


def checks_table(checks: list[tuple[str, Verdict]], history: str) -> rh.Table:
    """The regression table of the report (regressions shaded red, errors yellow)."""
    header = ["point", "check", "verdict", "accepted", "tonight", "worse by", "p", "n accepted", "n tonight", "why"]
    rows = [
        [pt, v.metric, v.status, _fmt(v.median_base), _fmt(v.median_cand), _fmt(v.worse_by), _fmt(v.p_value),
         v.n_base, v.n_cand, v.reason]
        for pt, v in checks
    ]  # fmt: skip
    classes = [_ROW_CLASS.get(v.status, "") for _, v in checks]
    return rh.Table(f"Regression checks against {history}", header, rows, classes, id="checks")


def _rules_md(matrix: Matrix) -> str:
    lines = [
        f"Matrix `{matrix.path}` (sha256 {matrix.sha256[:12]}…): {len(matrix.points)} points × {matrix.reps} "
        f"repetitions, budget {matrix.budget_s:g} s. Tonight's runs of each point are compared with the pooled runs "
        f"of the {matrix.history_nights} most recently accepted nights (same parameters, same accelerator). "
        "A metric check fails the night when tonight is worse by the one-sided Mann–Whitney U test (scipy; "
        f"significant after Holm's step-down procedure over all metric checks of the night at alpha {matrix.alpha:g}) "
        "**and** the medians differ by at least the minimum effect (absolute and relative). Migration failures "
        "(failure classes migration and post-migration; a failed run without a class counts as migration) fail "
        f"the night when a point has at least {matrix.failures.min_failures} and the binomial probability of that "
        f"many in tonight's attempts, with the accepted failure rate of the point taken as at least "
        f"{matrix.failures.min_rate:g}, is at most {matrix.failures.alpha:g}. Setup failures are errors, not "
        f"regressions. Nominal false-alarm bound of a night: {matrix.false_alarm_bound:g}. Rules:",
        "",
    ]
    for r in matrix.rules:
        lines.append(f"- `{r.metric}`: {r.worse} is worse, min_abs {r.min_abs:g}, min_rel {r.min_rel:.0%}")
    for label, rules in matrix.point_rules:
        for r, d in zip(rules, matrix.rules, strict=True):
            if r != d:
                lines.append(f"- `{r.metric}` at {label}: min_abs {r.min_abs:g}, min_rel {r.min_rel:.0%}")
    return "\n".join(lines)


@dataclass
class NightResult:
    """Outcome of one night."""

    night_dir: Path
    night_id: str
    status: str
    baseline: str | None  # the most recently accepted night (None: nothing accepted yet)
    checks: list[tuple[str, Verdict]]
    n_runs: int
    n_failed: int
    elapsed_s: float
    budget_stop: dict[str, Any] | None
    n_accepted: int = 1

    @property
    def exit_code(self) -> int:
        """1 on a regression, else 0 (setup errors are reported in junit.xml, not in the exit code)."""
        return EXIT_REGRESSION if self.status == "regression" else 0

    @property
    def n_errors(self) -> int:
        """Checks with status 'error' (runs that failed before their migration)."""
        return sum(v.status == "error" for _, v in self.checks)

    @property
    def history(self) -> str:
        """What tonight was compared with, in words."""
        if self.baseline is None:
            return "no accepted night"
        return f"{self.n_accepted} accepted night(s) (latest {self.baseline})"


def run_nightly(
    matrix_path: Path,
    results_root: Path,
    history_path: Path | None,
    testbed: Path | None = None,
    ab: str | None = None,
) -> NightResult:
    """Run one night end to end (see the module docstring); ``testbed``: on the hosts of this lab
    inventory, compared only with accepted nights of the same inventory; ``ab``: the commit the
    matrix's ``[ab]`` compares tonight's with (default: that of the most recently accepted night;
    ``none``: no A/B)."""
    matrix = load_matrix(matrix_path)
    if ab not in (None, "none") and matrix.ab is None:
        raise ConfigError(f"AB={ab}: MATRIX={matrix.path} has no [ab] section to run it with (or give no AB=)")
    ab_commit = ab_mod.resolve_commit(ab) if ab not in (None, "none") else None
    nightly_root = results_root / NIGHTLY_SUBDIR
    history_path = history_path or nightly_root / HISTORY_NAME
    sw.check_lab(matrix.points, testbed)
    where = where_for(testbed)
    tb = where.history_id()
    vers = sw.versions(matrix.points[0].scenario, testbed)
    accel = vers["hypervisor"].get("accel")
    sw.prepare_results_root(results_root)
    sw.prepare_results_root(nightly_root)
    with History(history_path) as hist:
        accepted = accepted_nights(hist, matrix.history_nights)
        check_testbed(hist, tb, accepted)
        check_accel(hist, accel, accepted)
        check_qemu(hist, vers["hypervisor"].get("qemu"), accepted)
        plan = sw.Plan("nightly", matrix.points, matrix.reps, sw.new_seed(), _grid(matrix, history_path))
        night_meta = sw.plan_meta(plan, vers, sys.argv, testbed)
        night_dir = sw.create_sweep_dir(nightly_root, f"{sd.stamp_utc()}-night", night_meta)
        night_id = night_dir.name
        baseline = accepted[0] if accepted else None
        est = hist.mean_elapsed_s() or matrix.expected_run_s
        if est * matrix.n_runs > matrix.budget_s:
            log.warning(
                "%d runs × %.0f s (history mean) may exceed the %g s budget", matrix.n_runs, est, matrix.budget_s
            )
        night_row = {
            "night_id": night_id, "night_dir": str(night_dir.resolve()), "started_utc": sd.now_utc(),
            "status": "running", "baseline_night": baseline, "matrix_path": str(matrix.path),
            "matrix_sha256": matrix.sha256, "git_commit": vers.get("git_commit"),
            "qemu": vers["hypervisor"].get("qemu"), "accel": accel,
            "host_kernel": vers["host"].get("kernel"), "hostname": vers["host"].get("hostname"), "versions_json": vers,
            "testbed": tb,
        }  # fmt: skip
        hist.upsert("nights", night_row)
        scenarios = {p.label: p.scenario for p in matrix.points}
        t0 = time.monotonic()
        meta, state = sd.open_sweep(night_dir, "nightly")

        def on_run(item: dict[str, Any], run_dir: Path, rec: dict[str, Any]) -> None:
            hist.upsert("runs", _run_row(night_id, scenarios, item, run_dir, rec, tb))

        try:
            with sw.locked(night_dir):
                sw.start_session(night_dir, state, vers)
                state = sw.execute(
                    night_dir, meta, state, deadline_mono=t0 + matrix.budget_s, on_run=on_run, testbed=testbed
                )
            ab_res = _night_ab(matrix, ab, ab_commit, hist, accepted, night_dir, plan.seed, where, vers)
        except BaseException:
            hist.upsert("nights", {**night_row, "status": "interrupted", "finished_utc": sd.now_utc()})
            raise
        checks = judge(hist, night_id, matrix, accepted)
        if ab_res is not None:
            checks += [(matrix.ab.point, v) for v in ab_res.checks]  # type: ignore[union-attr]
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
                         state.get("budget_stop"), len(accepted))  # fmt: skip
    _write_night_outputs(result, matrix, vers)
    return result


def _night_ab(
    matrix: Matrix,
    asked: str | None,
    commit: str | None,
    hist: History,
    accepted: Sequence[str],
    night_dir: Path,
    seed: int,
    where: Where,
    vers: dict[str, Any],
) -> ab_mod.AbResult | None:
    """The matrix's in-night A/B (None: the matrix has none): skipped with the reason when it
    cannot run (it runs another checkout of this machine: only where the runs are this
    machine's), an error verdict when it failed before judging."""
    spec = matrix.ab
    if spec is None:
        return None
    if asked == "none":
        return ab_mod.skipped(spec, "AB=none: no A/B tonight")
    if not where.runs_here:
        return ab_mod.skipped(spec, "the A/B runs on the embedded testbed only (the accepted commit is not deployed to "
                                    "a lab's hosts)")  # fmt: skip
    if commit is None:
        if not accepted:
            return ab_mod.skipped(spec, "no accepted night yet, so no accepted commit: give AB=<commit>")
        recorded = ab_mod.clean_commit((hist.night(accepted[0]) or {}).get("git_commit"))
        if recorded is None:
            return ab_mod.skipped(spec, f"the accepted night {accepted[0]} recorded no git commit: give AB=<commit>")
        try:
            commit = ab_mod.resolve_commit(recorded)
        except ConfigError as err:
            return ab_mod.skipped(spec, f"the accepted night's commit: {err}")
    log.info("A/B: %s (accepted) against this checkout, %d run(s) each", commit[:12], spec.reps)
    try:
        return ab_mod.run_ab(spec, commit, vers.get("git_commit"), night_dir, seed)
    except VrmigError as err:
        res = ab_mod.skipped(spec, "")
        res.checks = [replace(v, status="error", reason=f"A/B failed: {err}") for v in res.checks]
        res.commits = {"accepted": commit, "tonight": vers.get("git_commit")}
        return res


def _grid(matrix: Matrix, history_path: Path) -> dict[str, Any]:
    return {
        "matrix": {"path": str(matrix.path), "sha256": matrix.sha256, "text": matrix.text},
        "budget_s": matrix.budget_s,
        "history": str(Path(history_path).resolve()),
    }


def _write_night_outputs(res: NightResult, matrix: Matrix, vers: dict[str, Any]) -> None:
    from migrate.campaigns.reporting import build_outputs, load_source

    props = {
        "night": res.night_id,
        "baseline": res.baseline or "",
        "accepted_nights": str(res.n_accepted if res.baseline else 0),
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
        banner = ("bad", f"REGRESSION: {n_reg} check(s) failed against {res.history}")
    elif res.status == "no-baseline":
        banner = ("info", "No accepted night yet: nothing compared. `make nightly-accept` accepts this night.")
    else:
        banner = ("good", f"No regression against {res.history}")
    if res.n_errors:
        banner = ("bad", banner[1] + f" — {res.n_errors} point(s) with runs that failed before their migration")
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
        lead_tables=[checks_table(res.checks, res.history)],
        banner=banner,
        extra_definitions=[("Regression checks", _rules_md(matrix))],
    )


_MARK = {"regression": "FAIL", "skipped": "skip", "pass": "ok", "error": "ERR"}


def format_night(res: NightResult) -> str:
    """What ``make nightly`` prints (the caller prints the night directory last)."""
    n_skip = sum(v.status == "skipped" for _, v in res.checks)
    n_reg = sum(v.regression for _, v in res.checks)
    m, s = divmod(int(res.elapsed_s), 60)
    lines = [
        f"nightly {res.night_id}: {res.n_runs} runs ({res.n_failed} failed) in {m}m{s:02d}s; against {res.history}"
    ]
    if res.budget_stop:
        lines.append(f"  time budget reached: {res.budget_stop['runs_not_started']} run(s) not started")
    for point, v in res.checks:
        lines.append(f"  {_MARK[v.status]:<4} {point:<22} {v.metric:<24} {v.reason}")
    n_pass = len(res.checks) - n_reg - n_skip - res.n_errors
    lines.append(
        f"result: {res.status.upper()} — {n_reg} regression(s), {n_pass} passed, {n_skip} skipped, "
        f"{res.n_errors} error(s); junit {res.night_dir / JUNIT_NAME}; report {res.night_dir / 'report.html'}"
    )
    return "\n".join(lines)


def accept(results_root: Path, history_path: Path | None, night: str | None) -> dict[str, Any]:
    """Add ``night`` (an id or a night directory; default: the latest finished night) to the
    accepted nights (``baseline`` is the most recently accepted one)."""
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
        earlier = accepted_nights(hist)
        check_testbed(hist, row_testbed(runs[0]) if runs else EMBEDDED, earlier)
        check_accel(hist, runs[0]["accel_used"] if runs else None, earlier)
        check_qemu(hist, runs[0]["qemu"] if runs else None, earlier)
        row["previous_baseline"] = earlier[0] if earlier else None
        hist.promote(row["night_id"], sd.now_utc())
        row["n_completed"] = sum(r["status"] == "completed" for r in runs)
        row["n_accepted"] = len(accepted_nights(hist))
        return row
