"""Exceptions: what a failing save or finalize raised must be an Exception.

A training loop guards its checkpoint call with `except Exception`; an error class that derives only from
BaseException (torch DCP's CheckpointException does) passes through it and ends the job, where the
loop meant to log it and go on training. FAIL names the class and its bases. N/A when nothing raised."""

from __future__ import annotations

from .base import FAIL, NA, PASS, Evidence, Verdict
from .saves import describe


class ExceptionContract:
    name = "exceptions"

    def check(self, ev: Evidence) -> Verdict:
        if not ev.errors:
            return Verdict(self.name, NA, "no save or finalize raised")
        bad = [err for err in ev.errors if err.get("not_exception")]
        if bad:
            first = bad[0]
            bases = " -> ".join(first["not_exception"])
            return Verdict(
                self.name,
                FAIL,
                f"{describe(first)}; its class is not an Exception ({bases} -> BaseException), so "
                f"`except Exception` around the save does not catch it"
                + (f"; {len(bad) - 1} more" if len(bad) > 1 else ""),
                bad,
            )
        return Verdict(self.name, PASS, f"{len(ev.errors)} errors raised, each an Exception")
