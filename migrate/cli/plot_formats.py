"""``--plot-formats`` (Make variable PLOT_FORMATS) of the commands that draw plots (run, sweep,
ab, report): checked before anything runs and handed to the analysis (analysis.present.formats)."""

from __future__ import annotations

import argparse
import os

from migrate.core.errors import ConfigError


def add_plot_formats_argument(parser: argparse.ArgumentParser) -> None:
    """``--plot-formats`` (Make variable PLOT_FORMATS): the formats the plots are saved in."""
    from analysis.present.formats import FORMATS

    parser.add_argument(
        "--plot-formats", default=None, metavar="PLOT_FORMATS",
        help=f"comma list of the plot files' formats among {', '.join(FORMATS)} (PNG always; default: all)",
    )  # fmt: skip


def apply_plot_formats(args: argparse.Namespace) -> None:
    """Check ``--plot-formats`` (ConfigError, exit 2, before anything runs) and hand it to the
    analysis of this process and of the runs it starts (``VRMIG_PLOT_FORMATS``)."""
    from analysis.present.formats import ENV, parse_formats

    text = getattr(args, "plot_formats", None)
    if text is None:
        return
    try:
        os.environ[ENV] = ",".join(parse_formats(text))
    except ValueError as err:
        raise ConfigError(str(err)) from None
