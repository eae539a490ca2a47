"""The layer rules of the source tree, from the import graph read with :mod:`ast` (nothing is
imported): ``migrate.core`` imports nothing else of the project, ``analysis`` and ``routers`` use
at most ``migrate.core`` of ``migrate``, the single run never reaches up into campaigns or the
command line, and no module imports, directly or through others, a module that imports it.

Imports inside functions count: a deferred import still ties the two modules together."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("migrate", "analysis", "routers", "crosstraffic", "probes")


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            parts = list(f.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join(parts)] = f
    return mods


def _resolve(name: str, mods: dict[str, Path]) -> str | None:
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports (anywhere in its text)."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for t in targets:
                r = _resolve(t, mods)
                if r is not None and r != mod:
                    graph[mod].add(r)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _under(mod: str, prefix: str) -> bool:
    return mod == prefix or mod.startswith(prefix + ".")


def _violations(graph: dict[str, set[str]], src: str, allowed: tuple[str, ...], forbidden: str) -> list[str]:
    return sorted(
        f"{m} -> {t}"
        for m, ts in graph.items()
        if _under(m, src)
        for t in ts
        if _under(t, forbidden) and not any(_under(t, a) for a in allowed)
    )


GRAPH = import_graph()


def test_the_graph_sees_imports():
    assert "migrate.core.errors" in GRAPH["migrate.core.units"]
    assert "migrate.experiment.run" in GRAPH["migrate.cli.main"]  # an import inside a function
    assert len(GRAPH) > 100


@pytest.mark.parametrize(
    "src,allowed,forbidden",
    [
        ("migrate.core", ("migrate.core",), "migrate"),
        ("migrate.core", (), "analysis"),
        ("migrate.core", (), "routers"),
        ("analysis", ("migrate.core",), "migrate"),
        ("routers", ("migrate.core",), "migrate"),
        ("crosstraffic", ("migrate.core",), "migrate"),
        ("probes", ("migrate.core",), "migrate"),
        ("migrate.testbed", (), "migrate.experiment"),
        ("migrate.experiment", (), "migrate.campaigns"),
        ("migrate.experiment", (), "migrate.cli"),
        ("migrate.drivers", (), "migrate.campaigns"),
        ("migrate.drivers", (), "migrate.cli"),
        ("migrate.baseline", (), "migrate.campaigns"),
        ("migrate.baseline", (), "migrate.cli"),
        ("migrate.campaigns", (), "migrate.cli"),
        # the model: data the drivers, the peers and the run share, below all of them
        ("migrate.model", (), "migrate.experiment"),
        ("migrate.model", (), "migrate.drivers"),
        ("migrate.model", (), "migrate.baseline"),
        # the drivers take the scenario, its recorder, faults and dirtying from the model, and
        # nothing of the experiment (the run, the peers, the instruments sit above them)
        ("migrate.drivers", (), "migrate.experiment"),
        # lab tooling (hosts-check, hosts-setup, the emulated lab) sits above the drivers; the
        # testbed layer (a run's hosts, labbed, inventory) below them
        ("migrate.testbed", (), "migrate.drivers"),
        ("migrate.testbed", (), "migrate.labs"),
        ("migrate.drivers", (), "migrate.labs"),
        ("migrate.model", (), "migrate.labs"),
        ("migrate.model", (), "migrate.campaigns"),
    ],
)
def test_layer_rule(src, allowed, forbidden):
    assert _violations(GRAPH, src, allowed, forbidden) == []


def test_no_import_cycles():
    assert cycles(GRAPH) == []


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_taps_are_made_with_iproute2_not_pyroute2():
    """pyroute2's tuntap in a namespace forks a child and fakes the netlink answer; a later
    request on the same socket was seen to hang (migrate.testbed.builder.add_tap says more)."""
    offenders = [
        str(path.relative_to(ROOT))
        for path in _modules().values()
        if 'kind="tuntap"' in path.read_text() or "kind='tuntap'" in path.read_text()
    ]
    assert offenders == []
