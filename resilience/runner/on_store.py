"""A case whose checkpoints live on an object store (`--storage s3`, objectstore.store): its own place there,
what the runner does at rest through a local copy of it, and the copy kept in the case folder as evidence.

Rank processes reach the store through the seam (runner.arming.use_store) and the fault proxy before its
server (runner.io_route: the s3 way), which carries the faults aimed at requests; the fault-injecting file
system mounts over a folder, not a bucket. A backend that writes its own files, outside the seam, would
write them to the local disk and never reach the store: it is refused before the case, unless it says it
reaches object stores itself (`object_store = True` on its factory, as stock DCP's fsspec path does)."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator

from ..errors import ConfigError
from ..objectstore.store import CaseStore, RunStore, is_object_store
from . import io_route

CKPT = "ckpt"  # the case's checkpoint folder: the paths ranks write, and where the store's copy is kept
NO_UNSYNCED = "an object store keeps no unsynced writes to lose: an object is whole once its upload returned, or absent"


def case_store(scenario, store: RunStore | None, backend, way: str, case_dir: str) -> CaseStore | None:
    """The case's own place on the run's object store (None: local files); ConfigError when the case cannot
    reach it (check_reaches)."""
    if not is_object_store(scenario.storage):
        return None
    check_reaches(scenario, backend, way)
    assert store is not None  # run_case starts one when none was given
    return store.for_case(case_dir)


def check_reaches(scenario, backend, way: str) -> None:
    """ConfigError when the scenario's cases cannot reach its object store: the file system's way, or a
    backend whose I/O does not go through the seam."""
    if not is_object_store(scenario.storage):
        return
    if not (backend.through_seam or backend.object_store):
        raise ConfigError(
            "--storage",
            f"backend {backend} writes its own files, outside resilience.storage, so they would never reach "
            "the object store",
            "run it with --storage local, or set `object_store = True` on its factory when it writes to the "
            "store itself",
        )
    if way == io_route.FUSE:
        raise ConfigError(
            "--io",
            "the fault-injecting file system mounts over a folder, not an object store",
            "use --io seam (or auto) with --storage s3, or --storage local with --io fuse",
        )


def as_on_store(scenario):
    """The scenario as it runs on an object store. A power loss at a crash point (lose_unsynced with a rank,
    a file or a byte) becomes what it is there: nothing unsynced is kept by a bucket, so what a crash leaves
    is the objects whose upload the server did, the answer of the one in flight lost on its way back: that
    upload's answer is lost (response_lost) and its rank killed right after (rank_crash), both at the
    proxy. A power loss with no crash point strikes after the last operation, when everything is whole:
    left as it is, N/A with the reason (NO_UNSYNCED)."""
    from dataclasses import replace

    from ..faults import RankCrash, ResponseLost
    from ..faults.base import Target, Trigger
    from .scenario_model import Step

    steps = []
    for s in scenario.steps:
        f = s.fault
        t = f.target if f is not None else None
        if s.kind != "lose_unsynced" or f is None or t is None or (t.rank, t.path, f.trigger.at_byte) == (None,) * 3:
            steps.append(s)
            continue
        aimed = Target(rank=t.rank, path=t.path, op="put")  # the upload of the file it aimed at
        for record in (
            ResponseLost(target=aimed, trigger=Trigger(nth=f.trigger.nth), seed=f.seed),
            RankCrash(target=aimed, trigger=Trigger(nth=f.trigger.nth, when="after"), seed=f.seed),
        ):
            steps.append(Step("fault", record.to_dict(), s.line, record))
    return replace(scenario, steps=steps)


_UPLOAD = "put"


def _records(kind: str, fault: dict) -> list[dict]:
    """The request faults a write fault becomes (none: it stays as it is)."""
    if fault.get("op") not in (None, "write", "create", "close"):
        return []  # a fault of an fsync or a rename: the seam in the rank still carries it
    where = {k: fault[k] for k in ("rank", "path", "nth") if k in fault}
    if kind == "io_error":
        status = 500 if fault.get("errno") == "EIO" else 503
        first = {"kind": "http_error", "status": status, **where, "op": _UPLOAD}
        return [first, {**first, "nth": int(where.get("nth", 1)) + 1}]  # both tries of the client
    if kind == "torn_write":
        return [{"kind": "connection_reset", **where, "op": _UPLOAD}]
    if kind == "short_write":
        return [{"kind": "response_lost", **where, "op": _UPLOAD}]
    if kind == "slow_write":
        times = {"times": fault["times"]} if fault.get("times") else {}
        return [{"kind": "slow_write", "delay": fault.get("delay", 0.05), **times, **where, "op": _UPLOAD}]
    if kind == "rank_crash" and fault.get("phase") is None and fault.get("when", "before") == "before":
        return [{"kind": "rank_crash", **where, "op": _UPLOAD}]  # killed as it uploads the file it was writing
    return []


def requests_of_writes(scenario):
    """The scenario with each fault on a file's write made the fault of its upload request, carried out by
    the fault proxy: io_error -> http_error (503, or 500 for EIO) on both tries of the client, torn_write ->
    connection_reset, short_write -> response_lost, slow_write -> a slow upload, a crash at a byte of a file
    -> the rank killed at its upload. What a backend outside the seam meets on a store (the seam never sees
    its writes), and what the fuzzer draws there. Every other fault stays as it is."""
    from dataclasses import replace

    from ..faults import fault_from_dict
    from .scenario_model import Step

    steps = []
    for s in scenario.steps:
        args = s.fault.to_dict() if s.fault is not None and s.fault.layer == "inject" else {}
        records = _records(str(args.get("kind")), _flat(args)) if args else []
        if not records:
            steps.append(s)
            continue
        steps += [Step("fault", r, s.line, fault_from_dict(r)) for r in records]
    return replace(scenario, steps=steps)


def _flat(d: dict) -> dict:
    """A record's dict with its target and trigger fields at the top level, as a step writes them."""
    return {
        **{k: v for k, v in d.items() if k not in ("target", "trigger")},
        **d.get("target", {}),
        **d.get("trigger", {}),
    }


def kept_as_evidence(case) -> None:
    """Copy the case's objects into its checkpoint folder (what a loader would list at the end), then remove
    them from the store: the folder keeps the evidence, the store keeps nothing of the run."""
    if case.store is None:
        return
    from ..objectstore import mirror

    mirror.pull(case.store, os.path.join(case.case_dir, CKPT))
    mirror.remove(case.store)
    if case.store.staging is not None:  # what killed ranks were writing never reached the store
        shutil.rmtree(case.store.staging, ignore_errors=True)


@contextlib.contextmanager
def at_rest(case, root: str) -> Iterator[None]:
    """Work on the checkpoint at rest as files: on an object store, a copy of its objects pulled into `root`
    and what changed pushed back after."""
    if case.store is None:
        yield
        return
    from ..objectstore import mirror

    pulled = mirror.pull(case.store, root)
    yield
    mirror.push(case.store, root, pulled)


__all__ = [
    "CKPT",
    "NO_UNSYNCED",
    "as_on_store",
    "at_rest",
    "case_store",
    "check_reaches",
    "kept_as_evidence",
    "requests_of_writes",
]
