"""megatron-core's dist_checkpointing (torch_dist), with Megatron-LM's folder management: an adapter.

Optional: `pip install checkpoint-resilience[megatron]` (megatron-core). Select it with
`--backend megatron` (or resilience.backends.megatron:make) for GLOBAL/torch_dist/sync and /async.

What it does, as Megatron-LM's training loop does (written here, not imported from Megatron-LM):
- state: one megatron ShardedTensor per tensor record (global shape and offset, replica_id; only
  replica 0 is written), `allow_shape_mismatch=True` on the vocab-parallel tensors as Megatron sets it,
  so a tp change that changes the padded vocabulary loads the overlap; distributed-optimizer rows
  gathered over dp to the whole tp piece first (replica_id = dp rank). One ShardedObject per object
  record (RNG: global shape (pp, tp), replica_id = dp rank). The topology goes into the common state
  ("args", common.pt) as Megatron-LM stores its args;
- save: `dist_checkpointing.save(sd, <root>/iter_%07d)` (default torch_dist strategy); then a barrier,
  rank 0 writes `latest_checkpointed_iteration.txt` with a plain open('w') (no temp file, rename or
  fsync), Megatron-LM's commit point, and another barrier. Async: `save(..., async_sharded_save=True)`,
  the request given to an `AsyncCallsQueue` with the tracker write as a finalize function (no barrier
  after it, as in Megatron-LM), finalized with `maybe_finalize_async_calls(blocking=True)`;
- load: every rank reads the tracker and takes the largest iteration any rank read (Megatron-LM's
  read_metadata all-reduces it: a rank that read the file before rank 0 rewrote it loads the newer
  save too), then loads `iter_%07d` with `dist_checkpointing.load`; the RNG only when the saved args
  have this tp and pp (Megatron-LM's rule). No fallback: a missing or unreadable tracker means no
  checkpoint (Megatron-LM then starts from scratch).
- options (OPTIONS, given in the spec: `--backend megatron:fully_parallel_save=true`): the strategies
  Megatron-LM builds from its flags - the torch_dist save strategy's writer threads and cached metadata
  (--ckpt-assume-constant-structure), the fully-parallel save and load wrappers over the dp group
  (--ckpt-fully-parallel-save/-load), the load's strictness (--dist-ckpt-strictness) and the async
  queue's persistent worker (AsyncCallsQueue(persistent=True)).
  Defaults are megatron-core's own (no wrapper, a new worker per async save).

The CPU compatibility shim (`cpu_shim`), active only around megatron-core calls, in the rank processes,
and only when CUDA is not available: `torch.cuda.synchronize` becomes a no-op (megatron calls it after
its device-to-host copies, of which there are none on CPU) and `torch.cuda.current_device` returns
"cpu" (megatron places the one-element tensors of its failure broadcast and async-finalize all-reduce
on it; gloo needs them on the CPU). Nothing else is changed.

What the framework can observe: the tracker goes through the storage seam (faults and power loss apply
to it); megatron-core writes its data files from forked writer processes with its own open(), which
the in-process injector does not reach, so in-process write faults on them are reported UNPROBED.
Faults at rest, kills from outside and topology changes apply in full."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import torch
from torch.distributed.checkpoint import CheckpointException

from .. import storage
from ..checkpoint.formats.base import RankInfo
from ..dist import all_gather, barrier, this_rank
from ..errors import AsyncSaveFailed, CheckpointNotFound, ConfigError, IntegrityError, RankFailure
from ..state import TrainingState
from ..state.sharding import ShardedObject, ShardedTensor
from ..state.training import RNG_KEY
from ..vocab import CheckpointInfo, CheckpointType, CkptFormat, Combination, LoadResult, combination
from ..vocab.folders import ITER_FOLDER, TRACKER, iter_name
from .base import installed
from .options import Option

RELEASE = "release"  # Megatron-LM's tracker text for a converted checkpoint, kept in a `release` folder

ARGS = "args"

# what a megatron-core user picks (megatron-core 0.16's defaults; Megatron-LM's flags set them)
OPTIONS = (
    Option(
        "save_threads",
        2,
        "TorchDistSaveShardedStrategy(thread_count): writer threads per rank",
        between=(1, 64),
        sweep=(1,),
    ),
    Option(
        "cached_metadata",
        False,
        "TorchDistSaveShardedStrategy(cached_metadata): reuse the global plan "
        "of the previous save (Megatron-LM's --ckpt-assume-constant-structure)",
        choices=(True, False),
    ),
    Option(
        "fully_parallel_save",
        False,
        "FullyParallelSaveStrategyWrapper over the dp group: replicas split "
        "the writing among the dp ranks (Megatron-LM's --ckpt-fully-parallel-save)",
        choices=(True, False),
    ),
    Option(
        "fully_parallel_load",
        "off",
        "FullyParallelLoadStrategyWrapper over the dp group, with its "
        "exchange algorithm: each dp rank reads a part and the parts are exchanged (--ckpt-fully-parallel-load)",
        choices=("off", "gather_object", "broadcast", "gather_rounds"),
        refused={
            "broadcast": "exchange_utils allocates the exchanged shards on device 'cuda'; this machine runs on CPU",
            "gather_rounds": "exchange_utils gathers the shards in 'cuda' tensors; this machine runs on CPU",
        },
    ),
    Option(
        "strict",
        "assume_ok_unexpected",
        "dist_checkpointing.load(strict=...): what a load does about keys "
        "the checkpoint and the state disagree on (Megatron-LM's --dist-ckpt-strictness)",
        choices=("assume_ok_unexpected", "log_unexpected", "log_all", "raise_unexpected", "raise_all", "ignore_all"),
        sweep=("raise_all",),
    ),
    Option(
        "msc",
        False,
        "MultiStorageClientFeature: file I/O through multi-storage-client (its default profile writes a temporary "
        "file and renames it into place), as megatron-core does whenever the package is installed; false: "
        "plain files, Megatron-LM's --disable-msc",
        choices=(True, False),
    ),
    Option(
        "persistent_queue",
        False,
        "AsyncCallsQueue(persistent=True): one long-lived writer process per rank instead of a new one per async save",
        choices=(True, False),
        io="async",
        refused={
            True: "the persistent worker starts with torch.cuda.set_device(rank % "
            "torch.cuda.device_count()) (async_utils.async_loop): ZeroDivisionError without a GPU, "
            "the worker dies and the save waits for it until the job's timeout"
        },
    ),
)
DEFAULTS = {o.name: o.default for o in OPTIONS}


def _use_msc(on: bool) -> None:
    """megatron-core's switch for multi-storage-client, process-wide (on only where the package is installed)."""
    try:
        from megatron.core.msc_utils import MultiStorageClientFeature
    except ImportError:  # a megatron-core without it: plain files
        return
    if on:
        MultiStorageClientFeature.enable()
    else:
        MultiStorageClientFeature.disable()


def available() -> bool:
    """Is megatron-core installed? (Does not import it.)"""
    return installed("megatron.core.dist_checkpointing")


def _require():
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Transformer Engine and Apex are not installed"
            from megatron.core import dist_checkpointing
    except ImportError as e:
        raise ConfigError(
            "backend", f"megatron-core is not installed ({e})", "pip install 'checkpoint-resilience[megatron]'"
        ) from None
    return dist_checkpointing


@contextlib.contextmanager
def cpu_shim() -> Iterator[None]:
    """While megatron-core runs on a machine without CUDA: torch.cuda.synchronize is a no-op and
    torch.cuda.current_device() returns "cpu". Restored afterwards; nothing else changes."""
    if torch.cuda.is_available():
        yield
        return
    sync, current = torch.cuda.synchronize, torch.cuda.current_device
    torch.cuda.synchronize = lambda *args, **kwargs: None
    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment,return-value]  # megatron asks; CPU here
    try:
        yield
    finally:
        torch.cuda.synchronize, torch.cuda.current_device = sync, current


@contextlib.contextmanager
def may_fork() -> Iterator[None]:
    """Our launcher's rank processes are daemonic multiprocessing children (torchrun's are not), and
    Python forbids a daemonic process to start children; megatron-core starts writer processes. The
    rank counts as non-daemonic while megatron-core runs."""
    import multiprocessing

    config = multiprocessing.current_process()._config  # type: ignore[attr-defined]  # the daemon flag's home
    before = config.get("daemon")
    config["daemon"] = False
    try:
        yield
    finally:
        if before is not None:
            config["daemon"] = before


@contextlib.contextmanager
def megatron_calls() -> Iterator[None]:
    with cpu_shim(), may_fork():
        yield


def iter_folder(root: str, iteration: int) -> str:
    return os.path.join(root, iter_name(iteration))


def _tracker_text(root: str) -> str | None:
    path = os.path.join(root, TRACKER)
    fs = storage.current()
    if not fs.exists(path):
        return None
    with fs.open_read(path) as f:
        return f.read(64).decode("utf-8", "replace").strip()


def read_tracker(root: str) -> int | None:
    text = _tracker_text(root)
    return int(text) if text is not None and text.isdigit() else None


def tracked_folder(root: str) -> tuple[int, str]:
    """(iteration, folder) as Megatron-LM's read_metadata takes them from the tracker: none is a start from
    scratch (CheckpointNotFound); `release` is the `release` folder at iteration 0; anything else but an
    iteration above 0 stops the job there (its sys.exit and assert): an IntegrityError naming the tracker."""
    text = _tracker_text(root)
    if text is None:
        raise CheckpointNotFound(f"{root}: no {TRACKER} (Megatron-LM would start from scratch)")
    if text == RELEASE:
        return 0, os.path.join(root, RELEASE)
    if not text.isdigit() or int(text) == 0:
        why = (
            "error parsing metadata file (assert iteration > 0 or release)"
            if text.isdigit()
            else "Invalid metadata file. Exiting"
        )
        raise IntegrityError(os.path.join(root, TRACKER), "tracker", f"reads {text[:20]!r}: Megatron-LM stops: {why}")
    return int(text), iter_folder(root, int(text))


def _failures(e: BaseException) -> dict:
    failures = getattr(e, "failures", None)
    if isinstance(failures, dict) and failures:
        return {r: f"{type(x[0]).__name__}: {x[0]}" if isinstance(x, tuple) else str(x) for r, x in failures.items()}
    return {this_rank(): f"{type(e).__name__}: {e}"}


class MegatronBackend:
    """GLOBAL/torch_dist through megatron-core, sync or async."""

    SUPPORTED = ("GLOBAL/torch_dist/sync", "GLOBAL/torch_dist/async")

    def __init__(self, combo: Combination, **options: Any):
        combo = combination(combo.type, combo.format, combo.io)
        if (combo.type, combo.format) != (CheckpointType.GLOBAL, CkptFormat.TORCH_DIST):
            raise ConfigError(
                "combination",
                f"the megatron-core adapter does not implement {combo}",
                f"use one of {', '.join(self.SUPPORTED)}",
            )
        unknown = set(options) - set(DEFAULTS)
        if unknown:
            raise ConfigError(
                "backend",
                f"the megatron-core adapter has no option {sorted(unknown)[0]!r}",
                f"its options are {', '.join(DEFAULTS)}",
            )
        self.dc = _require()
        self.combo = combo
        self.opts = {**DEFAULTS, **options}
        chosen = ",".join(f"{k}={v}" for k, v in options.items() if v != DEFAULTS[k])
        self.name = f"megatron({chosen}):{combo}" if chosen else f"megatron:{combo}"
        _use_msc(self.opts["msc"])
        self._queue: Any = None  # megatron's AsyncCallsQueue, made on the first async save
        self._strategy: Any = None  # the save strategy the options make (False: megatron-core's default)
        self._pending: int | None = None
        from ..checkpoint.formats.torch_dcp import TorchDcpFormat

        self.layout = TorchDcpFormat()  # only its dp gather of distributed-optimizer rows

    def _info(self, state: TrainingState) -> RankInfo:
        return RankInfo.of(state, self.combo)

    # ---- state -----------------------------------------------------------------------------------
    def sharded_state_dict(self, state: TrainingState, records, *, for_load: bool = False) -> tuple[dict, dict]:
        """megatron's sharded state dict (flat, keyed by record key), and for split records the
        (whole tp piece buffer, row offset) a load fills before copying this rank's rows."""
        from megatron.core.dist_checkpointing import ShardedObject as MObject, ShardedTensor as MTensor

        info = self._info(state)
        fmt = self.layout
        split = {}
        if state.spec.optimizer == "distributed":
            fmt.prepare(info)
            split = fmt._split(info, records)
        whole = {}
        if split and not for_load:
            whole = fmt.gather_split(info, records, split)
        sd, buffers = {}, {}
        for r in records:
            if isinstance(r, ShardedTensor):
                if r.key in split:
                    piece = split[r.key]
                    data = whole[r.key] if not for_load else torch.empty(piece.local_shape, dtype=r.data.dtype)
                    # the whole piece, replicated as its parameter is (over the group its rows were gathered
                    # over, and over tp when tp does not split it)
                    offset, replica = piece.global_offset, piece.replica_id
                    if for_load:
                        buffers[r.key] = (data, r.global_offset[0] - offset[0])
                else:
                    data, offset, replica = r.data, r.global_offset, r.replica_id
                frags = tuple(g // n for g, n in zip(r.global_shape, data.shape))
                sd[r.key] = MTensor(
                    r.key,
                    data,
                    data.dtype,
                    tuple(data.shape),
                    tuple(r.global_shape),
                    tuple(offset),
                    frags,
                    replica,
                    allow_shape_mismatch=r.logical_shape is not None,
                )
            elif isinstance(r, ShardedObject):
                sd[r.key] = MObject(r.key, r.value, tuple(r.global_shape), tuple(r.global_offset), r.replica_id)
        sd[ARGS] = {"tp": state.topo.tp, "pp": state.topo.pp, "dp": state.topo.dp}
        return sd, buffers

    # ---- options, as Megatron-LM builds its strategies ----------------------------------------------
    def _save_strategy(self, state: TrainingState):
        """None (megatron-core's default torch_dist strategy) when every save option is the default."""
        o = self.opts
        if (o["save_threads"], o["cached_metadata"], o["fully_parallel_save"]) == (
            DEFAULTS["save_threads"],
            DEFAULTS["cached_metadata"],
            DEFAULTS["fully_parallel_save"],
        ):
            return None
        from megatron.core.dist_checkpointing.strategies.torch import TorchDistSaveShardedStrategy

        strategy = TorchDistSaveShardedStrategy(
            "torch_dist", 1, thread_count=o["save_threads"], cached_metadata=o["cached_metadata"]
        )
        if o["fully_parallel_save"]:
            from megatron.core.dist_checkpointing.strategies.fully_parallel import FullyParallelSaveStrategyWrapper

            strategy = FullyParallelSaveStrategyWrapper(strategy, state.groups.dp_group)
        return strategy

    def _load_kwargs(self, state: TrainingState, folder: str) -> dict:
        o = self.opts
        kwargs: dict[str, Any] = {"strict": o["strict"]}
        if o["fully_parallel_load"] != "off":
            from megatron.core.dist_checkpointing.serialization import get_default_load_sharded_strategy
            from megatron.core.dist_checkpointing.strategies.fully_parallel import FullyParallelLoadStrategyWrapper

            kwargs["sharded_strategy"] = FullyParallelLoadStrategyWrapper(
                get_default_load_sharded_strategy(folder), state.groups.dp_group, exchange_algo=o["fully_parallel_load"]
            )
        return kwargs

    # ---- save ------------------------------------------------------------------------------------
    def save(self, state: TrainingState, root: str) -> None:
        if self._pending is not None:
            self.finalize()
        root = os.path.abspath(root)
        folder = iter_folder(root, state.iteration)
        iteration = state.iteration
        if this_rank() == 0:
            storage.current().mkdir(folder)  # Megatron-LM's ensure_directory_exists: makedirs, no fsync
        barrier()
        sd, _ = self.sharded_state_dict(state, state.sharded_state_dict())
        with megatron_calls():
            try:
                if self._strategy is None:
                    self._strategy = self._save_strategy(state) or False
                strategy = self._strategy or None  # one per backend: cached_metadata needs the previous plan
                if self.combo.is_async:
                    request = self.dc.save(sd, folder, strategy, async_sharded_save=True)
                    request.finalize_fns.append(lambda: self._commit(root, iteration))
                    if self._queue is None:
                        from megatron.core.dist_checkpointing.strategies.async_utils import AsyncCallsQueue

                        self._queue = AsyncCallsQueue(persistent=self.opts["persistent_queue"])
                    self._queue.schedule_async_request(request)
                    self._pending = iteration
                    return
                self.dc.save(sd, folder, strategy)
            except Exception as e:
                raise RankFailure(_failures(e), f"megatron save into {folder}") from e
        self._commit(root, iteration)
        barrier()  # Megatron-LM's "wait so everyone is done (not necessary)"

    def _commit(self, root: str, iteration: int) -> None:
        """Megatron-LM: barrier, then rank 0 writes the tracker with a plain open('w')."""
        barrier()
        if this_rank() == 0:
            with storage.current().open_write(os.path.join(root, TRACKER), sync=False) as f:
                f.write(str(iteration).encode())

    def finalize(self, *, blocking: bool = True) -> bool:
        if self._pending is None:
            return True
        iteration = self._pending
        with megatron_calls():
            try:
                self._queue.maybe_finalize_async_calls(blocking=blocking)
            except Exception as e:
                self._pending = None
                raise AsyncSaveFailed(_failures(e), f"async megatron save of iteration {iteration} failed") from e
        if self._queue.get_num_unfinalized_calls():
            return False
        self._pending = None
        return True

    @property
    def in_flight_iteration(self) -> int | None:
        return self._pending

    # ---- load ------------------------------------------------------------------------------------
    def load(self, state: TrainingState, root: str) -> LoadResult:
        if self._pending is not None:
            self.finalize()
        root = os.path.abspath(root)
        iteration, folder = tracked_folder(root)
        newest = max(all_gather(iteration))  # Megatron-LM's read_metadata: the max over ranks, with a warning
        if iteration and newest != iteration:
            iteration, folder = newest, iter_folder(root, newest)
        records = state.sharded_state_dict()
        with megatron_calls():
            try:
                common = self.dc.load_common_state_dict(folder)
                saved = common.get(ARGS, {}) if isinstance(common, dict) else {}
                same_grid = (saved.get("tp"), saved.get("pp")) == (state.topo.tp, state.topo.pp)
                keep = [r for r in records if same_grid or r.key != RNG_KEY]
                sd, buffers = self.sharded_state_dict(state, keep, for_load=True)
                loaded = self.dc.load(sd, folder, **self._load_kwargs(state, folder))
            except (Exception, CheckpointException) as e:
                raise IntegrityError(folder, "dist_checkpointing.load", str(_failures(e))[:2000]) from e
        objects = {}
        for r in keep:
            value = loaded.get(r.key)
            if isinstance(r, ShardedTensor):
                if r.key in buffers:
                    buf, lo = buffers[r.key]
                    src = value if value is not None else buf
                    r.data.copy_(src[lo : lo + r.data.shape[0]])
                elif value is not None and value.data_ptr() != r.data.data_ptr():
                    n = [min(a, b) for a, b in zip(value.shape, r.data.shape)]
                    r.data[tuple(slice(0, k) for k in n)].copy_(value[tuple(slice(0, k) for k in n)])
            else:
                objects[r.key] = value
        state.load_objects(objects)
        return LoadResult(int(objects.get("iteration", iteration)), folder, RNG_KEY in objects, [])

    # ---- listing ---------------------------------------------------------------------------------
    def list_checkpoints(self, root: str) -> list[CheckpointInfo]:
        fs = storage.current()
        root = os.path.abspath(root)
        tracked = read_tracker(root)
        out = []
        if fs.is_dir(root):
            for name in fs.listdir(root):
                m = ITER_FOLDER.fullmatch(name)
                if m:
                    it = int(m.group(1))
                    path = os.path.join(root, name)
                    complete = fs.exists(os.path.join(path, "metadata.json"))
                    problem = "" if complete else "no metadata.json"
                    if it == tracked:
                        problem = (problem + "; " if problem else "") + "tracked"
                    out.append(CheckpointInfo(it, path, complete, None, problem))
        return sorted(out, key=lambda c: -c.iteration)


def make(combo: Combination, **options: Any) -> MegatronBackend:
    """megatron-core dist_checkpointing with its default torch_dist strategy, or the OPTIONS given."""
    return MegatronBackend(combo, **options)


make.combinations = MegatronBackend.SUPPORTED  # type: ignore[attr-defined]
make.options = OPTIONS  # type: ignore[attr-defined]
