"""Campaign files: an experiment campaign as data (docs/campaigns.md "Campaign files").

A campaign is a TOML file::

    [campaign]
    name = "knobs-kvm"            # names the results directory
    command = "migrate"           # migrate (default) or baseline
    reps = 5                      # repetitions per point, run in an order shuffled with `seed`
    seed = 7                      # optional: recorded either way
    budget = "2h"                 # optional: refused before it starts if it cannot fit

    [defaults]                    # any `make migrate` (or `make baseline`) variable
    RATE = "10M"

    [grid]                        # axes: every combination
    DOWNTIME_LIMIT = [50, 300]

    [zip]                         # lists varied together (crossed with [grid])
    RATE = ["0", "100M"]
    SIZE = [64, 1500]

    [[part]]                      # optional: sub-campaigns with their own defaults and axes
    name = "xen"
    defaults = { HV = "xen" }
    grid = { RATE = ["1M", "5M"] }

Variables are the Make variables, with the values ``make`` would take; each point is parsed by
the very parser of ``vrmig run`` (``vrmig baseline`` for a baseline campaign) and validated as a
Scenario before anything is created, and every error names the file and line.  Line numbers
come from the file's text (:class:`_Lines`): ``tomllib`` reports them only for syntax errors.

``make sweep`` writes its grid as an anonymous campaign (:func:`sweep_campaign`); ``make
campaign`` runs a file with the sweep machinery of :mod:`migrate.campaigns.sweep` (resume,
runs.csv, points.csv, plots, report.html, failure records)."""

from __future__ import annotations

import argparse
import difflib
import functools
import hashlib
import itertools
import math
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from migrate.core.errors import ConfigError
from migrate.core.units import format_rate
from migrate.model.scenario import Scenario

COMMANDS = ("migrate", "baseline")
CAMPAIGN_KEYS = ("name", "description", "command", "reps", "seed", "budget", "expected_run_s")
TOP_TABLES = ("campaign", "defaults", "grid", "zip", "part")
PART_KEYS = ("name", "defaults", "grid", "zip")
#: Make variables whose flag is not the variable's name in lower case with dashes
FLAG_OF = {"MIGBW": "max-bandwidth"}
#: flags of ``vrmig run``/``vrmig baseline`` that are no campaign variables (the command line gives them)
NOT_VARIABLES = {"results", "testbed", "resume", "help", "debug"}
#: per-run overhead beyond DURATION until the history knows better: boot, settle, teardown, analysis
#: (a run with 8 s of traffic took 12 s on an idle 2-core machine under TCG, 20-50 s while loaded)
RUN_OVERHEAD_S = 20.0
MAX_POINTS = 10_000
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(s|m|min|h)?")


@dataclass(frozen=True)
class CampaignPoint:
    """One point: its label, every variable set (defaults and axes, as text) and the varied ones."""

    label: str
    variables: dict[str, str]
    axes: dict[str, str]
    scenario: Scenario | None = None  # migrate campaigns: the validated scenario
    units_per_rep: int = 1  # runs per repetition: 1 for a migration, the matrix's points for a baseline
    #: a validation message -> the line of the file that sets the variable it names for this
    #: point (its axis, else its default); asked only when a later check refuses the point
    locate: Callable[[str], int] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Campaign:
    """A parsed, expanded and validated campaign file."""

    path: Path
    name: str
    description: str
    command: str
    reps: int
    seed: int | None
    budget_s: float | None
    expected_run_s: float | None
    points: tuple[CampaignPoint, ...]
    axes: tuple[str, ...]
    sha256: str
    text: str = field(repr=False)

    def refusal(self, label: str, err: ConfigError) -> ConfigError:
        """A refusal found after parsing (a preflight's: a knob the QEMU or libvirt that will run
        the point lacks), as ``file:line: message (point label)`` with the line of the first
        variable the message names; unchanged when it names none of the point's variables."""
        point = next((p for p in self.points if p.label == label), None)
        named = re.findall(r"\b([A-Z][A-Z0-9_]+)\b", str(err))
        if point is None or point.locate is None or not any(v in point.variables for v in named):
            return err
        where = f" (point {label})" if point.axes else ""
        return _err(self.path, point.locate(" ".join(v for v in named if v in point.variables)), f"{err}{where}")

    def record(self) -> dict[str, Any]:
        """meta.json ``campaign`` of the directory that runs it."""
        return {
            "name": self.name,
            "description": self.description,
            "command": self.command,
            "file": str(self.path),
            "sha256": self.sha256,
            "axes": list(self.axes),
            "budget_s": self.budget_s,
            "expected_run_s": self.expected_run_s,
            "points": [{"label": p.label, "axes": p.axes, "variables": p.variables} for p in self.points],
        }

    def estimate_s(self, reps: int | None = None) -> float:
        """Wall time the campaign needs, from ``expected_run_s`` (else DURATION + RUN_OVERHEAD_S per run)."""
        n = reps if reps is not None else self.reps
        total = 0.0
        for p in self.points:
            per = self.expected_run_s
            if per is None:
                duration = p.scenario.duration_s if p.scenario is not None else float(p.variables.get("DURATION", 5))
                per = duration + RUN_OVERHEAD_S
            total += per * n * p.units_per_rep
        return total

    @property
    def n_runs(self) -> int:
        """Runs of the whole campaign (a baseline's points count one each)."""
        return sum(p.units_per_rep for p in self.points) * self.reps


class _Lines:
    """Line numbers of keys in a TOML text: the first line of ``key =`` inside table ``table``
    (its ``index``-th occurrence for ``[[table]]``), or inside an inline table on such a line."""

    def __init__(self, text: str) -> None:
        self.sections: list[tuple[str, int, int]] = []  # (table, occurrence, first line)
        self.lines = text.splitlines()
        seen: dict[str, int] = {}
        for no, line in enumerate(self.lines, 1):
            m = re.match(r"\s*\[\[?\s*([A-Za-z0-9_.\"-]+)\s*\]\]?", line)
            if m:
                name = m[1].strip('"')
                self.sections.append((name, seen.get(name, 0), no))
                seen[name] = seen.get(name, 0) + 1

    def _span(self, table: str, index: int) -> tuple[int, int] | None:
        for i, (name, occ, start) in enumerate(self.sections):
            if name == table and occ == index:
                end = self.sections[i + 1][2] if i + 1 < len(self.sections) else len(self.lines) + 1
                return start, end
        return None

    def of(self, table: str, key: str | None = None, index: int = 0, sub: str | None = None) -> int:
        """Line of ``key`` in ``table`` (in its inline table ``sub``, e.g. ``[[part]] grid = {...}``);
        the table's header line if the key is not found; 1 if the table is not either."""
        span = self._span(table, index)
        if span is None:
            return 1
        start, end = span
        if key is None:
            return start
        pat = re.compile(rf'(^|[{{,\s])"?{re.escape(key)}"?\s*=')
        subpat = re.compile(rf"^\s*{re.escape(sub)}\s*=") if sub else None
        for no in range(start + 1, end):
            line = self.lines[no - 1].split("#", 1)[0]
            if subpat is not None and not subpat.search(line):
                continue
            if pat.search(line):
                return no
        if sub is not None:
            for no in range(start + 1, end):
                if subpat is not None and subpat.search(self.lines[no - 1]):
                    return no
        return start


def _err(path: Path, line: int, msg: str) -> ConfigError:
    return ConfigError(f"{path}:{line}: {msg}")


# -- variables -----------------------------------------------------------------------------------


@functools.cache
def _command_parser(command: str) -> argparse.ArgumentParser:
    """The parser of ``vrmig run`` or ``vrmig baseline`` (the one the Makefile's variables reach);
    built once per process: a campaign parses every point with it."""
    from migrate.experiment.args import Parser

    p = Parser(prog="vrmig")
    sub = p.add_subparsers(dest="command", required=True)
    if command == "migrate":
        from migrate.experiment.args import add_run_arguments

        add_run_arguments(sub.add_parser("run"))
    else:
        from migrate.baseline.args import add_parser

        add_parser(sub)
    return p


def variables(command: str) -> dict[str, str]:
    """Make variable -> flag (without dashes) of ``command``'s parser."""
    p = _command_parser(command)
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    parser = sub.choices["run" if command == "migrate" else "baseline"]
    out: dict[str, str] = {}
    by_flag = {v: k for k, v in FLAG_OF.items()}
    for action in parser._actions:
        long = [o for o in action.option_strings if o.startswith("--")]
        if not long:
            continue
        flag = long[0][2:]
        if flag in NOT_VARIABLES:
            continue
        out[by_flag.get(flag, flag.replace("-", "_").upper())] = flag
    if command == "baseline":
        out.pop("REPS", None)  # the campaign's reps
    return out


def variable_text(value: Any, var: str, command: str) -> str:
    """A TOML value as the text ``make VAR=...`` would pass."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int | str):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(f"{var}={value} is not a finite number")
        return repr(value)
    if isinstance(value, list) and command == "baseline" and all(isinstance(v, int | str) for v in value):
        return ",".join(str(v) for v in value)  # the baseline's own lists: SIZES = [64, 1500]
    raise ConfigError(
        f"{var} = {value!r}: give one value (a string, number or boolean); lists belong in [grid] or [zip]"
    )


def check_known(var: str, known: Mapping[str, str], where: str, command: str) -> None:
    """ConfigError unless ``var`` is one of the command's ``make`` variables (with the closest
    one as a hint); ``where`` names the table or point for the message."""
    if var in known:
        return
    close = difflib.get_close_matches(var, list(known), n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    if command == "baseline" and var == "REPS":
        raise ConfigError("REPS is set by [campaign] reps, not as a variable")
    raise ConfigError(
        f"unknown variable {var} in {where}{hint}: use a `make {command}` variable, e.g. "
        f"{', '.join(list(known)[:6])} (docs/campaigns.md)"
    )


# -- parsing -------------------------------------------------------------------------------------


def parse_duration_s(text: Any) -> float:
    """``budget``: seconds as a number, or "90m", "2h", "45s"."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        if text <= 0:
            raise ConfigError(f"budget = {text} must be above 0 seconds")
        return float(text)
    m = _DURATION.fullmatch(str(text).strip())
    if m is None or float(m[1]) <= 0:
        raise ConfigError(f'budget = {text!r} is not a duration: give seconds, or e.g. "90m", "2h"')
    return float(m[1]) * {"s": 1, None: 1, "m": 60, "min": 60, "h": 3600}[m[2]]


@dataclass
class _Block:
    """One block of axes: the top level or one ``[[part]]``."""

    name: str
    index: int | None  # the part's index; None for the top level
    defaults: dict[str, Any]
    grid: dict[str, list[Any]]
    zipped: dict[str, list[Any]]
    own: frozenset[str] = frozenset()  # variables of the block's own defaults


def _table(data: Any, what: str) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{what} must be a table")
    return data


def _blocks(data: dict[str, Any], path: Path, lines: _Lines) -> list[_Block]:
    top_defaults = _table(data.get("defaults"), "[defaults]")
    top = _Block("", None, top_defaults, {}, {}, frozenset(top_defaults))
    for key in ("grid", "zip"):
        try:
            axes = _table(data.get(key), f"[{key}]")
        except ConfigError as err:
            raise _err(path, lines.of(key), str(err)) from None
        setattr(top, "grid" if key == "grid" else "zipped", axes)
    parts = data.get("part")
    if parts is None:
        return [top]
    if not isinstance(parts, list):
        raise _err(path, lines.of("part"), "part must be an array of tables: write [[part]]")
    if top.grid or top.zipped:
        raise _err(path, lines.of("grid" if top.grid else "zip"),
                   "axes go either at the top level or in the [[part]] tables, not both")  # fmt: skip
    out = []
    for i, part in enumerate(parts):
        extra = sorted(set(part) - set(PART_KEYS))
        if extra:
            raise _err(
                path, lines.of("part", extra[0], i), f"[[part]] has no key {extra[0]!r}: use {', '.join(PART_KEYS)}"
            )
        name = part.get("name", f"part{i + 1}")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise _err(
                path, lines.of("part", "name", i), f"part name {name!r}: use letters, digits, '.', '_', '+', '-'"
            )
        try:
            blk = _Block(name, i, _table(part.get("defaults"), "defaults"), _table(part.get("grid"), "grid"),
                         _table(part.get("zip"), "zip"))  # fmt: skip
        except ConfigError as err:
            raise _err(path, lines.of("part", None, i), f"[[part]] {name}: {err}") from None
        out.append(blk)
    names = [b.name for b in out]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise _err(
            path, lines.of("part", "name", names.index(dup, names.index(dup) + 1)), f"two parts are named {dup!r}"
        )
    return [_merge_top(top, b) for b in out]


def _merge_top(top: _Block, part: _Block) -> _Block:
    """A part's defaults over the top-level [defaults]."""
    return _Block(part.name, part.index, {**top.defaults, **part.defaults}, part.grid, part.zipped,
                  frozenset(part.defaults))  # fmt: skip


def _where(block: _Block, table: str) -> tuple[str, int, str | None]:
    """(TOML table, occurrence, inline key) where a block's ``table`` ('defaults', 'grid', 'zip') lives."""
    if block.index is None:
        return table, 0, None
    return "part", block.index, table


def _expand(block: _Block, path: Path, lines: _Lines, command: str, known: Mapping[str, str]) -> list[dict[str, Any]]:
    """The block's points: [(axes values in order)], validated for names, lengths and repeats."""
    seen: dict[str, str] = {}
    for table, axes in (("grid", block.grid), ("zip", block.zipped)):
        for var, values in axes.items():
            t, i, sub = _where(block, table)
            line = lines.of(t, var, i, sub)
            try:
                check_known(var, known, f"[{table}]", command)
            except ConfigError as err:
                raise _err(path, line, str(err)) from None
            if var in seen:
                raise _err(path, line, f"axis {var} is given twice ([{seen[var]}] and [{table}]): give it once")
            seen[var] = table
            if var in block.own:
                raise _err(path, line, f"{var} is both a default and an axis of the same block: give it once")
            if not isinstance(values, list) or not values:
                raise _err(path, line, f'axis {var} must be a non-empty list, e.g. {var} = ["a", "b"]')
            texts = []
            for v in values:
                try:
                    texts.append(variable_text(v, var, "migrate"))
                except ConfigError as err:
                    raise _err(path, line, f"axis {var}: {err}") from None
            dup = [x for x in texts if texts.count(x) > 1]
            if dup:
                raise _err(path, line, f"axis {var} lists {dup[0]} twice")
    if block.zipped:
        lengths = {var: len(v) for var, v in block.zipped.items()}
        if len(set(lengths.values())) > 1:
            t, i, sub = _where(block, "zip")
            desc = ", ".join(f"{k} has {n}" for k, n in lengths.items())
            raise _err(path, lines.of(t, None, i) if sub is None else lines.of(t, sub, i),
                       f"[zip] lists must be equally long: {desc}")  # fmt: skip
    grid_vars = list(block.grid)
    rows = list(zip(*block.zipped.values(), strict=True)) if block.zipped else [()]
    points = []
    for combo in itertools.product(*(block.grid[v] for v in grid_vars)):
        for row in rows:
            axes = {**dict(zip(grid_vars, combo, strict=True)), **dict(zip(block.zipped, row, strict=True))}
            points.append(axes)
    return points


def _label(block: _Block, axes: Mapping[str, str], several: bool) -> str:
    parts = [f"{k.lower()}={v}" for k, v in axes.items()]
    if several:
        parts.insert(0, block.name)
    return ",".join(parts) or (block.name or "default")


def _line_of_message(msg: str, block: _Block, path: Path, lines: _Lines, axes: Mapping[str, str]) -> int:
    """The line of the variable a validation message names (the axis if varied, else its default)."""
    for var in re.findall(r"\b([A-Z][A-Z0-9_]+)\b", msg):
        for table in ("grid", "zip"):
            if var in (block.grid if table == "grid" else block.zipped):
                t, i, sub = _where(block, table)
                return lines.of(t, var, i, sub)
        if var in block.defaults:
            if block.index is not None:
                line = lines.of("part", var, block.index, "defaults")
                if line != lines.of("part", None, block.index):
                    return line
            return lines.of("defaults", var)
    t, i, sub = _where(block, "grid")
    return lines.of(t, None, i) if sub is None else lines.of(t, sub, i)


def namespace(command: str, values: Mapping[str, str], *extra: str) -> argparse.Namespace:
    """The command's parsed flags for Make variables ``values`` (text as make would pass it) and
    ``extra`` flags of the command line (``--results DIR``)."""
    known = variables(command)
    argv = ["run" if command == "migrate" else "baseline", *extra]
    for var, text in values.items():
        argv += [f"--{known[var]}", text]
    return _command_parser(command).parse_args(argv)


def baseline_spec(c: Campaign) -> Any:
    """The BaselineSpec of a baseline campaign (its one point's variables and its reps)."""
    from migrate.baseline.args import spec_from_args

    return spec_from_args(namespace("baseline", c.points[0].variables, "--reps", str(c.reps)))


def scenario_of(command: str, variables_text: Mapping[str, str]) -> tuple[Scenario | None, int]:
    """Parse the variables with the command's own parser: (the Scenario of a migrate point, or
    None for a baseline; runs per repetition)."""
    from migrate.experiment.args import scenario_from_args

    ns = namespace(command, variables_text)
    if command == "migrate":
        return scenario_from_args(ns), 1
    from migrate.baseline.args import spec_from_args

    ns.reps = "1"
    spec = spec_from_args(ns)  # validates
    return None, sum(spec.sweep_points(c) for c in spec.configs())


def load(path: Path, reps: int | None = None, seed: int | None = None) -> Campaign:
    """Read, expand and validate a campaign file (``reps``/``seed``: overrides from the command
    line).  Any error is a ConfigError of one line naming the file and line; nothing is run."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(f"FILE={path}: cannot read the campaign file ({err.strerror})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        m = re.search(r"\(at line (\d+), column \d+\)", str(err))
        line = int(m[1]) if m else 1
        msg = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(err)) if m else str(err)
        raise ConfigError(f"{path}:{line}: not valid TOML: {msg}") from None
    lines = _Lines(text)
    extra = sorted(set(data) - set(TOP_TABLES))
    if extra:
        raise _err(path, lines.of(extra[0]) if lines._span(extra[0], 0) else 1,
                   f"unknown table or key {extra[0]!r}: a campaign has {', '.join(TOP_TABLES)}")  # fmt: skip
    head = data.get("campaign")
    if not isinstance(head, dict):
        raise _err(path, 1, 'no [campaign] table: give at least [campaign] name = "..." and reps = N')
    bad = sorted(set(head) - set(CAMPAIGN_KEYS))
    if bad:
        raise _err(
            path, lines.of("campaign", bad[0]), f"[campaign] has no key {bad[0]!r}: use {', '.join(CAMPAIGN_KEYS)}"
        )
    name = head.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        msg = f"name = {name!r}: use letters, digits, '.', '_', '+', '-' (it names the results directory)"
        raise _err(path, lines.of("campaign", "name"), msg)
    command = head.get("command", "migrate")
    if command not in COMMANDS:
        raise _err(path, lines.of("campaign", "command"), f"command = {command!r}: use one of {', '.join(COMMANDS)}")
    n_reps = head.get("reps") if reps is None else reps
    if isinstance(n_reps, bool) or not isinstance(n_reps, int) or not 1 <= n_reps <= 1000:
        where = "REPS" if reps is not None else "reps"
        raise _err(path, lines.of("campaign", "reps"), f"{where} = {n_reps!r} must be a whole number 1-1000")
    the_seed = head.get("seed") if seed is None else seed
    if the_seed is not None and (isinstance(the_seed, bool) or not isinstance(the_seed, int) or the_seed < 0):
        raise _err(path, lines.of("campaign", "seed"), f"seed = {the_seed!r} must be a whole number >= 0")
    budget_s = None
    if "budget" in head:
        try:
            budget_s = parse_duration_s(head["budget"])
        except ConfigError as err:
            raise _err(path, lines.of("campaign", "budget"), str(err)) from None
    expected = head.get("expected_run_s")
    if expected is not None and (isinstance(expected, bool) or not isinstance(expected, int | float) or expected <= 0):
        raise _err(path, lines.of("campaign", "expected_run_s"), f"expected_run_s = {expected!r} must be seconds > 0")
    known = variables(command)
    try:
        blocks = _blocks(data, path, lines)
    except ConfigError as err:
        raise err if str(err).startswith(f"{path}:") else _err(path, 1, str(err)) from None
    for blk in blocks:
        for var, value in blk.defaults.items():
            own = blk.index is not None and var in blk.own
            line = lines.of("part", var, blk.index, "defaults") if own else lines.of("defaults", var)
            try:
                check_known(var, known, "[defaults]", command)
                variable_text(value, var, command)
            except ConfigError as err:
                raise _err(path, line, str(err)) from None
    if command == "baseline" and any(b.grid or b.zipped for b in blocks):
        blk = next(b for b in blocks if b.grid or b.zipped)
        t, i, sub = _where(blk, "grid" if blk.grid else "zip")
        raise _err(path, lines.of(t, None, i) if sub is None else lines.of(t, sub, i),
                   "a baseline campaign varies its points through the baseline's own lists: "
                   'give e.g. HV = "none,kvm,criu" and SIZES = "64,1500" in [defaults], no [grid]/[zip]')  # fmt: skip
    points: list[CampaignPoint] = []
    scenarios: dict[Any, str] = {}
    all_axes: list[str] = []
    for blk in blocks:
        for axes_raw in _expand(blk, path, lines, command, known):
            axes = {k: variable_text(v, k, command) for k, v in axes_raw.items()}
            for k in axes:
                if k not in all_axes:
                    all_axes.append(k)
            var_text = {k: variable_text(v, k, command) for k, v in blk.defaults.items()}
            var_text.update(axes)
            label = _label(blk, axes, len(blocks) > 1)
            try:
                scen, units = scenario_of(command, var_text)
            except ConfigError as err:
                line = _line_of_message(str(err), blk, path, lines, axes)
                where = f" (point {label})" if axes else ""
                raise _err(path, line, f"{err}{where}") from None
            key = repr(sorted(scen.to_dict().items())) if scen is not None else repr(sorted(var_text.items()))
            if key in scenarios:
                t, i, sub = _where(blk, "grid")
                raise _err(path, lines.of(t, None, i) if sub is None else lines.of(t, sub, i),
                           f"points {scenarios[key]} and {label} are the same experiment: drop one")  # fmt: skip
            scenarios[key] = label
            locate = functools.partial(_line_of_message, block=blk, path=path, lines=lines, axes=axes)
            points.append(CampaignPoint(label, var_text, axes, scen, units, locate))
            if len(points) > MAX_POINTS:
                raise _err(path, 1, f"the campaign expands to more than {MAX_POINTS} points")
    campaign = Campaign(
        path=path.resolve(),
        name=name,
        description=str(head.get("description", "")),
        command=command,
        reps=n_reps,
        seed=the_seed,
        budget_s=budget_s,
        expected_run_s=float(expected) if expected is not None else None,
        points=tuple(points),
        axes=tuple(all_axes),
        sha256=hashlib.sha256(text.encode()).hexdigest(),
        text=text,
    )
    check_budget(campaign, lines)
    return campaign


def check_budget(c: Campaign, lines: _Lines | None = None) -> None:
    """A campaign whose estimated wall time exceeds its budget is refused before it starts."""
    if c.budget_s is None:
        return
    need = c.estimate_s()
    if need > c.budget_s:
        line = (lines or _Lines(c.text)).of("campaign", "budget")
        n = c.n_runs
        per = f"{c.expected_run_s:g} s" if c.expected_run_s else f"DURATION + {RUN_OVERHEAD_S:g} s"
        raise _err(
            c.path,
            line,
            f"the campaign needs about {_hms(need)} ({n} runs at {per} each) but its budget is {_hms(c.budget_s)}: "
            "raise budget, or lower reps or the axes",
        )


def _hms(s: float) -> str:
    s = round(s)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


# -- make sweep as an anonymous campaign -----------------------------------------------------------


def sweep_campaign(
    template: argparse.Namespace, rates: Sequence[int], sizes: Sequence[int], reps: int, seed: int,
    modes: Sequence[str] = (), bfds: Sequence[tuple[int, int]] = (),
    knob_axes: Sequence[tuple[str, Sequence[str]]] = (),
) -> str:  # fmt: skip
    """The TOML text of the campaign a ``make sweep`` grid is: the template's variables as
    defaults, MODES/BFDS, the knob lists (``MULTIFD=1,4``) and RATES/SIZES as the grid (in the
    order the sweep nests them)."""
    import tomli_w

    defaults = template_variables(template)
    axis_vars = {"RATE", "SIZE", *(["MODE"] if modes else []), *(["BFD"] if bfds else []), *(v for v, _ in knob_axes)}
    for var in axis_vars:
        defaults.pop(var, None)
    grid: dict[str, list[Any]] = {}
    if modes:
        grid["MODE"] = list(modes)
    if bfds:
        grid["BFD"] = [f"{i}x{m}" for i, m in bfds]
    for var, texts in knob_axes:
        grid[var] = list(texts)
    grid["RATE"] = [format_rate(r) for r in rates]
    grid["SIZE"] = list(sizes)
    doc = {"campaign": {"name": "sweep", "command": "migrate", "reps": reps, "seed": seed},
           "defaults": defaults, "grid": grid}  # fmt: skip
    return "# written by make sweep: this sweep as a campaign file (docs/campaigns.md)\n" + tomli_w.dumps(doc)


RATE_VARIABLES = ("RATE", "MIGLINK", "MIGBW")


def template_variables(ns: argparse.Namespace) -> dict[str, Any]:
    """The Make variables of ``vrmig run``'s parsed flags that differ from the parser's defaults
    (HV, MODE, RATE and SIZE always), as a campaign's [defaults] would give them."""
    p = _command_parser("migrate")
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    run = sub.choices["run"]
    out: dict[str, Any] = {}
    for var, flag in variables("migrate").items():
        dest = flag.replace("-", "_")
        value, default = getattr(ns, dest, None), run.get_default(dest)
        if value is None or (value == default and var not in ("HV", "MODE", "RATE", "SIZE")):
            continue
        if var in RATE_VARIABLES and isinstance(value, int):
            value = format_rate(value)
        elif isinstance(value, bool):
            value = int(value)
        elif isinstance(value, list | tuple):
            value = ",".join(str(v) for v in value)
        elif not isinstance(value, int | float | str):
            value = str(value)
        out[var] = value
    return out
