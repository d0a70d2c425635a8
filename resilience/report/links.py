"""Links from a report to each case's files, relative to the run folder, so a moved or copied folder keeps
them; a row's paths are matched to the folder by their tail when the folder moved since the run
(results.json keeps the old paths)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import quote

from .matrix_table import FRAMEWORK_ERROR
from .result_row import ResultRow

TIMELINE = "timeline.html"  # written into each case folder by report.timeline
# (label, name inside the case folder; "" is the folder itself), linked when present
CASE_FILES = (
    ("case folder", ""),
    ("scenario", "scenario.yaml"),
    ("history", "history.jsonl"),
    ("logs", "logs"),
    ("faults fired", "faults.jsonl"),
    ("timeline", TIMELINE),
    ("traceback", FRAMEWORK_ERROR),
)


@dataclass(frozen=True)
class Link:
    label: str
    href: str  # relative to the run folder, URL-quoted


def case_links(run_dir: str, row: ResultRow) -> list[Link]:
    """Links to the case's folder and files that exist, relative to `run_dir`."""
    links = []
    case = local_path(run_dir, row.case_dir)
    if case is not None:
        for label, name in CASE_FILES:
            rel = f"{case}/{name}" if name else case
            if os.path.exists(os.path.join(run_dir, rel)):
                links.append(Link(label, _href(rel) + ("/" if os.path.isdir(os.path.join(run_dir, rel)) else "")))
    scenario = local_path(run_dir, row.scenario_file)
    if scenario is not None and not any(link.label == "scenario" for link in links):
        links.insert(0, Link("scenario", _href(scenario)))
    return links


def scenario_file_text(run_dir: str, row: ResultRow, limit: int = 20_000) -> str:
    """The text of the row's scenario file (a fuzzing run's minimal failure), cut at `limit` characters."""
    rel = local_path(run_dir, row.scenario_file)
    if rel is None:
        return ""
    with open(os.path.join(run_dir, rel), encoding="utf-8", errors="replace") as f:
        text = f.read(limit + 1)
    return text if len(text) <= limit else text[:limit] + "\n..."


def local_path(run_dir: str, path) -> str | None:
    """`path` as a path relative to `run_dir` ('/'-separated), if it is there; matched by its tail when the
    folder was moved since (a path recorded as /old/runs/x/cases/001 is found as cases/001)."""
    if not path or not isinstance(path, str):
        return None
    root = os.path.abspath(run_dir)
    full = os.path.abspath(path)
    if full.startswith(root + os.sep) and os.path.exists(full):
        return os.path.relpath(full, root).replace(os.sep, "/")
    parts = [p for p in os.path.normpath(path).split(os.sep) if p not in ("", ".", "..")]
    for i in range(len(parts)):  # the longest tail that exists under the folder
        rel = "/".join(parts[i:])
        if os.path.exists(os.path.join(root, *parts[i:])):
            return rel
    return None


def _href(rel: str) -> str:
    return quote(rel, safe="/")
