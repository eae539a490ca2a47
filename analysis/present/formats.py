"""Which file formats the plots are saved in: PNG (embedded in the HTML reports), SVG (vector,
for the web and editing) and PDF (vector, for papers), all three unless the user asks for fewer
(``--plot-formats``, Make variable PLOT_FORMATS, or the environment variable
``VRMIG_PLOT_FORMATS`` that the commands set and the analysis reads).  PNG is always among them:
the reports embed it."""

from __future__ import annotations

import io
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from migrate.core.atomic import replacing

FORMATS = ("png", "svg", "pdf")
ENV = "VRMIG_PLOT_FORMATS"


def parse_formats(text: str) -> tuple[str, ...]:
    """``"png,svg"`` -> ("png", "svg") in canonical order, PNG added; ValueError (one line naming
    the choices) for an empty list or an unknown format."""
    asked = [w.strip().lower() for w in text.split(",") if w.strip()]
    unknown = [w for w in asked if w not in FORMATS]
    if unknown or not asked:
        what = ", ".join(unknown) if unknown else "nothing"
        choices = ", ".join(FORMATS)
        raise ValueError(f"PLOT_FORMATS={text!r}: {what} is not a plot format: give a comma list of {choices}")
    return tuple(f for f in FORMATS if f in asked or f == "png")


def formats_from_env(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The formats ``VRMIG_PLOT_FORMATS`` names (all of :data:`FORMATS` when unset; an invalid
    value, which the commands refuse before it gets here, falls back to all)."""
    text = (os.environ if environ is None else environ).get(ENV)
    if not text:
        return FORMATS
    try:
        return parse_formats(text)
    except ValueError:
        return FORMATS


def save_figure(fig: Any, path: Path, formats: Sequence[str] | None = None, dpi: int = 110) -> bytes:
    """Write the matplotlib Figure ``fig`` to ``path`` (PNG, atomically) and beside it, with the
    same name, in the other ``formats`` (default: :func:`formats_from_env`); a format not asked
    for is removed, so no stale SVG or PDF stays beside a new PNG.  Returns the PNG's bytes (what
    the reports embed)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    png = buf.getvalue()
    wanted = formats if formats is not None else formats_from_env()
    for fmt in FORMATS:
        target = path if fmt == "png" else path.with_suffix(f".{fmt}")
        if fmt != "png" and fmt not in wanted:
            target.unlink(missing_ok=True)
            continue
        with replacing(target) as tmp:
            if fmt == "png":
                tmp.write_bytes(png)
            else:
                fig.savefig(tmp, format=fmt, dpi=dpi)
    return png
