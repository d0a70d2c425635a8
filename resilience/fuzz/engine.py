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

import os
import shutil
import time
from collections.abc import Callable

from hypothesis.reporting import with_reporter
from hypothesis.statistics import collector

from ..runner.run import CaseResult
from ..stopping import ask
from .examples import BudgetSpent, ExampleJudge, Interruption
from .modes import fuzz_machine, fuzz_scenarios
from .options import FuzzOptions, options_dict, replay_fuzz
from .outcome import FuzzOutcome, keep_failures, write_outcome


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
    judge = ExampleJudge(opts, folder, progress or (lambda mode, result: None))
    outcome = FuzzOutcome(run_dir, opts.seed, options_dict(opts))
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
                            fuzz_scenarios(opts, judge, os.path.join(run_dir, "hypothesis"))
                        else:
                            fuzz_machine(opts, judge, os.path.join(run_dir, "hypothesis"))
                except BudgetSpent as e:
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
        except Interruption as e:
            interrupted = e.error
        except KeyboardInterrupt as e:
            interrupted = e
    outcome.failures = keep_failures(judge, run_dir)
    outcome.counts = dict(judge.counts)
    outcome.events = {mode: dict(sorted(c.items())) for mode, c in judge.events.items()}
    outcome.hypothesis = dict(judge.hypothesis)
    outcome.gaps = dict(judge.gaps)
    outcome.passed_over = {mode: dict(c) for mode, c in judge.passed_over.items()}
    outcome.seconds = time.monotonic() - started
    shutil.rmtree(judge.work, ignore_errors=True)
    write_outcome(outcome, opts, folder, judge.rows, interrupted)
    if interrupted is not None:
        raise interrupted
    return outcome


class _sigterm_interrupts:
    """While fuzzing, SIGTERM and SIGHUP raise Interruption, which Hypothesis lets through (main thread only)."""

    SIGNALS = ("SIGTERM", "SIGHUP")

    def __enter__(self):
        import signal
        import threading

        self.previous = {}
        if threading.current_thread() is threading.main_thread():

            def stop(signum, frame):
                raise Interruption(ask(signum))

            self.previous = {s: signal.signal(getattr(signal, s), stop) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc):
        import signal

        for s, handler in self.previous.items():
            signal.signal(getattr(signal, s), handler)


def _flatten(e: BaseException) -> list[BaseException]:
    inner = getattr(e, "exceptions", None)
    if inner:
        return [x for sub in inner for x in _flatten(sub)]
    return [e]


def _is_failure(e: BaseException) -> bool:
    from .judge import ScenarioFailed

    return isinstance(e, ScenarioFailed)


__all__ = ["fuzz"]
