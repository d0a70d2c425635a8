"""Stock torch.distributed.checkpoint, used the way its users use it: the adapter under test.

What a DCP user writes, and nothing more:
- the state: a nested state dict {"model": {...}, "optimizer": {...}, "scheduler", "iteration", "data",
  "rng"} whose tensors are DTensors on the (dp, tp) device mesh of the rank's pipeline stage (Replicate
  over dp, Shard over tp), built by the same helpers as the reference's TORCH_DCP format (so both test
  the same state); distributed-optimizer rows gathered over dp first; RNG one plain tensor per (pp, tp);
- saving: `dcp.save(state, storage_writer=FileSystemWriter(step folder))` with the writer's default
  options (sync_files, one file per rank, one thread, overwrite); async: `dcp.async_save` (thread
  executor, the writer as stager, a gloo group of its own as torchtitan makes), finalized with
  `future.result()`. The options a DCP user picks instead are declared in OPTIONS (writer threads,
  sync_files, file per rank, collectives, the async executor, staging, the async process group) and
  given in the backend spec: `--backend dcp:thread_count=4,async=process`;
- folders as torchtitan manages them: `<root>/step-<N>/`; load picks the highest step whose folder has a
  `.metadata` file, every rank on its own, and calls `dcp.load` with the default planner. No manifest,
  no checksum, no fallback to an older step, no retention;
- on a tp change Megatron's padded vocabulary changes the embedding's global size, which DCP's planner
  refuses ("Size mismatch"); the adapter reads the stored size from `.metadata` and loads that tensor
  whole, then keeps the real rows, as a DCP user of a Megatron-style model must. That look at
  `.metadata` is the adapter's own, so it unpickles safely (resilience.storage.safe_pickle); when it
  refuses the file, the adapter goes on without it and dcp.load reads it as stock DCP does. The RNG is restored
  only when the checkpoint holds exactly this (pp, tp) grid's RNG cells.

How the framework observes it, without changing what DCP does (see docs/adapters.md):
- the writer's and reader's `fs` is replaced after __init__ (DCP's documented seam, as its fsspec
  writer does) by `ObservedFileSystem`, which sends each operation to the storage seam (so the fault
  injector and the power-loss recorder see it) with the same semantics as DCP's own FileSystem: streams
  opened without an added fsync, buffered like `open("wb")` (a BufferedWriter of the file's block size);
- DCP calls `os.fsync(stream.fileno())` itself; the `os` name inside torch's filesystem module is given
  a stand-in that forwards everything to the real `os` and sends that one fsync to the same seam stream,
  so it is recorded and can fail as injected. It is installed once per process, by the first adapter.
- DCP's errors become ours where the runner needs them (CheckpointException is a BaseException): a
  failed save raises RankFailure, a failed async write AsyncSaveFailed at finalize, a failed load
  IntegrityError naming the folder. Nothing is retried or hidden.

OPTIONS are declared in stock_dcp_options.py, the observation (ObservedFileSystem, the fsync stand-in) is
dcp_observation.py."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import CheckpointException, FileSystemWriter
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from .. import storage
from ..checkpoint.formats.base import RankInfo
from ..checkpoint.formats.torch_dcp import (
    TorchDcpFormat,
    copy_real_rows,
    copy_rows,
    get_nested,
    nest,
    object_targets,
    rng_cells,
)
from ..dist import all_agree, this_rank, world_size
from ..errors import AsyncSaveFailed, CheckpointNotFound, ConfigError, IntegrityError, RankFailure
from ..state import TrainingState
from ..state.sharding import ShardedTensor
from ..state.training import RNG_KEY
from ..storage.dcp import read_metadata_safely
from ..vocab import CheckpointInfo, CheckpointType, Combination, LoadResult, combination
from .dcp_observation import install_fsync_router, reader, writer
from .stock_dcp_options import DEFAULTS, OPTIONS

STEP = re.compile(r"step-(\d+)")
METADATA = ".metadata"
RANK_METADATA = re.compile(r"__(\d+)\.metadata")  # a rank's own metadata, written with use_collectives=False


def _failures(e: CheckpointException) -> dict:
    return {rank: f"{type(exc).__name__}: {exc}" for rank, (exc, _) in e.failures.items()} or {-1: str(e)}


# ---- folders, as torchtitan manages them -----------------------------------------------------------
def step_folder(root: str, iteration: int) -> str:
    return os.path.join(root, f"step-{iteration}")


def find_load_step(root: str, marker: str = METADATA) -> int | None:
    """The highest step whose folder holds a .metadata file (torchtitan's rule; `marker` names another
    file, a rank's own metadata when it saved without collectives)."""
    fs = storage.current()
    if not fs.is_dir(root):
        return None
    steps = []
    for name in fs.listdir(root):
        m = STEP.search(name)
        if m and fs.exists(os.path.join(root, name, marker)) and not fs.is_dir(os.path.join(root, name, marker)):
            steps.append(int(m.group(1)))
    return max(steps) if steps else None


def allow_children() -> None:
    """Our launcher's rank processes are daemonic multiprocessing children, and Python forbids those to
    start children; DCP's process executor spawns its checkpoint process from a thread of its own, at a
    time the adapter does not see, so the rank counts as non-daemonic from here on (torchrun's are not
    daemonic either). The checkpoint process is daemonic: it ends with the rank."""
    import multiprocessing

    multiprocessing.current_process()._config["daemon"] = False  # type: ignore[attr-defined]  # the flag's home


# ---- the backend -----------------------------------------------------------------------------------
class StockDcpBackend:
    """TORCH_DCP/torch_dcp, sync or async, with stock DCP and torchtitan-style step folders."""

    SUPPORTED = ("TORCH_DCP/torch_dcp/sync", "TORCH_DCP/torch_dcp/async")

    def __init__(self, combo: Combination, **options: Any):
        combo = combination(combo.type, combo.format, combo.io)
        if combo.type is not CheckpointType.TORCH_DCP:
            raise ConfigError(
                "combination", f"stock DCP does not implement {combo}", f"use one of {', '.join(self.SUPPORTED)}"
            )
        unknown = set(options) - set(DEFAULTS)
        if unknown:
            raise ConfigError(
                "backend", f"stock DCP has no option {sorted(unknown)[0]!r}", f"its options are {', '.join(DEFAULTS)}"
            )
        self.combo = combo
        self.chosen = {k: v for k, v in options.items() if v != DEFAULTS[k]}  # what differs from the defaults
        self.opts = {**DEFAULTS, **options}
        chosen = ",".join(f"{k}={v}" for k, v in self.chosen.items())
        self.name = f"dcp({chosen}):{combo}" if chosen else f"dcp:{combo}"
        self.layout = TorchDcpFormat()  # DTensor helpers: mesh, dp gather, even-shard check
        self._future: Any = None  # dcp.async_save's Future, or an AsyncSaveResponse (staging=background)
        self._future_iteration: int | None = None
        self._async_group = None
        self._stager: Any = None  # a DefaultStager the adapter owns, kept across saves (staging=background|shared)
        install_fsync_router()
        if combo.is_async and self.opts["async"] == "process":
            allow_children()

    # ---- options, as DCP takes them -----------------------------------------------------------------
    def _writer(self, folder: str) -> FileSystemWriter:
        o = self.opts
        kwargs: dict[str, Any] = {
            "thread_count": o["thread_count"],
            "sync_files": o["sync_files"],
            "single_file_per_rank": o["single_file_per_rank"],
        }
        if o["staging"] == "cached" and self.combo.is_async:
            kwargs["cache_staged_state_dict"] = True
        return writer(folder, self.opts["client"], **kwargs)

    def _coordination(self) -> dict[str, Any]:
        """dcp.save / async_save keyword arguments for the collectives option."""
        mode = self.opts["collectives"]
        return {"use_collectives": False} if mode == "off" else {"no_dist": True} if mode == "no_dist" else {}

    def _async_kwargs(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType

        o = self.opts
        kwargs: dict[str, Any] = self._coordination()
        if o["async"] == "process":
            kwargs["async_checkpointer_type"] = AsyncCheckpointerType.PROCESS
        if o["staging"] in ("background", "shared"):
            if self._stager is None:
                from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

                self._stager = DefaultStager(
                    StagingOptions(
                        use_pinned_memory=False,
                        use_shared_memory=o["staging"] == "shared",
                        use_async_staging=o["staging"] == "background",
                        use_non_blocking_copy=False,
                    )
                )
            kwargs["async_stager"] = self._stager
        if o["process_group"] == "own":
            if self._async_group is None and world_size() > 1:
                self._async_group = dist.new_group(backend="gloo")
            kwargs["process_group"] = self._async_group
        return kwargs

    @property
    def _marker(self) -> str:
        """The file whose presence makes a step loadable for this rank."""
        return f"__{this_rank()}{METADATA}" if self.opts["collectives"] == "off" else METADATA

    def _info(self, state: TrainingState) -> RankInfo:
        return RankInfo.of(state, self.combo)

    # ---- save ------------------------------------------------------------------------------------
    def state_dict(self, info: RankInfo, records) -> dict:
        """The nested DTensor state dict a DCP user saves: the same one the TORCH_DCP format writes."""
        return self.layout.state_dict(info, records)

    def save(self, state: TrainingState, root: str) -> None:
        if self._future is not None:
            self.finalize()  # torchtitan waits for the previous async save before starting the next
        root = os.path.abspath(root)
        info = self._info(state)
        folder = step_folder(root, state.iteration)
        sd = self.state_dict(info, state.sharded_state_dict())
        try:
            if self.combo.is_async:
                self._future = dcp.async_save(sd, storage_writer=self._writer(folder), **self._async_kwargs())
                self._future_iteration = state.iteration
            else:
                dcp.save(sd, storage_writer=self._writer(folder), **self._coordination())
        except CheckpointException as e:
            raise RankFailure(_failures(e), f"dcp save into {folder}") from e

    def finalize(self, *, blocking: bool = True) -> bool:
        future = self._future
        if future is None:
            return True
        future = getattr(future, "upload_completion", future)  # an AsyncSaveResponse: its upload
        if not blocking and not all_agree(future.done(), self._async_group):
            return False
        iteration = self._future_iteration
        self._future, self._future_iteration = None, None
        try:
            future.result()
        except CheckpointException as e:
            raise AsyncSaveFailed(_failures(e), f"async dcp save of iteration {iteration} failed") from e
        except Exception as e:
            raise AsyncSaveFailed(
                {this_rank(): f"{type(e).__name__}: {e}"}, f"async dcp save of iteration {iteration} failed"
            ) from e
        return True

    @property
    def in_flight_iteration(self) -> int | None:
        return self._future_iteration

    # ---- load ------------------------------------------------------------------------------------
    def load(self, state: TrainingState, root: str) -> LoadResult:
        if self._future is not None:
            self.finalize()
        root = os.path.abspath(root)
        step = find_load_step(root, self._marker)
        if step is None:
            raise CheckpointNotFound(f"{root}: no step-N folder with {self._marker}")
        folder = step_folder(root, step)
        info = self._info(state)
        records = state.sharded_state_dict()
        warnings = []
        try:
            if not storage.current().exists(os.path.join(folder, METADATA)):  # saved without collectives
                raise FileNotFoundError(os.path.join(folder, METADATA))
            # the adapter's own look at the stored sizes: never with plain pickle (that is DCP's to do)
            metadata = read_metadata_safely(reader(folder, self.opts["client"]))
        except IntegrityError as e:
            if e.check not in ("safe unpickling", "path safety", "metadata fields", "metadata type"):
                raise
            metadata = None  # what stock DCP makes of this file is what is under test: dcp.load reads it
            warnings.append(
                f"the adapter's safe read refused {e.path}: {e.check} failed: {e.detail}; dcp.load reads it with pickle"
            )
        except FileNotFoundError:
            if self.opts["collectives"] != "off":
                raise IntegrityError(folder, "read .metadata", "the file is gone") from None
            metadata = None  # each rank's own __R.metadata, which dcp.load falls back to
        except Exception as e:
            raise IntegrityError(folder, "read .metadata", f"{type(e).__name__}: {e}") from e
        target, after, names = self._targets(info, records, metadata)
        try:
            dcp.load(
                target,
                storage_reader=reader(folder, self.opts["client"]),
                no_dist=self.opts["collectives"] == "no_dist",
            )
        except CheckpointException as e:
            first = next(iter(_failures(e).values()))
            raise IntegrityError(folder, "dcp.load", first[:2000]) from e
        for step_fn in after:
            step_fn()
        objects = {key: get_nested(target, path) for key, path in names.items()}
        state.load_objects(objects)
        return LoadResult(int(objects.get("iteration", step)), folder, RNG_KEY in objects, warnings)

    def _targets(self, info: RankInfo, records, metadata) -> tuple[dict, list, dict]:
        """Load targets for every record; steps to finish padded and split tensors; object key -> path."""
        fmt = self.layout
        fmt.prepare(info)
        split = fmt._split(info, records)
        stored = metadata.state_dict_metadata if metadata is not None else None
        state: dict[str, Any] = {}
        after: list[Callable[[], Any]] = []
        for r in records:
            if isinstance(r, ShardedTensor):
                if r.key in split:  # the whole tp piece, then this dp rank's rows
                    param = split[r.key]
                    buf, offset = torch.empty(param.local_shape, dtype=r.data.dtype), param.global_offset
                    after.append(functools.partial(copy_rows, r.data, buf, r.global_offset[0] - offset[0]))
                else:
                    buf, offset = r.data, r.global_offset
                md = stored.get(r.key) if stored is not None else None
                if (
                    isinstance(md, TensorStorageMetadata)
                    and tuple(md.size) != tuple(r.global_shape)
                    and r.logical_shape is not None
                ):
                    full = torch.empty(md.size, dtype=md.properties.dtype)  # padded vocabulary of another tp
                    nest(state, r.key, full)
                    after.insert(0, functools.partial(copy_real_rows, full, buf, offset, r.logical[0]))
                else:
                    nest(state, r.key, fmt._dtensor(info, r.key, buf, r.global_shape, offset))
        # the RNG cells this checkpoint holds tell the grid it was saved on (no manifest says so here)
        grid = rng_cells(info.topo)
        cells = {k for k in stored if k.startswith(RNG_KEY + ".")} if stored is not None else grid
        names = object_targets(info, records, state, rng=cells == grid)
        return state, after, names

    # ---- listing ---------------------------------------------------------------------------------
    def list_checkpoints(self, root: str) -> list[CheckpointInfo]:
        fs = storage.current()
        root = os.path.abspath(root)
        out = []
        if fs.is_dir(root):
            for name in fs.listdir(root):
                m = STEP.fullmatch(name)
                path = os.path.join(root, name)
                if m and fs.is_dir(path):
                    complete = fs.exists(os.path.join(path, METADATA)) or (
                        self.opts["collectives"] == "off" and any(RANK_METADATA.fullmatch(n) for n in fs.listdir(path))
                    )
                    out.append(
                        CheckpointInfo(int(m.group(1)), path, complete, None, "" if complete else f"no {METADATA}")
                    )
        return sorted(out, key=lambda c: -c.iteration)


def make(combo: Combination, **options: Any) -> StockDcpBackend:
    """Stock DCP with FileSystemWriter's default options, or the OPTIONS given (`dcp:thread_count=4`)."""
    return StockDcpBackend(combo, **options)


def make_threaded(combo: Combination, **options: Any) -> StockDcpBackend:
    """The common variant: FileSystemWriter(thread_count=4), several writer threads per rank."""
    return StockDcpBackend(combo, **{"thread_count": 4, **options})


make.combinations = make_threaded.combinations = StockDcpBackend.SUPPORTED  # type: ignore[attr-defined]
make.options = make_threaded.options = OPTIONS  # type: ignore[attr-defined]
make.object_store = make_threaded.object_store = True  # type: ignore[attr-defined]  # its fsspec writer and reader
