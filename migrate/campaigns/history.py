"""The nightly history: an SQLite database (stdlib sqlite3), one row per run with every
summary metric, every scenario parameter and the versions, plus the nights, the baseline
promotions and the regression checks.  Query it with any SQLite client, e.g.

    sqlite3 results/nightly/history.sqlite \\
      "SELECT night_id, point, accel_used, COUNT(downtime_counters_s), AVG(downtime_counters_s)
       FROM runs WHERE status = 'completed' GROUP BY night_id, point, accel_used"

A metric is NULL when the run did not measure it or only a bound is known (``<metric>_lower``
holds the bound, ``qualifiers_json`` says why): AVG() then averages the measured runs only, and
COUNT(<metric>) says how many.  ``testbed`` names where a run ran: ``embedded`` or
``lab:<first 16 hex digits of the inventory's SHA-256>`` (NULL in rows written before it existed,
which all ran on the embedded testbed).  ``failure_class`` is the orchestrator's (setup, migration,
post-migration, interrupted; NULL for completed runs and older rows)."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from analysis.stats.aggregate import METRICS
from analysis.stats.regression import Verdict
from migrate.core.errors import ConfigError
from migrate.model.scenario import Scenario

SCHEMA_VERSION = 1
METRIC_NAMES = tuple(m.name for m in METRICS)
#: lower bounds of the censorable metrics (the metric itself is NULL when only its bound is known)
LOWER_NAMES = tuple(f"{m.name}_lower" for m in METRICS if m.censorable)
RUN_COLUMNS = (
    "night_id", "run_id", "point", "rep", "point_fingerprint", "run_dir", "status", "failure", "failure_class",
    "migration_attempted", "started_utc", "finished_utc", "elapsed_s", "accel_used", "qemu", "router_version",
    "guest_kernel", "host_kernel", "hostname", "git_commit", "qualifiers_json", "testbed",
)  # fmt: skip
NIGHT_COLUMNS = (
    "night_id", "night_dir", "started_utc", "finished_utc", "status", "n_runs", "n_failed", "n_regressions",
    "baseline_night", "matrix_path", "matrix_sha256", "git_commit", "qemu", "accel", "host_kernel", "hostname",
    "versions_json", "testbed",
)  # fmt: skip
CHECK_COLUMNS = (
    "night_id", "point", "metric", "status", "reason", "n_base", "n_cand", "median_base", "median_cand",
    "worse_by", "worse_by_rel", "p_value", "baseline_night",
)  # fmt: skip


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def scenario_column(field: str) -> str:
    """Column of a scenario parameter (prefixed only if it would clash with another column)."""
    return f"scenario_{field}" if field in RUN_COLUMNS or field in METRIC_NAMES or field in LOWER_NAMES else field


def run_columns() -> list[str]:
    """All columns of the runs table: identity, versions, scenario parameters, metrics (NULL when
    absent or known only as a bound), the bounds, raw summary."""
    return [
        *RUN_COLUMNS,
        *(scenario_column(f) for f in Scenario.field_names()),
        *METRIC_NAMES,
        *LOWER_NAMES,
        "summary_json",
    ]


def history_fields(record: Mapping[str, Any]) -> dict[str, Any]:
    """The columns of a runs row that come from an analysis.stats.aggregate run record: every metric,
    the lower bounds, the failure class and the qualifiers (JSON: metric -> why it is NULL or
    incomplete)."""
    out = {name: record.get(name) for name in METRIC_NAMES}
    out.update({name: record.get(name) for name in LOWER_NAMES})
    out["failure_class"] = record.get("failure_class")
    out["qualifiers_json"] = json.dumps(record.get("quals") or {}, sort_keys=True)
    return out


def _add_missing_columns(db: sqlite3.Connection, table: str, columns: Sequence[str]) -> None:
    """A newer vrmig added a parameter, metric or identity column: add it to an older table (its
    existing rows get NULL there)."""
    have = {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
    for c in columns:
        if c not in have:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {_q(c)}")


class History:
    """Open (creating if needed) the history database; use as a context manager."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        if self.path.exists() and not self.path.is_file():
            raise ConfigError(f"HISTORY={self.path} is not a file")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = sqlite3.connect(self.path, timeout=30)
            self.db.row_factory = sqlite3.Row
            self._migrate()
        except sqlite3.DatabaseError as err:
            raise ConfigError(
                f"HISTORY={self.path} is not a usable SQLite database ({err}); nothing was changed"
            ) from None

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.db.close()

    @contextlib.contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """A transaction: all or nothing."""
        with self.db:
            yield self.db

    def _migrate(self) -> None:
        with self.tx() as db:
            db.execute("CREATE TABLE IF NOT EXISTS schema (version INTEGER)")
            row = db.execute("SELECT version FROM schema").fetchone()
            if row is None:
                db.execute("INSERT INTO schema VALUES (?)", (SCHEMA_VERSION,))
            elif row[0] != SCHEMA_VERSION:
                raise ConfigError(f"HISTORY={self.path} has schema {row[0]}; this vrmig uses {SCHEMA_VERSION}")
            cols = run_columns()
            db.execute(
                f"CREATE TABLE IF NOT EXISTS runs ({', '.join(_q(c) for c in cols)}, PRIMARY KEY (night_id, run_id))"
            )
            _add_missing_columns(db, "runs", cols)
            db.execute(
                f"CREATE TABLE IF NOT EXISTS nights ({', '.join(_q(c) for c in NIGHT_COLUMNS)}, PRIMARY KEY (night_id))"
            )
            _add_missing_columns(db, "nights", NIGHT_COLUMNS)
            db.execute(f"CREATE TABLE IF NOT EXISTS checks ({', '.join(_q(c) for c in CHECK_COLUMNS)})")
            db.execute(
                "CREATE TABLE IF NOT EXISTS baseline"
                " (seq INTEGER PRIMARY KEY AUTOINCREMENT, night_id TEXT, accepted_utc TEXT)"
            )

    def upsert(self, table: str, row: Mapping[str, Any]) -> None:
        """Insert or replace one row (dicts/lists stored as JSON)."""
        vals = [json.dumps(v) if isinstance(v, dict | list) else v for v in row.values()]
        cols = ", ".join(_q(c) for c in row)
        with self.tx() as db:
            db.execute(f"INSERT OR REPLACE INTO {table} ({cols}) VALUES ({', '.join('?' * len(row))})", vals)

    def add_checks(self, night_id: str, baseline: str | None, checks: Sequence[tuple[str, Verdict]]) -> None:
        """Replace the night's regression checks."""
        with self.tx() as db:
            db.execute("DELETE FROM checks WHERE night_id = ?", (night_id,))
            for point, v in checks:
                db.execute(
                    f"INSERT INTO checks VALUES ({', '.join('?' * len(CHECK_COLUMNS))})",
                    (night_id, point, v.metric, v.status, v.reason, v.n_base, v.n_cand, v.median_base,
                     v.median_cand, v.worse_by, v.worse_by_rel, v.p_value, baseline),
                )  # fmt: skip

    def runs(self, night_id: str) -> list[dict[str, Any]]:
        """Every run row of a night."""
        return [dict(r) for r in self.db.execute("SELECT * FROM runs WHERE night_id = ? ORDER BY run_id", (night_id,))]

    def night(self, night_id: str) -> dict[str, Any] | None:
        """One night's row."""
        row = self.db.execute("SELECT * FROM nights WHERE night_id = ?", (night_id,)).fetchone()
        return dict(row) if row else None

    def latest_night(self, finished_only: bool = True) -> dict[str, Any] | None:
        """The most recently started night (only finished ones by default)."""
        where = "WHERE status IN ('pass', 'regression', 'no-baseline')" if finished_only else ""
        row = self.db.execute(f"SELECT * FROM nights {where} ORDER BY started_utc DESC LIMIT 1").fetchone()
        return dict(row) if row else None

    def baseline(self) -> str | None:
        """The night currently used as the baseline."""
        row = self.db.execute("SELECT night_id FROM baseline ORDER BY seq DESC LIMIT 1").fetchone()
        return row[0] if row else None

    def promote(self, night_id: str, utc: str) -> None:
        """Make ``night_id`` the baseline (the earlier promotions stay in the table)."""
        with self.tx() as db:
            db.execute("INSERT INTO baseline (night_id, accepted_utc) VALUES (?, ?)", (night_id, utc))

    def mean_elapsed_s(self) -> float | None:
        """Mean wall time of a run over the history (for the time budget)."""
        row = self.db.execute("SELECT AVG(elapsed_s) FROM runs WHERE elapsed_s IS NOT NULL").fetchone()
        return float(row[0]) if row and row[0] is not None else None
