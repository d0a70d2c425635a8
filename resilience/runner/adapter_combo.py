"""One combination of an adapter check (resilience.runner.adapter_check): its jobs run on the three
topologies (runner.adapter_jobs), what their facts show said line by line (found, problems, notes), and the
layout learned from one clean save."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..checkers.topology import promised as promise_of
from ..errors import ResilienceError
from ..state import Transition
from ..vocab import Combination
from ..vocab.contract import LOAD, REFUSE
from .adapter_jobs import FIRST, SECOND, TOPOLOGIES, CheckJob, run_job
from .adapters import BackendRef
from .matrix import MODEL


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


def check_combo(backend: BackendRef, combo: Combination, work: str, timeout: float) -> ComboCheck:
    """Check `backend` on `combo`: a save and load on the first topology, a load of that save and a round
    trip on the second, a change of dp alone on the third, then one clean save to learn the layout."""
    from .learn import learn_layout

    check = ComboCheck(str(combo))
    a, b, _ = TOPOLOGIES
    base = os.path.join(work, str(combo).replace("/", "-"))
    for sub in ("facts", "empty", "logs"):
        os.makedirs(os.path.join(base, sub), exist_ok=True)
    plan = CheckJob(
        MODEL,
        a,
        combo,
        backend.spec,
        os.path.join(base, "ckpt"),
        os.path.join(base, "empty"),
        os.path.join(base, "own"),
        os.path.join(base, "facts"),
        "first",
    )
    ranks, failed = run_job(plan, timeout, os.path.join(base, "logs", "first"))
    lead = ranks[0]
    _judge_empty_load(check, _first(lead, "empty_load"), a, failed)
    if not _judge_saves(check, combo, ranks, a, failed):
        return check
    saved = _first(lead, "saved") or {}
    _judge_listing(check, _first(lead, "listing"), backend, failed)
    _judge_same_load(check, _first(lead, "load_same"), saved, a, failed)

    plan_b = CheckJob(MODEL, b, combo, backend.spec, plan.root, plan.empty, plan.own_root, plan.facts, "second")
    ranks_b, failed_b = run_job(plan_b, timeout, os.path.join(base, "logs", "second"))
    lead_b = ranks_b[0]
    contract = backend.contract(combo)
    other = _first(lead_b, "load_other")
    _judge_moved(check, combo, Transition(a, b), other, failed_b, saved.get("fingerprint"), contract)
    check.found.append(("contract", str(contract)))
    own_saved = _first(lead_b, "own_saved") or {}
    _judge_round_trip(check, ranks_b, own_saved, b, failed_b)

    c = TOPOLOGIES[2]
    if own_saved.get("fingerprint") is None:
        check.notes.append(f"no change of dp alone was tried ({b}->{c}): the save on {b} did not finish")
    else:
        plan_c = CheckJob(MODEL, c, combo, backend.spec, plan.root, plan.empty, plan.own_root, plan.facts, "dp")
        ranks_c, failed_c = run_job(plan_c, timeout, os.path.join(base, "logs", "dp"))
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


def _judge_empty_load(check: ComboCheck, empty: dict | None, a, failed: str) -> None:
    """A load of an empty folder: the protocol asks for CheckpointNotFound."""
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


def _judge_saves(check: ComboCheck, combo: Combination, ranks: list, a, failed: str) -> bool:
    """The saves of iterations FIRST and SECOND on every rank; False when one failed (nothing more to check)."""
    lead = ranks[0]
    saves = lead.get("save", [])
    bad = [s for r in ranks for s in r.get("save", []) if "raised" in s]
    if bad or len(saves) < 2:
        why = _raised(bad[0]) if bad else failed or "the job ended before both saves"
        check.problems.append(f"save on {a}: {why}")
        return False
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
    return True


def _judge_listing(check: ComboCheck, listing: dict | None, backend: BackendRef, failed: str) -> None:
    """list_checkpoints after both saves: both listed (unless it keeps the newest only), both complete."""
    if listing is None:
        check.problems.append(f"list_checkpoints did not return: {failed}")
    elif "raised" in listing:
        check.problems.append(f"list_checkpoints raised {_raised(listing)}")
    else:
        check.problems += [f"list_checkpoints {p}" for p in listing["problems"]]
        items = listing["items"]
        seen = {c["iteration"] for c in items}
        if None not in seen:  # else the items themselves are wrong, said above
            keep_last = backend.keep_last
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


def _judge_same_load(check: ComboCheck, same: dict | None, saved: dict, a, failed: str) -> None:
    """A load on the topology that saved: bit-exact, and the RNG restored (or said not to be)."""
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


def _judge_round_trip(check: ComboCheck, ranks_b: list, own_saved: dict, b, failed_b: str) -> None:
    """The second topology's own save, loaded back there."""
    own = _first(ranks_b[0], "own_load")
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


def _describe_layout(check: ComboCheck, layout, backend: BackendRef) -> None:
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


def _describe_io(check: ComboCheck, layout, per_save: list, backend: BackendRef) -> None:
    """Whether its writes go through resilience.storage, and so which way `--io auto` takes its faults."""
    from . import io_route

    declared = backend.through_seam
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
    why = io_route.unavailable()
    if why is None:
        check.notes.append(
            f"its {IN_PROCESS} go through the fault-injecting file system (--io auto, the default; docs/io.md)"
        )
    else:
        check.notes.append(
            f"its {IN_PROCESS} need the fault-injecting file system, which cannot mount here "
            f"({why}): here they are UNPROBED, never passed"
        )
