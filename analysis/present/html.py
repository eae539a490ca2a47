"""A single self-contained HTML report (pure): plots embedded as base64 PNG ``data:`` URIs,
tables, metadata and metric definitions; inline CSS, no script, no external reference, so it
opens offline in any browser.

The page is a Jinja2 template (``templates/report.html.j2``, autoescaping on: every value is
escaped by the engine); Markdown (the metric definitions of docs/metrics.md, table notes,
captions) is rendered by markdown-it-py (CommonMark plus pipe tables, raw HTML escaped)."""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import jinja2
from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from markupsafe import Markup, escape

TEMPLATE = "report.html.j2"


@dataclass(frozen=True)
class Plot:
    """A figure: PNG bytes embedded as a data: URI."""

    title: str
    png: bytes
    caption: str = ""


@dataclass(frozen=True)
class Table:
    """A table; ``row_classes`` (optional, one per row) mark rows (e.g. 'regression')."""

    title: str
    header: Sequence[str]
    rows: Sequence[Sequence[Any]]
    row_classes: Sequence[str] | None = None
    note: str = ""
    id: str = ""


@dataclass(frozen=True)
class Report:
    """Everything the report shows, in order: banner, lead tables, plots, tables, metadata, definitions."""

    title: str
    subtitle: str = ""
    banner: tuple[str, str] | None = None  # (kind: good|bad|info, text)
    lead_tables: Sequence[Table] = ()  # shown before the plots (e.g. the regression checks)
    plots: Sequence[Plot] = ()
    #: plots that could not be shown: (title, why), listed with the plots
    missing_plots: Sequence[tuple[str, str]] = ()
    tables: Sequence[Table] = ()
    metadata: Sequence[tuple[str, Mapping[str, Any]]] = ()
    definitions_md: Sequence[tuple[str, str]] = ()
    generated_utc: str = ""
    extra_notes: Sequence[str] = field(default_factory=tuple)


def _link_text_only(_self: RendererHTML, _tokens: Sequence[Token], _idx: int, _options: Any, _env: Any) -> str:
    """Links render as their text: the report is one offline file, the targets (other docs pages,
    anchors of docs/metrics.md) are not in it."""
    return ""


def _image_alt_only(self: RendererHTML, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    """Images render as their alt text: the report embeds only its own plots."""
    return str(escape(self.renderInlineAsText(tokens[idx].children or [], options, env)))


@cache
def _markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    md.add_render_rule("link_open", _link_text_only)
    md.add_render_rule("link_close", _link_text_only)
    md.add_render_rule("image", _image_alt_only)
    return md


def markdown_to_html(text: str) -> Markup:
    """Markdown (CommonMark and pipe tables; raw HTML escaped, links as text) as HTML for the
    Definitions section: its headings become h3 (levels 1-2) and h4 (deeper), below the
    section's h2."""
    md = _markdown()
    tokens = md.parse(text)
    for tok in tokens:
        if tok.type in ("heading_open", "heading_close"):
            tok.tag = "h3" if int(tok.tag[1]) <= 2 else "h4"
    return Markup(md.renderer.render(tokens, md.options, {}))


def markdown_inline(text: str) -> Markup:
    """One line of inline Markdown (code, emphasis) as HTML, without a paragraph around it."""
    return Markup(_markdown().renderInline(text))


def data_uri(png: bytes) -> str:
    """A ``data:image/png;base64,...`` URI."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


_NUMERIC = re.compile(r"[-+]?[\d.,]+(e[-+]?\d+)?\s*(%|[a-zA-Z/]{0,6})?")


def is_text_cell(value: Any) -> bool:
    """True for a string that is not a number (with an optional unit): such cells are left-aligned."""
    return isinstance(value, str) and not _NUMERIC.fullmatch(value.strip())


def meta_value(value: Any) -> str:
    """A metadata value on one line: mappings as 'k: v; ...', lists as 'a, b'."""
    if isinstance(value, Mapping):
        return "; ".join(f"{k}: {v}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(str(x) for x in value)
    return "" if value is None else str(value)


def _none_as_empty(value: Any) -> Any:
    return "" if value is None else value


@cache
def environment() -> jinja2.Environment:
    """The template environment: the package's templates, autoescaping, undefined names fail."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("analysis.present", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        finalize=_none_as_empty,
    )
    env.filters.update(markdown=markdown_to_html, md_inline=markdown_inline, data_uri=data_uri, meta_value=meta_value)
    env.tests["text_cell"] = is_text_cell
    return env


def render(report: Report) -> str:
    """The complete HTML document."""
    return environment().get_template(TEMPLATE).render(report=report)
