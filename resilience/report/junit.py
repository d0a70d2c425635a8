"""junit.xml: one testcase per row, so CI systems show the verdicts."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from ..verdicts import FAIL, FLAKY, NA, is_failing
from .matrix_table import column_of, is_framework_error, row_of
from .result_row import ResultRow, culprits_text, runs_text

# found broken by the implementation (a failure); every other failing verdict is an error of the case
FAILED = (FAIL, FLAKY)


def render_junit(rows: list[ResultRow], meta: dict) -> str:
    suite = ET.Element(
        "testsuite",
        name=meta.get("title", "resilience"),
        tests=str(len(rows)),
        failures=str(sum(r.verdict in FAILED for r in rows)),
        errors=str(sum(is_failing(r.verdict) and r.verdict not in FAILED for r in rows)),
    )
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="status", value=str(meta.get("status", "complete")))
    if meta.get("note"):
        ET.SubElement(props, "property", name="note", value=meta["note"])
    for r in rows:
        case = ET.SubElement(suite, "testcase", classname=row_of(r), name=column_of(r), time=str(r.seconds))
        text = "\n".join([r.detail, *culprits_text(r), *runs_text(r), f"replay: {r.replay}"])
        if r.verdict == FAIL:
            ET.SubElement(case, "failure", message=r.detail[:200]).text = text
        elif r.verdict == FLAKY:  # timing-dependent: a finding, with each run's verdict and evidence
            ET.SubElement(case, "failure", type=str(FLAKY), message=f"{FLAKY}: {r.detail[:200]}").text = text
        elif is_failing(r.verdict):
            kind = "framework error" if is_framework_error(r) else str(r.verdict)
            ET.SubElement(case, "error", type=kind, message=f"{r.verdict}: {r.detail[:200]}").text = text
        elif r.verdict == NA:
            ET.SubElement(case, "skipped", message="not applicable")
    return ET.tostring(suite, encoding="unicode", xml_declaration=True)
