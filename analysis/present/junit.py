"""JUnit XML of a night's regression checks (pure): one test case per matrix point and metric,
<failure> for a regression, <error> for runs that failed before their migration (a setup
problem, not a regression), <skipped> when a check could not be made, so CI systems show them
natively.

The document is built with ElementTree and is valid against the JUnit schema that Jenkins'
xUnit plugin validates with (junit-10.xsd; tests/fixtures/junit/): the counts ``tests``,
``failures``, ``errors`` on ``testsuites`` and ``testsuite``, ``skipped`` only on ``testsuite``
(the schema allows no ``skipped`` on ``testsuites``)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence

from analysis.stats.regression import Verdict

# Characters XML 1.0 cannot carry, not even escaped (control characters such as ESC in a
# tool's coloured error message); ElementTree would write them and leave the file unreadable.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _fmt(x: float | None) -> str:
    return "" if x is None else f"{x:.6g}"


def _xml_safe(text: str) -> str:
    """``text`` with every character XML cannot carry replaced by U+FFFD."""
    return _NOT_XML.sub("\ufffd", text)


def _case(suite: ET.Element, name: str, point: str, v: Verdict) -> None:
    case = ET.SubElement(suite, "testcase", classname=f"{name}.{point}", name=v.metric, time="0")
    if v.status == "regression":
        ET.SubElement(case, "failure", type="regression", message=v.reason).text = (
            f"check {v.metric} at {point}\naccepted: n={v.n_base} median={_fmt(v.median_base)}\n"
            f"tonight:  n={v.n_cand} median={_fmt(v.median_cand)}\n"
            f"worse by {_fmt(v.worse_by)} (relative {_fmt(v.worse_by_rel)}), p={_fmt(v.p_value)}\n"
        )
    elif v.status == "error":
        ET.SubElement(case, "error", type="setup", message=v.reason).text = f"{v.metric} at {point}: {v.reason}\n"
    elif v.status == "skipped":
        ET.SubElement(case, "skipped", message=v.reason)
    ET.SubElement(case, "system-out").text = v.reason


def junit_xml(
    suite: str,
    checks: Sequence[tuple[str, Verdict]],
    properties: Mapping[str, str] = {},
    timestamp: str = "",
    hostname: str = "",
    time_s: float = 0.0,
) -> str:
    """The JUnit XML document for ``checks`` = [(point label, verdict), ...]."""
    statuses = [v.status for _, v in checks]
    counts = {
        "tests": str(len(checks)),
        "failures": str(statuses.count("regression")),
        "errors": str(statuses.count("error")),
    }
    time = f"{time_s:.1f}"
    root = ET.Element("testsuites", name=suite, **counts, time=time)
    ts = ET.SubElement(
        root,
        "testsuite",
        name=suite,
        **counts,
        skipped=str(statuses.count("skipped")),
        time=time,
        timestamp=timestamp,
        hostname=hostname,
    )
    if properties:
        props = ET.SubElement(ts, "properties")
        for k, val in properties.items():
            ET.SubElement(props, "property", name=k, value=str(val))
    for point, v in checks:
        _case(ts, suite, point, v)
    for el in root.iter():
        if el.text:
            el.text = _xml_safe(el.text)
        el.attrib = {k: _xml_safe(val) for k, val in el.attrib.items()}
    ET.indent(root)
    return ET.tostring(root, encoding="UTF-8", xml_declaration=True).decode("utf-8") + "\n"
