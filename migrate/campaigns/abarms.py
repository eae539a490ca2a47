"""``make ab A="QEMU=system" B="QEMU=10.0"``: any two stacks or knob settings of one scenario, side by side.

The nightly's in-night A/B (migrate.campaigns.ab) runs two commits; this one runs two settings of
the same checkout: arm A is the scenario (the usual ``make migrate`` variables) with A's
variables, arm B with B's.  It is a campaign of two parts, ``A`` and ``B``, of one point each,
``REPS`` runs per arm (30 by default) in an order shuffled from the seed, so both arms share the
machine's state and its drift cancels; the campaign machinery brings resume, the time estimate,
runs.csv, points.csv and report.html.  Then every figure is judged with the nightly's decision
rule (analysis.stats.regression.decide_ab: one-sided Mann–Whitney U of B against A at
``alpha`` = 0.01 per metric, and the rule's minimum effect), migration failures with its binomial
rule (check_failures: B's failures against A's rate), each metric's effect sizes beside
(Hodges–Lehmann shift with its exact interval, Cliff's delta: analysis.stats.compare), into
``ab.csv``, a verdict table at the top of report.html and ``ab.json``.  One verdict line is
printed; the exit status is 1 if B regressed against A (so that ``git bisect run`` can drive it
over builds of QEMU, docs/stack.md) and 0 if not.  With fewer than 30 runs per arm the report
states, per metric, the smallest change those runs find with 80 % power beside what 30 would.

Bad input (one line, exit 2, nothing started): a word of A or B that is not ``VAR=value`` of
``make migrate``, a variable given twice, or arms that do not differ."""

from __future__ import annotations

import json
import math
import shlex
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from analysis.stats.regression import (
    FAILURES,
    Detectable,
    FailureRule,
    Rule,
    Verdict,
    check_failures,
    count_attempts,
    decide_ab,
    detectable,
    detectable_ratio,
)
from migrate.core.atomic import write_json, write_text
from migrate.core.errors import ConfigError

ARMS = ("A", "B")
AB_REPS = 30
AB_ALPHA = 0.01
#: the exit status of an A/B that could judge no figure (``git bisect run``'s "cannot test")
UNDECIDED_EXIT = 125

POWER = 0.8
#: variables an arm cannot set: where results go and which testbed runs both arms are the command's
NOT_ARM_VARIABLES = ("RESULTS", "TESTBED")
#: judged beside the nightly matrix's metrics: the hypervisor's own downtime (same minimum effect
#: as the packet downtime) and, with PEERING, the time until the peers hold the router's routes
#: again (a quarter and 100 ms: the peers' logs stamp in microseconds, BGP's timers in seconds)
EXTRA_RULES = (Rule("downtime_hypervisor_s", "higher", 0.25, 0.010), Rule("routes_back_s", "higher", 0.25, 0.100))
AB_CSV = "ab.csv"
AB_JSON = "ab.json"
AB_COLUMNS = (
    "metric", "verdict", "n_a", "n_b", "median_a", "median_b", "ratio_b_a", "worse_by", "worse_by_rel", "p_worse",
    "min_effect", "hl_shift_b_a", "hl_ci_low", "hl_ci_high", "hl_ci_confidence", "cliffs_delta", "effect_size",
    "detectable_ratio", "detectable_ratio_at_30", "reason",
)  # fmt: skip


def parse_arm(text: str, which: str) -> dict[str, str]:
    """``"QEMU=10.0 MULTIFD=4"`` -> {"QEMU": "10.0", "MULTIFD": "4"}: words ``VAR=value`` of
    ``make migrate``'s variables (split as a shell splits words, never run by one)."""
    from migrate.campaigns.campaign import check_known, variables

    known = variables("migrate")
    out: dict[str, str] = {}
    try:
        words = shlex.split(text)
    except ValueError as err:
        raise ConfigError(f"{which}={text!r}: {err}") from None
    if not words:
        raise ConfigError(f'{which} is empty: give the arm\'s variables, e.g. {which}="QEMU=10.0"')
    for w in words:
        var, eq, value = w.partition("=")
        if not eq or not var:
            raise ConfigError(f'{which}: {w!r} is not VAR=value: write e.g. {which}="QEMU=10.0 MULTIFD=4"')
        if var in NOT_ARM_VARIABLES:
            raise ConfigError(f"{which}: {var} is the same for both arms: give it to make ab itself, not to {which}")
        check_known(var, known, which, "migrate")
        if var in out:
            raise ConfigError(f"{which}: {var} is given twice ({out[var]!r} and {value!r})")
        out[var] = value
    return out


def arms_campaign(template: Mapping[str, Any], a: Mapping[str, str], b: Mapping[str, str], reps: int,
                  seed: int) -> str:  # fmt: skip
    """The TOML text of the A/B's campaign: the scenario's variables as [defaults] (less those an
    arm sets), parts A and B with their arms' variables."""
    import tomli_w

    defaults = dict(template)  # a part's defaults override these (an arm's variable, the other arm keeps this)
    doc = {
        "campaign": {"name": "ab", "description": f"make ab A={_text(a)!r} B={_text(b)!r}", "command": "migrate",
                     "reps": reps, "seed": seed},
        "defaults": defaults,
        "part": [{"name": "A", "defaults": dict(a)}, {"name": "B", "defaults": dict(b)}],
    }  # fmt: skip
    return "# written by make ab: the two arms as a campaign of two parts (docs/campaigns.md)\n" + tomli_w.dumps(doc)


def _text(arm: Mapping[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in arm.items())


def check_arms_differ_text(a: Mapping[str, str], b: Mapping[str, str]) -> None:
    """:func:`check_arms_differ`'s refusal."""
    raise ConfigError(
        f"A={_text(a)!r} and B={_text(b)!r} make the same scenario: the arms must differ in a variable, "
        'e.g. A="QEMU=system" B="QEMU=10.0"'
    )


def check_arms_differ(points: Sequence[Any], a: Mapping[str, str], b: Mapping[str, str]) -> None:
    """Refuse (ConfigError) arms whose scenarios are the same: the A/B would compare a setting with itself."""
    sa, sb = (next(p.scenario for p in points if p.label == arm) for arm in ARMS)
    if sa == sb:
        check_arms_differ_text(a, b)


def rules() -> tuple[Rule, ...]:
    """The nightly matrix's metric rules (migrate/campaigns/nightly.toml [metrics]) and :data:`EXTRA_RULES`."""
    from migrate.campaigns.nightly import DEFAULT_MATRIX, load_matrix

    base = load_matrix(DEFAULT_MATRIX).rules
    return (*base, *(r for r in EXTRA_RULES if r.metric not in {x.metric for x in base}))


def min_reps(alpha: float = AB_ALPHA) -> int:
    """The fewest runs per arm with which the exact one-sided rank test can reach ``alpha`` at all
    (0.01: 5, whose smallest p is 1/252); fewer and every figure's check is skipped."""
    n = 1
    while not detectable(n, n, alpha):
        n += 1
    return n


def check_reps(reps: int, alpha: float = AB_ALPHA) -> None:
    """Refuse (ConfigError, exit 2, before anything runs) a REPS with which no figure can be judged."""
    need = min_reps(alpha)
    if reps < need:
        raise ConfigError(
            f"REPS={reps} is too few for make ab: the rank test needs at least {need} runs per arm to reach "
            f"alpha {alpha:g} at all (30 by default); use REPS={need} or more"
        )


@dataclass
class AbJudgement:
    """Every check of the A/B, the rows of ab.csv and the verdict."""

    verdicts: list[Verdict]
    rows: list[dict[str, Any]]
    regression: bool
    reps: int
    power_note: str = ""
    runs: dict[str, int] = field(default_factory=dict)

    @property
    def undecided(self) -> bool:
        """No figure's check was decided (too few completed runs): "no regression" would claim
        what nothing tested."""
        figures = [v for v in self.verdicts if v.metric != FAILURES]  # decided from attempts, not figures
        return not self.regression and all(v.status in ("skipped", "error") for v in figures)

    @property
    def exit_code(self) -> int:
        """0: no regression; 1: a regression; 125: undecided (``git bisect run`` skips the commit)."""
        return 1 if self.regression else UNDECIDED_EXIT if self.undecided else 0

    def line(self, a: Mapping[str, str], b: Mapping[str, str]) -> str:
        """The one verdict line."""
        bad = [v.metric for v in self.verdicts if v.regression]
        skipped = [v.metric for v in self.verdicts if v.status in ("skipped", "error")]
        head = f"make ab: B ({_text(b)}) against A ({_text(a)}), {self.runs.get('A', 0)}+{self.runs.get('B', 0)} runs: "
        if bad:
            return head + f"REGRESSION in {', '.join(bad)}"
        if self.undecided:
            return head + (
                f"UNDECIDED: no figure could be judged (too few completed runs per arm; the rank test needs "
                f"{min_reps()} at alpha {AB_ALPHA:g})"
            )
        tail = f" ({len(skipped)} check(s) skipped or in error: {', '.join(skipped)})" if skipped else ""
        return head + f"no regression{tail}"


def _arm_rows(records: Sequence[Mapping[str, Any]], arm: str) -> list[dict[str, Any]]:
    from migrate.campaigns.history import history_fields

    return [{**history_fields(r), "status": r.get("status")} for r in records if r.get("point") == arm]


def _values(rows: Sequence[Mapping[str, Any]], metric: str) -> list[float]:
    out = []
    for r in rows:
        v = r.get(metric)
        if r.get("status") == "completed" and isinstance(v, int | float) and math.isfinite(v):
            out.append(float(v))
    return out


def judge(records: Sequence[Mapping[str, Any]], reps: int, alpha: float = AB_ALPHA,
          failures: FailureRule | None = None) -> AbJudgement:  # fmt: skip
    """Judge arm B's runs against arm A's (records: analysis.stats.aggregate run records whose
    ``point`` is the arm)."""
    from analysis.stats.compare import compare_samples

    arm = {x: _arm_rows(records, x) for x in ARMS}
    rs = rules()
    verdicts = list(decide_ab(rs, arm["A"], arm["B"], alpha))
    verdicts.append(check_failures(failures or FailureRule(), count_attempts(arm["A"]), count_attempts(arm["B"])))
    rows: list[dict[str, Any]] = []
    lost: list[str] = []
    for v in verdicts:
        row: dict[str, Any] = {"metric": v.metric, "verdict": v.status, "n_a": v.n_base, "n_b": v.n_cand,
                               "median_a": v.median_base, "median_b": v.median_cand, "worse_by": v.worse_by,
                               "worse_by_rel": v.worse_by_rel, "p_worse": v.p_value, "min_effect": v.min_effect,
                               "reason": v.reason or v.desc}  # fmt: skip
        a_vals, b_vals = _values(arm["A"], v.metric), _values(arm["B"], v.metric)
        if a_vals and b_vals:
            c = compare_samples(a_vals, b_vals)
            row.update(hl_shift_b_a=c.shift, hl_ci_low=c.ci_low, hl_ci_high=c.ci_high, hl_ci_confidence=c.ci_confidence,
                       cliffs_delta=c.cliffs_delta, effect_size=c.effect)  # fmt: skip
            if c.median_a:
                row["ratio_b_a"] = c.median_b / c.median_a
        if v.metric != "migration_failures":
            now: Detectable = detectable_ratio(a_vals, reps, alpha, POWER)
            full: Detectable = detectable_ratio(a_vals, AB_REPS, alpha, POWER)
            row.update(detectable_ratio=now.ratio, detectable_ratio_at_30=full.ratio)
            if reps < AB_REPS and now.ratio is not None and full.ratio is not None:
                lost.append(f"{v.metric} x{now.ratio:.2f} (x{full.ratio:.2f} with {AB_REPS})")
        rows.append(row)
    note = ""
    if reps < AB_REPS:
        note = (
            f"REPS={reps} (< {AB_REPS}): the smallest change of the median each metric's test finds with "
            f"{POWER:.0%} power at alpha {alpha:g}, from A's spread: " + ("; ".join(lost) or "not estimable")
        )
    return AbJudgement(
        verdicts=verdicts, rows=rows, regression=any(v.regression for v in verdicts), reps=reps, power_note=note,
        runs={x: len(arm[x]) for x in ARMS},
    )  # fmt: skip


def verdict_table(j: AbJudgement) -> Any:
    """The report's lead table."""
    from analysis.present import html as rh

    def f(x: Any, unit: str = "") -> str:
        return "" if x is None else f"{x:.4g}{unit}" if isinstance(x, float) else str(x)

    body = [[r["metric"], r["verdict"], f(r.get("median_a")), f(r.get("median_b")), f(r.get("ratio_b_a")),
             f(r.get("p_worse")), f(r.get("cliffs_delta")), r.get("effect_size") or "", r.get("reason") or ""]
            for r in j.rows]  # fmt: skip
    classes = ["regression" if r["verdict"] == "regression" else "" for r in j.rows]
    note = "B against A: one-sided rank test at alpha 0.01 per metric and the nightly's minimum effects. "
    return rh.Table(
        "A/B verdicts", ["metric", "verdict", "median A", "median B", "B/A", "p (B worse)", "Cliff's delta",
                         "effect", "why"], body, row_classes=classes, note=note + j.power_note,
    )  # fmt: skip


def write_results(out_dir: Path, j: AbJudgement, a: Mapping[str, str], b: Mapping[str, str]) -> None:
    """ab.csv, ab.json and report.html (re-rendered with the verdicts first)."""
    from migrate.campaigns import reporting

    write_text(out_dir / AB_CSV, reporting.csv_text(AB_COLUMNS, j.rows))
    doc = {"format_version": 1, "A": dict(a), "B": dict(b), "reps": j.reps, "alpha": AB_ALPHA, "power": POWER,
           "regression": j.regression, "verdict": j.line(a, b), "power_note": j.power_note, "runs": j.runs,
           "checks": [asdict(v) for v in j.verdicts]}  # fmt: skip
    write_json(out_dir / AB_JSON, json.loads(json.dumps(doc, default=str)))
    source = reporting.load_source(out_dir)
    banner = ("bad" if j.regression else "good", j.line(a, b))
    reporting.build_outputs(out_dir, [source], f"vrmig A/B {out_dir.name}", banner=banner,
                            lead_tables=[verdict_table(j)])  # fmt: skip


def run_ab(template: Mapping[str, Any], a: Mapping[str, str], b: Mapping[str, str], reps: int, seed: int,
           results: Path, testbed: Path | None = None) -> tuple[Path, AbJudgement]:  # fmt: skip
    """Validate, run both arms interleaved (a campaign), judge, write; (directory, judgement)."""
    from migrate.campaigns import campaign as cp
    from migrate.campaigns import sweep as sw

    check_reps(reps)
    with tempfile.TemporaryDirectory(prefix="vrmig-ab-") as tmp:
        f = Path(tmp) / "ab.toml"
        f.write_text(arms_campaign(template, a, b, reps, seed))
        try:
            c = cp.load(f, None, None)
            check_arms_differ(c.points, a, b)
            out_dir = sw.new_campaign(c, results, testbed)
        except ConfigError as err:  # the generated file's name and line mean nothing to the user
            msg = str(err)
            if msg.startswith(f"{f}:"):
                msg = msg.removeprefix(f"{f}:").split(": ", 1)[-1]
            if "are the same experiment" in msg:
                check_arms_differ_text(a, b)
            raise ConfigError(msg if msg.startswith("A=") else f"A={_text(a)!r} B={_text(b)!r}: {msg}") from None
    out = sw.run_sweep(out_dir, testbed)
    j = judge(out.records, reps)
    write_results(out_dir, j, a, b)
    return out_dir, j
