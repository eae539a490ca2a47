"""JUnit XML of a night's regression checks (pure): one test case per matrix point and metric,
<failure> for a regression, <error> for runs that failed before their migration (a setup
problem, not a regression), <skipped> when a check could not be made, so CI systems show them
natively."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence

from analysis.stats.regression import Verdict


def _fmt(x: float | None) -> str:
    return "" if x is None else f"{x:.6g}"


def junit_xml(
    suite: str,
    checks: Sequence[tuple[str, Verdict]],
    properties: Mapping[str, str] = {},
    timestamp: str = "",
    hostname: str = "",
    time_s: float = 0.0,
) -> str:
    """The JUnit XML document for ``checks`` = [(point label, verdict), ...]."""
    failures = sum(1 for _, v in checks if v.status == "regression")
    skipped = sum(1 for _, v in checks if v.status == "skipped")
    errors = sum(1 for _, v in checks if v.status == "error")
    counts = {"tests": str(len(checks)), "failures": str(failures), "errors": str(errors), "skipped": str(skipped)}
    root = ET.Element("testsuites", {"name": suite, **counts, "time": f"{time_s:.1f}"})
    ts = ET.SubElement(
        root,
        "testsuite",
        {"name": suite, **counts, "time": f"{time_s:.1f}", "timestamp": timestamp, "hostname": hostname},
    )
    if properties:
        props = ET.SubElement(ts, "properties")
        for k, v in properties.items():
            ET.SubElement(props, "property", {"name": k, "value": str(v)})
    for point, v in checks:
        case = ET.SubElement(ts, "testcase", {"classname": f"{suite}.{point}", "name": v.metric, "time": "0"})
        if v.status == "regression":
            fail = ET.SubElement(case, "failure", {"type": "regression", "message": v.reason})
            fail.text = (
                f"check {v.metric} at {point}\naccepted: n={v.n_base} median={_fmt(v.median_base)}\n"
                f"tonight:  n={v.n_cand} median={_fmt(v.median_cand)}\n"
                f"worse by {_fmt(v.worse_by)} (relative {_fmt(v.worse_by_rel)}), p={_fmt(v.p_value)}\n"
            )
        elif v.status == "error":
            err = ET.SubElement(case, "error", {"type": "setup", "message": v.reason})
            err.text = f"{v.metric} at {point}: {v.reason}\n"
        elif v.status == "skipped":
            ET.SubElement(case, "skipped", {"message": v.reason})
        out = ET.SubElement(case, "system-out")
        out.text = v.reason
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
