"""The checkpoint lifecycle as a Hypothesis state machine.

Rules: train n steps, save, finalize an async save, crash a rank during a save, a write fault during a
save, corrupt a file at rest, lose unsynced writes, resume (on the same or another topology; with
precision_changes, in another precision once saving is over), delete old checkpoints. The combination,
topologies and model are chosen once, at the start. The rules build up one scenario; at the end of each
run (teardown) it runs on real ranks and every checker must hold over its whole history: atomic commit,
durability, integrity, resume equivalence, topology independence, precision on resume.
(Judging once, at the end, sees every load the run made, costs one run on real ranks per example, and
keeps the rules Hypothesis draws independent of what the ranks did, so a failure replays and shrinks.)
A failure prints as the minimal sequence of rules, and as the scenario YAML with the `resilience run`
command that replays it.

    from resilience.fuzz.machine import lifecycle_machine
    TestLifecycle = lifecycle_machine(combinations=["GLOBAL/torch_dist/sync"], max_world=2).TestCase
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from ..runner.run import CaseResult
from ..runner.scenario import Scenario, from_dict
from ..vocab.combos import Combination
from ..vocab.events import NO_SAVE
from . import lifecycle as lc, scenario_strategies as rst
from .events import tell_hypothesis
from .judge import judge
from .state_strategies import model_specs, topologies
from .strategy_args import InvalidStrategyArgument

Judge = Callable[[Scenario, Combination], CaseResult]


class LifecycleMachine(RuleBasedStateMachine):
    """Base of the machines lifecycle_machine() builds; holds the model and judges the scenario."""

    backend = "reference"
    name = "lifecycle"

    def __init__(self):
        super().__init__()
        self.life: lc.Lifecycle = None  # type: ignore[assignment]  # set by the machine's initialize rule
        self.model: Any = None
        self.results: list[CaseResult] = []

    # ---- the scenario built so far ---------------------------------------------------------------
    def scenario(self) -> Scenario:
        life = self.life
        return from_dict(
            {
                "name": self.name,
                "topology": str(life.base),
                "model": self.model.to_dict(),
                "combinations": [str(life.combo)],
                "steps": life.steps + life.closing_steps(),
                "backend": self.backend,
                "tags": ["generated", "state-machine"],
            },
            source=f"<{self.name}>",
        )

    def judge_scenario(self, scenario: Scenario, combo: Combination) -> CaseResult:
        """Run and judge; raise ScenarioFailed on FAIL or UNKNOWN. Replaced by the fuzz run."""
        return judge(scenario, combo)

    def nothing_to_judge(self) -> None:
        """The run saved nothing, so no case runs: told to Hypothesis as an event. Replaced by the fuzz run,
        which counts it too."""
        tell_hypothesis([NO_SAVE])

    def _judge(self) -> None:
        if self.life is None or not self.life.saves:
            self.nothing_to_judge()
            return
        self.results.append(self.judge_scenario(self.scenario(), self.life.combo))

    def _do(self, action) -> None:
        self.life.apply(action)

    def _allows(self, action) -> bool:
        return self.life is not None and self.life.allows(action)

    def teardown(self):
        """The checkers are the invariant, judged over the whole run once every rule has run."""
        if sys.exc_info()[0] is None:  # not while a rule's exception (or Hypothesis' own) is on its way out
            self._judge()


def lifecycle_machine(
    *,
    combinations: Iterable[Combination | str] | None = None,
    max_world: int = 2,
    faults: Iterable[str] | None = None,
    moves: bool = True,
    backend: str = "reference",
    precision_changes: bool = False,
    judge_with: Judge | None = None,
    on_nothing_to_judge: Callable[[], None] | None = None,
) -> type[LifecycleMachine]:
    """A state machine class over the given combinations, world size, fault kinds (names of
    resilience.faults kinds, default: the deterministic ones) and backend. `judge_with(scenario, combo)`
    replaces the default judge (run on real ranks, raise ScenarioFailed on FAIL or UNKNOWN)."""
    combos = rst.combinations(among=combinations) if combinations is not None else rst.combinations()
    topos = topologies(max_world=max_world)
    kinds = frozenset(rst.SCENARIO_FAULTS if faults is None else faults)
    bad = [k for k in kinds if k not in rst.SCENARIO_FAULTS]
    if bad:
        raise InvalidStrategyArgument(
            "faults", f"the state machine cannot draw {bad[0]!r}", f"use some of {', '.join(rst.SCENARIO_FAULTS)}"
        )
    writes = [k for k in lc.WRITE_FAULTS if k in kinds]
    rest = [k for k in lc.CORRUPTIONS if k in kinds]
    CheckpointLifecycle = _machine(_setups(combos, topos, moves), kinds, writes, rest, moves, precision_changes)
    CheckpointLifecycle.backend = backend
    if judge_with is not None:
        CheckpointLifecycle.judge_scenario = lambda self, scenario, combo: judge_with(scenario, combo)  # type: ignore[method-assign]
    if on_nothing_to_judge is not None:
        CheckpointLifecycle.nothing_to_judge = lambda self: on_nothing_to_judge()  # type: ignore[method-assign]
    return CheckpointLifecycle


def _setups(combos: st.SearchStrategy, topos: st.SearchStrategy, moves: bool) -> Callable[[], st.SearchStrategy]:
    """The choices made once, at the start: combination, topology, the topologies resumes move to, model."""

    @st.composite
    def setups(draw):
        combo = draw(combos)
        base = draw(topos)
        others = draw(st.lists(topos.filter(lambda t: t != base), max_size=2, unique=True)) if moves else []
        model = draw(model_specs(topologies=[base, *others], max_layers=2, max_heads=2, max_vocab=32))
        return combo, base, others, model

    return setups


def _crash_points() -> st.SearchStrategy:
    """Where a crash during a save strikes: at a phase, after a number of bytes, or at an operation."""
    return st.one_of(
        st.tuples(st.just("phase"), st.sampled_from(lc.CRASH_PHASES)),
        st.tuples(st.just("byte"), st.integers(1, 1024)),
        st.tuples(st.just("op"), st.sampled_from(lc.CRASH_OPS), st.sampled_from(("before", "after"))),
    )


def enabled(drawn: bool, action):
    """A rule's precondition: its kind is drawn in this machine, and the lifecycle allows its action now."""
    return precondition(lambda self: drawn and self._allows(action))


# The class's source is kept as it is: Hypothesis derives a derandomized run's seed (and its database key)
# from it, so the same settings keep drawing the same examples.
def _machine(setups, kinds, writes: list, rest: list, moves: bool, precision_changes: bool) -> type[LifecycleMachine]:
    """The machine class: the rules `kinds` (`writes`, `rest`), `moves` and `precision_changes` allow."""
    rank, seed, crash_points = st.integers(0, 7), st.integers(0, 1000), _crash_points()

    class CheckpointLifecycle(LifecycleMachine):
        __doc__ = LifecycleMachine.__doc__

        @initialize(setup=setups(), warm_up=st.integers(0, 3))
        def start(self, setup, warm_up):
            combo, base, others, model = setup
            precisions = rst.other_precisions(model) if precision_changes else []
            self.life, self.model = lc.Lifecycle(combo, base, list(others), precisions=precisions), model
            for action in (lc.Train(warm_up), lc.Save()) if warm_up else ():  # most runs start from a commit
                self._do(action)

        @precondition(lambda self: self._allows(lc.Train()))
        @rule(steps=st.integers(1, 3))
        def train(self, steps):
            self._do(lc.Train(steps))

        @precondition(lambda self: self._allows(lc.Save()))
        @rule()
        def save(self):
            self._do(lc.Save())

        @precondition(lambda self: self._allows(lc.Finalize()))
        @rule()
        def finalize(self):
            self._do(lc.Finalize())

        @enabled("rank_crash" in kinds, lc.CrashDuringSave())
        @rule(rank=rank, point=crash_points)
        def crash_rank_during_save(self, rank, point):
            self._do(lc.CrashDuringSave(rank, point))

        @enabled(bool(writes), lc.FaultDuringSave())
        @rule(
            kind=st.sampled_from(writes or ["short_write"]),
            rank=rank,
            nth=st.integers(1, 2),
            detail=st.sampled_from(lc.IO_ERROR_OPS + ("zeros", "garbage")),
            errno=st.sampled_from(lc.ERRNOS),
            file=st.sampled_from(tuple(lc.FAULT_FILES)),
        )
        def write_fault_during_save(self, kind, rank, nth, detail, errno, file):
            self._do(lc.FaultDuringSave(kind, rank, nth, detail, errno, file))

        @enabled(bool(rest), lc.Corrupt(rest[0] if rest else "truncate"))
        @rule(
            kind=st.sampled_from(rest or ["truncate"]),
            rank=rank,
            seed=seed,
            how=st.sampled_from(lc.METADATA_HOW + lc.TRACKER_HOW),
            dcp_metadata=st.booleans(),
        )
        def corrupt_file(self, kind, rank, seed, how, dcp_metadata):
            self._do(lc.Corrupt(kind, rank, seed, how, dcp_metadata))

        @enabled("lost_unsynced_writes" in kinds, lc.PowerLoss())
        @rule(rank=rank, phase=st.none() | st.sampled_from(lc.CRASH_PHASES), max_states=st.integers(1, 3))
        def lose_unsynced_writes(self, rank, phase, max_states):
            self._do(lc.PowerLoss(rank, phase, max_states))

        @precondition(lambda self: self.life is not None)
        @rule(
            where=st.none() | st.integers(0, 3) if moves else st.none(),
            cont=st.integers(0, 2),
            precision=st.none() | st.integers(0, 2) if precision_changes else st.none(),
            stagger=rst.staggers(),
        )
        def resume(self, where, cont, precision, stagger):
            self._do(lc.Resume(where, cont, precision, stagger))

        @enabled("delete_file" in kinds, lc.DeleteOld())
        @rule(which=st.integers(0, 3), seed=seed)
        def delete_old_checkpoints(self, which, seed):
            self._do(lc.DeleteOld(which, seed))

    return CheckpointLifecycle


__all__ = ["LifecycleMachine", "lifecycle_machine"]
