"""Learn a backend's layout from one clean save: a short job of real ranks that trains, saves once into
a scratch folder with every seam operation logged, reports the phases the backend announced, and loads
the save back to learn which files a load reads (faults.reads). The
runner learns it once per (backend, combination, topology, model; for the reference, its optimizer stands
for the model) and keeps it beside the case (layout.json) for faults and corruptions to aim through."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import dataclass, fields, replace

from ..errors import RankFailure
from ..faults.layout import Layout, learn
from ..state import ModelSpec, Topology
from ..vocab.combos import Combination
from .adapters import BackendName, BackendRef, resolve_backend
from .io_route import FUSE

_CACHE: dict[tuple, Layout] = {}
_SHARED: list[str] = []  # a folder where the worker processes of one run leave the layouts they learn


@contextlib.contextmanager
def sharing_layouts(on: bool = True, under: str | None = None):
    """While in it, learned layouts are also kept in a scratch folder (in `under`, the run's own folder, so
    that not even a SIGKILLed runner leaves it in the temp folder), one file per key under a lock, so
    worker processes forked inside it learn each layout once between them (removed on the way out)."""
    if not on or _SHARED:
        yield
        return
    import tempfile

    if under is not None:
        os.makedirs(under, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="resilience-layouts-", dir=under)
    _SHARED.append(folder)
    try:
        yield
    finally:
        _SHARED.remove(folder)
        shutil.rmtree(folder, ignore_errors=True)


def _kept(key: tuple) -> str | None:
    """Where a shared layout of `key` is kept (written whole, by a rename: read it without the lock)."""
    if not _SHARED:
        return None
    import hashlib

    return os.path.join(_SHARED[0], hashlib.sha256(repr(key).encode()).hexdigest()[:24]) + ".json"


@contextlib.contextmanager
def _shared(key: tuple):
    """The path a shared layout of `key` is kept at, held under its lock (None when not sharing)."""
    path = _kept(key)
    if path is None:
        yield None
        return
    import fcntl

    with open(path[: -len(".json")] + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released by the kernel if the learner dies
        yield path


# What of a model only shapes its tensors, their types and values. The reference names its files by iteration
# and rank alone, and writes each file whatever these are (tests/runner/test_learn_layout.py learns its layout
# twice on every combination to check it), so one probe serves every model that differs only in these; any
# other backend may name a file by what it holds, and learns the layout of each model.
SHAPES_AND_VALUES = frozenset(
    {
        "num_layers",
        "hidden",
        "ffn_hidden",
        "heads",
        "vocab",
        "make_vocab_size_divisible_by",
        "dtype",
        "optim_dtype",
        "global_batch_size",
        "lr",
        "seed",
        "rampup_samples",
        "skip_every",
        "value_range",
    }
)


def _model_key(backend: str, spec: ModelSpec) -> str:
    if backend != "reference":
        return repr(spec)
    return repr({f.name: getattr(spec, f.name) for f in fields(spec) if f.name not in SHAPES_AND_VALUES})


@dataclass
class ProbeJob:
    spec: ModelSpec
    topo: Topology
    combo: Combination
    backend: str  # the spec: a rank process resolves it itself, once
    root: str
    oplog_dir: str
    iteration: int
    phases_file: str
    reads_file: str
    control: str = ""  # the mount point when the save goes through the fault-injecting file system
    reads: bool = True  # also load the save back to learn which files a load reads


def probe_iteration(world: int) -> int:
    """An iteration number no rank, tp or pp index of this world can be mistaken for in a file name."""
    return max(13, world + 2)


def _probe_rank(ctx, plan: ProbeJob) -> dict:
    import torch.distributed as dist

    from ..faults import inject
    from ..state import TrainingState
    from ..vocab import phases

    if plan.control:
        from ..fusefs import tell

        tell(plan.control, "rank", ctx.rank)
    state = TrainingState(plan.spec, plan.topo, ctx.rank)
    state.train(1)  # real optimizer state in every file; the files' names need the iteration, not its steps
    state.iteration = plan.iteration
    ref = resolve_backend(plan.backend)  # once in this rank process
    backend = ref.make(plan.combo)
    announced: list[str] = []
    stop = phases.listen(lambda phase, info: announced.append(phase))
    try:
        # under the file system, it logs every operation itself
        with (
            contextlib.nullcontext()
            if plan.control
            else inject([], rank=ctx.rank, world=plan.topo.world, oplog_dir=plan.oplog_dir)
        ):
            backend.save(state, plan.root)
            backend.finalize()
    finally:
        stop()
    dist.barrier()
    with open(f"{plan.phases_file}.{ctx.rank}", "w") as f:
        json.dump(announced, f)
    with open(f"{plan.phases_file}.pid.{ctx.rank}", "w") as f:
        json.dump(os.getpid(), f)  # who created which file: this process, or one it started
    with open(f"{plan.reads_file}.{ctx.rank}", "w") as f:
        json.dump(_reads_of_load(plan, ref, ctx.rank) if plan.reads else {"ok": False, "why": "not asked"}, f)
    return {"iteration": state.iteration}


def _reads_of_load(plan: ProbeJob, ref: BackendRef, rank: int) -> dict:
    """The files of the root that a load of the save just made opens for reading on this rank."""
    from ..faults.reads import ReadRecorder
    from ..state import TrainingState

    recorder = ReadRecorder(plan.root)
    state = TrainingState(plan.spec, plan.topo, rank)
    backend = ref.make(plan.combo)
    recorder.recording = True
    try:
        backend.load(state, plan.root)
    except Exception as e:  # a load that fails here teaches nothing about reads; the cases will show it
        return {"ok": False, "why": f"{type(e).__name__}: {str(e)[:300]}", "paths": sorted(recorder.paths)}
    finally:
        recorder.recording = False
    return {"ok": True, "paths": sorted(recorder.paths)}


def learn_layout(
    spec: ModelSpec,
    topo: Topology,
    combo: Combination,
    backend: BackendName,
    folder: str,
    *,
    timeout: float = 120.0,
    start_method: str = "fork",
    io: str = "seam",
    reads: bool = True,
) -> Layout:
    """The layout of `backend` for `combo` on `topo`, learned in `folder` (scratch root, operation log,
    layout.json); cached for the life of the process. `io` fuse: the save goes through the
    fault-injecting file system, whose log holds every file of every writer. `reads` False: which files a
    load reads may stay unknown (only damage at rest aims by it), and the probe skips loading its save."""
    ref = resolve_backend(backend)
    name = ref.full
    key = (name, str(combo), str(topo), _model_key(name, spec), io)
    os.makedirs(folder, exist_ok=True)
    layout = _cached(key, reads)
    if layout is None:
        with _shared(key + (reads,)) as kept:
            layout = _cached(key, reads)  # another worker may have learned it while this one waited
            if layout is None:
                probe = replace(spec, num_layers=topo.pp) if name == "reference" else spec  # fewer tensors
                layout = _learn(probe, topo, combo, ref, folder, timeout, start_method, io, reads)
                if kept is not None:
                    layout.save(kept + ".tmp")
                    os.replace(kept + ".tmp", kept)
            _CACHE[key + (reads,)] = layout
    declared = ref.writer(combo)
    if declared is not None:  # what the adapter says of its writer stands over what one save showed
        layout = replace(layout, data_writer=declared, writer_declared=True)
    layout.save(os.path.join(folder, "layout.json"))
    return layout


def _cached(key: tuple, reads: bool) -> Layout | None:
    """A layout of `key` learned before, in this process or a sibling: one that learned the reads serves
    either way."""
    for learned_reads in (True,) if reads else (True, False):
        full = key + (learned_reads,)
        if full not in _CACHE and (kept := _kept(full)) is not None and os.path.exists(kept):
            _CACHE[full] = Layout.load(kept)
        if full in _CACHE:
            return _CACHE[full]
    return None


def _learn(
    spec: ModelSpec,
    topo: Topology,
    combo: Combination,
    backend: BackendName,
    folder: str,
    timeout: float,
    start_method: str,
    io: str,
    load_back: bool = True,
) -> Layout:
    from ..launch import Job

    backend = resolve_backend(backend)  # resolved by learn_layout: the same value
    backend.make(combo)  # its imports happen here, once, not in every forked rank
    root, oplog = os.path.join(folder, "ckpt"), os.path.join(folder, "oplog")
    plan = ProbeJob(
        spec,
        topo,
        combo,
        backend.spec,
        root,
        oplog,
        probe_iteration(topo.world),
        os.path.join(folder, "phases"),
        os.path.join(folder, "reads"),
        reads=load_back,
    )
    with (
        _way(io, plan, folder) as ran,
        Job(
            _probe_rank,
            topo.world,
            args=(ran,),
            timeout=timeout,
            log_dir=os.path.join(folder, "logs"),
            start_method=start_method,
            pin_cpus=True,
        ) as job,
    ):
        outcome = job.wait()
    if not outcome.ok:
        first = outcome.first_failure()
        raise RankFailure(
            {first.rank: first.describe()[:2000]} if first else {},
            f"one clean save of {backend} to learn its layout failed",
        )
    announced: set[str] = set()
    reads: set[str] | None = set()
    pids: dict[int, int] = {}
    for r in range(topo.world):
        with open(f"{plan.phases_file}.pid.{r}") as f:
            pids[r] = int(json.load(f))
        with open(f"{plan.phases_file}.{r}") as f:
            announced |= set(json.load(f))
        with open(f"{plan.reads_file}.{r}") as f:
            seen = json.load(f)
        if reads is not None and seen["ok"]:
            reads |= set(seen["paths"])
        else:
            reads = None  # a rank's load failed: what a load reads stays unknown
    return learn(
        plan.root,
        plan.iteration,
        {},
        oplog_dir=plan.oplog_dir,
        hints=backend.layout_hints,
        announced=sorted(announced),
        reads=reads or None,
        rank_pids=pids,
    )


@contextlib.contextmanager
def _way(io: str, plan: ProbeJob, folder: str):
    """The probe plan as the ranks run it: through the file system mounted over its root when io is fuse."""
    if io != FUSE:
        yield plan
        return
    from ..fusefs import mounted

    mountpoint = os.path.join(folder, "mnt")
    os.makedirs(plan.root, exist_ok=True)
    os.makedirs(mountpoint, exist_ok=True)
    with mounted(plan.root, mountpoint, log=plan.oplog_dir, paths_as=plan.root):
        yield replace(plan, root=mountpoint, control=mountpoint)


__all__ = ["learn_layout", "probe_iteration"]
