"""Checkpoint save and load: the reference backend's six combinations against stock torch on one state.

One job of 4 rank processes (the fork launcher) builds a GPT-like state once (fp32 weights and Adam's two
moments, one training step taken so every moment is non-zero) and, round after round, measures:

- each of the six combinations: save, then load, with `ReferenceBackend` (checksums on, as shipped);
  async: how long the training thread is blocked (the save() call, plus the staging copies the next
  training step waits for: a tensor is copied before the step changes it), save() + finalize(), and the
  worst case, a step that changes every tensor at once;
- stock `torch.distributed.checkpoint.save/load` of the same pieces: a state dict of torch ShardedTensors
  (each rank's replica-0 pieces with their global shape and offset), `checkpoint_id=folder`, defaults;
  run right after GLOBAL/torch_dist/sync, the combination it is compared with;
- per-rank `torch.save` / `torch.load(weights_only=True)` + copy into the state, of the same records;
  the fsync a plain torch.save never does is timed on its own;
- checksum overhead: each sync combination saved again with hashing disabled in the rounds, and then every
  combination (an async one: save() and finalize()) in --checksum-runs consecutive runs of that comparison
  alone, each of --checksum-repeats rounds and judged on its own, through the storage seam (a LocalFileSystem
  whose write streams skip xxh3; nothing outside this file changes). The target is judged on those runs
  only; the rounds' own comparison is printed, not judged (fewer rounds, each beside the other methods).
  The load side's checksum cost is the verification pass alone (every file of a GLOBAL checkpoint hashed,
  split over ranks);
- a diagnostic: GLOBAL/torch_dist/sync saved with torch.save's own CRC32 kept on (the reference's writes
  turn it off: storage/torch_save.py).

A warm-up round (not counted) first runs every path once: allocator, page cache, DCP's first plans, the
device mesh; an async save's first, cold staging is reported from it. Rounds alternate the order of the
methods. Every figure is the median over rounds of the wall time until the last rank finished (async
blocking: the slowest rank's save() call); targets are judged on ratios of medians, and the median of
the round-by-round ratios is printed beside them. CPU seconds summed over ranks are printed too: on a
shared machine they show the work done whatever else runs. Loads read files just written (page cache).
Every checkpoint is written to a fresh folder under a temp dir that is removed at the end.

    python -m benchmarks checkpoint [--size-gib 1.0] [--repeats 3] [--warmup 1] [--checksum-runs 3]
        [--checksum-repeats 21] [--fusefs-mib 256] [--loads COMBOS | --checksums] [--dir DIR] [--json FILE]

Each target prints one line ending `met` or `NOT met`, with the machine's load average while it was measured.

`--loads TORCH_DCP/torch_dcp/sync,TORCH_DCP/torch_dcp/async` measures only those loads against stock
dcp.load (each saved untimed first), in the same rounds: a quicker run when only the loads are in question.
`--checksums` measures only the checksum runs.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from math import prod

import psutil
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import xxhash

from resilience import storage
from resilience.checkpoint import ReferenceBackend
from resilience.checkpoint.manifest import Manifest, file_digest
from resilience.commands.common import nonnegative_int, positive_float, positive_int
from resilience.errors import ConfigError
from resilience.launch import run_ranks
from resilience.state import ModelSpec, Topology, TrainingState
from resilience.state.sharding import ShardedObject, ShardedTensor
from resilience.storage.local import LocalFileSystem, LocalWriteStream
from resilience.vocab import valid_combinations

from . import memory, raw_io

TARGET_GLOBAL_VS_DCP = 1.0  # GLOBAL/torch_dist/sync save time / stock DCP save time, at most
TARGET_ASYNC_BLOCKING = 0.03  # async save() blocking time / the sync save time, at most (DCP with shm staging: ~3%)
TARGET_CHECKSUM_OVERHEAD = 0.10  # save time with checksums / without, minus 1, at most, in every checksum run
TARGET_LOAD_VS_DCP = 1.0  # every reference load (checksums verified) / stock dcp.load, at most
TARGET_RAW_FRACTION = 0.70  # GLOBAL and TORCH_DCP sync saves, every verified load: of the raw bandwidth, at least
RAW_JUDGED_SAVES = ("GLOBAL/torch_dist/sync", "TORCH_DCP/torch_dcp/sync")
GLOBAL_SYNC = "GLOBAL/torch_dist/sync"
ASYNC_OF = {
    "GLOBAL/torch_dist/async": "GLOBAL/torch_dist/sync",
    "TORCH_DCP/torch_dcp/async": "TORCH_DCP/torch_dcp/sync",
}
BYTES_PER_PARAM = 12  # fp32 weight + Adam's exp_avg and exp_avg_sq


# ---- the state ------------------------------------------------------------------------------------
def held_bytes(spec: ModelSpec, topo: Topology) -> int:
    """Bytes of tensor state held over all ranks: replicas (tp-replicated norms, dp copies) included."""
    total = 0
    for p in spec.params(topo.tp):
        copies = topo.dp * (topo.tp if p.tp_dim is None else 1)
        total += prod(p.shape) * copies * BYTES_PER_PARAM
    return total


def spec_for(size_gib: float, topo: Topology, hidden: int | None = None) -> ModelSpec:
    """A GPT-like spec (hidden 768, ffn 3072, 12 heads, vocab 32000) with the fewest layers (a multiple of
    pp) whose fp32 Adam state is at least `size_gib`; below that size the width shrinks instead. `hidden`
    fixes the width (a series of sizes of one model family: only the number of layers differs)."""
    want = size_gib * (1 << 30)
    if hidden is None:
        hidden = 768
        while hidden > 64 and held_bytes(_spec(hidden, topo.pp), topo) > 2 * want:
            hidden //= 2
    layers = topo.pp
    while held_bytes(_spec(hidden, layers), topo) < want:
        layers += topo.pp
    return _spec(hidden, layers)


def _spec(hidden: int, layers: int) -> ModelSpec:
    return ModelSpec(
        num_layers=layers,
        hidden=hidden,
        ffn_hidden=4 * hidden,
        heads=max(4, hidden // 64),
        vocab=32000 if hidden >= 512 else 4000,
        dtype="fp32",
        optimizer="adam",
    )


# ---- checksums off, through the storage seam ---------------------------------------------------------
class _NoHash:
    def update(self, data) -> None:
        pass

    def hexdigest(self) -> str:
        return "0" * 32


class UnhashedWriteStream(LocalWriteStream):
    """LocalWriteStream with its xxh3 replaced by nothing: everything else (buffering, fsync) unchanged.
    Its digest is a placeholder, so nothing re-reads the file either."""

    def __init__(self, path: str, sync: bool = True):
        super().__init__(path, sync)
        if not hasattr(self, "_hash"):
            raise RuntimeError("LocalWriteStream no longer keeps its hash in _hash: update this benchmark")
        self._hash = _NoHash()

    def close(self) -> None:
        super().close()
        self.digest = _NoHash().hexdigest()


class UnhashedFileSystem(LocalFileSystem):
    def open_write(self, path: str, *, sync: bool = True) -> UnhashedWriteStream:
        return UnhashedWriteStream(str(path), sync)


# ---- timing inside the ranks ----------------------------------------------------------------------
def _cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this rank, the writer's included
    return r.ru_utime + r.ru_stime


class Clock:
    """Times collective steps. Every rank starts together; a step's wall time ends when the last rank is
    done (rank 0's clock). Each rank's own duration and CPU seconds are kept too: CPU time shows the
    work done whatever else runs on the machine."""

    def __init__(self, rank: int, world: int):
        self.rank, self.world = rank, world
        self.runs: dict[str, list[dict]] = {}

    def run(self, name: str, fn):
        dist.barrier()
        cpu0, t0 = _cpu_seconds(), time.perf_counter()
        result = fn()
        own, cpu = time.perf_counter() - t0, _cpu_seconds() - cpu0
        dist.barrier()
        wall = time.perf_counter() - t0
        everyone = [None] * self.world
        dist.all_gather_object(everyone, (own, cpu))
        self.runs.setdefault(name, []).append(
            {"wall": wall, "own": [o for o, _ in everyone], "cpu": [c for _, c in everyone]}
        )
        return result

    def last(self, name: str) -> float:
        return self.runs[name][-1]["wall"]

    def progress(self, text: str) -> None:
        if self.rank == 0:
            print(f"  {text}", file=sys.stderr, flush=True)


def _remove(rank: int, path: str) -> None:
    dist.barrier()
    if rank == 0:
        shutil.rmtree(path, ignore_errors=True)
    memory.trim()  # what one method freed is not left resident while the next is measured
    dist.barrier()


@contextlib.contextmanager
def _torch_crc32_kept():
    """The reference's writes as they were before they turned torch.save's CRC32 off (storage.torch_save;
    torch.load never checks it): the write step's switch replaced by one that changes nothing."""
    from resilience.checkpoint import driver

    before = driver.without_crc32
    driver.without_crc32 = contextlib.nullcontext  # type: ignore[assignment]
    try:
        yield
    finally:
        driver.without_crc32 = before


def _stock_state(records, group=None) -> dict:
    """The same replica-0 pieces as torch ShardedTensors, and the objects, as a DCP user would save them."""
    from torch.distributed._shard.metadata import ShardMetadata
    from torch.distributed._shard.sharded_tensor import Shard, ShardedTensor as TorchShardedTensor
    from torch.distributed._shard.sharded_tensor.metadata import ShardedTensorMetadata, TensorProperties

    rank = dist.get_rank()
    mine = [
        (r.key, list(r.global_shape), list(r.global_offset), list(r.local_shape))
        for r in records
        if isinstance(r, ShardedTensor) and r.replica_id == 0
    ]
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    by_key: dict[str, list] = {}
    for owner, pieces in enumerate(everyone):
        for key, shape, offset, local in pieces:
            by_key.setdefault(key, []).append((owner, shape, offset, local))
    state = {}
    for r in records:
        if isinstance(r, ShardedTensor) and r.replica_id == 0:
            shards = [ShardMetadata(off, local, f"rank:{owner}/cpu") for owner, _, off, local in by_key[r.key]]
            meta = ShardedTensorMetadata(shards, torch.Size(r.global_shape), TensorProperties(dtype=r.data.dtype))
            local = next(s for s, (owner, *_) in zip(shards, by_key[r.key]) if owner == rank)
            state[r.key] = TorchShardedTensor._init_from_local_shards_and_global_metadata(
                [Shard(r.data, local)], meta, process_group=group
            )
        elif isinstance(r, ShardedObject) and r.replica_id == 0:
            state[r.unique_key] = r.value
    return state


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class RankBench:
    """Everything one rank measures, block by block; blocks run in reverse order on odd repeats so no
    method always runs first, and the stock DCP block runs next to GLOBAL/torch_dist/sync."""

    def __init__(self, ctx, spec: ModelSpec, topo: Topology, root: str, lean: bool = False):
        self.rank, self.world, self.root, self.lean = ctx.rank, ctx.world, root, lean
        self.clock = Clock(ctx.rank, ctx.world)
        self.clock.progress(f"building the state on {ctx.world} ranks ({spec.num_layers} layers, hidden {spec.hidden})")
        self.state = TrainingState(spec, topo, ctx.rank)
        self.state.train(1)  # non-zero moments: every page of the state is real data
        self.records = self.state.sharded_state_dict()
        self.stock = _stock_state(self.records)
        self.backends = {str(c): ReferenceBackend(c) for c in valid_combinations()}
        self.raw = raw_io.RawBaseline(ctx.rank, self.sizes()[1])

    def sizes(self) -> tuple[int, int]:
        tensors = [r for r in self.records if isinstance(r, ShardedTensor)]
        return (
            sum(r.data.numel() * r.data.element_size() for r in tensors),
            sum(r.data.numel() * r.data.element_size() for r in tensors if r.replica_id == 0),
        )

    def blocks(self) -> list:
        out = [lambda rep: self.raw.measure(self.clock, self._folder(rep, "raw"), _remove)]
        for name in self.backends:
            out.append(lambda rep, name=name: self.combination(name, rep))
            if name == GLOBAL_SYNC and not self.lean:
                out.append(self.stock_dcp)
        return out if self.lean else [*out, self.torch_save, self.step_alone]

    def round(self, rep: int) -> None:
        blocks = self.blocks()
        for block in blocks[::-1] if rep % 2 else blocks:
            block(rep)

    def loads_round(self, rep: int, names: list[str]) -> None:
        """--loads: each named combination and stock DCP saved (untimed; an async one finalized), then
        loaded (timed), in turn; the order alternates from round to round."""
        order = [*names, "dcp"]
        for name in order[::-1] if rep % 2 else order:
            folder = self._folder(rep, name)
            if name == "dcp":
                dcp.save(self.stock, checkpoint_id=folder)
                raw_io.drop_cache_tree(folder)
                self.clock.run("dcp load", functools.partial(dcp.load, self.stock, checkpoint_id=folder))
                self.clock.progress(f"{'stock dcp.load':<27} load {self.clock.last('dcp load'):6.3f} s")
            else:
                backend = self.backends[name]
                self.state.iteration = 1000 + rep
                backend.save(self.state, folder)
                backend.finalize()
                raw_io.drop_cache_tree(folder)
                self.clock.run(f"{name} load", functools.partial(backend.load, self.state, folder))
                self.clock.progress(f"{name:<27} load {self.clock.last(f'{name} load'):6.3f} s")
            _remove(self.rank, folder)

    def _folder(self, rep: int, name: str) -> str:
        return os.path.join(self.root, f"rep{rep}", name.replace("/", "-").replace(" ", "-"))

    def combination(self, name: str, rep: int) -> None:
        backend, state, clock = self.backends[name], self.state, self.clock
        folder = self._folder(rep, name)
        state.iteration = 1000 + rep
        if backend.combo.is_async:
            self._async_save(name, folder)
            self._load(name, folder)
            if self.lean:  # one async staging copy alive at a time: a large size fits the machine
                backend.release_staging()
            return
        variants = ["save", "save unhashed"] + (["save crc32 on"] if name == GLOBAL_SYNC else [])
        if self.lean:
            variants = ["save"]
        for variant in variants[::-1] if rep % 2 else variants:
            if variant == "save":
                clock.run(f"{name} save", lambda: backend.save(state, folder))
                clock.progress(f"{name:<27} save {clock.last(f'{name} save'):6.3f} s")
                self._load(name, folder)
            elif variant == "save unhashed":
                with storage.use(UnhashedFileSystem()):
                    clock.run(f"{name} save unhashed", lambda: backend.save(state, folder))
                clock.progress(f"{name:<27} save, hashing off {clock.last(f'{name} save unhashed'):6.3f} s")
                _remove(self.rank, folder)
            else:
                with _torch_crc32_kept():
                    clock.run(f"{name} save crc32 on", lambda: backend.save(state, folder))
                seconds = clock.last(f"{name} save crc32 on")
                clock.progress(f"{name:<27} save, torch.save's CRC32 on {seconds:6.3f} s")
                _remove(self.rank, folder)

    def checksum_run(self, run: int, rep: int) -> None:
        """One round of a checksum run: every combination saved with and without hashing, in turn (an async
        one: save() and finalize(), the writer hashing in the background)."""
        names = list(self.backends)
        for name in names[::-1] if rep % 2 else names:
            folder = self._folder(rep, f"checksums-{run}-{name}")
            self.state.iteration = 2000 + rep
            backend = self.backends[name]

            def save(backend=backend, folder=folder):
                backend.save(self.state, folder)
                backend.finalize()

            for variant in ("save", "save unhashed")[:: -1 if rep % 2 else 1]:
                key = f"checksum run {run} {name} {variant}"
                if variant == "save":
                    self.clock.run(key, save)
                else:
                    with storage.use(UnhashedFileSystem()):
                        self.clock.run(key, save)
                _remove(self.rank, folder)
            on, off = (self.clock.last(f"checksum run {run} {name} {v}") for v in ("save", "save unhashed"))
            self.clock.progress(f"checksum run {run + 1}: {name:<27} save {on:6.3f} s, hashing off {off:6.3f} s")

    def _async_save(self, name: str, folder: str) -> None:
        """save(), one training step while the write runs, finalize(). The training thread is blocked for
        the save() call and for the copies the step waits for (Snapshot.waited). Then the worst case: a
        step that changes every tensor before the writer copied any (the whole copy on the training thread)."""
        backend, state, clock = self.backends[name], self.state, self.clock
        clock.run(f"{name} blocking", lambda: backend.save(state, folder))
        guard = state.write_guard
        clock.run(f"{name} step", state.step)
        self._gathered(f"{name} step waits", guard.waited if guard is not None else 0.0)
        clock.run(f"{name} finalize", backend.finalize)
        blocked = max(
            a + b
            for a, b in zip(clock.runs[f"{name} blocking"][-1]["own"], clock.runs[f"{name} step waits"][-1]["own"])
        )
        clock.progress(
            f"{name:<27} save() + the step's waits blocked {blocked:6.3f} s, with finalize "
            f"{clock.last(f'{name} blocking') + clock.last(f'{name} finalize'):6.3f} s; the step "
            f"took {clock.last(f'{name} step'):.3f} s"
        )
        _remove(self.rank, folder)

        def save_then_change_everything():
            backend.save(state, folder)
            state.write_guard.before_write([r.data for r in self.records if isinstance(r, ShardedTensor)])

        clock.run(f"{name} worst", save_then_change_everything)
        clock.run(f"{name} worst finalize", backend.finalize)
        clock.progress(f"{name:<27} worst case blocked {max(clock.runs[f'{name} worst'][-1]['own']):6.3f} s")

    def _gathered(self, name: str, own: float) -> None:
        """A per-rank figure measured inside a step (not a step of its own): kept like Clock.run's."""
        everyone = [None] * self.world
        dist.all_gather_object(everyone, own)
        self.clock.runs.setdefault(name, []).append({"wall": max(everyone), "own": everyone, "cpu": [0.0] * self.world})

    def step_alone(self, rep: int) -> None:
        """A training step with no save in flight: what the step costs when it has the machine."""
        self.clock.run("step alone", self.state.step)
        self.clock.progress(f"{'training step, no save':<27} {self.clock.last('step alone'):6.3f} s")

    def _load(self, name: str, folder: str) -> None:
        backend, clock = self.backends[name], self.clock
        raw_io.drop_cache_tree(folder)
        clock.run(f"{name} load", lambda: backend.load(self.state, folder))
        clock.progress(f"{name:<27} load {clock.last(f'{name} load'):6.3f} s")
        if name == GLOBAL_SYNC:
            path = os.path.join(folder, f"iter_{self.state.iteration:07d}")
            clock.run("verify checksums", lambda: self._verify(path))
            clock.progress(f"{'  checksum pass of its load':<27} {clock.last('verify checksums'):6.3f} s")
        _remove(self.rank, folder)

    def _verify(self, folder: str) -> None:
        """The load path's checksum pass on its own: every listed file hashed, files split over ranks."""
        manifest = Manifest.read(folder)
        for i, rel in enumerate(sorted(manifest.files)):
            if i % self.world == self.rank:
                file_digest(os.path.join(folder, rel))

    def stock_dcp(self, rep: int) -> None:
        clock, folder = self.clock, self._folder(rep, "dcp")
        clock.run("dcp save", lambda: dcp.save(self.stock, checkpoint_id=folder))
        clock.progress(f"{'stock dcp.save':<27} save {clock.last('dcp save'):6.3f} s")
        raw_io.drop_cache_tree(folder)
        clock.run("dcp load", lambda: dcp.load(self.stock, checkpoint_id=folder))
        clock.progress(f"{'stock dcp.load':<27} load {clock.last('dcp load'):6.3f} s")
        _remove(self.rank, folder)

    def torch_save(self, rep: int) -> None:
        clock, folder = self.clock, self._folder(rep, "torch")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"rank{self.rank}.pt")
        doc = {
            "tensors": {r.key: r.data for r in self.records if isinstance(r, ShardedTensor)},
            "objects": {r.key: r.value for r in self.records if isinstance(r, ShardedObject)},
        }
        clock.run("torch.save save", lambda: torch.save(doc, path))
        clock.run("torch.save fsync", lambda: _fsync(path))
        raw_io.drop_cache_tree(folder)

        def load():
            loaded = torch.load(path, weights_only=True)
            for r in self.records:
                if isinstance(r, ShardedTensor):
                    r.data.copy_(loaded["tensors"][r.key])
            self.state.load_objects(loaded["objects"])

        clock.run("torch.save load", load)
        clock.progress(
            f"{'per-rank torch.save':<27} save {clock.last('torch.save save'):6.3f} s "
            f"(+ fsync {clock.last('torch.save fsync'):.3f} s), "
            f"load {clock.last('torch.save load'):6.3f} s"
        )
        _remove(self.rank, folder)


def bench_rank(
    ctx,
    spec: ModelSpec,
    topo: Topology,
    root: str,
    repeats: int,
    warmup: int,
    checksum_runs: int = 0,
    only_loads: list[str] | None = None,
    checksum_repeats: int | None = None,
    only_checksums: bool = False,
    lean: bool = False,
) -> dict | None:
    # torch's own deprecation notice for ShardedTensor, printed by every rank at every stock save and load
    warnings.filterwarnings("ignore", message=".*ShardedTensor.*", category=FutureWarning)
    bench = RankBench(ctx, spec, topo, root, lean)
    sizes = [None] * ctx.world
    dist.all_gather_object(sizes, bench.sizes())
    peaks: list = [None] * ctx.world
    if not (only_loads or only_checksums):  # first, in fresh processes: nothing held yet by another method
        mine = memory.measure(bench, lambda name: bench._folder(-99, f"memory-{name}"), _remove)
        dist.all_gather_object(peaks, mine)
    warm, loads = {}, []
    for rep in range(-warmup, 0 if only_checksums else repeats):
        if rep == 0 and warmup:  # first use of every path (allocator, page cache, DCP, device mesh): apart
            warm, bench.clock.runs = bench.clock.runs, {}
        loads.append(os.getloadavg()[0])
        bench.clock.progress(
            f"warm-up round {rep + warmup + 1}/{warmup}, not counted"
            if rep < 0
            else f"repeat {rep + 1}/{repeats} (load average {loads[-1]:.1f})"
        )
        if only_checksums:
            bench.checksum_run(-1, rep)
        elif only_loads:
            bench.loads_round(rep, only_loads)
        else:
            bench.round(rep)
    if only_checksums and warmup:
        warm, bench.clock.runs = bench.clock.runs, {}
    # consecutive runs of the checksum comparison alone, each judged apart
    checksum_loads = []
    for run in range(0 if only_loads else checksum_runs):
        checksum_loads.append(os.getloadavg()[0])
        for rep in range(checksum_repeats or repeats):
            bench.checksum_run(run, rep)
    if ctx.rank != 0:
        return None
    return {
        "runs": bench.clock.runs,
        "warmup": warm,
        "load_average_1min": loads,
        "checksum_runs": checksum_runs,
        "checksum_load_average_1min": checksum_loads,
        **state_bytes(sizes),
        "memory": peaks if peaks[0] is not None else None,
    }


def state_bytes(sizes: list[tuple[int, int]]) -> dict:
    """The figures of every rank's RankBench.sizes() (held bytes, replica-0 bytes written), gathered."""
    return {
        "held_bytes": sum(s[0] for s in sizes),
        "written_bytes": sum(s[1] for s in sizes),
        "per_rank_bytes": [s[0] for s in sizes],
        "per_rank_written_bytes": [s[1] for s in sizes],
    }


# ---- parent side --------------------------------------------------------------------------------------
def xxh3_throughput(nbytes: int = 256 << 20) -> float:
    """GiB/s of xxh3-128 over `nbytes` in memory, one core, best of 3 (what the write streams do)."""
    data = torch.arange(nbytes // 4, dtype=torch.int32).numpy().tobytes()
    view = memoryview(data)
    best = float("inf")
    for _ in range(3):
        h = xxhash.xxh3_128()
        t0 = time.perf_counter()
        for at in range(0, nbytes, 8 << 20):
            h.update(view[at : at + (8 << 20)])
        h.hexdigest()
        best = min(best, time.perf_counter() - t0)
    return nbytes / best / (1 << 30)


def _median(xs) -> float:
    return statistics.median(xs)


class Figures:
    """Medians over repeats of what the ranks measured."""

    def __init__(self, runs: dict[str, list[dict]]):
        self.runs = runs

    def walls(self, name: str) -> list[float]:
        return [r["wall"] for r in self.runs[name]]

    def wall(self, name: str) -> float:
        return _median(self.walls(name))

    def cpu(self, name: str) -> float:
        """CPU seconds summed over ranks."""
        return _median(sum(r["cpu"]) for r in self.runs[name])

    def blocking(self, *names: str) -> list[float]:
        """The slowest rank's own time (summed over `names`, run by run), per run."""
        return [max(map(sum, zip(*(r["own"] for r in runs)))) for runs in zip(*(self.runs[n] for n in names))]

    def add(self, name: str, a: str, b: str) -> None:
        """A derived measurement: a then b, run after run (async save() and its finalize)."""
        self.runs[name] = [
            {
                "wall": x["wall"] + y["wall"],
                "own": [p + q for p, q in zip(x["own"], y["own"])],
                "cpu": [p + q for p, q in zip(x["cpu"], y["cpu"])],
            }
            for x, y in zip(self.runs[a], self.runs[b])
        ]


def _paired(a: list[float], b: list[float]) -> float:
    """Median of the run-by-run ratios a/b: each pair ran minutes apart at most, the same load around."""
    return _median(x / y for x, y in zip(a, b))


def summarize(raw: dict) -> dict:
    f = Figures(raw["runs"])
    for name in ASYNC_OF:
        f.add(f"{name} save", f"{name} blocking", f"{name} finalize")
    dcp_save, ts_save = f.wall("dcp save"), f.wall("torch.save save")
    dcp_load, ts_load = f.wall("dcp load"), f.wall("torch.save load")
    methods = [(str(c), f"{c} save", f"{c} load") for c in valid_combinations()]
    methods += [
        ("stock dcp.save/dcp.load", "dcp save", "dcp load"),
        ("per-rank torch.save/torch.load", "torch.save save", "torch.save load"),
    ]
    rows = []
    for method, save, load in methods:
        s, lo = f.wall(save), f.wall(load)
        rows.append(
            {
                "method": method,
                "save_s": s,
                "load_s": lo,
                "save_cpu_s": f.cpu(save),
                "load_cpu_s": f.cpu(load),
                "save_vs_dcp": s / dcp_save,
                "load_vs_dcp": lo / dcp_load,
                "save_vs_torch_save": s / ts_save,
                "load_vs_torch_load": lo / ts_load,
                "save_vs_dcp_paired": _paired(f.walls(save), f.walls("dcp save")),
                "load_vs_dcp_paired": _paired(f.walls(load), f.walls("dcp load")),
                "save_runs": f.walls(save),
                "load_runs": f.walls(load),
            }
        )
    fsync = {"fsync_s": f.wall("torch.save fsync"), "runs": f.walls("torch.save fsync")}
    asyncs = []
    for name, sync_name in ASYNC_OF.items():
        blocked = (f"{name} blocking", f"{name} step waits")
        blocking = f.blocking(*blocked)
        first = Figures(raw["warmup"]).blocking(*blocked)[0] if raw["warmup"] else blocking[0]
        b, sync = _median(blocking), f.wall(f"{sync_name} save")
        worst = _median(f.blocking(f"{name} worst"))
        asyncs.append(
            {
                "method": name,
                "blocking_s": b,
                "first_blocking_s": first,
                "blocking_runs": blocking,
                "save_call_s": _median(f.blocking(f"{name} blocking")),
                "step_waits_s": _median(f.blocking(f"{name} step waits")),
                "step_s": f.wall(f"{name} step"),
                "step_alone_s": f.wall("step alone"),
                "worst_case_s": worst,
                "worst_case_vs_sync": worst / sync,
                "save_and_finalize_s": f.wall(f"{name} save"),
                "sync": sync_name,
                "sync_save_s": sync,
                "blocking_vs_sync": b / sync,
                "blocking_vs_sync_paired": _paired(blocking, f.walls(f"{sync_name} save")),
            }
        )
    checksums = []
    for c in valid_combinations():
        if c.is_async:
            continue
        on, off = f"{c} save", f"{c} save unhashed"
        checksums.append(
            {
                "method": str(c),
                "save_s": f.wall(on),
                "save_unhashed_s": f.wall(off),
                "overhead": f.wall(on) / f.wall(off) - 1,
                "overhead_paired": _paired(f.walls(on), f.walls(off)) - 1,
                "cpu_s": f.cpu(on),
                "cpu_unhashed_s": f.cpu(off),
                "cpu_overhead": f.cpu(on) / f.cpu(off) - 1,
                "unhashed_runs": f.walls(off),
            }
        )
    checksum_runs = _checksum_runs(f, raw)
    crc = f"{GLOBAL_SYNC} save crc32 on"
    crc32 = {
        "method": GLOBAL_SYNC,
        "save_s": f.wall(f"{GLOBAL_SYNC} save"),
        "save_crc32_on_s": f.wall(crc),
        "crc32_on_vs_dcp": f.wall(crc) / dcp_save,
        "crc32_on_vs_dcp_paired": _paired(f.walls(crc), f.walls("dcp save")),
        "cpu_s": f.cpu(f"{GLOBAL_SYNC} save"),
        "cpu_crc32_on_s": f.cpu(crc),
        "dcp_cpu_s": f.cpu("dcp save"),
        "runs": f.walls(crc),
    }
    verify = {
        "method": GLOBAL_SYNC,
        "verify_s": f.wall("verify checksums"),
        "load_s": f.wall(f"{GLOBAL_SYNC} load"),
        "share_of_load": f.wall("verify checksums") / f.wall(f"{GLOBAL_SYNC} load"),
        "runs": f.walls("verify checksums"),
    }
    g = next(r for r in rows if r["method"] == GLOBAL_SYNC)
    targets = {
        "global_sync_save_vs_dcp": {
            "value": g["save_vs_dcp"],
            "paired": g["save_vs_dcp_paired"],
            "limit": TARGET_GLOBAL_VS_DCP,
            "met": g["save_vs_dcp"] <= TARGET_GLOBAL_VS_DCP,
        },
        "async_blocking_vs_sync": {
            a["method"]: {
                "value": a["blocking_vs_sync"],
                "paired": a["blocking_vs_sync_paired"],
                "limit": TARGET_ASYNC_BLOCKING,
                "met": a["blocking_vs_sync"] <= TARGET_ASYNC_BLOCKING,
            }
            for a in asyncs
        },
        "checksum_overhead_runs": _checksum_run_targets(checksum_runs),
        "load_vs_dcp": {
            r["method"]: {
                "value": r["load_vs_dcp"],
                "paired": r["load_vs_dcp_paired"],
                "limit": TARGET_LOAD_VS_DCP,
                "met": r["load_vs_dcp"] <= TARGET_LOAD_VS_DCP,
            }
            for r in rows
            if r["method"] in {str(c) for c in valid_combinations()}
        },
    }
    targets["raw_fraction"] = raw_targets(fig_raw := raw_figures(f, methods, raw))
    targets["memory"] = fig_raw["memory"]
    return {
        "rows": rows,
        "raw": fig_raw,
        "torch_save_fsync": fsync,
        "async": asyncs,
        "checksums": checksums,
        "crc32": crc32,
        "checksum_runs": checksum_runs,
        "load_verify": verify,
        "targets": targets,
    }


def raw_figures(f: Figures, methods: list[tuple[str, str, str]], raw: dict) -> dict:
    """The raw baseline's medians, each method as a fraction of it, and the memory peaks."""
    written = raw["written_bytes"] / (1 << 30)
    return {
        "write_s": f.wall("raw write"),
        "read_s": f.wall("raw read"),
        "write_gib_per_s": written / f.wall("raw write"),
        "read_gib_per_s": written / f.wall("raw read"),
        "write_runs": f.walls("raw write"),
        "read_runs": f.walls("raw read"),
        "cold_cache": raw_io.CACHE_WAY,
        "state_bytes": raw["per_rank_bytes"],
        "fractions": raw_io.fractions(f, methods),
        "memory": memory.summarize(raw["memory"], raw["per_rank_bytes"], set(ASYNC_OF)) if raw["memory"] else {},
    }


def raw_targets(fig: dict) -> dict:
    """GLOBAL and TORCH_DCP sync saves and every reference load, each >= TARGET_RAW_FRACTION of raw."""
    out = {}
    for name, c in fig["fractions"].items():
        if name not in {str(c) for c in valid_combinations()}:
            continue
        for what in ("save", "load"):
            if what in c and (what == "load" or name in RAW_JUDGED_SAVES):
                out[f"{name} {what}"] = {
                    "value": c[what],
                    "paired": c[f"{what}_paired"],
                    "limit": TARGET_RAW_FRACTION,
                    "met": c[what] >= TARGET_RAW_FRACTION,
                }
    return out


def report_raw(fig: dict) -> None:
    """The table of fractions of the raw bandwidth, then the memory table."""
    print(
        f"raw: plain files, one per rank, fsynced: write {fig['write_s']:.3f} s ({fig['write_gib_per_s']:.2f} GiB/s), "
        f"cold read {fig['read_s']:.3f} s ({fig['read_gib_per_s']:.2f} GiB/s); loads and the raw read start cold: "
        f"{fig['cold_cache']}"
    )
    print(f"{'of the raw bandwidth':<32}{'save':>8}{'run by run':>12}{'load':>8}{'run by run':>12}")
    for name, c in fig["fractions"].items():
        save = f"{c['save']:>8.0%}{c['save_paired']:>12.0%}" if "save" in c else f"{'':>20}"
        load = f"{c['load']:>8.0%}{c['load_paired']:>12.0%}" if "load" in c else ""
        print(f"{name:<32}{save}{load}")
    print("  raw time / method time, medians (the same bytes); async: save() + finalize(), not the step between")
    print()
    if fig["memory"]:
        memory.report(fig["memory"], fig["state_bytes"])


def report_raw_targets(targets: dict, loads: list[float]) -> None:
    for name, c in targets["raw_fraction"].items():
        print(
            f"target {name} >= {c['limit']:.0%} of the raw bandwidth: {c['value']:.0%} "
            f"(run by run {c['paired']:.0%}, {_load_range(loads)}), {_met(c)}"
        )
    if targets.get("memory"):
        memory.report_targets(targets["memory"])


def _checksum_runs(f: Figures, raw: dict) -> list[dict]:
    """Each checksum run: every combination's save with checksums against without, and the load average."""
    checksum_runs = []
    for run in range(raw.get("checksum_runs", 0)):
        per = {}
        for c in valid_combinations():
            on, off = f"checksum run {run} {c} save", f"checksum run {run} {c} save unhashed"
            per[str(c)] = {
                "save_s": f.wall(on),
                "save_unhashed_s": f.wall(off),
                "overhead": f.wall(on) / f.wall(off) - 1,
                "overhead_paired": _paired(f.walls(on), f.walls(off)) - 1,
                "cpu_overhead": f.cpu(on) / f.cpu(off) - 1,
            }
        checksum_runs.append({"load_average_1min": raw["checksum_load_average_1min"][run], "saves": per})
    return checksum_runs


def _checksum_run_targets(checksum_runs: list[dict]) -> list[dict]:
    return [
        {
            name: {
                "value": c["overhead"],
                "paired": c["overhead_paired"],
                "limit": TARGET_CHECKSUM_OVERHEAD,
                "met": c["overhead"] <= TARGET_CHECKSUM_OVERHEAD,
            }
            for name, c in run["saves"].items()
        }
        for run in checksum_runs
    ]


def summarize_checksums(raw: dict) -> dict:
    """--checksums: the checksum runs alone."""
    runs = _checksum_runs(Figures(raw["runs"]), raw)
    return {"checksum_runs": runs, "targets": {"checksum_overhead_runs": _checksum_run_targets(runs)}}


def summarize_loads(raw: dict, names: list[str]) -> dict:
    """--loads: each named combination's load against stock dcp.load, run by run."""
    f = Figures(raw["runs"])
    dcp_load = f.wall("dcp load")
    rows = []
    for name in [*names, "stock dcp.load"]:
        key = "dcp load" if name == "stock dcp.load" else f"{name} load"
        rows.append(
            {
                "method": name,
                "load_s": f.wall(key),
                "load_cpu_s": f.cpu(key),
                "load_vs_dcp": f.wall(key) / dcp_load,
                "load_vs_dcp_paired": _paired(f.walls(key), f.walls("dcp load")),
                "load_runs": f.walls(key),
            }
        )
    targets = {
        "load_vs_dcp": {
            r["method"]: {
                "value": r["load_vs_dcp"],
                "paired": r["load_vs_dcp_paired"],
                "limit": TARGET_LOAD_VS_DCP,
                "met": r["load_vs_dcp"] <= TARGET_LOAD_VS_DCP,
            }
            for r in rows
            if r["method"] in names
        }
    }
    return {"rows": rows, "targets": targets}


def _load_range(loads: list[float]) -> str:
    """The machine's 1-min load average over the rounds that measured a target."""
    low, high = min(loads), max(loads)
    return f"load average {low:.1f}" if f"{low:.1f}" == f"{high:.1f}" else f"load average {low:.1f}-{high:.1f}"


def report_loads(fig: dict, loads: list[float]) -> None:
    print(f"{'median of repeats':<32}{'load s':>8}{'load/dcp':>10}{'run by run':>12}{'load cpu s':>12}   runs")
    for r in fig["rows"]:
        print(
            f"{r['method']:<32}{r['load_s']:>8.3f}{r['load_vs_dcp']:>10.2f}{r['load_vs_dcp_paired']:>12.2f}"
            f"{r['load_cpu_s']:>12.2f}   {', '.join(f'{x:.3f}' for x in r['load_runs'])}"
        )
    print("  cpu s: CPU seconds summed over ranks")
    print()
    _report_load_targets(fig["targets"]["load_vs_dcp"], loads)


def _report_load_targets(targets: dict, loads: list[float]) -> None:
    for name, c in targets.items():
        paired = f"run by run {c['paired']:.2f}x, " if "paired" in c else ""
        print(
            f"target {name} load (checksums verified) no slower than stock dcp.load: {c['value']:.2f}x "
            f"({paired}{_load_range(loads)}), {_met(c)}"
        )


def _report_checksum_runs(fig: dict) -> None:
    if fig["checksum_runs"]:
        print()
        print(f"{'checksum runs (save)':<32}{'on s':>8}{'off s':>8}{'overhead':>10}{'run by run':>12}{'cpu +':>8}")
        for number, run in enumerate(fig["checksum_runs"], 1):
            print(f"run {number} (load average {run['load_average_1min']:.1f} at its start)")
            for name, c in run["saves"].items():
                print(
                    f"  {name:<30}{c['save_s']:>8.3f}{c['save_unhashed_s']:>8.3f}{c['overhead']:>10.1%}"
                    f"{c['overhead_paired']:>12.1%}{c['cpu_overhead']:>8.1%}"
                )
        print("  async: save() and finalize(); cpu +: CPU seconds summed over ranks, with checksums against without")


def _report_checksum_targets(fig: dict) -> None:
    t = fig["targets"]
    runs = t["checksum_overhead_runs"]
    for number, (run, figures) in enumerate(zip(runs, fig["checksum_runs"]), 1):
        name, worst = max(run.items(), key=lambda item: item[1]["value"])
        print(
            f"target checksums add <= {TARGET_CHECKSUM_OVERHEAD:.0%} to every combination's save, checksum run "
            f"{number} (load average {figures['load_average_1min']:.1f}): worst {worst['value']:+.1%} ({name}), "
            f"{_met({'met': all(c['met'] for c in run.values())})}"
        )
    if runs:
        every = all(c["met"] for run in runs for c in run.values())
        worst_all = max(c["value"] for run in runs for c in run.values())
        print(
            f"target checksums add <= {TARGET_CHECKSUM_OVERHEAD:.0%} to every save in {len(runs)} consecutive "
            f"checksum runs: worst {worst_all:+.1%}, {_met({'met': every})}"
        )


def report_checksums(fig: dict) -> None:
    _report_checksum_runs(fig)
    print()
    _report_checksum_targets(fig)


def _met(t: dict) -> str:
    return "met" if t["met"] else "NOT met"


def report(fig: dict, loads: list[float]) -> None:
    print(
        f"{'median of repeats':<32}{'save s':>8}{'load s':>8}{'save/dcp':>10}{'load/dcp':>10}{'save/t.save':>13}"
        f"{'load/t.load':>13}{'save cpu s':>12}{'load cpu s':>12}"
    )
    for r in fig["rows"]:
        print(
            f"{r['method']:<32}{r['save_s']:>8.3f}{r['load_s']:>8.3f}{r['save_vs_dcp']:>10.2f}"
            f"{r['load_vs_dcp']:>10.2f}{r['save_vs_torch_save']:>13.2f}{r['load_vs_torch_load']:>13.2f}"
            f"{r['save_cpu_s']:>12.2f}{r['load_cpu_s']:>12.2f}"
        )
    print(
        f"  cpu s: CPU seconds summed over ranks. Per-rank torch.save does not fsync; an fsync afterwards "
        f"took {fig['torch_save_fsync']['fsync_s']:.3f} s more"
    )
    print("  async rows: the training thread's time in save() and finalize(); the write ran during a training step")
    print()
    print(
        f"{'async':<32}{'blocks s':>9}{'save()':>8}{'waits':>8}{'first s':>9}{'+finalize s':>13}"
        f"{'sync save s':>13}{'blocks/sync':>13}{'worst s':>9}{'worst/sync':>12}"
    )
    for a in fig["async"]:
        print(
            f"{a['method']:<32}{a['blocking_s']:>9.3f}{a['save_call_s']:>8.3f}{a['step_waits_s']:>8.3f}"
            f"{a['first_blocking_s']:>9.3f}{a['save_and_finalize_s']:>13.3f}{a['sync_save_s']:>13.3f}"
            f"{a['blocking_vs_sync']:>13.1%}{a['worst_case_s']:>9.3f}{a['worst_case_vs_sync']:>12.1%}"
        )
    print("  blocks: the training thread's time in save() plus the copies the next step waited for, slowest rank;")
    print("  first: the first async save of a backend (fresh buffers); worst: a step that changes every tensor")
    print(
        "  before the writer copied any. The step with a save in flight took "
        + ", ".join(f"{a['step_s']:.2f} s ({a['method']})" for a in fig["async"])
        + f", {fig['async'][0]['step_alone_s']:.2f} s with no save (the writer shares the cpus)"
    )
    print()
    print(
        f"{'checksums (save)':<32}{'on s':>8}{'off s':>8}{'overhead':>10}{'cpu on s':>10}{'cpu off s':>11}{'cpu +':>8}"
    )
    for c in fig["checksums"]:
        print(
            f"{c['method']:<32}{c['save_s']:>8.3f}{c['save_unhashed_s']:>8.3f}{c['overhead']:>10.1%}"
            f"{c['cpu_s']:>10.2f}{c['cpu_unhashed_s']:>11.2f}{c['cpu_overhead']:>8.1%}"
        )
    print("  in the rounds, beside the other methods: a figure; the target is judged on the checksum runs below")
    v, k = fig["load_verify"], fig["crc32"]
    print(
        f"  load side: every load hashes each file as it reads it (one pass); a separate hashing pass over a "
        f"{v['method']} checkpoint, split over the ranks, would take {v['verify_s']:.3f} s "
        f"({v['share_of_load']:.0%} of its {v['load_s']:.3f} s load)"
    )
    print(
        f"  torch.save's own CRC32 (never checked by torch.load; the reference's writes skip it) kept on: "
        f"{k['method']} saves in {k['save_crc32_on_s']:.3f} s ({k['crc32_on_vs_dcp']:.2f}x stock dcp.save; "
        f"cpu {k['cpu_crc32_on_s']:.2f} s against {k['cpu_s']:.2f} s without it and {k['dcp_cpu_s']:.2f} s "
        f"for stock dcp.save)"
    )
    _report_checksum_runs(fig)
    print()
    report_raw(fig["raw"])
    t = fig["targets"]
    g = t["global_sync_save_vs_dcp"]
    print(
        f"target {GLOBAL_SYNC} save no slower than stock dcp.save: {g['value']:.2f}x "
        f"(run by run {g['paired']:.2f}x), {_met(g)}"
    )
    for name, a in t["async_blocking_vs_sync"].items():
        print(
            f"target {name} save() blocks <= {a['limit']:.0%} of the sync save: {a['value']:.1%} "
            f"(run by run {a['paired']:.1%}), {_met(a)}"
        )
    _report_checksum_targets(fig)
    _report_load_targets(t["load_vs_dcp"], loads)
    report_raw_targets(t, loads)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks checkpoint", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--size-gib",
        type=positive_float,
        default=1.0,
        metavar="GIB",
        help="tensor state held over all ranks, at least (default: 1.0)",
    )
    parser.add_argument(
        "--topology",
        type=Topology.parse,
        default=Topology(2, 2, 1),
        metavar="TOPO",
        help="tp, pp, dp (default: tp2pp2dp1, 4 ranks, nothing replicated)",
    )
    parser.add_argument(
        "--repeats",
        type=positive_int,
        default=3,
        metavar="N",
        help="runs of every measurement, interleaved (default: 3)",
    )
    parser.add_argument(
        "--warmup", type=nonnegative_int, default=1, metavar="N", help="rounds run first and not counted (default: 1)"
    )
    parser.add_argument(
        "--dir", metavar="DIR", help="make the temp folder under DIR (default: the system temp dir); removed at the end"
    )
    parser.add_argument(
        "--timeout", type=positive_float, default=3600.0, metavar="S", help="for the whole job (default: 3600)"
    )
    parser.add_argument(
        "--checksum-runs",
        type=nonnegative_int,
        default=3,
        metavar="N",
        help="consecutive runs of the checksum-overhead comparison alone, every combination, after the "
        "rounds, each of --checksum-repeats rounds and judged on its own (default: 3)",
    )
    parser.add_argument(
        "--checksum-repeats",
        type=positive_int,
        # hashing costs 3-4% and a save on a shared disk varies about 7%: with 11 rounds the difference of two
        # medians still moved by +-4%, and one of 18 (6 combinations, 3 runs) went past 10% in most runs
        default=21,
        metavar="N",
        help="rounds in each checksum run (default: 21)",
    )
    parser.add_argument(
        "--fusefs-mib",
        type=nonnegative_int,
        default=256,
        metavar="MIB",
        help="the FUSE layer's write throughput against the seam and the bare folder, over a file of "
        "MIB (benchmarks/fusefs.py); 0 skips it (default: 256)",
    )
    parser.add_argument(
        "--loads",
        type=combination_list,
        metavar="COMBOS",
        help="measure loads only: each of COMBOS (comma-separated, or 'all') and stock dcp.load, each saved "
        "untimed first; no saves, async or checksum figures, no FUSE layer",
    )
    parser.add_argument(
        "--checksums",
        action="store_true",
        help="measure only the checksum runs (every combination saved with and without checksums, after "
        "--warmup rounds of the same); no loads, no other saves, no FUSE layer",
    )
    parser.add_argument(
        "--sizes",
        type=positive_float,
        nargs="+",
        metavar="GIB",
        help="the cost-growth series instead (benchmarks/series.py): every size in one job, in rounds, each "
        "measuring the raw baseline, every combination's save and cold load, async blocking and peak memory; "
        "the cost per GiB compared across sizes (e.g. --sizes 0.25 1 4; --sizes 0.5 1 2 for the async target)",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the figures to FILE")
    return parser.parse_args(argv)


def combination_list(text: str) -> list[str]:
    """--loads: combination names, comma-separated, or 'all'."""
    known = [str(c) for c in valid_combinations()]
    names = known if text.strip() == "all" else [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown combination {', '.join(map(repr, unknown)) or repr(text)} (known: {', '.join(known)}, all)"
        )
    return list(dict.fromkeys(names))


def main(argv: list[str] | None = None) -> int:
    if argv is not None and "--storage" in argv:  # on an object store: benchmarks/checkpoint_s3.py
        from .checkpoint_s3 import main as on_s3

        return on_s3(argv)
    args = parse_args(argv)
    if args.sizes:
        from . import series

        try:
            fig = series.main(args)
        except ConfigError as e:
            print(f"python -m benchmarks checkpoint: {e}", file=sys.stderr)
            return 2
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(fig, fh, indent=2)
                fh.write("\n")
        return 0
    spec = spec_for(args.size_gib, args.topology)
    try:
        spec.check_topology(args.topology)  # one clear error here rather than one per rank
    except ConfigError as e:
        print(f"python -m benchmarks checkpoint: {e}", file=sys.stderr)
        return 2
    load_before = os.getloadavg()
    config = {
        "topology": str(args.topology),
        "ranks": args.topology.world,
        "repeats": args.repeats,
        "warmup_rounds": args.warmup,
        "model": spec.to_dict(),
        "size_gib_asked": args.size_gib,
        "stock_dcp": "dcp.save/dcp.load(checkpoint_id=folder), default planner and FileSystemWriter "
        "(sync_files=True, one thread), state dict of torch ShardedTensors (replica-0 pieces)",
        "torch_save": "per rank torch.save of every tensor record and object to its own file, no fsync "
        "(timed apart); torch.load(weights_only=True) + copy_ into the state",
        "checksum_off": "storage seam: LocalFileSystem whose write streams skip xxh3 (benchmark-only)",
        "crc32_on": "one GLOBAL save with torch.save's CRC32 computed, as before the reference turned it off "
        "(diagnostic, benchmark-only)",
        "timed": "wall time until the last rank finished, median over interleaved repeats; async blocking: "
        "the slowest rank's save() call plus the staging copies the next training step waited for",
        "launcher": "resilience.launch.run_ranks (fork), gloo",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / (1 << 30), 1),
    }
    print("checkpoint benchmark (state values from seed 1234)")
    for key, value in config.items():
        print(f"  {key:<13} {value}")
    print(f"  load average  {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f} (1, 5, 15 min) at start")
    xxh = xxh3_throughput()
    print(f"  xxh3-128      {xxh:.2f} GiB/s on one core, in memory")
    tmp = tempfile.mkdtemp(prefix="bench-checkpoint-", dir=args.dir)
    started = time.monotonic()
    try:
        raw = run_ranks(
            bench_rank,
            args.topology.world,
            args=(
                spec,
                args.topology,
                tmp,
                args.repeats,
                args.warmup,
                args.checksum_runs,
                args.loads,
                args.checksum_repeats,
                args.checksums,
            ),
            timeout=args.timeout,
            init_timeout=120.0,
        )[0]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    seconds = time.monotonic() - started
    load_after = os.getloadavg()
    if args.checksums:
        fig = summarize_checksums(raw)
    else:
        fig = summarize_loads(raw, args.loads) if args.loads else summarize(raw)
    print()
    loads = raw["load_average_1min"] + raw["checksum_load_average_1min"]
    rounds = f"{args.warmup} + {args.repeats} rounds"
    if args.checksums:
        rounds = f"{args.warmup} + {args.checksum_runs} x {args.checksum_repeats} rounds"
    print(
        f"state: {raw['held_bytes'] / (1 << 30):.3f} GiB held over {args.topology.world} ranks "
        f"({', '.join(f'{b / (1 << 20):.0f}' for b in raw['per_rank_bytes'])} MiB), "
        f"{raw['written_bytes'] / (1 << 30):.3f} GiB of it replica 0; {rounds} in {seconds:.0f} s"
    )
    print(
        f"machine: 1-min load average {min(loads):.1f} to {max(loads):.1f} at the rounds' starts, "
        f"{load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} (1, 5, 15 min) at the end, "
        f"on {os.cpu_count()} cpus"
    )
    if args.checksums:
        report_checksums(fig)
    elif args.loads:
        report_loads(fig, loads)
    else:
        report(fig, loads)
    fuse = None
    if args.fusefs_mib and not (args.loads or args.checksums):
        from benchmarks import fusefs

        print()
        fuse = fusefs.run(args.fusefs_mib, 1, args.repeats, args.dir)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                {
                    "benchmark": "checkpoint",
                    "version": 1,
                    "config": config,
                    "xxh3_gib_per_s": xxh,
                    "load_average": {"start": load_before, "end": load_after, "rounds_1min": loads},
                    "seconds": seconds,
                    "held_bytes": raw["held_bytes"],
                    "written_bytes": raw["written_bytes"],
                    "per_rank_bytes": raw["per_rank_bytes"],
                    **fig,
                    "fusefs": fuse,
                    "raw_runs": raw["runs"],
                    "warmup_runs": raw["warmup"],
                },
                fh,
                indent=2,
            )
            fh.write("\n")
        print(f"figures written to {args.json}")
    return 0
