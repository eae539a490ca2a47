"""The results contract: the names of the files a run directory holds, written by the
orchestrators (migrate/) and read by the analysis (analysis/), and meta.json's format version.

Every run-like command (``run``, ``calibrate``, ``baseline``, a sweep's or campaign's directory)
writes a ``meta.json`` of format :data:`META_FORMAT` with its ``kind``; a run's analysis writes
``summary.json`` (its own format version: analysis.summary).  docs/data-formats.md describes each."""

from __future__ import annotations

#: meta.json of every kind (run, calibration, baseline); bumped when a reader would misread an old one
META_FORMAT = 1

META_JSON = "meta.json"  # parameters, versions, host, status (migrate.core.meta)
SUMMARY_JSON = "summary.json"  # the figures derived from the raw traces (analysis.run)
SINK_JSON = "sink.json"  # vrsink's per-run record: gaps, counts, clock (crosstraffic/)
GEN_JSON = "gen.json"  # vrgen's send record
COUNTERS_TSV = "counters.tsv"  # the 10 ms interface counter samples (probes/vrsampler)
