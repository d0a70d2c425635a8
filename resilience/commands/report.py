"""`resilience report DIR`: write a run folder's results.json, report.md, report.html and junit.xml again
from what the run appended case by case (results.jsonl) and wrote at its start (run.json). For a run that
was killed (SIGKILL, a lost node), the reports say it is incomplete. With --screenshot, headless Chromium
renders report.html into DIR/report.png.

Exit status: 0 when every case passed and the run finished, 1 otherwise, 2 when DIR is not a run folder."""

from __future__ import annotations

import os


def register(sub) -> None:
    p = sub.add_parser(
        "report", help="rebuild the reports of a run folder from its results.jsonl (e.g. after the run was killed)"
    )
    p.add_argument("dir", metavar="DIR", help="a run folder (it holds run.json and results.jsonl)")
    p.add_argument(
        "--screenshot", action="store_true", help="also render report.html in headless Chromium into DIR/report.png"
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from ..report import RunFolder
    from ..report.folder import COMPLETE, INCOMPLETE, RUNNING, status_line
    from .run import summarize

    folder = RunFolder.open(args.dir)
    rows, torn = folder.rows()
    status = folder.meta.get("status", RUNNING)
    if status == RUNNING:  # the run never wrote its end: it was killed
        status = INCOMPLETE
    if torn:
        print(f"{torn} line(s) of results.jsonl could not be read (a row torn by the kill); skipped")
    paths = folder.finish(rows, status=status, why=folder.meta.get("stopped_by", ""))
    note = status_line(folder.meta, len(rows))
    if note:
        print(note)
    code = summarize(rows, paths)
    if args.screenshot:
        from ..report.browser import screenshot

        print(f"screenshot: {screenshot(paths['report.html'], os.path.join(folder.path, 'report.png'))}")
    return code if status == COMPLETE else max(code, 1)
