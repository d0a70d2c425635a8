"""A fuzzing run: generated scenarios and the lifecycle state machine, judged on real ranks, with a
time budget, the Hypothesis example database and every minimal failure kept in one run folder.

    runs/<time>-fuzz/
      run.json results.jsonl results.json report.md report.html junit.xml   (as every run folder: one row
                         per case, appended as it ends, with its replay; then one per minimal failure)
      cases/NNNNN-<mode>.yaml  the scenario of every case, which its row's replay command runs
      fuzz.json          seed, options, counts, failures
      hypothesis/        the example database (Hypothesis replays what it holds first)
      hypothesis.log     what Hypothesis printed (falsifying examples, the rule sequences)
      failures/NNN-<mode>-<what>.yaml   each minimal failing scenario, its replay command on line 2
      failures/NNN-<mode>-<what>/       the evidence of its last run (history, ranks' logs, checkpoint)

The same seed and options give the same examples in the same order, so a run replays exactly as long
as the time budget does not cut it short. The time budget stops generation itself: once it is spent the
next example raises a private stop (a BaseException, which Hypothesis does not treat as a failure)
caught around the mode; Ctrl-C and SIGTERM stop the same way and still write the run folder, marked
interrupted."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from hypothesis import HealthCheck, Phase, given, reject, settings
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.errors import InvalidArgument
from hypothesis.reporting import with_reporter
from hypothesis.stateful import run_state_machine_as_test
from hypothesis.statistics import collector

from ..checkers import FAIL, is_failing
from ..errors import ConfigError, Interrupted
from ..report.result_row import FaultResult, ResultRow, verdict_from_dict
from ..runner.adapters import preload
from ..runner.run import CaseResult, replay_command
from ..runner.scenario import Scenario
from ..status import Status
from ..stopping import ask, check as check_stop
from ..vocab.combos import Combination, valid_combinations
from ..vocab.events import FAULT, NO_SAVE, REJECTED, VERDICT
from . import profiles  # noqa: F401  (registers the profiles)
from .events import events_of, faults_in, tell_hypothesis
from .judge import BAD, failure_class, write_failure
from .machine import lifecycle_machine
from .scenario_strategies import scenarios
from .speculation import Rejected, RunAhead, draw_ahead, judged, key_of

MODES = ("scenarios", "machine")
OURS = (FAULT, VERDICT, REJECTED, NO_SAVE)  # the events a case gives; Hypothesis adds its own (retried draws, ...)


@dataclass
class FuzzOptions:
    examples: int = None  # type: ignore[assignment]  # per mode; None: the profile's max_examples
    seed: int = None  # type: ignore[assignment]  # None: 0 under a derandomized profile (ci), else a fresh random one
    combos: list[Combination] | None = None
    max_world: int = 2
    time_budget: float | None = None  # seconds for the whole run, shared by the modes
    shrink_budget: float = 120.0  # seconds a found failure may spend shrinking
    all_bugs: bool = False  # shrink each failing checker separately (slower), not one failure per mode
    backend: str = "reference"
    backend_options: bool = False  # scenario mode draws the backend's declared options too
    precision_changes: bool = False  # a resume after the last save may change the precision
    io: str | None = None  # how faults reach the backend (runner.ways); None: auto
    out: str = "runs"
    modes: tuple[str, ...] = MODES
    faults: list[str] | None = None  # fault kinds to draw (default: the deterministic ones)
    max_steps: int = 6  # actions per scenario, rules per machine run
    profile: str = "dev"  # ci: 25 examples, seed 0; dev: 50; fuzz: 500 (resilience.fuzz.profiles)
    workers: int = 1  # scenario mode: examples run ahead this many at a time (speculation.py)

    def __post_init__(self):
        try:
            base = settings.get_profile(self.profile)
        except InvalidArgument:
            raise ConfigError("--profile", f"no Hypothesis profile {self.profile!r}", "use ci, dev or fuzz") from None
        if self.examples is None:
            self.examples = base.max_examples
        if self.seed is None:
            self.seed = 0 if base.derandomize else secrets.randbelow(2**32)
        for m in self.modes:
            if m not in MODES:
                raise ConfigError("--mode", f"unknown mode {m!r}", f"use {', '.join(MODES)} or both")


@dataclass
class FuzzFailure:
    mode: str
    kind: str  # the failure class, e.g. FailInDurability
    verdict: str
    combo: str
    detail: str
    scenario_file: str
    replay: str
    case_dir: str
    steps: int
    checkers: list = field(default_factory=list)  # each checker's verdict and evidence, as a row holds them
    faults: list = field(default_factory=list)


@dataclass
class FuzzOutcome:
    run_dir: str
    seed: int
    options: dict
    counts: dict = field(default_factory=dict)
    failures: list[FuzzFailure] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # what Hypothesis raised besides our failures
    seconds: float = 0.0
    stopped: dict = field(default_factory=dict)  # mode -> why it stopped early ("time budget", "shrink budget")
    timings: dict = field(default_factory=dict)  # mode -> {"seconds": all of it, "shrinking": from the first failure}
    events: dict = field(default_factory=dict)  # mode -> {Hypothesis event: examples that gave it}
    hypothesis: dict = field(default_factory=dict)  # mode -> Hypothesis' own statistics, when it delivered them

    @property
    def unprobed(self) -> int:
        """Cases neither failed nor passed (FAILING verdicts that are not shrunk: a fault that never fired)."""
        return sum(n for k, n in self.counts.items() if is_failing(k) and k not in BAD)

    @property
    def ok(self) -> bool:
        return not self.failures and not self.errors and not self.unprobed

    def to_dict(self) -> dict:
        return {
            "run_dir": self.run_dir,
            "seed": self.seed,
            "options": self.options,
            "counts": self.counts,
            "failures": [asdict(f) for f in self.failures],
            "errors": self.errors,
            "seconds": round(self.seconds, 3),
            "stopped": self.stopped,
            "timings": self.timings,
            "events": self.events,
            "hypothesis": self.hypothesis,
        }


class _Stop(BaseException):
    """Ends a mode's Hypothesis loop: the budget is spent. Not an Exception, so Hypothesis neither
    counts it as a failure nor shrinks it; it leaves the loop at once."""


class _Interrupt(BaseException):
    """Carries a SIGTERM (errors.Interrupted) out of Hypothesis, which would take an Exception for a
    failure of the example and shrink it."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


class _Judge:
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
        self.first_failure: float | None = None
        self.n = 0
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
            raise _Interrupt(e) from None
        key = key_of(scenario, combo)
        spent = self._may_run(key)
        if spent:
            self.stopped = spent
            raise _Stop(spent)
        self.n += 1
        case_dir = os.path.join(self.work, f"{self.n:05d}")
        faults, phase, began = faults_in(scenario), self.phase, time.monotonic()
        try:
            ahead = self.ahead.take(key) if self.ahead is not None else None
            if ahead is None:
                result = judged(scenario, combo, case_dir, self.opts.io)
            else:  # run ahead in a worker, in its own folder
                result = ahead
                case_dir = ahead.case_dir if isinstance(ahead, CaseResult) else case_dir
        except Interrupted as e:
            raise _Interrupt(e) from None
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
        if result.verdict in BAD:
            cls = failure_class(result)
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

    def run_ahead(self, drawn: list[tuple[Scenario, Combination]]) -> None:
        """Start judging these examples (the ones Hypothesis is about to ask for) in worker processes."""
        self.ahead = RunAhead(drawn, self.opts.workers, self.work, self.opts.io)

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


def _settings(opts: FuzzOptions, database: str | None) -> settings:
    return settings(
        settings.get_profile(opts.profile),
        max_examples=opts.examples,
        deadline=None,
        database=DirectoryBasedExampleDatabase(database) if database is not None else None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=opts.all_bugs,
        stateful_step_count=opts.max_steps,
        print_blob=False,
        phases=[p for p in Phase if p is not Phase.explain],
    )  # explaining reruns on real ranks


def _seeded(test, seed: int):
    # what hypothesis.seed() does, minus switching the example database off: the run keeps its database
    test._hypothesis_internal_use_seed = seed
    return test


def fuzz(
    opts: FuzzOptions, *, progress: Callable[[str, CaseResult | None], None] | None = None, run_dir: str | None = None
) -> FuzzOutcome:
    """Run the fuzzer; `progress(mode, result)` is called after each case (result None: rejected).
    Ctrl-C (KeyboardInterrupt) or SIGTERM (errors.Interrupted) stops it: the run folder is written for
    the cases that finished, marked interrupted, and the interruption is raised again."""
    from ..report import RunFolder
    from ..runner.case_loop import create_run_folder

    meta = {"title": "resilience fuzz", "seed": opts.seed, "backend": opts.backend, "command": replay_fuzz(opts)}
    folder = RunFolder(run_dir, dict(meta, status="running")) if run_dir else create_run_folder(opts.out, "fuzz", meta)
    run_dir = folder.path
    started = time.monotonic()
    judge = _Judge(opts, folder, progress or (lambda mode, result: None))
    outcome = FuzzOutcome(run_dir, opts.seed, _options(opts))
    log_path = os.path.join(run_dir, "hypothesis.log")
    interrupted: BaseException | None = None
    with (
        open(log_path, "w", encoding="utf-8") as log,
        with_reporter(lambda text: print(text, file=log)),
        _sigterm_interrupts(),
    ):
        try:
            for mode in opts.modes:
                judge.begin(mode)
                try:
                    with collector.with_value(judge.statistics(mode)):
                        if mode == "scenarios":
                            _fuzz_scenarios(opts, judge, os.path.join(run_dir, "hypothesis"))
                        else:
                            _fuzz_machine(opts, judge, os.path.join(run_dir, "hypothesis"))
                except _Stop as e:
                    outcome.stopped[mode] = str(e)
                    log.write(f"{mode}: stopped: the {e} is spent\n")
                except Exception as e:  # our failures (one or a group of them), or Hypothesis' own complaint
                    log.write(f"{mode}: {type(e).__name__}: {e}\n")
                    for x in _flatten(e):  # Hypothesis attaches the falsifying example as notes
                        log.write("".join(f"{note}\n" for note in getattr(x, "__notes__", [])))
                        log.write(f"{type(x).__name__}: {x}\n\n")
                    leftover = [x for x in _flatten(e) if not _is_failure(x)]
                    outcome.errors += [f"{mode}: {type(x).__name__}: {str(x)[:2000]}" for x in leftover]
                finally:
                    outcome.timings[mode] = judge.timing()
                    if judge.speculation:
                        outcome.timings[mode]["run_ahead"], judge.speculation = judge.speculation, {}
        except _Interrupt as e:
            interrupted = e.error
        except KeyboardInterrupt as e:
            interrupted = e
    outcome.failures = _keep_failures(judge, run_dir)
    outcome.counts = dict(judge.counts)
    outcome.events = {mode: dict(sorted(c.items())) for mode, c in judge.events.items()}
    outcome.hypothesis = dict(judge.hypothesis)
    outcome.seconds = time.monotonic() - started
    shutil.rmtree(judge.work, ignore_errors=True)
    _write(outcome, opts, folder, judge.rows, interrupted)
    if interrupted is not None:
        raise interrupted
    return outcome


class _sigterm_interrupts:
    """While fuzzing, SIGTERM and SIGHUP raise _Interrupt, which Hypothesis lets through (main thread only)."""

    SIGNALS = ("SIGTERM", "SIGHUP")

    def __enter__(self):
        import signal
        import threading

        self.previous = {}
        if threading.current_thread() is threading.main_thread():

            def stop(signum, frame):
                raise _Interrupt(ask(signum))

            self.previous = {s: signal.signal(getattr(signal, s), stop) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc):
        import signal

        for s, handler in self.previous.items():
            signal.signal(getattr(signal, s), handler)


def _fuzz_scenarios(opts: FuzzOptions, judge: _Judge, database: str) -> None:
    strategy = scenarios(
        combinations=opts.combos,
        max_world=opts.max_world,
        faults=opts.faults,
        max_steps=opts.max_steps,
        backend=opts.backend,
        backend_options=opts.backend_options,
        precision_changes=opts.precision_changes,
        name="fuzz-scenario",
    )

    @_settings(opts, database)
    @given(strategy)
    def fuzz_scenarios(scenario):
        judge("scenarios", scenario, scenario.combinations[0])

    if opts.workers > 1:
        # the same seed and settings draw the same examples in the same order, as long as they pass:
        # draw them first (no case runs), judge them in workers while Hypothesis asks for them one by one
        drawn = draw_ahead(
            lambda record: _seeded(_settings(opts, None)(given(strategy)(record)), opts.seed),
            meanwhile=lambda: preload((opts.backend, c) for c in opts.combos or valid_combinations()),
        )
        judge.run_ahead([(s, s.combinations[0]) for s in drawn])
    try:
        _seeded(fuzz_scenarios, opts.seed)()
    finally:
        judge.stop_running_ahead()


def _fuzz_machine(opts: FuzzOptions, judge: _Judge, database: str) -> None:
    def judge_with(scenario: Scenario, combo: Combination):
        return judge("machine", scenario, combo)

    machine = lifecycle_machine(
        combinations=opts.combos,
        max_world=opts.max_world,
        faults=opts.faults,
        backend=opts.backend,
        precision_changes=opts.precision_changes,
        judge_with=judge_with,
        on_nothing_to_judge=lambda: judge.nothing_to_judge("machine"),
    )
    machine.name = "fuzz-machine"
    run_state_machine_as_test(_seeded(machine, opts.seed), settings=_settings(opts, database))


def _flatten(e: BaseException) -> list[BaseException]:
    inner = getattr(e, "exceptions", None)
    if inner:
        return [x for sub in inner for x in _flatten(sub)]
    return [e]


def _is_failure(e: BaseException) -> bool:
    from .judge import ScenarioFailed

    return isinstance(e, ScenarioFailed)


def _keep_failures(judge: _Judge, run_dir: str) -> list[FuzzFailure]:
    out = []
    folder = os.path.join(run_dir, "failures")
    keep = {id(result) for *_, result in judge.failures()}
    for *_, result in [(m, k, *v) for (m, k), v in judge.latest.items()]:
        if id(result) not in keep:
            shutil.rmtree(result.case_dir, ignore_errors=True)
    for i, (mode, kind, scenario, result) in enumerate(judge.failures(), 1):
        stem = f"{i:03d}-{mode}-{kind}"
        scenario.name = stem
        path, command = write_failure(folder, stem, scenario, result)
        evidence = os.path.join(folder, stem)
        if os.path.isdir(result.case_dir):
            shutil.move(result.case_dir, evidence)
        out.append(
            FuzzFailure(
                mode,
                kind,
                result.verdict,
                result.combo,
                result.detail,
                path,
                command,
                evidence,
                len(scenario.steps),
                [v.to_dict() for v in result.verdicts],
                result.faults,
            )
        )
    return out


def _options(opts: FuzzOptions) -> dict:
    d = asdict(opts)
    d["combos"] = [str(c) for c in opts.combos] if opts.combos else None
    d["modes"] = list(opts.modes)
    return d


def _write(
    outcome: FuzzOutcome, opts: FuzzOptions, folder, case_rows: list[ResultRow], interrupted: BaseException | None
) -> None:
    """results.json: a row per case (as appended), then one per minimal failure (appended to results.jsonl
    too, so `resilience report` rebuilds the same reports); and the reports."""
    from ..report.folder import COMPLETE, INTERRUPTED
    from ..runner.case_loop import signal_name

    # interrupted: results.jsonl holds exactly the rows that were written, whenever the signal came
    rows = folder.rows()[0] if interrupted is not None else list(case_rows)
    extra = [
        ResultRow(
            os.path.basename(f.scenario_file),
            f.combo,
            Status(f.verdict),
            f.detail,
            0.0,
            tuple(verdict_from_dict(c) for c in f.checkers),
            tuple(FaultResult.from_dict(x) for x in f.faults),
            fault=f.mode,
            case_dir=f.case_dir,
            replay=f.replay,
            column=f"{f.mode}: minimal failure",
            scenario_file=f.scenario_file,
            minimal=True,
        )
        for f in outcome.failures
    ]
    if outcome.errors:
        extra.append(
            ResultRow(
                "fuzz",
                ", ".join(map(str, opts.combos or [])) or "all",
                FAIL,
                outcome.errors[0][:300],
                outcome.seconds,
                case_dir=outcome.run_dir,
                replay=replay_fuzz(opts),
                column="fuzz",
            )
        )
    for row in extra:
        folder.append(row)
    rows += extra
    folder.meta.update(
        stopped=outcome.stopped,
        counts=outcome.counts,
        kind="fuzz",
        fuzz={
            "examples": opts.examples,
            "modes": list(opts.modes),
            "timings": outcome.timings,
            "rejected": outcome.counts.get("rejected", 0),
            "errors": outcome.errors,
            "events": outcome.events,
            "hypothesis": outcome.hypothesis,
        },
    )
    folder.finish(
        rows,
        status=INTERRUPTED if interrupted is not None else COMPLETE,
        why=signal_name(interrupted) if interrupted is not None else "",
    )
    with open(os.path.join(outcome.run_dir, "fuzz.json"), "w", encoding="utf-8") as f:
        json.dump(dict(outcome.to_dict(), status=folder.meta["status"]), f, indent=1)


def replay_fuzz(opts: FuzzOptions) -> str:
    """The command that runs this fuzzing run again, example for example."""
    import shlex

    cmd = [
        "resilience",
        "fuzz",
        "--seed",
        str(opts.seed),
        "--examples",
        str(opts.examples),
        *(["--profile", opts.profile] if opts.profile != FuzzOptions.profile else []),
        "--max-world",
        str(opts.max_world),
        "--max-steps",
        str(opts.max_steps),
    ]
    if opts.combos:
        cmd += ["--combos", *map(str, opts.combos)]
    if opts.faults is not None:
        cmd += ["--faults", *opts.faults]
    if tuple(opts.modes) != MODES:
        cmd += ["--mode", *opts.modes]
    if opts.backend != "reference":
        cmd += ["--backend", opts.backend]
    if opts.backend_options:
        cmd += ["--backend-options"]
    if opts.precision_changes:
        cmd += ["--precision-changes"]
    if opts.time_budget is not None:
        cmd += ["--time-budget", f"{opts.time_budget:g}"]
    if opts.shrink_budget != FuzzOptions.shrink_budget:
        cmd += ["--shrink-budget", f"{opts.shrink_budget:g}"]
    if opts.all_bugs:
        cmd += ["--all-bugs"]
    return " ".join(shlex.quote(c) for c in cmd)


__all__ = ["FuzzFailure", "FuzzOptions", "FuzzOutcome", "MODES", "fuzz", "replay_fuzz"]
