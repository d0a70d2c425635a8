"""Progress on stderr. In a terminal, a bar (tqdm) with the failures so far and the case running; elsewhere
(a CI log, `make run > file`) one plain line every few seconds or every tenth of the cases, with the counts
so far and the case that ended last, so a long run is never silent. A phase with no known end (the fuzzer
shrinking a failure) is shown as itself, counting cases, never as a count past 100%."""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from tqdm import tqdm

if TYPE_CHECKING:
    from ..report.result_row import ResultRow

EVERY_SECONDS = 10.0


class Progress:
    def __init__(
        self,
        total: int,
        unit: str,
        *,
        stream=None,
        every_seconds: float = EVERY_SECONDS,
        every: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.stream = stream if stream is not None else sys.stderr
        self.total, self.unit, self.clock = total, unit, clock
        self.plain = not _is_terminal(self.stream)
        self.every_seconds, self.every = every_seconds, every or max(1, total // 10)
        self.done = 0
        self.counts: Counter[str] = Counter()
        self.current, self.finished, self.phase_name = "", "", ""
        self.started = self.last_line = clock()
        self.since_line = 0
        self.bar = tqdm(total=total, unit=unit, file=self.stream, dynamic_ncols=True, leave=False, disable=self.plain)

    def start(self, what: str) -> None:
        """The case that runs now: on the bar, and in the plain line written as it ends."""
        self.current = what
        self._postfix()

    def update(self, n: int = 1, verdict: str | None = None, what: str | None = None) -> None:
        """`n` more cases done; `verdict` (of one case, `what`: default the one started last) counted for
        the failures so far."""
        self.done += n
        self.finished = f"{what or self.current} {verdict or ''}".strip()
        if verdict is not None:
            self.counts[str(verdict)] += 1
        self.bar.update(n)
        self._postfix()
        self.since_line += n
        if self.plain and (self.since_line >= self.every or self.clock() - self.last_line >= self.every_seconds):
            self.line()

    def row(self, row: ResultRow) -> None:
        """One finished case's row (runner.case_loop.judge_cases calls it after each case)."""
        name = row.column or row.fault or row.transition or row.scenario
        # cases run side by side end in any order: the row names its own
        self.update(1, row.verdict, f"{row.combo} {name}" if row.combo and name else None)

    def phase(self, name: str) -> None:
        """A phase whose length is not known in advance: the bar counts its cases without a total."""
        self.phase_name = name
        self.bar.reset(total=None)
        self.bar.set_description(name)
        self.line()

    def line(self) -> None:
        """One plain line with the counts so far (only when stderr is not a terminal)."""
        if not self.plain:
            return
        self.last_line, self.since_line = self.clock(), 0
        of = f"/{self.total}" if not self.phase_name and self.total else ""
        verdicts = ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
        parts = [
            f"{self.done}{of} {self.unit}",
            f"{self.failed} failed" + (f" ({verdicts})" if verdicts else ""),
            f"{self.clock() - self.started:.0f} s",
        ]
        if self.phase_name:
            parts.insert(0, self.phase_name)
        if self.finished:
            parts.append(f"last: {self.finished}")
        print("progress: " + " · ".join(parts), file=self.stream, flush=True)

    @property
    def failed(self) -> int:
        """Cases so far whose verdict counts as not passed (status.FAILING)."""
        from ..verdicts import is_failing

        return sum(n for verdict, n in self.counts.items() if is_failing(verdict))

    def note(self, text: str) -> None:
        self.bar.write(text, file=sys.stdout)

    def _postfix(self) -> None:
        if not self.plain:
            self.bar.set_postfix_str(f"{self.failed} failed" + (f" · {self.current}" if self.current else ""))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.bar.close()


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
