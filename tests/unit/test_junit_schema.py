"""junit.xml validated against the JUnit schema Jenkins' xUnit plugin validates its input with
(tests/fixtures/junit/junit-10.xsd; source and licence in the README there), with xmlschema.
Checks are SYNTHETIC verdicts, one of each status, with text that XML must escape or cannot
carry at all."""

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema

from analysis.present.junit import junit_xml
from analysis.stats.regression import SETUP, Verdict

XSD = Path(__file__).resolve().parents[1] / "fixtures" / "junit" / "junit-10.xsd"

REGRESSION = "REGRESSION: median 0.32 vs accepted 0.1 (p=0.004 < 0.01) & worse"
CHECKS = [
    ("precopy-100M-1500", Verdict("downtime_counters_s", "regression", REGRESSION, 5, 5, 0.1, 0.32, 0.22, 2.2, 0.004)),
    ("precopy-100M-1500", Verdict("forwarded_ratio", "pass", "not worse: medians 0.9 and 0.9", 5, 5, 0.9, 0.9)),
    ("stopcopy-20M-1500", Verdict("downtime_counters_s", "skipped", "no accepted night yet")),
    (
        "stopcopy-20M-1500",
        Verdict(SETUP, "error", 'QEMU said "\x1b[31mcould not open <tap-R1>\x1b[0m"\x00 at 2 of 5 runs\n'),
    ),
]


@pytest.fixture(scope="module")
def schema():
    return xmlschema.XMLSchema(XSD)


def _night(checks=CHECKS):
    props = {"night": "20261124T132447Z-night", "qemu": "7.2.22 <Debian>", "empty": ""}
    return junit_xml("vrmig.nightly", checks, props, "2026-11-24T13:24:47.392+00:00", "vm", 412.34)


def test_junit_xml_is_valid_against_the_jenkins_junit_schema(schema):
    text = _night()
    errors = [f"{e.path}: {e.reason}" for e in schema.iter_errors(text)]
    assert errors == []
    root = ET.fromstring(text)
    suite = root.find("testsuite")
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("4", "1", "1")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == (
        "4",
        "1",
        "1",
        "1",
    )
    cases = suite.findall("testcase")
    assert cases[0].find("failure").get("message").endswith("& worse")
    assert "median=0.32" in cases[0].find("failure").text
    # characters XML 1.0 cannot carry are replaced, everything else survives escaped
    expected = 'QEMU said "\ufffd[31mcould not open <tap-R1>\ufffd[0m"\ufffd at 2 of 5 runs\n'
    assert cases[3].find("error").get("message") == expected
    assert suite.find("properties/property[@name='qemu']").get("value") == "7.2.22 <Debian>"


def test_a_night_without_checks_is_valid(schema):
    schema.validate(_night([]))


def test_the_schema_rejects_what_ci_systems_refuse(schema):
    """The validation can fail: the counts on <testsuites> may not include 'skipped', a test case
    needs a name, and the suite's failures and errors are required."""
    text = _night()
    case = '<testcase classname="vrmig.nightly.stopcopy-20M-1500"'
    suite = '<testsuite name="vrmig.nightly" tests="4"'
    bad = [
        text.replace('<testsuites name="vrmig.nightly"', '<testsuites skipped="1" name="vrmig.nightly"'),
        text.replace(f'{case} name="downtime_counters_s"', case),
        text.replace(f'{suite} failures="1"', suite),
    ]
    for doc in bad:
        assert doc != text
        assert not schema.is_valid(doc)
