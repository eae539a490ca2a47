"""Integration tests need root (otherwise they skip) and what `make setup` provides (otherwise
they fail, naming it)."""

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest

REPO = Path(__file__).resolve().parents[2]

#: the runs of the integration tests draw their plots as PNG only: SVG and PDF beside it cost
#: about 0.4 s of analysis per run (over a hundred runs here); tests/unit/test_analysis_run.py
#: checks that the default writes all three
os.environ.setdefault("VRMIG_PLOT_FORMATS", "png")


#: every retry this session made: (test id, cause, the failed attempt's directory); printed by
#: :func:`pytest_terminal_summary`, counted by cause
RETRIES: list[tuple[str, str, str]] = []


def report_retry(cause: str, where: Path | str) -> None:
    """Record (and print, into the test's captured output) that the running test retries after
    ``cause``, a narrowly identified fault of another project's code: the only way a test may
    retry.  The one cause today: nested Xen's libxc save-side fault under TCG
    (tests/integration/_runs.py ``nested_xen_save_fault``), once per HV=xen run; the summary
    counts the retries by cause (``retries: 0`` when none)."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" (", 1)[0]
    RETRIES.append((test, cause, str(where)))
    print(f"RETRY {test}: once more after {cause} ({where})", file=sys.stderr)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The retries of this session, by cause, in pytest's final summary (none: one line saying so)."""
    tr = terminalreporter
    tr.section("retries")
    if not RETRIES:
        tr.write_line("retries: 0")
        return
    by_cause: dict[str, int] = {}
    for _test, cause, _where in RETRIES:
        by_cause[cause] = by_cause.get(cause, 0) + 1
    tr.write_line(f"retries: {len(RETRIES)} ({'; '.join(f'{c}: {n}' for c, n in sorted(by_cause.items()))})")
    for test, cause, where in RETRIES:
        tr.write_line(f"  {test}: {cause} ({where})")


def require_root_and(*tools: str) -> None:
    """Skip unless running as root; fail unless every tool (binary name or repo-relative path) is
    present: `make setup` installs or builds each, so a missing one is a broken setup, not a
    reason to pass without testing."""
    if os.geteuid() != 0:
        pytest.skip("needs root (creates network namespaces)")
    for t in tools:
        if "/" in t:
            if not (REPO / t).exists():
                pytest.fail(f"{t} not built: run `make setup`", pytrace=False)
        elif shutil.which(t) is None:
            pytest.fail(f"{t} not installed: run `make setup`", pytrace=False)


def missing_from_setup(err: Exception) -> NoReturn:
    """A router image, or criu, that `make setup` provides is missing or damaged (a SHA-256 that
    does not match its manifest): the test fails, so that `make test` cannot pass without
    migrating anything.  Only a profile this machine cannot have (its package is not served:
    ``ProfileUnavailableError``) is a skip."""
    from routers.errors import ProfileUnavailableError

    if isinstance(err, ProfileUnavailableError):
        pytest.skip(str(err))
    pytest.fail(f"{err} (`make setup` provides it)", pytrace=False)


RUN_NS = re.compile(r"^vm[0-9a-f]{6}-")


def _suite_namespaces() -> set[str]:
    names = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    return {n for n in names if RUN_NS.match(n)}


def _suite_state_dirs() -> set[str]:
    root = Path("/run/vrmig")
    return {p.name for p in root.iterdir()} if root.is_dir() else set()


def _live_owner(prefix: str) -> bool:
    """A run whose orchestrator still lives (another test or session running concurrently)."""
    import json

    from migrate.core.registry import pid_alive

    try:
        state = json.loads((Path("/run/vrmig") / prefix / "state.json").read_text())
    except (OSError, ValueError):
        return False
    return pid_alive(state.get("owner_pid", -1), state.get("owner_starttime"))


@pytest.fixture
def no_leftovers():
    """Assert the test leaves no run namespace or run state behind.  Namespaces and state of runs
    whose orchestrator is still alive belong to concurrent runs, not to this test."""
    before_ns, before_state = _suite_namespaces(), _suite_state_dirs()
    yield
    new_ns = {n for n in _suite_namespaces() - before_ns if not _live_owner(n.split("-")[0])}
    new_state = {p for p in _suite_state_dirs() - before_state if not _live_owner(p)}
    assert not new_ns, f"namespaces left behind: {sorted(new_ns)}"
    assert not new_state, f"state left behind: {sorted(new_state)}"


def assert_cut_rows_meet_their_targets(rows: list[dict[str, str]]) -> None:
    """Every cut row of a calibration.csv seen in every event and within its target, the one
    ``analysis.metrics.calibration`` fixed before the run (the edges' brackets, 2 edge spacings
    for the packets, a sampling period more for the counters): the verdict ``make calibrate``
    exits with, nothing derived from the trace being judged."""
    cuts = [r for r in rows if r["kind"] == "cut"]
    assert cuts, rows
    missed = [
        (r["estimator"], r["pause_ms"], r["median_error_ms"], r["max_abs_error_ms"], r["target_ms"], r["note"])
        for r in cuts
        if r["pass"] != "true" or r["detected"] != r["n"]
    ]
    assert not missed, f"(estimator, ms, median error, max |error|, target, note): {missed}"


def start_vrmig(command: str, args: list[str], log: Path) -> subprocess.Popen:
    """``python -m migrate <command> <args>`` from the repository, in its own session (as from a
    terminal), its stderr appended to ``log``."""
    argv = [sys.executable, "-m", "migrate", command, *args]
    with open(log, "ab") as err:
        return subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=err, start_new_session=True)


def sweep_state(d: Path) -> dict:
    """A sweep or campaign directory's state.json ({} while there is none or it is being written)."""
    try:
        return json.loads((d / "state.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def wait_until(what: str, cond: Callable[[], Any], proc: subprocess.Popen, log: Path, timeout_s: float,
               poll_s: float = 0.2) -> Any:  # fmt: skip
    """``cond()``'s first true value; the test fails if ``proc`` exits first or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        if proc.poll() is not None:
            pytest.fail(f"{proc.args[3]} exited ({proc.returncode}) before {what}:\n{log.read_text()[-3000:]}")
        time.sleep(poll_s)
    pytest.fail(f"timed out waiting for {what}:\n{log.read_text()[-3000:]}")


# -- the results contract: every meta.json and summary.json the tests write ----------------------
#: (path, mtime_ns) of every meta.json and summary.json validated this session
CONTRACT_CHECKED: set[tuple[str, int]] = set()
#: where the tests write their results: pytest's base temporary directory (tmp_path, tmp_path_factory)
CONTRACT_ROOTS: list[Path] = []


@pytest.fixture(autouse=True, scope="session")
def results_contract_root(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Records the base temporary directory, below which :func:`pytest_runtest_teardown` looks for
    the run directories the tests wrote."""
    CONTRACT_ROOTS.append(tmp_path_factory.getbasetemp())


def results_contract_problems(roots: list[Path]) -> list[str]:
    """Why the meta.json and summary.json files below ``roots`` that are new or rewritten since the
    last call break the results contract (the schemas of migrate.core.rundir), one line each."""
    from migrate.core import rundir

    dirs = set()
    for root in roots:
        for d, _subdirs, files in os.walk(root):
            for name in (rundir.META_JSON, rundir.SUMMARY_JSON):
                path = os.path.join(d, name)
                try:
                    key = (path, os.stat(path).st_mtime_ns) if name in files else None
                except OSError:
                    continue
                if key is not None and key not in CONTRACT_CHECKED:
                    CONTRACT_CHECKED.add(key)
                    dirs.add(Path(d))
    return [line for d in sorted(dirs) if not _synthetic(d, roots) for line in rundir.run_dir_problems(d)]


#: a file that marks a directory tree as assembled by a test from synthetic records (not written
#: by the suite's orchestrators: its meta.json holds only what the test needs)
SYNTHETIC_MARKER = "SYNTHETIC"


def _synthetic(d: Path, roots: list[Path]) -> bool:
    """``d`` or a directory above it (below one of ``roots``) holds :data:`SYNTHETIC_MARKER`."""
    for p in (d, *d.parents):
        if (p / SYNTHETIC_MARKER).is_file():
            return True
        if p in roots:
            return False
    return False


# -- one emulated lab for every lab test of the session --------------------------------------------
#: the fixture through which a test uses the session's emulated lab
SHARED_LAB = "shared_lab"


@dataclass
class PreparedLab:
    """The emulated lab of ``lab-up`` (its R1 and R2 Xen hosts too when the Xen image is built),
    prepared by one ``hosts-setup``: ``setup`` is that first run and ``setup_s`` its wall time,
    which test_hosts_setup judges; ``nswatch_entries``: the namespaces it entered (none allowed)."""

    inventory: Path
    setup: subprocess.CompletedProcess[str]
    setup_s: float
    nswatch_entries: list[str]


def _have_xen_image() -> bool:
    from routers.errors import RouterError
    from routers.xen_image import xen_image

    try:
        xen_image(verify=False)
    except RouterError:
        return False
    return True


def _lab_namespaces() -> set[str]:
    """The namespaces of emulated labs on this machine (``vl<6 hex>-<role>``)."""
    names = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    return {n for n in names if re.match(r"vl[0-9a-f]{6}-", n)}


class SharedLab:
    """Opens the emulated lab when a test first asks for it (:meth:`get`) and removes it when the
    last test that uses it is over (:func:`pytest_runtest_teardown`; the tests that use it run
    one after the other, :func:`pytest_collection_modifyitems`).  A lab that failed to come up
    fails every test that asks for it with the same message, without trying again."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.lab: PreparedLab | None = None
        self.failure: str | None = None
        #: the namespaces that lab-up created (the emulated lab's ``vl<6 hex>-<role>``)
        self.namespaces: set[str] = set()

    def _cli(self, *args: str, timeout: float, watch: Path | None = None) -> subprocess.CompletedProcess[str]:
        from tests import nswatch

        env = {**os.environ, "PYTHONPATH": str(REPO), "VRMIG_PROGRESS": "0"}
        env = env if watch is None else nswatch.child_env(watch, env)
        argv = [sys.executable, "-m", "migrate", *args]
        return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env, check=False)

    def get(self) -> PreparedLab:
        from tests import nswatch

        if self.failure is not None:
            pytest.fail(self.failure, pytrace=False)
        if self.lab is not None:
            return self.lab
        name = "t" + secrets.token_hex(3)
        before = _lab_namespaces()
        up = self._cli("lab-up", "--name", name, *(["--xen"] if _have_xen_image() else []), timeout=420)
        if up.returncode != 0:
            self.failure = f"lab-up failed ({up.returncode}): {up.stderr.strip()[-2000:]}"
            pytest.fail(self.failure, pytrace=False)
        inventory = Path(up.stdout.strip().splitlines()[-1])
        self.namespaces = _lab_namespaces() - before
        log = self.work / f"nswatch-hosts-setup-{name}.log"
        t0 = time.monotonic()
        try:
            setup = self._cli("hosts-setup", "--testbed", str(inventory), "--results", str(self.work / "results"),
                              timeout=900, watch=log)  # fmt: skip
        except BaseException:
            self._down(inventory)
            raise
        self.lab = PreparedLab(inventory, setup, time.monotonic() - t0, nswatch.read_log(log))
        return self.lab

    def _down(self, inventory: Path) -> None:
        """lab-down, which must exit 0 and leave none of the lab's namespaces."""
        down = self._cli("lab-down", str(inventory), timeout=120)
        assert down.returncode == 0, down.stdout + down.stderr
        left, self.namespaces = sorted(self.namespaces & _lab_namespaces()), set()
        assert not left, f"lab-down of the shared lab left its namespaces: {left}"

    def close(self) -> None:
        """lab-down of the lab, if it is up; a later :meth:`get` brings up a new one."""
        lab, self.lab = self.lab, None
        if lab is not None:
            self._down(lab.inventory)


_SHARED_LABS: list[SharedLab] = []


@pytest.fixture(scope="session")
def shared_lab(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The session's :class:`SharedLab` (``.get()`` gives the prepared lab)."""
    labs = SharedLab(tmp_path_factory.mktemp("shared-lab"))
    _SHARED_LABS.append(labs)
    try:
        yield labs
    finally:
        _SHARED_LABS.remove(labs)
        labs.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that use the shared lab run one after the other, where the first of them stands,
    so that one lab serves them all and is down while the other tests run."""
    users = [i for i in items if SHARED_LAB in getattr(i, "fixturenames", ())]
    if not users:
        return
    first = items.index(users[0])
    rest = [i for i in items if SHARED_LAB not in getattr(i, "fixturenames", ())]
    items[:] = rest[:first] + users + rest[first:]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """Once a test and its fixtures are torn down, every meta.json and summary.json written since
    the previous test must validate against the results contract's schemas (docs/schemas/,
    migrate/core/rundir.py); one that does not fails this test at teardown, a line per problem.
    A walk of the base temporary directory and one validation per new file: milliseconds.
    After the last test that uses the shared lab, the lab goes down."""
    result = yield
    try:
        _check_results_contract()
    finally:
        if SHARED_LAB in item.fixturenames and (nextitem is None or SHARED_LAB not in nextitem.fixturenames):
            for labs in _SHARED_LABS:
                labs.close()
    return result


def _check_results_contract() -> None:
    try:
        problems = results_contract_problems(CONTRACT_ROOTS)
    except ImportError as err:  # jsonschema: the dev extras of make venv
        pytest.fail(f"cannot check the results contract ({err}): run make venv", pytrace=False)
    if problems:
        head = "a meta.json or summary.json written by this test breaks the results contract "
        pytest.fail("\n".join([head + "(migrate/core/rundir.py, docs/data-formats.md):", *problems]), pytrace=False)
