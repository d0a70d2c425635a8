"""Exceptions: what a failing save, finalize or load raised must be an Exception, and an error caused by
a damaged file should name that file.

A training loop guards its checkpoint call with `except Exception`; an error class that derives only from
BaseException (torch DCP's CheckpointException does) passes through it and ends the job, where the
loop meant to log it and go on training. The class judged is the one the implementation raised and, when
an adapter translated the library's error into the protocol's, the library's own (`raw`): a user calling
the library directly meets that one. FAIL names the class and its bases.

A load that fails on a damaged file and does not say which file sends its user looking through every
shard: a WARN (the guarantee held, the finding is counted apart from passes) when no rank's error, nor what
the library raised under it, names the file the damage struck. N/A when nothing raised."""

from __future__ import annotations

import os

from .base import FAIL, NA, PASS, WARN, Verdict
from .evidence import Evidence, LoadRecord
from .saves import describe


class ExceptionContract:
    name = "exceptions"

    def check(self, ev: Evidence) -> Verdict:
        failed_loads = [ld for ld in ev.loads if ld.status != "ok"]
        if not ev.errors and not failed_loads:
            return Verdict(self.name, NA, "no save, finalize or load raised")
        bad = [p for err in ev.errors if (p := _save_problem(err))]
        bad += [p for ld in failed_loads if (p := _load_problem(ld))]
        unnamed = [w for ld in failed_loads if (w := _unnamed_file(ld, ev))]
        warn = ""
        if unnamed:
            warn = unnamed[0]["problem"] + (f"; {len(unnamed) - 1} more" if len(unnamed) > 1 else "")
        if bad:
            more = f"; {len(bad) - 1} more" if len(bad) > 1 else ""
            return Verdict(
                self.name,
                FAIL,
                bad[0]["problem"] + more + (f"; also {WARN.value}: {warn}" if warn else ""),
                bad + unnamed,
            )
        raised = len(ev.errors) + len(failed_loads)
        passed = f"{raised} errors raised, each an Exception" + (
            ", the library's own under each translated one too" if _any_raw(ev, failed_loads) else ""
        )
        if warn:
            return Verdict(self.name, WARN, f"{warn}; {passed}", unnamed)
        return Verdict(self.name, PASS, passed)


def _not_an_exception(bases: list[str]) -> str:
    return (
        f"its class is not an Exception ({' -> '.join(bases)} -> BaseException), so `except Exception` "
        f"around the call does not catch it"
    )


def _save_problem(err: dict) -> dict | None:
    said = describe(dict(err, error=_first_line(str(err.get("error") or ""))))  # a gathered error: its first line
    if err.get("not_exception"):
        return dict(err, problem=f"{said}; {_not_an_exception(err['not_exception'])}")
    raw = err.get("raw") or {}
    if raw.get("not_exception"):
        name = raw["not_exception"][0].rsplit(".", 1)[-1]
        return dict(
            err,
            problem=f"{said}, translated by the adapter from the library's {name}; "
            f"{_not_an_exception(raw['not_exception'])} where the library is called directly",
        )
    return None


def _load_problem(ld: LoadRecord) -> dict | None:
    what = f"the load in job {ld.job} raised {_first_line(ld.error)}"
    if ld.not_exception:
        return {"load_job": ld.job, "error": ld.error, "problem": f"{what}; {_not_an_exception(ld.not_exception)}"}
    raw = ld.raw or {}
    if raw.get("not_exception"):
        name = raw["not_exception"][0].rsplit(".", 1)[-1]
        return {
            "load_job": ld.job,
            "error": ld.error,
            "raw": raw,
            "problem": f"{what}, translated by the adapter from the library's {name}; "
            f"{_not_an_exception(raw['not_exception'])} where the library is called directly",
        }
    return None


def _any_raw(ev: Evidence, loads: list[LoadRecord]) -> bool:
    return any(err.get("raw") for err in ev.errors) or any(ld.raw for ld in loads)


def _first_line(text: str, limit: int = 200) -> str:
    line = text.split("\n", 1)[0]
    return line if len(line) <= limit else line[:limit] + " ..."


def _unnamed_file(ld: LoadRecord, ev: Evidence) -> dict | None:
    """A WARN finding when the load failed after damage at rest and nothing it raised names a damaged file."""
    if ld.refused or ld.crash_state:
        return None
    damaged = [c for c in ev.corrupted_before(ld.index) if c.get("rel") or c.get("path")]
    if not damaged:
        return None
    texts = [ld.error, (ld.raw or {}).get("error", ""), *ld.rank_errors.values()]
    names = {str(c.get("rel") or c.get("path")) for c in damaged}
    if any(_names(text, name) for text in texts for name in names):
        return None
    first = sorted(names)[0]
    return {
        "level": WARN.value,
        "load_job": ld.job,
        "damaged": sorted(names),
        "error": ld.error,
        "problem": f"the load in job {ld.job} failed on damaged {first} without naming it: "
        f"{_first_line(ld.error, 160)}",
    }


def _names(text: str, rel: str) -> bool:
    """Whether an error text names the file: its path under the checkpoint root, or its file name."""
    return bool(text) and (rel in text or os.path.basename(rel) in text)
