"""What a router profile's config template sees, and the Jinja2 environment that renders it
(docs/own-router.md "Template variables").

:class:`ConfigContext` is typed data (built from the testbed by
:func:`migrate.model.router_config.testbed_context`); :meth:`ConfigContext.variables` hands it to
the template as plain dicts and lists.  Templates run in Jinja2's sandbox with undefined variables
as errors; every failure becomes one :class:`~routers.errors.ProfileFileError` line naming the
template, its line and Jinja2's message."""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import jinja2.sandbox

from routers.errors import ProfileFileError


@dataclass(frozen=True)
class HostAddr:
    """An end host on a segment, as the template sees it."""

    role: str
    ipv4: str  # with prefix length
    ipv6: str
    ipv4_address: str
    ipv6_address: str


@dataclass(frozen=True)
class Interface:
    """A data-plane NIC of the router: its guest NIC index, fixed MAC and addresses."""

    role: str  # left | right
    segment: str  # L | R
    index: int
    mac: str
    ipv4: str  # with prefix length
    ipv6: str
    ipv4_address: str
    ipv4_prefixlen: int
    ipv6_address: str
    ipv6_prefixlen: int
    hosts: tuple[HostAddr, ...]


@dataclass(frozen=True)
class Route:
    """A static route the router must hold."""

    prefix: str
    via: str
    role: str  # the interface it leaves by


@dataclass(frozen=True)
class Neighbour:
    """A routing peer (PEERING=)."""

    role: str  # the end host: A or B
    interface: str  # left | right
    address: str
    asn: int
    local_address: str  # the router's address on that segment
    announced: str  # the /32 the peer announces


@dataclass(frozen=True)
class Peering:
    """The routing sessions of PEERING= (docs/peering.md)."""

    protocols: tuple[str, ...]
    bgp: bool
    ospf: bool
    bfd: bool
    asn: int
    router_id: str
    neighbours: tuple[Neighbour, ...]
    bfd_interval_ms: int
    bfd_multiplier: int
    bgp_hold_s: int
    bgp_keepalive_s: int
    ospf_dead_s: int
    ospf_hello_s: int


@dataclass(frozen=True)
class ConfigContext:
    """Everything a config template may use; :meth:`variables` gives it as plain dicts/lists."""

    router: Mapping[str, Any]  # name, hostname, kind, software, version, console_marker
    interfaces: tuple[Interface, ...]  # left and right, in the guest's NIC order
    mgmt: int | None  # the mgmt NIC's index (no address yet)
    static_routes: tuple[Route, ...]
    peering: Peering | None

    def variables(self) -> dict[str, Any]:
        """The template's variables: only dicts, lists, strings, numbers, booleans and None."""
        ifaces = [_plain(i) for i in self.interfaces]
        return {
            "router": dict(self.router),
            "interfaces": ifaces,
            "left": next(i for i in ifaces if i["role"] == "left"),
            "right": next(i for i in ifaces if i["role"] == "right"),
            "mgmt": None if self.mgmt is None else {"index": self.mgmt},
            "static_routes": [_plain(r) for r in self.static_routes],
            "peering": None if self.peering is None else _plain(self.peering),
        }


def _plain(obj: object) -> Any:
    if hasattr(obj, "__dataclass_fields__"):
        return {k: _plain(getattr(obj, k)) for k in obj.__dataclass_fields__}
    if isinstance(obj, tuple | list):
        return [_plain(v) for v in obj]
    if isinstance(obj, Mapping):
        return {k: _plain(v) for k, v in obj.items()}
    return obj


def _environment(template: Path) -> jinja2.Environment:
    return jinja2.sandbox.SandboxedEnvironment(
        loader=jinja2.FileSystemLoader(str(template.parent)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,  # a block tag's own line break is dropped (as Ansible's templates)
        lstrip_blocks=True,  # and the spaces before it: block tags can be indented
        autoescape=False,
    )


def compile_template(template: Path, profile: str, *, loading: bool) -> jinja2.Template:
    """The compiled template; a syntax error is one line: while ``loading``, the profile's
    ``[config] template`` first, while rendering, the template's ``file:line`` first."""
    try:
        return _environment(template).get_template(template.name)
    except jinja2.TemplateSyntaxError as err:
        where, what = f"{template}:{err.lineno}", _one_line(err.message)
    except (jinja2.TemplateError, OSError, UnicodeDecodeError) as err:
        where, what = str(template), f"cannot load the template: {_one_line(str(err))}"
    if loading:
        raise ProfileFileError(f"{profile}: [config] template: {where}: {what}: fix the template")
    raise ProfileFileError(f"{where}: {what} ({profile}: [config] template): fix the template")


def _one_line(text: str | None) -> str:
    return " ".join((text or "").split())


def _template_line(err: BaseException, template: Path) -> str:
    """``file:line`` of the innermost template frame of ``err`` (Jinja2 puts the templates' own
    file names and lines into the traceback), ``template:?`` if none."""
    folder = template.parent.resolve()
    for frame in reversed(traceback.extract_tb(err.__traceback__)):
        try:
            where = Path(frame.filename).resolve()
        except (OSError, RuntimeError):
            continue
        if where.parent == folder and where.suffix != ".py":
            return f"{template.parent / where.name}:{frame.lineno}"
    return f"{template}:?"


def render_template(template: Path, profile: str, variables: dict[str, Any]) -> str:
    """``template`` rendered with ``variables``; ``profile`` (the profile file) is named in errors."""
    tmpl = compile_template(template, profile, loading=False)
    try:
        return tmpl.render(variables)
    except Exception as err:  # the template is the operator's code: any failure of it is theirs to fix
        raise ProfileFileError(
            f"{_template_line(err, template)}: {_one_line(str(err))} ({profile}: [config] template): fix the template"
        ) from None
