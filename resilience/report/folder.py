"""runs/<time>-<name>/: one folder of evidence per run, written in phases so a killed run keeps its rows.

run.json        written first (seed, command, versions, status "running"), rewritten at the end with
                status "complete" or "interrupted"; "running" left behind means the run was killed
results.jsonl   one row per finished case (report.result_row, docs/results.md), appended and fsynced as
                each case ends
results.json    the rows as one list, report.md, report.html, junit.xml: written when the run ends
                (also on Ctrl-C or SIGTERM), or later from results.jsonl by `resilience report DIR`
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import time

from ..errors import ConfigError
from ..vocab.versions import versions
from .html import render_html
from .junit import render_junit
from .markdown import render_markdown
from .result_row import ResultRow, rows_to_json

RUNNING, COMPLETE, INTERRUPTED, INCOMPLETE = "running", "complete", "interrupted", "incomplete"
REPORTS = ("results.json", "run.json", "report.md", "report.html", "junit.xml")


def _out_error(field: str, path: str, e: OSError, what: str = "a run folder under") -> ConfigError:
    reason = {
        errno.ENOSPC: "no space left on the device",
        errno.EROFS: "the file system is read-only",
        errno.EACCES: "permission denied",
        errno.EPERM: "permission denied",
        errno.EEXIST: "it is a file, not a folder",
        errno.ENOTDIR: "a part of the path is a file, not a folder",
        errno.EDQUOT: "disk quota exceeded",
    }.get(e.errno or 0, e.strerror or str(e))
    return ConfigError(
        field, f"cannot make {what} {path!r}: {reason}", "give a writable folder on a file system with free space"
    )


def make_run_dir(base: str, name: str, first: dict[str, str] | None = None) -> str:
    """A new folder `base/<time>-<name>[-N]`, created atomically (a concurrent call never gets the same
    one), holding the files of `first` ({name: text}, written durably). A base that is a file, under a
    file, read-only or full is one ConfigError naming --out, and nothing is left behind."""
    made: list[str] = []
    path = None
    try:
        made = _make_parents(base)
        path = _make_unique(base, name)
        _fill(path, first)
        return path
    except OSError as e:
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)
        _unmake(made)
        raise _out_error("--out", base, e) from None


def make_folder(path: str, field: str, *, empty: bool = False) -> str:
    """`path` as a writable folder, created with its parents if missing (for a folder the user names:
    `corpus write DIR`, `validate --shared`); one ConfigError naming `field`, and nothing left, if it is
    a file, under a file, read-only or on a full file system, or (with `empty`) holds anything."""
    made: list[str] = []
    try:
        made = _make_parents(path)
        if empty and os.listdir(path):
            raise ConfigError(field, f"{path} is not empty", "give a new or empty folder")
        _fill(path, None)
        return path
    except OSError as e:
        _unmake(made)
        raise _out_error(field, path, e, "the folder") from None


def _fill(path: str, first: dict[str, str] | None) -> None:
    """Write `first` into `path`; without it, write and remove a probe: the folder is writable and the
    disk has room for a page."""
    for fname, text in (first or {".probe": "probe\n"}).items():
        _write(os.path.join(path, fname), text)
    if not first:
        os.unlink(os.path.join(path, ".probe"))


def _unmake(made: list[str]) -> None:
    """Remove the folders a failed start made, innermost first, as long as they are empty."""
    for p in made:
        try:
            os.rmdir(p)
        except OSError:
            break


def _make_unique(base: str, name: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.")[:80] or "run"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1, 100_000):
        path = os.path.join(base, f"{stamp}-{safe}" + (f"-{n}" if n > 1 else ""))
        try:
            os.mkdir(path)  # fails if it exists: no check-then-create race
            return path
        except FileExistsError:
            continue
    raise ConfigError("--out", f"{base!r} already holds 100000 run folders named {stamp}-{safe}", "clean it up")


def _make_parents(base: str) -> list[str]:
    """Create `base` and its missing parents; the folders created, innermost first."""
    made, path = [], os.path.abspath(base)
    while not os.path.lexists(path):
        made.append(path)
        path = os.path.dirname(path)
    if not os.path.isdir(path):
        raise OSError(errno.ENOTDIR if made else errno.EEXIST, "not a folder", path)
    created: list[str] = []  # outermost first
    for p in reversed(made):
        try:
            os.mkdir(p)
        except FileExistsError:
            if not os.path.isdir(p):
                _unmake(created[::-1])
                raise
            continue  # another run made it at the same moment: theirs, not ours to remove
        except OSError:
            _unmake(created[::-1])
            raise
        created.append(p)
    return created[::-1]


class RunFolder:
    """The folder of one run. create() before any case runs; append() each finished case's row;
    finish() at the end, or on an interruption with status INTERRUPTED."""

    def __init__(self, path: str, meta: dict):
        self.path, self.meta = path, meta

    @classmethod
    def create(cls, base: str, name: str, meta: dict) -> RunFolder:
        """A new run folder with run.json (status running) and an empty results.jsonl (the runner's
        runner.case_loop.create_run_folder also clears the mounts a killed run left)."""
        meta = dict(meta, status=RUNNING, started=_now(), versions=versions())
        path = make_run_dir(base, name, {"run.json": json.dumps(meta, indent=1, default=str), "results.jsonl": ""})
        return cls(path, meta)

    @classmethod
    def open(cls, path: str) -> RunFolder:
        """An existing run folder (for `resilience report`)."""
        run_json = os.path.join(path, "run.json")
        if not os.path.isdir(path):
            raise ConfigError("report", f"{path} is not a folder", "give a run folder (it holds run.json)")
        try:
            with open(run_json, encoding="utf-8") as f:
                meta = json.load(f)
        except FileNotFoundError:
            raise ConfigError(
                "report",
                f"{path} is not a run folder: it has no run.json",
                "give a folder made by resilience run, matrix, fuzz or broken",
            ) from None
        except (OSError, ValueError) as e:
            raise ConfigError("report", f"{run_json} cannot be read: {e}", "") from None
        if not isinstance(meta, dict):
            raise ConfigError("report", f"{run_json} does not hold a JSON object", "")
        return cls(path, meta)

    @property
    def jsonl(self) -> str:
        return os.path.join(self.path, "results.jsonl")

    def append(self, row: ResultRow) -> None:
        """Add one finished case's row to results.jsonl, durably: a killed run keeps it."""
        with open(self.jsonl, "a", encoding="utf-8") as f:
            f.write(json.dumps(row.to_dict(), default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def rows(self) -> tuple[list[ResultRow], int]:
        """The rows in results.jsonl, and how many lines could not be read (a line torn by a kill); a
        row of a newer schema than this version reads is a ConfigError."""
        rows, torn = [], 0
        try:
            with open(self.jsonl, encoding="utf-8", errors="replace") as f:
                for line in f:
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                    except ValueError:
                        torn += 1
                        continue
                    if isinstance(row, dict) and "verdict" in row and "combo" in row:
                        rows.append(_row_of(row, self.jsonl))
                    else:
                        torn += 1
        except FileNotFoundError:
            pass
        return rows, torn

    def finish(
        self,
        rows: list[ResultRow] | None = None,
        *,
        status: str = COMPLETE,
        columns: list[str] | None = None,
        why: str = "",
    ) -> dict[str, str]:
        """Write results.json, the reports and junit.xml, and run.json with `status`; the paths."""
        if rows is None:
            rows, _ = self.rows()
        self.meta.update(status=status, finished=_now(), finished_cases=len(rows))
        if why:
            self.meta["stopped_by"] = why
        if columns is not None:
            self.meta["columns"] = columns
        return write_run_files(self.path, rows, self.meta, self.meta.get("columns"))


def _row_of(d: dict, path: str) -> ResultRow:
    """One row of `path`; a row this version cannot read (a newer schema) refused with the file named."""
    try:
        return ResultRow.from_dict(d)
    except ConfigError as e:
        raise ConfigError("report", f"{path}: {e.problem}", e.fix) from None


def status_line(meta: dict, cases: int) -> str:
    """'' for a complete run, else what a reader must know first: it stopped early."""
    status = meta.get("status", COMPLETE)
    if status == COMPLETE:
        return ""
    planned = meta.get("cases")
    of = f" of {planned}" if planned else ""
    if status == INTERRUPTED:
        return f"INTERRUPTED ({meta.get('stopped_by') or 'stopped'}): {cases}{of} cases finished"
    if status == INCOMPLETE:
        return f"INCOMPLETE: the run was killed; {cases}{of} cases finished"
    return f"{status.upper()}: {cases}{of} cases finished"


def write_run_files(
    run_dir: str, rows: list[ResultRow], meta: dict, columns: list[str] | None = None
) -> dict[str, str]:
    """results.json (a list of rows), run.json (seed, command, versions, status), report.md, report.html,
    junit.xml."""
    meta = dict(meta)
    meta.setdefault("versions", versions())
    meta.setdefault("status", COMPLETE)
    note = status_line(meta, len(rows))
    if note and "(" + meta["status"] not in meta.get("title", ""):
        meta["title"] = f"{meta.get('title', 'Resilience run')} ({meta['status']})"
    meta["note"] = note
    paths = {name: os.path.join(run_dir, name) for name in REPORTS}
    _draw_missing_timelines(run_dir, rows)
    _write(paths["results.json"], json.dumps(rows_to_json(rows), indent=1, default=str))
    _write(paths["run.json"], json.dumps({k: v for k, v in meta.items() if k != "note"}, indent=1, default=str))
    _write(paths["report.md"], render_markdown(rows, meta, columns, run_dir))
    _write(paths["report.html"], render_html(rows, meta, columns, run_dir))
    _write(paths["junit.xml"], render_junit(rows, meta))
    return paths


def _draw_missing_timelines(run_dir: str, rows: list[ResultRow]) -> None:
    """A timeline for each case folder that has none yet (the fuzzer's kept failures; cases of a run that was
    killed before it drew them)."""
    from .links import TIMELINE, local_path
    from .timeline import write_timeline

    for r in rows:
        case = local_path(run_dir, r.case_dir)
        if case is not None and not os.path.exists(os.path.join(run_dir, case, TIMELINE)):
            try:
                write_timeline(os.path.join(run_dir, case))
            except OSError:
                pass  # the reports come first


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def _write(path: str, text: str) -> None:
    tmp = path + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
