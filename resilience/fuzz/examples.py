"""Judging a fuzzing run's examples: each example's scenario run on real ranks (or taken from the workers
running ahead), its row appended to the run folder, the evidence of failures kept and the rest removed, the
time and shrink budgets applied, and the Hypothesis events and statistics of each mode counted."""

from __future__ import annotations

import os
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

from hypothesis import reject

from ..errors import Interrupted
from ..report.result_row import ResultRow
from ..runner.run import CaseResult, replay_command
from ..runner.scenario import Scenario
from ..stopping import check as check_stop
from ..vocab.combos import Combination
from ..vocab.events import FAULT, NO_SAVE, REJECTED, VERDICT
from .events import events_of, faults_in, tell_hypothesis
from .failure_kinds import gap_reasons
from .judge import BAD, failure_class
from .options import FuzzOptions
from .speculation import Rejected, RunAhead, judged, key_of

OURS = (FAULT, VERDICT, REJECTED, NO_SAVE)  # the events a case gives; Hypothesis adds its own (retried draws, ...)


class BudgetSpent(BaseException):
    """Ends a mode's Hypothesis loop: the budget is spent. Not an Exception, so Hypothesis neither
    counts it as a failure nor shrinks it; it leaves the loop at once."""


class Interruption(BaseException):
    """Carries a SIGTERM (errors.Interrupted) out of Hypothesis, which would take an Exception for a
    failure of the example and shrink it."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


class ExampleJudge:
    """Runs every example's scenario, keeps the evidence of failures only, and applies the budget."""

    def __init__(self, opts: FuzzOptions, folder, on_case: Callable[[str, CaseResult | None], None]):
        self.opts, self.folder, self.run_dir, self.on_case = opts, folder, folder.path, on_case
        run_dir = folder.path
        self.rows: list[ResultRow] = []
        self.work = os.path.join(run_dir, "work")
        self.start = time.monotonic()
        self.counts: Counter = Counter()
        self.latest: dict[tuple[str, str], tuple[Scenario, CaseResult]] = {}  # (mode, class) -> last failure
        self.last: dict[str, tuple[str, str]] = {}  # mode -> the (mode, class) failing last
        self.failing: set[str] = set()
        self.gaps: Counter = Counter()  # why UNPROBED examples tested nothing: gaps in the search, not failures
        self.passed_over: dict[str, Counter] = {}  # mode -> failures of another class than the one it shrinks
        self.first_failure: float | None = None
        self.n = 0
        # the run's backends, each resolved once (speculation.judged): the command's own to begin with
        self.backends: dict = {opts.backend: opts.resolved} if opts.resolved is not None else {}
        self.events: dict[str, Counter] = {}  # mode -> the Hypothesis events its examples gave, rejected ones too
        self.hypothesis: dict[str, dict] = {}  # mode -> Hypothesis' own statistics, when it delivered them
        self.ahead: RunAhead | None = None  # examples judged ahead of Hypothesis asking (workers > 1)
        self.speculation: dict = {}

    def begin(self, mode: str) -> None:
        """Each mode gets its share of the time budget and its own shrink budget."""
        self.start, self.first_failure, self.stopped = time.monotonic(), None, ""
        self.budget = None if self.opts.time_budget is None else self.opts.time_budget / len(self.opts.modes)
        self.running = {"searching": 0.0, "shrinking": 0.0}  # seconds inside run_case, by phase
        self.phase_cases = {"searching": 0, "shrinking": 0}
        self.events[mode] = Counter()

    @property
    def phase(self) -> str:
        """searching until the mode's first failure, shrinking from then on."""
        return "searching" if self.first_failure is None else "shrinking"

    def timing(self) -> dict:
        """Where the mode's seconds went: all of them, those from its first failure on (shrinking), those
        spent running cases on ranks (by phase), and the cases run in each phase. The rest of the time is
        Hypothesis generating examples and the run folder being written."""
        now = time.monotonic()
        shrinking = 0.0 if self.first_failure is None else now - self.first_failure
        return {
            "seconds": round(now - self.start, 3),
            "shrinking": round(shrinking, 3),
            "running": {k: round(v, 3) for k, v in self.running.items()},
            "cases": dict(self.phase_cases),
        }

    def statistics(self, mode: str):
        """A callback for Hypothesis' statistics of the mode (delivered when its engine ends on its own, not
        when a budget or a signal stopped it): per phase, its test cases by status, seconds and events."""

        def keep(stats: dict) -> None:
            phases = {}
            for key, d in stats.items():
                if not key.endswith("-phase") or not isinstance(d, dict) or not d.get("test-cases"):
                    continue
                cases = d["test-cases"]
                phases[key[: -len("-phase")]] = {
                    "test_cases": len(cases),
                    "statuses": dict(Counter(t["status"] for t in cases)),
                    "seconds": round(float(d.get("duration-seconds", 0.0)), 3),
                    "drawing": round(sum(float(t.get("drawtime", 0.0)) for t in cases), 3),
                    "events": dict(Counter(e for t in cases for e in t.get("events", []) if e.startswith(OURS))),
                }
            self.hypothesis[mode] = {"phases": phases, "stopped_because": str(stats.get("stopped-because", ""))}

        return keep

    def _may_run(self, key: str) -> str:
        """'' when the example may run, else the budget it would exceed. Known failures always run
        (Hypothesis replays its minimal example last); anything else only within the time budget, or
        once something failed, within the shrink budget."""
        if key in self.failing:
            return ""
        now = time.monotonic()
        if self.first_failure is not None:
            return "" if now - self.first_failure < self.opts.shrink_budget else "shrink budget"
        return "" if self.budget is None or now - self.start < self.budget else "time budget"

    def _record(self, mode: str, scenario: Scenario, combo: Combination, result: CaseResult, events: list[str]) -> None:
        """The case's row, appended to results.jsonl now, with its scenario kept as cases/NNNNN-mode.yaml
        for the row's replay command."""
        folder = os.path.join(self.run_dir, "cases")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{self.n:05d}-{mode}.yaml")
        with open(path, "w", encoding="utf-8") as f:
            f.write(f"# {result.verdict}: {result.detail[:300]}\n")
            f.write(scenario.as_run(combo, scenario.backend).to_yaml())
        row = result.to_row().with_extra(
            column=mode,
            case_dir=None,
            scenario_file=path,
            replay=replay_command(path, combo, scenario.backend, self.opts.io),
            events=tuple(events),  # as Hypothesis was told: the fault kinds drawn and the verdict
            phase=self.phase,
        )
        self.rows.append(row)
        self.folder.append(row)

    def failures(self) -> list[tuple[str, str, Scenario, CaseResult]]:
        """(mode, class, scenario, result) of each failure to report: every class with all_bugs,
        else the one each mode shrank last."""
        keys = sorted(self.latest) if self.opts.all_bugs else sorted(self.last.values())
        return [(mode, kind, *self.latest[(mode, kind)]) for mode, kind in keys]

    def __call__(self, mode: str, scenario: Scenario, combo: Combination) -> CaseResult | None:
        try:
            check_stop()  # a Ctrl-C or SIGTERM that Python dropped (in a gc callback of Hypothesis') ends it here
        except Interrupted as e:
            raise Interruption(e) from None
        scenario = self._placed(scenario)
        key = key_of(scenario, combo)
        spent = self._may_run(key)
        if spent:
            self.stopped = spent
            raise BudgetSpent(spent)
        self.n += 1
        case_dir = os.path.join(self.work, f"{self.n:05d}")
        faults, phase, began = faults_in(scenario), self.phase, time.monotonic()
        try:
            ahead = self.ahead.take(key) if self.ahead is not None else None
            if ahead is None:
                result = judged(scenario, combo, case_dir, self.opts.io, self.backends)
            else:  # run ahead in a worker, in its own folder
                result = ahead
                case_dir = ahead.case_dir if isinstance(ahead, CaseResult) else case_dir
        except Interrupted as e:
            raise Interruption(e) from None
        finally:
            self.running[phase] += time.monotonic() - began
        if isinstance(result, Rejected):
            # a generated corruption found nothing to damage (no file left of that rank, or a file this
            # implementation does not write, such as our manifest.json): not an example
            shutil.rmtree(result.case_dir, ignore_errors=True)
            self.counts["rejected"] += 1
            self._tell(mode, events_of(faults, None))
            self.on_case(mode, None)
            reject()
        self.counts[result.verdict] += 1
        self.phase_cases[phase] += 1
        events = events_of(faults, result.verdict)
        self._tell(mode, events)
        self._record(mode, scenario, combo, result, events)
        self.on_case(mode, result)
        self.gaps.update(gap_reasons(result))
        cls = failure_class(result) if result.verdict in BAD else None
        if cls is not None and self._passes_over(mode, cls.__name__):
            cls = None
        if cls is not None:
            previous = self.latest.get((mode, cls.__name__))
            if previous is not None and previous[1].case_dir != case_dir:
                shutil.rmtree(previous[1].case_dir, ignore_errors=True)
            # Hypothesis replays each minimal failure last: the last one recorded per class is the minimal one
            self.latest[(mode, cls.__name__)] = (scenario, result)
            self.last[mode] = (mode, cls.__name__)
            self.failing.add(key)
            if self.first_failure is None:
                self.first_failure = time.monotonic()
                self.stop_running_ahead()  # shrinking asks for examples of its own, one by one
            raise cls(scenario, result)
        shutil.rmtree(case_dir, ignore_errors=True)
        return result

    def _passes_over(self, mode: str, name: str) -> bool:
        """Whether a failure of class `name` is not shown to Hypothesis: without --all-bugs a mode shrinks the
        first class it found and no other (Hypothesis would slip to any failure smaller than it, a durability
        FAIL into an UNKNOWN); the other classes met on the way are counted (--all-bugs shrinks each)."""
        target = self.last.get(mode)
        if self.opts.all_bugs or target is None or target[1] == name:
            return False
        self.passed_over.setdefault(mode, Counter())[name] += 1
        return True

    def run_ahead(self, drawn: list[tuple[Scenario, Combination]]) -> None:
        """Start judging these examples (the ones Hypothesis is about to ask for) in worker processes."""
        self.ahead = RunAhead([(self._placed(s), c) for s, c in drawn], self.opts.workers, self.work, self.opts.io)

    def _placed(self, scenario: Scenario) -> Scenario:
        """The scenario with the run's --storage in place of its own (local when drawn); on an object store,
        its write faults made the faults of their upload requests (runner.on_store.requests_of_writes)."""
        if self.opts.storage is None or self.opts.storage == "local":
            return scenario
        from ..runner.on_store import requests_of_writes

        return requests_of_writes(replace(scenario, storage=self.opts.storage))

    def stop_running_ahead(self) -> None:
        if self.ahead is not None:
            self.ahead.close()
            self.speculation = self.ahead.counts()
            self.ahead = None

    def nothing_to_judge(self, mode: str) -> None:
        """An example that ran no case (a state-machine run that saved nothing): counted among its events."""
        self._tell(mode, [NO_SAVE])

    def _tell(self, mode: str, events: list[str]) -> None:
        self.events[mode].update(events)
        tell_hypothesis(events)
