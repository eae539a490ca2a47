"""A single self-contained HTML report (pure): plots embedded as base64 PNG ``data:`` URIs,
tables, metadata and metric definitions; inline CSS, no script, no external reference, so it
opens offline in any browser."""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em auto;max-width:1400px;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
th,td{border:1px solid #ccc;padding:.2em .5em;text-align:right;vertical-align:top}
th{background:#f2f2f2}td.l,th.l{text-align:left}
tr.regression td{background:#fdd}tr.failed td{background:#fff3d6}tr.skipped td{color:#777}
figure{margin:1em 0}figure img{max-width:100%;border:1px solid #ddd}figcaption{font-size:.85em;color:#555}
.banner{padding:.6em 1em;border-radius:4px;font-weight:bold}.banner.bad{background:#fdd;color:#900}
.banner.good{background:#dfd;color:#060}.banner.info{background:#eef;color:#225}
code{background:#f4f4f4;padding:0 .2em}.scroll{overflow-x:auto}dl dt{font-weight:bold}
"""


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
    tables: Sequence[Table] = ()
    metadata: Sequence[tuple[str, Mapping[str, Any]]] = ()
    definitions_md: Sequence[tuple[str, str]] = ()
    generated_utc: str = ""
    extra_notes: Sequence[str] = field(default_factory=tuple)


def esc(x: Any) -> str:
    """HTML-escape any value ('' for None)."""
    return "" if x is None else html.escape(str(x), quote=True)


_INLINE = (
    (re.compile(r"`([^`]+)`"), r"<code>\1</code>"),
    (re.compile(r"\*\*([^*]+)\*\*"), r"<b>\1</b>"),
    (re.compile(r"(?<![*\w])\*([^*\s][^*]*)\*(?!\w)"), r"<i>\1</i>"),
)


def _inline(text: str) -> str:
    out = esc(text)
    for rx, repl in _INLINE:
        out = rx.sub(repl, out)
    return out


def _md_table(rows: list[str]) -> str:
    cells = [[c.strip() for c in r.strip().strip("|").split("|")] for r in rows]
    body = [r for r in cells[1:] if not all(set(c) <= set("-: ") for c in r)]
    head = "".join(f'<th class="l">{_inline(c)}</th>' for c in cells[0])
    trs = "".join("<tr>" + "".join(f'<td class="l">{_inline(c)}</td>' for c in r) + "</tr>" for r in body)
    return f"<table><tr>{head}</tr>{trs}</table>"


def markdown_to_html(md: str) -> str:
    """Tiny Markdown subset: paragraphs, ``-`` bullet lists (with continuation lines), headings
    (as h3/h4), fenced code blocks, pipe tables, inline code, bold and italics.  Enough for
    docs/metrics.md."""
    blocks: list[str] = []
    items: list[str] = []
    para: list[str] = []
    table: list[str] = []
    code: list[str] | None = None

    def flush() -> None:
        if items:
            blocks.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in items) + "</ul>")
            items.clear()
        if para:
            blocks.append(f"<p>{_inline(' '.join(para))}</p>")
            para.clear()
        if table:
            blocks.append(_md_table(table))
            table.clear()

    for raw in md.splitlines():
        line = raw.rstrip()
        if line.startswith("```"):
            if code is None:
                flush()
                code = []
            else:
                blocks.append(f"<pre>{esc(chr(10).join(code))}</pre>")
                code = None
        elif code is not None:
            code.append(raw)
        elif not line.strip():
            flush()
        elif heading := re.match(r"^(#+)\s+(.*)$", line):
            flush()
            tag = "h3" if len(heading.group(1)) <= 2 else "h4"
            blocks.append(f"<{tag}>{_inline(heading.group(2))}</{tag}>")
        elif line.lstrip().startswith("|"):
            if items or para:
                flush()
            table.append(line)
        elif line.lstrip().startswith("- "):
            if para or table:
                flush()
            items.append(line.lstrip()[2:].strip())
        elif items and raw.startswith("  "):
            items[-1] += " " + line.strip()
        else:
            if items or table:
                flush()
            para.append(line.strip())
    if code is not None:
        blocks.append(f"<pre>{esc(chr(10).join(code))}</pre>")
    flush()
    return "\n".join(blocks)


def extract_section(markdown: str, heading: str) -> str | None:
    """The body of the Markdown section whose heading text is ``heading`` (up to the next
    heading of the same or a higher level), or None."""
    lines = markdown.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^(#+)\s+(.*)$", line)
        if m and m.group(2).strip() == heading:
            level = len(m.group(1))
            body = []
            for nxt in lines[i + 1 :]:
                m2 = re.match(r"^(#+)\s", nxt)
                if m2 and len(m2.group(1)) <= level:
                    break
                body.append(nxt)
            return "\n".join(body).strip()
    return None


def data_uri(png: bytes) -> str:
    """A ``data:image/png;base64,...`` URI."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _cell(value: Any, left: bool) -> str:
    cls = ' class="l"' if left else ""
    return f"<td{cls}>{esc(value)}</td>"


def render_table(t: Table) -> str:
    """One table as HTML (first column left-aligned)."""
    ident = f' id="{esc(t.id)}"' if t.id else ""
    head = "".join(f"<th{' class=l' if i == 0 else ''}>{esc(h)}</th>" for i, h in enumerate(t.header))
    body = []
    for i, row in enumerate(t.rows):
        cls = t.row_classes[i] if t.row_classes and i < len(t.row_classes) else ""
        attr = f' class="{esc(cls)}"' if cls else ""
        cells = "".join(_cell(v, j == 0 or (isinstance(v, str) and not _numeric(v))) for j, v in enumerate(row))
        body.append(f"<tr{attr}>{cells}</tr>")
    note = f"<p>{_inline(t.note)}</p>" if t.note else ""
    return (
        f"<h2>{esc(t.title)}</h2>{note}<div class=scroll><table{ident}><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _numeric(s: str) -> bool:
    return bool(re.fullmatch(r"[-+]?[\d.,]+(e[-+]?\d+)?\s*(%|[a-zA-Z/]{0,6})?", s.strip()))


def _meta_dl(meta: Mapping[str, Any]) -> str:
    rows = []
    for k, v in meta.items():
        if isinstance(v, Mapping):
            v = "; ".join(f"{kk}: {vv}" for kk, vv in v.items())
        elif isinstance(v, list | tuple):
            v = ", ".join(str(x) for x in v)
        rows.append(f'<tr><th class="l">{esc(k)}</th><td class="l">{esc(v)}</td></tr>')
    return f"<table>{''.join(rows)}</table>"


def render(report: Report) -> str:
    """The complete HTML document."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(report.title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{esc(report.title)}</h1>",
    ]
    if report.subtitle:
        parts.append(f"<p>{_inline(report.subtitle)}</p>")
    if report.banner:
        kind, text = report.banner
        parts.append(f'<p class="banner {esc(kind)}">{esc(text)}</p>')
    parts += [f"<p>{_inline(n)}</p>" for n in report.extra_notes]
    parts += [render_table(t) for t in report.lead_tables]
    if report.plots:
        parts.append("<h2>Plots</h2>")
    for p in report.plots:
        parts.append(
            f'<figure><img alt="{esc(p.title)}" src="{data_uri(p.png)}">'
            f"<figcaption>{esc(p.title)}{': ' + _inline(p.caption) if p.caption else ''}</figcaption></figure>"
        )
    parts += [render_table(t) for t in report.tables]
    if report.metadata:
        parts.append("<h2>Metadata</h2>")
        for title, meta in report.metadata:
            parts.append(f"<h3>{esc(title)}</h3>{_meta_dl(meta)}")
    if report.definitions_md:
        parts.append("<h2>Definitions</h2>")
        for title, md in report.definitions_md:
            parts.append(f"<h3>{esc(title)}</h3>{markdown_to_html(md)}")
    if report.generated_utc:
        parts.append(f"<p><small>generated {esc(report.generated_utc)} by vrmig</small></p>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
