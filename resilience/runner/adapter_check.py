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
what it did; the parent turns the facts into the report."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field

from ..checkers.topology import promised as promise_of
from ..errors import CheckpointNotFound, ConfigError, IntegrityError, ResilienceError, TopologyChangeRefused
from ..state import ModelSpec, Topology, Transition
from ..vocab import Combination, valid_combinations
from ..vocab.contract import LOAD, REFUSE
from .adapters import contract_of, keep_last_of, make_backend, resolve, supported_combinations
from .listing import listing_problems
from .matrix import MODEL

# saved on the first, loaded there and on the second (tp and dp change); the second's own save is loaded on
# the third: a change of dp alone
TOPOLOGIES = (Topology.parse("tp2pp1dp1"), Topology.parse("tp1pp1dp2"), Topology.parse("tp1pp1dp1"))
FIRST, SECOND = 2, 3  # the iterations saved on the first topology


@dataclass
class CheckPlan:
    spec: ModelSpec
    topo: Topology
    combo: Combination
    backend: str
    root: str  # the checkpoints of the first topology
    empty: str  # an empty folder
    own_root: str  # the second topology's own save
    facts: str  # rank{r}.jsonl go here
    job: str  # "first", "second" or "dp" (the change of dp alone)


# ---- in each rank process -----------------------------------------------------------------------------
class _Facts:
    def __init__(self, plan: CheckPlan, rank: int):
        self.path = os.path.join(plan.facts, f"{plan.job}.rank{rank}.jsonl")

    def put(self, step: str, **facts) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(dict(facts, step=step), default=str) + "\n")


def _error(e: BaseException) -> dict:
    kind = (
        "refused"
        if isinstance(e, TopologyChangeRefused)
        else "not_found"
        if isinstance(e, CheckpointNotFound)
        else "integrity"
        if isinstance(e, IntegrityError)
        else "other"
    )
    return {"raised": type(e).__name__, "error": str(e)[:400], "kind": kind}


def _result(value) -> dict:
    """What a load returned, field by field (LoadResult: iteration, path, rng_restored, warnings)."""
    fields = {name: getattr(value, name, None) for name in ("iteration", "path", "rng_restored", "warnings")}
    return {
        "returned": type(value).__name__,
        **{k: v for k, v in fields.items()},
        "has": [k for k in fields if hasattr(value, k)],
    }


def _load(facts: _Facts, step: str, backend, plan: CheckPlan, rank: int, root: str, *, fingerprint: bool):
    from ..state import TrainingState
    from .rankprog import digests_of

    state = TrainingState(plan.spec, plan.topo, rank)
    try:
        value = backend.load(state, root)
    except Exception as e:
        facts.put(step, **_error(e))
        return
    out = _result(value)
    if fingerprint:
        fp, rng = digests_of(state)  # collective; rank 0 gets the digests
        out.update(fingerprint=fp, rng=rng)
    facts.put(step, **out)


def _save(facts: _Facts, step: str, backend, state, root: str) -> None:
    try:
        backend.save(state, root)
        in_flight = backend.in_flight_iteration
        done = backend.finalize()
    except Exception as e:
        facts.put(step, iteration=state.iteration, **_error(e))
        raise  # a save that failed leaves nothing to check on: the job ends here
    facts.put(step, iteration=state.iteration, in_flight=in_flight, finalized=done)


def _check_rank(ctx, plan: CheckPlan) -> dict:
    import torch.distributed as dist

    from ..state import TrainingState
    from .rankprog import digests_of

    facts = _Facts(plan, ctx.rank)
    backend = make_backend(plan.backend, plan.combo)
    if plan.job == "first":
        _load(facts, "empty_load", backend, plan, ctx.rank, plan.empty, fingerprint=False)
        state = TrainingState(plan.spec, plan.topo, ctx.rank)
        for iteration in (FIRST, SECOND):
            state.train(iteration - state.iteration)
            _save(facts, "save", backend, state, plan.root)
        fp, rng = digests_of(state)
        facts.put("saved", fingerprint=fp, rng=rng)
        dist.barrier()
        if ctx.rank == 0:
            try:
                listed = backend.list_checkpoints(plan.root)
                facts.put(
                    "listing",
                    problems=listing_problems(listed),
                    items=[
                        {k: getattr(c, k, None) for k in ("iteration", "path", "complete", "problem")}
                        for c in (listed if isinstance(listed, (list, tuple)) else [])
                    ],
                )
            except Exception as e:
                facts.put("listing", **_error(e))
        dist.barrier()
        _load(facts, "load_same", backend, plan, ctx.rank, plan.root, fingerprint=True)
    elif plan.job == "dp":
        _load(facts, "load_dp", backend, plan, ctx.rank, plan.own_root, fingerprint=True)
    else:
        _load(facts, "load_other", backend, plan, ctx.rank, plan.root, fingerprint=True)
        state = TrainingState(plan.spec, plan.topo, ctx.rank)
        state.train(SECOND)
        _save(facts, "own_save", backend, state, plan.own_root)
        fp, rng = digests_of(state)
        facts.put("own_saved", fingerprint=fp, rng=rng)
        _load(facts, "own_load", backend, plan, ctx.rank, plan.own_root, fingerprint=True)
    return {}


# ---- in the parent -------------------------------------------------------------------------------------
@dataclass
class ComboCheck:
    """What one combination showed: `found` (label, text) lines, problems and notes, the learned layout."""

    combo: str
    found: list[tuple[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    layout: dict | None = None
    said: set[str] = field(default_factory=set, repr=False)

    def to_dict(self) -> dict:
        return {
            "combo": self.combo,
            "found": [list(f) for f in self.found],
            "problems": self.problems,
            "notes": self.notes,
            "layout": self.layout,
        }

    def problem(self, text: str, key: str) -> None:
        """Add a problem once: the same mistake seen on both topologies (same key) is one message."""
        if key not in self.said:
            self.said.add(key)
            self.problems.append(text)


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


def _read(plan: CheckPlan, world: int) -> list[dict[str, list[dict]]]:
    """Per rank: step -> the facts it wrote for that step, in order."""
    out = []
    for r in range(world):
        steps: dict[str, list[dict]] = {}
        path = os.path.join(plan.facts, f"{plan.job}.rank{r}.jsonl")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                for line in f:
                    fact = json.loads(line)
                    steps.setdefault(fact["step"], []).append(fact)
        out.append(steps)
    return out


def _run(plan: CheckPlan, timeout: float, log_dir: str) -> tuple[list[dict[str, list[dict]]], str]:
    from ..launch import Job

    outcome = (
        Job(_check_rank, plan.topo.world, args=(plan,), timeout=timeout, log_dir=log_dir, pin_cpus=True).start().wait()
    )
    failed = ""
    if not outcome.ok:
        first = outcome.first_failure()
        if first is not None:
            text = first.describe().strip().splitlines()
            failed = f"rank {first.rank} {text[0] if text else first.status}"
            if outcome.timed_out:
                failed += f" (the job did not finish in {timeout:g} s: a collective waited for a rank that had failed)"
    return _read(plan, plan.topo.world), failed


def _first(steps: dict[str, list[dict]], step: str) -> dict | None:
    """The first fact a rank wrote for `step`, or None when it never got there."""
    found = steps.get(step)
    return found[0] if found else None


def _raised(fact: dict) -> str:
    return f"{fact['raised']}: {fact['error'][:200]}"


def _judge_load(check: ComboCheck, label: str, fact: dict | None, want_fp: str | None, iteration: int) -> str | None:
    """The common checks of a load that returned; 'exact', 'wrong' or None (did not return)."""
    if fact is None or "raised" in fact:
        return None
    missing = [k for k in ("iteration", "path", "rng_restored", "warnings") if k not in fact["has"]]
    if missing:
        check.problem(
            f"load returned a {fact['returned']} without {', '.join(missing)}: return "
            "resilience.backends.LoadResult(iteration, path, rng_restored, warnings)",
            "result",
        )
        return "wrong"
    if fact["iteration"] != iteration:
        check.problems.append(
            f"{label}: LoadResult.iteration is {fact['iteration']!r}, but iteration {iteration} "
            "was loaded: give the iteration as it was saved"
        )
    if fact.get("fingerprint") != want_fp:
        check.problem(
            f"{label}: the loaded state differs from what was saved: fill every ShardedTensor's data in "
            "place and pass the other records' values to state.load_objects",
            "state",
        )
        return "wrong"
    return "exact"


_STATING = (
    'state what it does: factory.contract = {"tp": ..., "pp": ..., "dp": ...} with "load" or "refuse" '
    "for each (docs/adapters.md)"
)


def _judge_moved(
    check: ComboCheck, combo: Combination, moved: Transition, fact: dict | None, failed: str, want_fp, contract
) -> None:
    """A load of iteration SECOND on another topology: bit-exact or refused clearly, and which of the two
    the adapter's contract promises for this change."""
    promise = promise_of(combo, moved, contract)
    label = f"load on {moved.load}" + (" (dp alone)" if moved.changed == ("dp",) else "")
    if fact is None:
        check.problems.append(f"{label} ({moved}) did not return: {failed}")
    elif "raised" in fact:
        if fact["kind"] == "refused":
            check.found.append((label, f"refused clearly ({_raised(fact)})"))
            if promise == LOAD:
                check.problems.append(
                    f"{label}: refused, but its contract ({contract}) promises {moved} loads: the "
                    f"topology checker will FAIL every such change; if refusing is intended, " + _STATING
                )
        else:  # one untranslated error, however many changes show it
            check.problem(
                f"{label} ({moved}) raised {_raised(fact)}: raise TopologyChangeRefused for a "
                "topology you do not load on",
                "refusal",
            )
    elif _judge_load(check, label, fact, want_fp, SECOND) == "exact":
        check.found.append((label, f"iteration {SECOND} bit-exact after {moved}"))
        if promise == REFUSE:
            check.problems.append(
                f"{label}: loads {moved} exactly, but its contract ({contract}) promises a "
                "refusal: the topology checker will FAIL it; if loading is intended, " + _STATING
            )


def _combo_check(backend: str, combo: Combination, work: str, timeout: float) -> ComboCheck:
    from .learn import learn_layout

    check = ComboCheck(str(combo))
    a, b, _ = TOPOLOGIES
    base = os.path.join(work, str(combo).replace("/", "-"))
    for sub in ("facts", "empty", "logs"):
        os.makedirs(os.path.join(base, sub), exist_ok=True)
    plan = CheckPlan(
        MODEL,
        a,
        combo,
        backend,
        os.path.join(base, "ckpt"),
        os.path.join(base, "empty"),
        os.path.join(base, "own"),
        os.path.join(base, "facts"),
        "first",
    )
    ranks, failed = _run(plan, timeout, os.path.join(base, "logs", "first"))
    lead = ranks[0]

    empty = _first(lead, "empty_load")
    if empty is None:
        check.problems.append(f"load of an empty folder on {a} did not return: {failed}")
    elif "raised" not in empty:
        check.problems.append(
            f"load of an empty folder returned a {empty['returned']}: raise CheckpointNotFound "
            "(resilience.errors) when there is nothing to load"
        )
    elif empty["kind"] == "not_found":
        check.found.append(("load of an empty folder", f"{empty['raised']}, as the protocol asks"))
    elif empty["kind"] == "integrity":
        check.found.append(("load of an empty folder", f"{empty['raised']} (CheckpointNotFound says it better)"))
    else:
        check.problems.append(
            f"load of an empty folder raised {_raised(empty)}: raise CheckpointNotFound "
            "(any other error counts as a crash of the rank, verdict UNKNOWN)"
        )

    saves = lead.get("save", [])
    bad = [s for r in ranks for s in r.get("save", []) if "raised" in s]
    if bad or len(saves) < 2:
        why = _raised(bad[0]) if bad else failed or "the job ended before both saves"
        check.problems.append(f"save on {a}: {why}")
        return check
    if combo.is_async and not any(s.get("in_flight") == s["iteration"] for s in saves):
        check.notes.append(
            "an async save left in_flight_iteration None: the runner cannot tell which save is still being written"
        )
    check.found.append(
        (
            f"save on {a}",
            f"iterations {FIRST} and {SECOND} "
            + ("staged, then finalized" if combo.is_async else "saved (returned on every rank)"),
        )
    )
    saved = _first(lead, "saved") or {}

    listing = _first(lead, "listing")
    if listing is None:
        check.problems.append(f"list_checkpoints did not return: {failed}")
    elif "raised" in listing:
        check.problems.append(f"list_checkpoints raised {_raised(listing)}")
    else:
        check.problems += [f"list_checkpoints {p}" for p in listing["problems"]]
        items = listing["items"]
        seen = {c["iteration"] for c in items}
        if None not in seen:  # else the items themselves are wrong, said above
            keep_last = keep_last_of(backend)
            expected = {SECOND} if keep_last == 1 else {FIRST, SECOND}  # keep_last: it removes older ones
            if not expected <= seen:
                check.problems.append(
                    f"list_checkpoints lists iterations {sorted(seen)} after saves of {FIRST} and {SECOND}"
                    + (f" (keeps the newest {keep_last})" if keep_last else "")
                )
            incomplete = [c["iteration"] for c in items if c["iteration"] in (FIRST, SECOND) and not c["complete"]]
            if incomplete:
                check.problems.append(f"list_checkpoints calls finished saves incomplete: iterations {incomplete}")
            check.found.append(
                (
                    "list_checkpoints",
                    ", ".join(
                        f"iteration {c['iteration']} ({'complete' if c['complete'] else 'NOT complete'})" for c in items
                    )
                    or "nothing",
                )
            )

    same = _first(lead, "load_same")
    label = f"load on {a}"
    if same is None:
        check.problems.append(f"{label} did not return: {failed}")
    elif "raised" in same:
        check.problems.append(f"{label}: the checkpoint just saved did not load: {_raised(same)}")
    elif _judge_load(check, label, same, saved.get("fingerprint"), SECOND) == "exact":
        rng = same["rng_restored"]
        if rng and same.get("rng") != saved.get("rng"):
            check.problems.append(f"{label}: rng_restored is True but the RNG differs from the saved one")
        check.found.append(
            (
                label,
                f"iteration {SECOND} bit-exact, RNG " + ("restored" if rng else "not restored (rng_restored False)"),
            )
        )
        if not rng:
            check.notes.append(
                f"{label}: rng_restored is False on the topology that saved: resumes are judged without the RNG"
            )

    plan_b = CheckPlan(MODEL, b, combo, backend, plan.root, plan.empty, plan.own_root, plan.facts, "second")
    ranks_b, failed_b = _run(plan_b, timeout, os.path.join(base, "logs", "second"))
    lead_b = ranks_b[0]
    contract = contract_of(backend, combo)
    other = _first(lead_b, "load_other")
    _judge_moved(check, combo, Transition(a, b), other, failed_b, saved.get("fingerprint"), contract)
    check.found.append(("contract", str(contract)))
    own_saved = _first(lead_b, "own_saved") or {}
    own = _first(lead_b, "own_load")
    label = f"round trip on {b}"
    own_bad = [s for r in ranks_b for s in r.get("own_save", []) if "raised" in s]
    if own_bad:
        check.problems.append(f"save on {b}: {_raised(own_bad[0])}")
    elif own is None:
        check.problems.append(f"{label} did not finish: {failed_b}")
    elif "raised" in own:
        check.problems.append(f"{label}: the checkpoint just saved did not load: {_raised(own)}")
    elif _judge_load(check, label, own, own_saved.get("fingerprint"), SECOND) == "exact":
        check.found.append((label, f"iteration {SECOND} saved and loaded bit-exact"))

    c = TOPOLOGIES[2]
    if own_saved.get("fingerprint") is None:
        check.notes.append(f"no change of dp alone was tried ({b}->{c}): the save on {b} did not finish")
    else:
        plan_c = CheckPlan(MODEL, c, combo, backend, plan.root, plan.empty, plan.own_root, plan.facts, "dp")
        ranks_c, failed_c = _run(plan_c, timeout, os.path.join(base, "logs", "dp"))
        moved = _first(ranks_c[0], "load_dp")
        _judge_moved(check, combo, Transition(b, c), moved, failed_c, own_saved["fingerprint"], contract)

    try:
        layout = learn_layout(MODEL, a, combo, backend, os.path.join(base, "layout"), timeout=timeout)
    except ResilienceError as e:
        check.problems.append(f"one clean save to learn the layout failed: {str(e).splitlines()[0][:300]}")
        return check
    check.layout = layout.to_dict()
    _describe_layout(check, layout, backend)
    return check


def _describe_layout(check: ComboCheck, layout, backend: str) -> None:
    per_save = [f for f in layout.files if f.per_iteration]
    check.found.append(
        (
            "layout",
            f"one save of iteration {layout.iteration} on {TOPOLOGIES[0]}, learned from "
            + (
                "the operations it made through the storage seam"
                if layout.source == "oplog"
                else "a before/after scan of the folder"
            ),
        )
    )
    check.found.append(
        (
            "files per save",
            f"{len(per_save)}: "
            + ", ".join(f"{f.template} ({f.role}{'' if f.rank is None else f', rank {f.rank}'})" for f in per_save),
        )
    )
    meta = [f.template for f in layout.files if f.role == "metadata"]
    check.found.append(("metadata files", ", ".join(meta) or "none"))
    trackers = [f.template for f in layout.files if f.role == "pointer"]
    check.found.append(("tracker", ", ".join(trackers) or "none"))
    if not trackers:
        check.notes.append("no tracker file (a root-level file naming the newest iteration): tracker damage is N/A")
    if not meta:
        names = sorted({os.path.basename(f.template) for f in per_save if f.role == "data"})
        check.notes.append(
            "no metadata file: metadata damage is N/A. If one of the files above is metadata (its "
            "role is guessed from its name), name it on the factory: factory.layout_hints = "
            f'{{"metadata": [{names[0]!r}]}}'
            if names
            else "no metadata file: metadata damage is N/A"
        )
    _describe_io(check, layout, per_save, backend)
    unread = sorted({f.template for f in layout.files if f.read is False})
    if unread:
        check.notes.append(f"never read by a load: {', '.join(unread)} (damage there tests nothing and is N/A)")


IN_PROCESS = "in-process faults (a crash at a byte, io_error, torn and short writes, power loss)"


def _describe_io(check: ComboCheck, layout, per_save: list, backend: str) -> None:
    """Whether its writes go through resilience.storage, and so which way `--io auto` takes its faults."""
    from . import ways

    declared = ways.through_seam(backend)
    outside = [f.template for f in per_save if f.written_as is None]
    if layout.seam:
        check.found.append(("I/O", "through the storage seam (resilience.storage)"))
        if not declared:
            check.notes.append(
                "every file goes through the storage seam: with factory.io_through_seam = True its "
                f"{IN_PROCESS} run in process, without mounting the fault-injecting file system"
            )
        return
    check.found.append(
        (
            "I/O",
            "outside the storage seam (plain open()/torch.save)"
            if not layout.logged
            else f"partly outside the storage seam: {', '.join(outside)}",
        )
    )
    if declared:
        check.problem(
            f"factory.io_through_seam is True, but {', '.join(outside)} are written around "
            f"resilience.storage: under --io auto its {IN_PROCESS} aimed at them are UNPROBED; drop "
            "io_through_seam and the fault-injecting file system reaches them",
            "seam",
        )
        return
    why = ways.unavailable()
    if why is None:
        check.notes.append(
            f"its {IN_PROCESS} go through the fault-injecting file system (--io auto, the default; docs/io.md)"
        )
    else:
        check.notes.append(
            f"its {IN_PROCESS} need the fault-injecting file system, which cannot mount here "
            f"({why}): here they are UNPROBED, never passed"
        )


def check_adapter(
    backend: str,
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
    declared = supported_combinations(backend)
    wanted = combos or declared or valid_combinations()
    usable: list[Combination] = []
    refused: list[str] = []
    made, why = None, ""
    for combo in wanted:
        try:
            one = make_backend(backend, combo)
        except ConfigError as e:
            if str(e.field).startswith("backend"):
                raise  # a bad name, an import error, a missing method: one clear error, before any rank runs
            refused.append(str(combo))  # the factory's own "not this combination"
            why = why or e.problem
            continue
        made = made or one
        usable.append(combo)
    factory = ":" in resolve(backend) and not backend.startswith("broken:")
    undeclared = factory and declared is None and not combos
    if not usable:
        raise ConfigError(
            "backend",
            f"{backend} refuses every combination asked for ({', '.join(refused)}): {why}",
            "declare the ones it implements: factory.combinations = ('LOCAL/torch/sync',)"
            if undeclared
            else "ask for one it implements (--combos)",
        )
    report = AdapterCheck(
        backend,
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
            report.combos.append(_combo_check(backend, combo, work, timeout))
    finally:
        if keep is None:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
    return report
