"""The lab tests' namespace watch: every way a Python process can enter (or make) a network
namespace, caught by an audit hook (PEP 578) and a post-import patch of pyroute2.

On a lab the orchestrator reaches every host over SSH and must never enter a namespace of this
machine.  What is caught:

- a command started by ``subprocess.Popen``, ``os.posix_spawn``, ``os.spawn*``, ``os.system``
  or the ``os.exec*`` family whose command line (every argument, shell strings included)
  runs ``nsenter``, ``ip netns exec``, ``ip -n``/``-netns``/``--netns`` or ``unshare``; of an
  ``ssh`` command only its local part (options and destination) is inspected, the command it
  runs belongs to the remote host;
- ``ctypes.dlsym`` of ``setns`` or ``unshare`` (how code without a binding for them reaches
  libc, pyroute2's netns module among it);
- pyroute2's ``NetNS`` and ``IPRoute(netns=...)``, patched as pyroute2 is imported (pyroute2
  resolves libc's setns once per process, so the dlsym event alone would miss a second use).

The audit hook cannot be removed once added (``sys.addaudithook``), so :func:`watching` adds
one per process and collects only while a block runs.  A child Python process is watched from
its start by ``tests/nswatch_site/sitecustomize.py`` when :data:`ENV` names a log file
(:func:`child_env`); its findings are appended there, one line each (forked children too).
Written here because no library offers a namespace-entry audit; the events are CPython's."""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import os
import re
import shlex
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

#: the environment variable naming a child's log file (read by tests/nswatch_site/sitecustomize.py)
ENV = "VRMIG_NSWATCH"
SITE_DIR = Path(__file__).parent / "nswatch_site"
REPO = Path(__file__).resolve().parent.parent

_WORD = r"(?:^|[\s;&|()`'\"/=])"
NS_COMMAND = re.compile(
    _WORD + r"(?:nsenter|unshare)(?=$|[\s;&|)`'\"])"
    r"|" + _WORD + r"ip(?:\s+-{1,2}[^\s;&|]+)*?\s+(?:-{1,2}n(?:etns)?(?=[\s=])|netns\s+exec(?=\s|$))"
)
#: ``nsenter --version``, ``unshare --help``: a query of the tool, which enters nothing (the
#: orchestrator records the versions of its tools)
NS_TOOL_QUERY = re.compile(r"(?:nsenter|unshare)\s+(?:--version|-V|--help|-h)(?=\s*(?:$|[;&|)>]))")
LIBC_NS_CALLS = frozenset({"setns", "unshare"})
#: ssh options that take an argument (OpenSSH 9): the destination is the first other word
SSH_OPTS_WITH_ARG = frozenset("BbcDEeFIiJLlmOopQRSWw")
SPAWN_EVENTS = frozenset({"subprocess.Popen", "os.posix_spawn", "os.spawn", "os.exec", "os.system"})


def _words(value: Any) -> list[str]:
    if isinstance(value, str | bytes | os.PathLike):
        return [os.fsdecode(value)]
    if isinstance(value, Sequence):
        return [os.fsdecode(v) if isinstance(v, str | bytes | os.PathLike) else str(v) for v in value]
    return [] if value is None else [str(value)]


def local_part(argv: list[str]) -> list[str]:
    """The part of a command line that runs here: all of it, except for an ``ssh`` (the program
    itself or one its wrappers exec, e.g. ``setpriv ... sh -c ... ssh``), whose remote command
    (the words after its destination) runs on the other host."""
    at = next((i for i, w in enumerate(argv) if os.path.basename(w) == "ssh"), None)
    if at is None:
        return argv
    i = at + 1
    while i < len(argv):
        word = argv[i]
        if word == "--":
            return argv[: i + 2]
        if word.startswith("-") and len(word) > 1:
            i += 2 if word[-1] in SSH_OPTS_WITH_ARG and len(word) == 2 else 1
            continue
        return argv[: i + 1]  # the destination
    return argv


def command_entry(argv: list[str]) -> str | None:
    """The command line as one string if it enters or makes a namespace here, else None."""
    local = local_part(argv)
    text = NS_TOOL_QUERY.sub("", " ".join(local))
    if NS_COMMAND.search(text):
        return shlex.join(argv)
    return None


def classify(event: str, args: tuple[Any, ...]) -> str | None:
    """What an audit event says of a namespace entry, or None."""
    if event == "ctypes.dlsym":
        name = args[1] if len(args) > 1 else None
        name = os.fsdecode(name) if isinstance(name, str | bytes) else name
        return f"ctypes.dlsym({name})" if name in LIBC_NS_CALLS else None
    if event not in SPAWN_EVENTS:
        return None
    if event == "os.system":
        argv = ["sh", "-c", *_words(args[0])]
    elif event == "subprocess.Popen":
        argv = _words(args[1]) or _words(args[0])
    elif event == "os.spawn":
        argv = _words(args[2]) or _words(args[1])
    else:  # os.posix_spawn, os.exec: (path, argv, env)
        argv = _words(args[1]) or _words(args[0])
    found = command_entry(argv)
    return None if found is None else f"{event}: {found}"


class _Watch:
    """The process's one audit hook and the blocks listening to it."""

    def __init__(self) -> None:
        self.sinks: list[Callable[[str], None]] = []
        self.local = threading.local()
        self.installed = False

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.sinks or (event not in SPAWN_EVENTS and event != "ctypes.dlsym"):
            return
        if getattr(self.local, "busy", False):  # a sink's own file I/O raises events too
            return
        self.local.busy = True
        try:
            what = classify(event, args)
            if what is not None:
                for sink in list(self.sinks):
                    sink(what)
        finally:
            self.local.busy = False

    def report(self, what: str) -> None:
        for sink in list(self.sinks):
            sink(what)

    def install(self) -> None:
        if not self.installed:
            sys.addaudithook(self.hook)
            _patch_pyroute2_on_import(self.report)
            self.installed = True


_WATCH = _Watch()


def _patch_pyroute2(module: Any, report: Callable[[str], None]) -> None:
    iproute = getattr(module, "IPRoute", None)
    netns_cls = getattr(module, "NetNS", None)
    if iproute is not None and not getattr(iproute.__init__, "_nswatch", False):
        orig = iproute.__init__

        def init(self: Any, *a: Any, **kw: Any) -> None:
            if kw.get("netns"):
                report(f"pyroute2 {type(self).__name__}(netns={kw['netns']!r})")
            orig(self, *a, **kw)

        init._nswatch = True  # type: ignore[attr-defined]
        iproute.__init__ = init
    if netns_cls is not None and not getattr(netns_cls.__init__, "_nswatch", False):
        orig_ns = netns_cls.__init__

        def ns_init(self: Any, *a: Any, **kw: Any) -> None:
            report(f"pyroute2 NetNS({a[0] if a else kw.get('netns')!r})")
            orig_ns(self, *a, **kw)

        ns_init._nswatch = True  # type: ignore[attr-defined]
        netns_cls.__init__ = ns_init


class _Pyroute2Finder(importlib.abc.MetaPathFinder):
    """Patches pyroute2's NetNS and IPRoute right after ``import pyroute2`` has run."""

    def __init__(self, report: Callable[[str], None]) -> None:
        self.report = report

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "pyroute2":
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader, report = spec.loader, self.report
        exec_module = loader.exec_module  # type: ignore[attr-defined]

        def patched(module: Any) -> None:
            exec_module(module)
            _patch_pyroute2(module, report)

        loader.exec_module = patched  # type: ignore[method-assign]
        return spec


def _patch_pyroute2_on_import(report: Callable[[str], None]) -> None:
    if "pyroute2" in sys.modules:
        _patch_pyroute2(sys.modules["pyroute2"], report)
    else:
        sys.meta_path.insert(0, _Pyroute2Finder(report))


@contextlib.contextmanager
def watching() -> Iterator[list[str]]:
    """Collect every namespace entry this process makes while the block runs."""
    seen: list[str] = []
    _WATCH.install()
    _WATCH.sinks.append(seen.append)
    try:
        yield seen
    finally:
        _WATCH.sinks.remove(seen.append)


def install_to_file(path: str) -> None:
    """Watch this whole process (and its forks), appending each entry as a line to ``path``."""

    def write(what: str) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (f"[pid {os.getpid()}] " + what.replace("\n", " ") + "\n").encode())
        finally:
            os.close(fd)

    _WATCH.install()
    _WATCH.sinks.append(write)


def child_env(log: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this one) for a child Python process watched into ``log``."""
    base = dict(os.environ if env is None else env)
    path = [str(SITE_DIR), str(REPO), *([base["PYTHONPATH"]] if base.get("PYTHONPATH") else [])]
    return {**base, ENV: str(log), "PYTHONPATH": os.pathsep.join(path)}


def read_log(log: Path) -> list[str]:
    """The entries a watched child wrote (none if it wrote no file)."""
    try:
        return [line for line in log.read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return []
