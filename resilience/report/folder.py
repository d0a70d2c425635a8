"""runs/<time>-<name>/: one folder of evidence per run."""
from __future__ import annotations

import json
import os
import re
import time

from ..checkpoint.manifest import versions
from .html import render_html
from .junit import render_junit
from .markdown import render_markdown


def make_run_dir(base: str, name: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "run"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = os.path.join(base, f"{stamp}-{safe}")
    n = 1
    while os.path.exists(path):
        n += 1
        path = os.path.join(base, f"{stamp}-{safe}-{n}")
    os.makedirs(path)
    return path


def write_run_files(run_dir: str, rows: list[dict], meta: dict, columns: list[str] | None = None) -> dict[str, str]:
    """results.json (a list of rows), run.json (seed, command, versions), report.md, report.html, junit.xml."""
    meta = dict(meta, versions=versions())
    paths = {name: os.path.join(run_dir, name) for name in
             ("results.json", "run.json", "report.md", "report.html", "junit.xml")}
    _write(paths["results.json"], json.dumps(rows, indent=1))
    _write(paths["run.json"], json.dumps(meta, indent=1))
    _write(paths["report.md"], render_markdown(rows, meta, columns))
    _write(paths["report.html"], render_html(rows, meta, columns))
    _write(paths["junit.xml"], render_junit(rows, meta))
    return paths


def _write(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
