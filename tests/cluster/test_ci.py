"""The CI workflow users copy: it installs with the torch pin, runs the suite with xdist and the matrix, keeps
the run folders and JUnit, and every `resilience` command in it is one this version accepts."""

import shlex
from pathlib import Path

import yaml

from resilience.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "ci" / "github-actions.yml"


def _steps():
    doc = yaml.safe_load(WORKFLOW.read_text())
    assert doc.get("on", doc.get(True))  # PyYAML reads the bare key `on` as True
    return doc, {name: job["steps"] for name, job in doc["jobs"].items()}


def test_the_torch_pin_stays():
    lines = [ln.strip() for ln in (ROOT / "ci" / "constraints.txt").read_text().splitlines()]
    assert "torch==2.13.0" in lines


def test_workflow_installs_tests_with_xdist_and_keeps_the_evidence():
    doc, jobs = _steps()
    runs = {name: [s.get("run", "") for s in steps] for name, steps in jobs.items()}
    for name in jobs:  # every job installs with the torch pin (the tests job with the extras its tests need)
        assert any(r.startswith("python -m pip install -c ci/constraints.txt -e ") for r in runs[name])
    assert 'python -m pip install -c ci/constraints.txt -e ".[megatron,dev]"' in runs["tests"]
    assert any("apt-get install" in r and "fuse3" in r for r in runs["tests"])  # the FUSE tests mount
    assert any("pytest -n auto" in r and "--junitxml=" in r for r in runs["tests"])
    assert any(r.startswith("resilience matrix") for r in runs["matrix"])
    uploads = {
        name: [s for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact")]
        for name, steps in jobs.items()
    }
    assert uploads["tests"][0]["with"]["path"] == "test-results/" and uploads["tests"][0]["if"] == "always()"
    assert uploads["matrix"][0]["with"]["path"] == "runs/" and uploads["matrix"][0]["if"] == "always()"
    assert "download.pytorch.org/whl/cpu" in doc["env"]["PIP_EXTRA_INDEX_URL"]


def test_every_resilience_command_in_the_workflow_parses():
    doc, jobs = _steps()
    commands = [s["run"] for steps in jobs.values() for s in steps if s.get("run", "").startswith("resilience ")]
    assert len(commands) >= 3
    parser = build_parser()
    for cmd in commands:
        argv = shlex.split(cmd.replace('"$BACKEND"', doc["env"]["BACKEND"]))[1:]
        parser.parse_args(argv)  # SystemExit here means the workflow calls an option that does not exist
