"""The fault columns of `resilience job`: each one a plan for a case, aimed through the golden run's
layout at one save and one rank.

The save aimed at is the second one (the first when there is one only, or when the second is at the last
step and leaves nothing to resume after it): an acknowledged save comes before it, so a resume has
something to go back to. Faults on a rank's I/O strike rank 1 (rank 0 when the job has one rank) at its
data file of that save; damage at rest strikes rank 0's, the rank whose state the others take on a
resume (DDP broadcasts rank 0's parameters), after the whole job was killed between that save and the
next.

| column               | the fault                                                                        |
|----------------------|----------------------------------------------------------------------------------|
| kill-rank-write      | rank 1 SIGKILLed once its data file of the save holds 4096 bytes (or half of it)  |
| kill-job-mid-save    | rank 1's first write of that file held; the whole job (agent, workers) SIGKILLed  |
| kill-job-between     | the whole job SIGKILLed as it reports the step midway to the next save            |
| enospc, eio          | rank 1's first write of that file fails with ENOSPC / EIO                         |
| truncate             | killed between saves; rank 0's data file of the save cut to half, then restarted  |
| bit-flip             | killed between saves; one exponent bit of a value in that file flipped            |
| delete               | killed between saves; that file deleted                                           |
| tracker-empty        | killed between saves; the tracker (pointer) file emptied                          |
| power-loss           | killed between saves, then the power lost: a restart on each crash state the      |
|                      | operation log allows (up to --max-states), each judged on its own                 |
| slow-disk            | every rank's first writes of its data file of the save slow (seconds, not ms);    |
|                      | the whole job SIGKILLed the moment it acknowledges that save                      |
| chained              | killed between the first two saves, and again after each resume between the next  |
|                      | two (up to three kills): every resume must take the newest acknowledged save      |
| sigterm              | every process sent SIGTERM between saves, as a scheduler preempts; SIGKILL after  |
|                      | the grace: a job that ignores SIGTERM is stops_on_sigterm's FAIL                  |
| node-kill            | with --nodes: the last node's agent and workers SIGKILLed between saves; the     |
|                      | others get --term-grace to end on their own, then the job is restarted whole     |
"""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ConfigError
from ..faults.base import Fault, Target, Trigger
from ..faults.kinds import BitFlip, DeleteFile, IOFailure, RankCrash, SlowWrite, TrackerDamage, Truncate
from .golden import Reference
from .layout import Save
from .process import WholeJobKill

KILL_AT_BYTE = 4096
HOLD = 30.0  # seconds a held write waits: the runner kills the job within a few ms of its firing
MID_SAVE, BETWEEN_SAVES = "mid-save", "between saves"
SLOW_DISK_DELAY, SLOW_DISK_WRITES = 1.0, 2  # seconds per held write, and writes held per rank: seconds, not ms
CHAINED_KILLS = 3  # the first run's kill and up to two more, each after a resume


@dataclass(frozen=True)
class CasePlan:
    """What one column does to one case: the mount's records and the runner's kill for the first run, and
    the damage done at rest before the restart. `na`: why the column does not apply to this job."""

    column: str
    what: str = ""
    records: tuple[Fault, ...] = ()
    kill: WholeJobKill | None = None
    damage: Fault | None = None
    damage_path: str | None = None  # relative to the checkpoint folder
    save: Save | None = None
    next_step: int | None = None  # the step of the save after the one aimed at (or the last step)
    na: str | None = None
    chain: tuple[CasePlan, ...] = ()  # the kills of restarts 1, 2, ...: each one's kill, save and next step
    power_loss: bool = False  # after the first run, a restart on each crash state of the folder


@dataclass(frozen=True)
class Aim:
    """Where a column strikes instead of its default: the save (1-based, in the golden run's order), the
    rank, the byte of a kill in a write. Written `COLUMN@save=2,rank=0,byte=512`, as the fuzzer draws it."""

    save: int | None = None
    rank: int | None = None
    byte: int | None = None

    def text(self) -> str:
        parts = [
            f"{k}={v}" for k, v in (("save", self.save), ("rank", self.rank), ("byte", self.byte)) if v is not None
        ]
        return "@" + ",".join(parts) if parts else ""


# the aim of the plan being made: set by plan_for around one column's call, read where the defaults are
NO_AIM = Aim()
_AIM: contextvars.ContextVar[Aim] = contextvars.ContextVar("aim", default=NO_AIM)  # noqa: B039 (frozen)


def parse_column(text: str) -> tuple[str, Aim]:
    """'kill-rank-write@save=2,rank=1,byte=100' -> (name, Aim); a bad aim is one ConfigError."""
    name, _, spec = text.partition("@")
    values: dict[str, int] = {}
    for part in filter(None, spec.split(",")):
        key, _, value = part.partition("=")
        if key not in ("save", "rank", "byte") or not value.isdigit():
            raise ConfigError(
                "--column", f"{text!r}: {part!r} is not an aim", "write COLUMN@save=N,rank=R,byte=B (whole numbers)"
            )
        values[key] = int(value)
    if values.get("save") == 0:
        raise ConfigError("--column", f"{text!r}: saves count from 1", "save=1 is the golden run's first save")
    return name, Aim(**values)


def _target_save(ref: Reference, between: bool) -> tuple[Save | None, str]:
    saves, last = ref.layout.saves, ref.golden.last_step
    aim = _AIM.get()
    if aim.save is not None and saves:
        if aim.save > len(saves):
            return None, f"the golden run made {len(saves)} saves, not {aim.save}"
        chosen = saves[aim.save - 1]
        if between and chosen.step >= last:
            return None, f"save {aim.save} is at the last step ({chosen.step}): nothing to resume after it"
        return chosen, ""
    if not saves:
        return None, f"the golden run made no checkpoint the layout could place by step ({ref.layout.describe()})"
    usable = [s for s in saves[:2] if not between or s.step < last]
    if not usable:
        return None, f"its only save is at its last step ({saves[0].step}): nothing to resume after it"
    return usable[-1], ""


def _next_step(ref: Reference, save: Save) -> int:
    later = [s.step for s in ref.layout.saves if s.step > save.step]
    return min(later) if later else ref.golden.last_step


def _io_rank(ref: Reference) -> int:
    if _AIM.get().rank is not None:
        return _AIM.get().rank  # type: ignore[return-value]
    return 1 if 1 in ref.layout.ranks else (ref.layout.ranks[0] if ref.layout.ranks else 0)


def _between_kill(ref: Reference, save: Save) -> tuple[WholeJobKill | None, int, str]:
    nxt = _next_step(ref, save)
    if nxt - save.step < 2:
        return None, nxt, f"steps {save.step} and {nxt} follow each other: no step between them to kill at"
    acked = save.step if save.step in ref.golden.acks else None  # not before the job said the save is done
    return WholeJobKill(BETWEEN_SAVES, at_step=(save.step + nxt) // 2, after_ack=acked), nxt, ""


def _aimed(ref: Reference, column: str, between: bool, rank: int) -> tuple[Save | None, str | None, str]:
    """The save, the glob of the rank's data file in it, or why not."""
    save, why = _target_save(ref, between)
    if save is None:
        return None, None, why
    glob = ref.layout.write_glob(save.step, rank)
    if glob is None:
        return save, None, f"rank {rank} writes no data file of its own in a save ({ref.layout.layout.describe()})"
    return save, glob, ""


def _rank_fault(ref: Reference, column: str, make: Callable[[int, Save, str], tuple[Fault, str]]) -> CasePlan:
    rank = _io_rank(ref)
    save, glob, why = _aimed(ref, column, False, rank)
    if save is None or glob is None:
        return CasePlan(column, na=why)
    record, what = make(rank, save, glob)
    return CasePlan(column, what, (record,), save=save, next_step=_next_step(ref, save))


def kill_rank_write(ref: Reference) -> CasePlan:
    def make(rank: int, save: Save, glob: str) -> tuple[Fault, str]:
        f = ref.layout.data_file(rank)
        at = _AIM.get().byte if _AIM.get().byte is not None else min(KILL_AT_BYTE, (f.size if f else 0) // 2)
        record = RankCrash(target=Target(rank=rank, path=glob), trigger=Trigger(at_byte=at))
        return record, f"rank {rank} SIGKILLed at byte {at} of {glob[2:]} (save {save.number}, step {save.step})"

    return _rank_fault(ref, "kill-rank-write", make)


def kill_job_mid_save(ref: Reference) -> CasePlan:
    def make(rank: int, save: Save, glob: str) -> tuple[Fault, str]:
        record = SlowWrite(target=Target(rank=rank, path=glob, op="write"), delay=HOLD, times=1)
        return record, (
            f"the whole job SIGKILLed while rank {rank}'s first write of {glob[2:]} is held "
            f"(save {save.number}, step {save.step})"
        )

    plan = _rank_fault(ref, "kill-job-mid-save", make)
    return plan if plan.na else CasePlan(**{**plan.__dict__, "kill": WholeJobKill(MID_SAVE, on_firing=True)})


def kill_job_between(ref: Reference) -> CasePlan:
    save, why = _target_save(ref, True)
    if save is None:
        return CasePlan("kill-job-between", na=why)
    kill, nxt, why = _between_kill(ref, save)
    if kill is None:
        return CasePlan("kill-job-between", na=why)
    what = (
        f"the whole job SIGKILLed at step {kill.at_step} (or at the first step after it acknowledged the save of "
        f"step {save.step}, if later), before step {nxt}'s"
    )
    return CasePlan("kill-job-between", what, kill=kill, save=save, next_step=nxt)


def io_error(errno: str) -> Callable[[Reference], CasePlan]:
    def column(ref: Reference) -> CasePlan:
        def make(rank: int, save: Save, glob: str) -> tuple[Fault, str]:
            record = IOFailure(target=Target(rank=rank, path=glob, op="write"), errno=errno)
            return (
                record,
                f"rank {rank}'s first write of {glob[2:]} fails with {errno} (save {save.number}, step {save.step})",
            )

        return _rank_fault(ref, errno.lower(), make)

    return column


def _damage(column: str, ref: Reference, make: Callable[[Save, int], tuple[Fault, str | None, str]]) -> CasePlan:
    save, why = _target_save(ref, True)
    if save is None:
        return CasePlan(column, na=why)
    kill, nxt, why = _between_kill(ref, save)
    if kill is None:
        return CasePlan(column, na=why)
    record, path, what = make(save, _AIM.get().rank or 0)
    if path is None:
        return CasePlan(column, na=what)
    return CasePlan(
        column,
        f"killed at step {kill.at_step}, then {what}, before the restart",
        kill=kill,
        damage=record,
        damage_path=path,
        save=save,
        next_step=nxt,
    )


def _data_damage(column: str, kind: Callable[[Save, int], Fault], verb: str) -> Callable[[Reference], CasePlan]:
    def plan(ref: Reference) -> CasePlan:
        def make(save: Save, rank: int) -> tuple[Fault, str | None, str]:
            path = ref.layout.final_path(save.step, rank)
            if path is None:
                return kind(save, rank), None, f"rank {rank} writes no data file of its own in a save"
            return kind(save, rank), path, f"{path} (rank {rank}, step {save.step}) {verb}"

        return _damage(column, ref, make)

    return plan


def tracker_empty(ref: Reference) -> CasePlan:
    def make(save: Save, rank: int) -> tuple[Fault, str | None, str]:
        path = ref.layout.pointer()
        record = TrackerDamage(how="empty")
        if path is None:
            return record, None, f"the job keeps no tracker or pointer file ({ref.layout.layout.describe()})"
        return record, path, f"its tracker {path} emptied"

    return _damage("tracker-empty", ref, make)


def power_loss(ref: Reference) -> CasePlan:
    plan = kill_job_between(ref)
    if plan.na is not None:
        return CasePlan("power-loss", na=plan.na)
    what = (
        f"{plan.what}; then the power lost: a restart on each crash state of the folder its operation log allows "
        "(up to --max-states)"
    )
    return CasePlan(**{**plan.__dict__, "column": "power-loss", "what": what, "power_loss": True})


def slow_disk(ref: Reference) -> CasePlan:
    save, why = _target_save(ref, True)
    if save is None:
        return CasePlan("slow-disk", na=why)
    if save.step not in ref.golden.acks:
        return CasePlan(
            "slow-disk", na=f"the golden run acknowledged no save of step {save.step} to kill at (give --ack)"
        )
    globs = [(r, g) for r in ref.layout.ranks if (g := ref.layout.write_glob(save.step, r)) is not None]
    if not globs:
        return CasePlan("slow-disk", na=f"no rank writes a data file of its own in a save ({ref.layout.describe()})")
    records = tuple(
        SlowWrite(target=Target(rank=r, path=g, op="write"), delay=SLOW_DISK_DELAY, times=SLOW_DISK_WRITES)
        for r, g in globs
    )
    what = (
        f"each rank's first {SLOW_DISK_WRITES} writes of its data file of save {save.number} (step {save.step}) "
        f"{SLOW_DISK_DELAY:g} s slow; the whole job SIGKILLed the moment it acknowledges that save"
    )
    kill = WholeJobKill(BETWEEN_SAVES, after_ack=save.step, on_ack=True)
    return CasePlan("slow-disk", what, records, kill=kill, save=save, next_step=_next_step(ref, save))


def sigterm(ref: Reference) -> CasePlan:
    plan = kill_job_between(ref)
    if plan.na is not None or plan.kill is None:
        return CasePlan("sigterm", na=plan.na)
    kill = WholeJobKill(BETWEEN_SAVES, at_step=plan.kill.at_step, after_ack=plan.kill.after_ack, term=True)
    what = (
        f"every process of the job sent SIGTERM at step {kill.at_step}, after the save of step "
        f"{plan.save.step if plan.save else '?'}, "
        "as a scheduler preempts a job; whatever is left after the grace (--term-grace) SIGKILLed"
    )
    return CasePlan(**{**plan.__dict__, "column": "sigterm", "what": what, "kill": kill})


def node_kill(ref: Reference) -> CasePlan:
    nodes = ref.golden.nodes
    plan = kill_job_between(ref)
    if plan.na is not None or plan.kill is None:
        return CasePlan("node-kill", na=plan.na)
    if nodes < 2:
        return CasePlan(
            "node-kill",
            na="the job runs as one node (give --nodes 2 to start its launcher twice, as two torchrun agents)",
        )
    node = nodes - 1  # not node 0: its agent holds the rendezvous store the others join
    kill = dataclasses.replace(plan.kill, node=node)
    what = (
        f"node {node} of {nodes} (its agent and workers) SIGKILLed at step {kill.at_step}, after the save of step "
        f"{plan.save.step if plan.save else '?'}; the other nodes left to end on their own (--term-grace), "
        "then the whole job restarted"
    )
    return CasePlan(**{**plan.__dict__, "column": "node-kill", "what": what, "kill": kill})


def chained(ref: Reference) -> CasePlan:
    if not ref.layout.saves:
        return CasePlan("chained", na=_target_save(ref, True)[1])
    aimed = []
    for save in ref.layout.saves:
        kill, nxt, _ = _between_kill(ref, save) if save.step < ref.golden.last_step else (None, 0, "")
        if kill is not None:
            aimed.append(CasePlan("chained", kill=kill, save=save, next_step=nxt))
        if len(aimed) == CHAINED_KILLS:
            break
    if len(aimed) < 2:
        return CasePlan(
            "chained",
            na="a chained resume needs two saves before the last step, each with a step between it and the next "
            f"(the golden run saved at steps {[s.step for s in ref.layout.saves]})",
        )
    kills = ", then ".join(f"at step {p.kill.at_step} (after the save of step {p.save.step})" for p in aimed)  # type: ignore[union-attr]
    what = f"the whole job SIGKILLed {kills}: each kill after the resume from the one before"
    first = aimed[0]
    return CasePlan(**{**first.__dict__, "what": what, "chain": tuple(aimed[1:])})


COLUMNS: dict[str, Callable[[Reference], CasePlan]] = {
    "kill-rank-write": kill_rank_write,
    "kill-job-mid-save": kill_job_mid_save,
    "kill-job-between": kill_job_between,
    "enospc": io_error("ENOSPC"),
    "eio": io_error("EIO"),
    "truncate": _data_damage(
        "truncate", lambda s, r: Truncate(target=Target(rank=r, iteration=s.step)), "cut to half its size"
    ),
    "bit-flip": _data_damage(
        "bit-flip",
        lambda s, r: BitFlip(target=Target(rank=r, iteration=s.step), bits=(6,)),
        "with the highest exponent bit of a stored value flipped",
    ),
    "delete": _data_damage("delete", lambda s, r: DeleteFile(target=Target(rank=r, iteration=s.step)), "deleted"),
    "tracker-empty": tracker_empty,
    "power-loss": power_loss,
    "slow-disk": slow_disk,
    "chained": chained,
    "sigterm": sigterm,
    "node-kill": node_kill,
}


def plan_for(column: str, ref: Reference) -> CasePlan:
    """The plan of a column (`NAME` or `NAME@save=..,rank=..,byte=..`) aimed through the golden run."""
    name, aim = parse_column(column)
    if aim.rank is not None and ref.layout.ranks and aim.rank not in ref.layout.ranks:
        return CasePlan(column, na=f"rank {aim.rank} is not a rank of the job (ranks {list(ref.layout.ranks)})")
    token = _AIM.set(aim)
    try:
        plan = COLUMNS[name](ref)
    finally:
        _AIM.reset(token)
    return dataclasses.replace(plan, column=column) if aim != NO_AIM else plan


__all__ = ["COLUMNS", "Aim", "CasePlan", "parse_column", "plan_for"]
