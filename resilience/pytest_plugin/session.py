"""The session's one run folder. Each process that runs cases (the only one, or each pytest-xdist worker)
appends its rows to a RunFolder of its own inside the session's folder; at the end the process that
owns the session (the xdist controller) writes one report over every row: results.json, report.md,
report.html and junit.xml, as `resilience run` writes them."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..report.result_row import ResultRow

WORKER_INPUT = "resilience_run_dir"  # the session folder, handed from the xdist controller to its workers


@dataclass
class SessionFolder:
    """`folder()` is this process' RunFolder, made on first use under `base()` (the session's folder)."""

    out: str | None  # --resilience-out, else pytest's temporary directory
    config: object | None = None  # pytest's config: its TempPathFactory, once the tmp_path plugin made it
    shared: str | None = None  # the session folder, when a controller made it
    worker: str = "main"
    backend: str = "per scenario"  # what the reports name as the backend under test
    _base: str | None = field(default=None, repr=False)
    _folder: object | None = field(default=None, repr=False)
    rows: int = 0

    def base(self) -> str:
        """The session folder (made once): under --resilience-out, else under pytest's temporary directory."""
        if self._base is None:
            self._base = self.shared or self._make()
        return self._base

    def _make(self) -> str:
        if self.out:
            from ..report import make_run_dir

            return make_run_dir(self.out, "pytest")
        factory = getattr(self.config, "_tmp_path_factory", None)
        if factory is not None:
            return str(factory.mktemp("resilience", numbered=True))
        import tempfile

        return tempfile.mkdtemp(prefix="resilience-pytest-")

    def folder(self):
        """This process' RunFolder: the session folder itself without xdist, a subfolder per worker with it."""
        if self._folder is None:
            from ..report import RunFolder
            from ..runner.case_loop import create_run_folder

            meta = {
                "command": command_of(self.config),
                "title": "pytest session",
                "worker": self.worker,
                "backend": self.backend,
            }
            if self.shared is None:
                self._folder = RunFolder(self.base(), dict(meta, started=_now()))
                _start(self._folder)
            else:
                self._folder = create_run_folder(self.base(), self.worker, meta)
        return self._folder

    @property
    def path(self) -> str:
        return self.folder().path

    def case_dir(self, name: str) -> str:
        import re

        self.rows += 1
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-")[:120] or "case"
        return os.path.join(self.path, "cases", f"{self.rows:04d}-{safe}")

    def append(self, row: ResultRow) -> None:
        self.folder().append(row)


def command_of(config) -> str:
    """The pytest command line the session was started with, as the reports show it."""
    import shlex

    args = getattr(getattr(config, "invocation_params", None), "args", None) or ()
    return " ".join(["pytest", *(shlex.quote(str(a)) for a in args)])


def _start(folder) -> None:
    """run.json and an empty results.jsonl in a folder made by pytest (tmp_path) or make_run_dir."""
    import json

    folder.meta.setdefault("status", "running")
    with open(os.path.join(folder.path, "run.json"), "w", encoding="utf-8") as f:
        json.dump(folder.meta, f, indent=1, default=str)
    open(folder.jsonl, "a").close()


def finish(session: SessionFolder, *, controller: bool) -> tuple[str, list[ResultRow]] | None:
    """Write the reports: of this process' folder, and on the controller one combined report over every
    worker's rows in the session folder. (report folder, rows), or None when no case ran."""
    from ..report import RunFolder, write_run_files

    if session._folder is not None:
        rows, _ = session.folder().rows()
        session.folder().finish(rows)
        if session.shared is None:
            return session.path, rows
    if not controller or session._base is None:
        return None
    rows = []
    for name in sorted(os.listdir(session._base)):
        sub = os.path.join(session._base, name)
        if os.path.isfile(os.path.join(sub, "results.jsonl")):
            rows += RunFolder.open(sub).rows()[0]
    if not rows:
        return None
    meta = {
        "command": command_of(session.config),
        "title": "pytest session (every worker)",
        "status": "complete",
        "backend": session.backend,
        "finished": _now(),
        "finished_cases": len(rows),
    }
    write_run_files(session._base, rows, meta)
    return session._base, rows


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def session_coverage(folder: str, rows: list[ResultRow]) -> list[str]:
    """The coverage (runner.coverage) of the scenarios the session's cases ran, read back from each case
    folder's scenario.yaml: kept as coverage.json in the session's report folder, said in one line."""
    from ..runner.coverage import REACHES, of_files

    coverage = of_files(os.path.join(r.case_dir, "scenario.yaml") for r in rows if r.case_dir)
    coverage.keep(folder)  # the session's verdicts stand without it
    never = coverage.unreached()
    # one line in the terminal summary (the table per dimension is in coverage.json)
    return [
        f"coverage: {len(REACHES) - len(never)} of {len(REACHES)} corners reached; never: {', '.join(never) or 'none'} "
        f"({os.path.join(folder, 'coverage.json')})"
    ]
