"""Declarative scenarios: YAML in, a validated Scenario out, or one error listing every problem of the
file, each with its line and field.

Scenario files are untrusted input. They are read with resilience.safe_yaml (size, aliases, tags,
nesting and duplicate keys bounded), every mapping refuses keys it does not know, and every value is
checked for type and range against the limits of scenario_schema (by scenario_checks), before any rank
starts. The Scenario itself and its YAML form are scenario_model's."""

from __future__ import annotations

from pathlib import Path

from .. import safe_yaml
from .scenario_checks import from_dict
from .scenario_model import Scenario
from .scenario_schema import UNNAMED, ScenarioError, ScenarioProblem, safe_name


# ---- reading ------------------------------------------------------------------------------------------
def load_text(text: str | bytes, source: str = "<scenario>") -> Scenario:
    try:
        doc = safe_yaml.load(text)
    except safe_yaml.Refused as e:
        raise ScenarioError(
            source,
            problems=[ScenarioProblem(p.line, "yaml" if p.line else "file", p.problem, p.fix) for p in e.problems],
        ) from None
    if doc.data is None:
        raise ScenarioError(source, None, "file", "is empty", "a scenario needs at least `steps:`")
    return from_dict(doc.data, source, doc.lines)


def load_file(path: str | Path) -> Scenario:
    p = Path(path)
    if not p.is_file():  # also refuses FIFOs and devices, which could block the read
        what = "is not a regular file" if p.exists() else "does not exist"
        raise ScenarioError(str(p), None, "file", what, "give the path of a .yaml scenario")
    try:
        with open(p, "rb") as f:
            data = f.read(safe_yaml.MAX_BYTES + 1)
    except OSError as e:
        raise ScenarioError(str(p), None, "file", f"cannot be read: {e.strerror or e}") from None
    if len(data) > safe_yaml.MAX_BYTES:
        raise ScenarioError(
            str(p),
            None,
            "file",
            f"is larger than the limit of {safe_yaml.MAX_BYTES} bytes",
            "a scenario is a short text file",
        )
    scenario = load_text(data, str(p))
    if scenario.name == UNNAMED:
        scenario.name = safe_name(p.stem)
    return scenario


__all__ = ["Scenario", "ScenarioError", "ScenarioProblem", "from_dict", "load_file", "load_text", "safe_name"]
