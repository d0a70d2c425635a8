"""What a fuzzing run gives: its outcome (counts, failures, timings, events), the minimal failures kept
under failures/ with their evidence, and the run folder's last rows, reports and fuzz.json."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, field

from ..checkers import FAIL, is_failing
from ..report.result_row import FaultResult, ResultRow, verdict_from_dict
from ..verdicts import Status
from .examples import ExampleJudge
from .judge import BAD, write_failure
from .options import FuzzOptions, replay_fuzz


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
    reproduced: int = 0  # of REPLAYS replays of the minimal scenario, how many failed the same way again
    replays: int = 0


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
    # why UNPROBED cases tested nothing ('rank_kill: never fired' -> cases): gaps in the search, never shrunk
    gaps: dict = field(default_factory=dict)
    # mode -> {failure class: cases}: failing in another way than the one the mode shrank (without --all-bugs)
    passed_over: dict = field(default_factory=dict)

    @property
    def unprobed(self) -> int:
        """Cases neither failed nor passed (FAILING verdicts that are not shrunk: a fault that never fired):
        gaps in the search, their reasons counted in `gaps`. Not passed, as in every command."""
        return sum(n for k, n in self.counts.items() if is_failing(k) and k not in BAD)

    def gap_summary(self) -> dict:
        """The gaps in the search as the fuzz report gives them: how many cases, and why (reason -> cases)."""
        return {"unprobed": self.unprobed, "reasons": dict(sorted(self.gaps.items(), key=lambda kv: (-kv[1], kv[0])))}

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
            "gaps": self.gap_summary(),
            "passed_over": self.passed_over,
        }


REPLAYS = 3  # each minimal failure is run again this many times before it is reported


def replayed(scenario, result, kind: str, evidence: str, io: str | None) -> int:
    """How many of REPLAYS runs of the minimal scenario, same seed, failed the same way (same failure
    class) again: fewer than all is a timing-dependent failure, itself a finding."""
    from ..runner.run import run_case
    from ..vocab.combos import Combination
    from .judge import failure_class

    again = 0
    for k in range(1, REPLAYS + 1):
        try:
            r = run_case(scenario, Combination.parse(result.combo), os.path.join(evidence, f"replay-{k}"), io=io)
        except Exception:  # noqa: BLE001  the framework broke on a replay: not a reproduction
            continue
        again += r.verdict in BAD and failure_class(r).__name__ == kind
    return again


def keep_failures(judge: ExampleJudge, run_dir: str) -> list[FuzzFailure]:
    """Each failure to report, moved under failures/ (its scenario and its evidence); the others removed."""
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
        again = replayed(scenario, result, kind, evidence, judge.opts.io)
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
                again,
                REPLAYS,
            )
        )
    return out


def write_outcome(
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
            "gaps": outcome.gap_summary(),
            "passed_over": outcome.passed_over,
        },
    )
    folder.finish(
        rows,
        status=INTERRUPTED if interrupted is not None else COMPLETE,
        why=signal_name(interrupted) if interrupted is not None else "",
    )
    with open(os.path.join(outcome.run_dir, "fuzz.json"), "w", encoding="utf-8") as f:
        json.dump(dict(outcome.to_dict(), status=folder.meta["status"]), f, indent=1)


__all__ = ["FuzzFailure", "FuzzOutcome", "keep_failures", "write_outcome"]
