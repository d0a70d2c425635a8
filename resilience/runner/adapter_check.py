"""A first run of a new adapter, as `resilience adapter check` does it: make the backend, save and load with
real ranks on three topologies, list what is on disk, learn the layout, and say what was found, with one
message per problem.

Per combination, four short jobs of real ranks (the same launch.Job every case uses):
1. on the first topology: a load of an empty folder (the protocol asks for CheckpointNotFound), saves of
   iterations 2 and 3, list_checkpoints (rank 0), and a load back into a fresh state: bit-exact?
2. on the second topology: a load of that checkpoint (bit-exact, or refused clearly with
   TopologyChangeRefused; what the adapter's contract promises for the change decides which is right),
   then a save and load of its own;
3. on the third topology (the second's tp and pp, another dp): a load of the second's own save, a change
   of dp alone, judged against the contract's dp promise;
4. one clean save to learn the layout (runner.learn): files per save, metadata, tracker, the seam.

Each rank writes what happened step by step to a facts file, so a rank that hangs or dies still leaves
what it did; the parent turns the facts into the report. The jobs and the facts are runner.adapter_jobs, judging
one combination runner.adapter_combo."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import ConfigError
from ..vocab import Combination, valid_combinations
from .adapter_combo import ComboCheck, check_combo
from .adapters import FACTORY, BackendName, resolve_backend


@dataclass
class AdapterCheck:
    backend: str
    name: str
    declared: list[str] | None
    combos: list[ComboCheck] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # about the factory itself
    work: str | None = None  # where the evidence was kept

    @property
    def ok(self) -> bool:
        return not self.problems and not any(c.problems for c in self.combos)

    def all_problems(self) -> list[str]:
        return self.problems + [f"{c.combo}: {p}" for c in self.combos for p in c.problems]


def check_adapter(
    backend: BackendName,
    combos: list[Combination] | None = None,
    *,
    timeout: float = 120.0,
    keep: Callable[[], str] | None = None,
    progress=None,
) -> AdapterCheck:
    """Check `backend` ('package.module:factory' or any name make_backend takes) for `combos` (default: the
    ones its factory declares, else every valid one it accepts). A backend that cannot be made at all is one
    ConfigError, before any rank starts; the rest is in the AdapterCheck (its `work` folder is made by `keep`
    and kept, else a temporary one is removed)."""
    ref = resolve_backend(backend)  # a bad name or factory: one clear error, before any rank runs
    declared = ref.combinations()
    wanted = combos or declared or valid_combinations()
    usable: list[Combination] = []
    refused: list[str] = []
    made, why = None, ""
    for combo in wanted:
        try:
            one = ref.make(combo)
        except ConfigError as e:
            if str(e.field).startswith("backend"):
                raise  # a bad name, an import error, a missing method: one clear error, before any rank runs
            refused.append(str(combo))  # the factory's own "not this combination"
            why = why or e.problem
            continue
        made = made or one
        usable.append(combo)
    undeclared = ref.kind == FACTORY and declared is None and not combos
    if not usable:
        raise ConfigError(
            "backend",
            f"{ref} refuses every combination asked for ({', '.join(refused)}): {why}",
            "declare the ones it implements: factory.combinations = ('LOCAL/torch/sync',)"
            if undeclared
            else "ask for one it implements (--combos)",
        )
    report = AdapterCheck(
        ref.spec,
        str(getattr(made, "name", type(made).__name__)),
        [str(c) for c in declared] if declared is not None else None,
    )
    if undeclared:
        report.problems.append(
            "the factory declares no `combinations`, so the matrix and the pytest plugin run all "
            "six"
            + (f" (it refuses {', '.join(refused)})" if refused else "")
            + ": declare the ones it implements, factory.combinations = (...); that choice also "
            "decides what the topology checker expects, unless it states a contract "
            "(factory.contract)"
        )
    elif refused:
        report.problems.append(f"the factory refuses {', '.join(refused)}")
    work = keep() if keep is not None else tempfile.mkdtemp(prefix="resilience-adapter-check-")
    report.work = work if keep is not None else None
    try:
        for combo in usable:
            if progress:
                progress(f"checking {combo} ...")
            report.combos.append(check_combo(ref, combo, work, timeout))
    finally:
        if keep is None:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
    return report
