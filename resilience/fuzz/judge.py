"""Judge a scenario on real ranks and turn a bad verdict into an exception that replays.

A ScenarioFailed message holds the verdict, what each failing checker saw, the scenario as YAML and
the one-line `resilience run` command that replays it, so a failure printed by pytest or Hypothesis
is enough to reproduce it. Each verdict, failing checker and kind of evidence (failure_kinds) gets its
own subclass, so Hypothesis shrinks different bugs separately instead of folding them into one."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable

from ..checkers import FAIL, FAILING, UNKNOWN
from ..errors import ResilienceError
from ..runner.run import CaseResult, replay_command, run_case
from ..runner.scenario import Scenario
from ..vocab.combos import Combination
from .failure_kinds import camel, evidence_kind, failing_verdict

# what fails a property and is shrunk; an UNPROBED case (a generated fault found nothing to hit) is not a bug
# to shrink, but it is not a pass either: the fuzz summary counts it among FAILING, as every command does
BAD = (FAIL, UNKNOWN)


class ScenarioFailed(ResilienceError, AssertionError):
    """A scenario got a verdict it must not get. `result` is the CaseResult, `scenario` the Scenario. An
    AssertionError too: pytest and Hypothesis report it as the failed assertion of a test."""

    checker: str = ""  # the checker giving the verdict ("run", "framework", ...)
    evidence_kind: str = ""  # failure_kinds.EVIDENCE_KINDS for a FAIL, else ""

    def __init__(
        self, scenario: Scenario, result: CaseResult, replay: str | None = None, *, also: Iterable[ScenarioFailed] = ()
    ):
        self.scenario, self.result = scenario, result
        self.replay = replay or result.replay
        # every failure one call found, this one first (resilience_run runs every combination, then raises)
        self.failures: list[ScenarioFailed] = [self, *also]
        super().__init__(describe_failure(scenario, result, self.replay) + _also_failing(self.failures[1:]))

    def __reduce__(self):  # crossing a process boundary, the message is what matters
        return AssertionError, (str(self),)


_CLASSES: dict[str, type] = {}


def failure_class(result: CaseResult) -> type[ScenarioFailed]:
    """ScenarioFailed subclass named after the verdict, the first checker giving it and, for a FAIL, the
    kind of its evidence (failure_kinds): FailInDurabilityPowerLoss, FailInIntegrityDamage,
    UnknownInFramework. One class per name, so Hypothesis tells the failures apart by it."""
    verdict = failing_verdict(result)
    checker = verdict.checker if verdict is not None else "run"
    kind = evidence_kind(result)
    name = f"{camel(str(result.verdict).lower())}In{camel(checker)}{camel(kind)}"
    if name not in _CLASSES:
        attrs = {"__module__": __name__, "checker": checker, "evidence_kind": kind}
        _CLASSES[name] = type(name, (ScenarioFailed,), attrs)
    return _CLASSES[name]


def _also_failing(others: list[ScenarioFailed]) -> str:
    """The other failures of the same call, one paragraph each: verdict, combination, detail, replay."""
    if not others:
        return ""
    lines = ["", "", f"{len(others)} more combination{'s' if len(others) != 1 else ''} failed:"]
    for f in others:
        lines += [f"  {f.result.verdict} with {f.result.combo} ({type(f).__name__}): {f.result.detail[:300]}"]
        lines += [f"    evidence: {f.result.case_dir}", f"    replay: {f.replay}"]
    return "\n".join(lines)


def describe_failure(scenario: Scenario, result: CaseResult, replay: str, *, limit: int = 1500) -> str:
    """The evidence a person needs: verdict, each checker's verdict and evidence, the scenario, the replay."""
    lines = [f"{result.verdict}: scenario {scenario.name!r} with {result.combo}: {result.detail}", "", "checkers:"]
    for v in result.verdicts:
        lines.append(f"  {v.status:<20} {v.checker}: {v.detail}")
        if v.status in FAILING and v.evidence:
            text = json.dumps(v.evidence, indent=1, default=str)
            lines += ["    " + line for line in (text[:limit] + (" ..." if len(text) > limit else "")).splitlines()]
    lines += ["", f"evidence: {result.case_dir}", "", "scenario:"]
    lines += ["  " + line for line in scenario.to_yaml().splitlines()]
    lines += ["", f"replay: {replay}"]
    return "\n".join(lines)


def judge(
    scenario: Scenario,
    combo: Combination | str | None = None,
    *,
    backend: str | None = None,
    case_dir: str | None = None,
    fail_on: Iterable[str] = BAD,
    io: str | None = None,
) -> CaseResult:
    """Run one scenario x combination on real ranks; raise ScenarioFailed if the verdict is in `fail_on`.
    Without `case_dir` the evidence goes to a temporary folder, kept only when the case fails."""
    if combo is None:
        if len(scenario.combinations) != 1:
            raise ValueError("the scenario has several combinations: say which one, or use judge_all")
        combo = scenario.combinations[0]
    combo = combo if isinstance(combo, Combination) else Combination.parse(combo)
    if (backend is not None and backend != scenario.backend) or (io is not None and io != scenario.io):
        from dataclasses import replace

        # so the YAML written beside the evidence replays alone
        scenario = replace(scenario, backend=backend or scenario.backend, io=io or scenario.io)
    temporary = case_dir is None
    case_dir = case_dir or tempfile.mkdtemp(prefix="resilience-case-")
    result = run_case(scenario, combo, case_dir, backend=scenario.backend)
    if result.verdict in tuple(fail_on):
        raise failure_class(result)(scenario, result)
    if temporary:
        shutil.rmtree(case_dir, ignore_errors=True)
    return result


def judge_all(
    scenario: Scenario,
    combos: Iterable[Combination] | None = None,
    *,
    backend: str | None = None,
    run_dir: str | None = None,
    fail_on: Iterable[str] = BAD,
) -> list[CaseResult]:
    """judge() for each of the scenario's combinations (or those of `combos` it has); stops at the first
    failure."""
    wanted = list(combos) if combos is not None else None
    out = []
    for i, combo in enumerate(scenario.combinations):
        if wanted is not None and combo not in wanted:
            continue
        case_dir = os.path.join(run_dir, f"{i:02d}-{str(combo).replace('/', '-')}") if run_dir else None
        out.append(judge(scenario, combo, backend=backend, case_dir=case_dir, fail_on=fail_on))
    return out


def write_failure(folder: str, stem: str, scenario: Scenario, result: CaseResult) -> tuple[str, str]:
    """The scenario as `folder/stem.yaml`, the replay command as its first line; (path, command)."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{stem}.yaml")
    combo = Combination.parse(result.combo)
    command = replay_command(path, combo, scenario.backend)
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"# {result.verdict}: {result.detail[:300]}\n# replay: {command}\n")
        f.write(scenario.as_run(combo).to_yaml())
    return path, command
