"""NVIDIA Resiliency Extension's local checkpointing (what Megatron-LM's LOCAL checkpoints are): an adapter.

Optional: `pip install checkpoint-resilience[nvrx]` (nvidia-resiliency-ext 0.4.1). Select it with
`--backend nvrx` (or resilience.backends.nvrx:make) for LOCAL/torch/sync.

What it does, as an NVRx user on the CPU writes it:
- state: `RecordsStateDict`, a TensorAwareStateDict of this rank's records (tensors by key, objects by
  key) and the saving topology (Megatron-LM keeps its args beside the model). NVRx's own
  BasicTensorAwareStateDict asserts that every tensor is on CUDA, so a CPU user writes one like this;
- save: `LocalCheckpointManager(root).save(sd, iteration)`, synchronous. NVRx writes
  `<root>/<rank>/iter_%07d_<rank>_local.pt.dirty` with torch.save and its own open(), renames it into
  place (no fsync of the file or the folder), waits in a barrier, all-gathers which iterations every
  rank holds, and removes this rank's older iterations;
- load: `find_latest()` (the newest iteration every rank of this job holds; with replication, held by
  any rank of the clique) and `load()`, which torch.loads the file with `weights_only=False`. The tensors
  are copied into the state as a user's model code copies them.
- options (OPTIONS): `replication=clique` builds `CliqueReplicationStrategy.from_replication_params(
  replication_jump=1, replication_factor=2)`: neighbouring ranks (0-1, 2-3, ...) exchange their shards on
  every save over the default (gloo) group and each keeps both files. Default off, as the manager's own
  default (`repl_strategy=None`).

Topology contract: none of tp, pp, dp, ep, etp, cp, vpp may change (`contract`). NVRx pairs files with
global rank numbers and knows no topology; the adapter compares the saved tp, pp and dp with the job's after
the load, as Megatron-LM checks its args (which name tp and pp, not ep, etp, cp or vpp), and refuses a
difference with TopologyChangeRefused: an ep, etp, cp or vpp change is not refused, and fails on the first
record of another shape. When this job has more
ranks than the saving one, NVRx finds no iteration every rank holds and says nothing more: the adapter
raises CheckpointNotFound with what each iteration's holders are, NVRx's answer, not a refusal.

What cannot run on a CPU machine (docs/adapters.md, "NVIDIA Resiliency Extension"): async saves
(`save(is_async=True)` calls torch.cuda.synchronize), and, under replication, a load that fetches a
rank's file from its peer (`GroupWrapper.isend_state_dict` moves each tensor with `.cuda()`,
`irecv_state_dict` receives into a CUDA tensor): the load raises ConfigError saying so (the case cannot be
judged here, UNKNOWN), not a verdict on the checkpoint.

What the framework can observe: NVRx writes with its own open(), outside the storage seam; under
`--io auto` (the default) in-process faults go through the fault-injecting file system (docs/io.md)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any

import torch

from ..dist import this_rank, world_size
from ..errors import CheckpointNotFound, ConfigError, IntegrityError, RankFailure, TopologyChangeRefused
from ..state import TrainingState
from ..state.sharding import ShardedObject, ShardedTensor
from ..state.training import RNG_KEY
from ..vocab import CheckpointInfo, CheckpointType, CkptFormat, Combination, IOMode, LoadResult, combination
from .base import installed
from .options import Option

VERSION = "0.4.1"
# NVRx's file name: iter_<iteration:07d>_<rank>_local.pt, ".dirty" before the rename
FILE = re.compile(r"iter_(\d{7,})_(\d+)_local(\.dirty)?\.pt")

OPTIONS = (
    Option(
        "replication",
        "off",
        "LocalCheckpointManager(repl_strategy=...): off (None, the default), or clique: "
        "CliqueReplicationStrategy.from_replication_params(replication_jump=1, replication_factor=2), "
        "neighbouring ranks keep each other's files",
        choices=("off", "clique"),
    ),
)
DEFAULTS = {o.name: o.default for o in OPTIONS}


def available() -> bool:
    """Is nvidia-resiliency-ext installed? (Does not import it.)"""
    return installed("nvidia_resiliency_ext.checkpointing.local")


def _require():
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.cuda's "pynvml package is deprecated"
            from nvidia_resiliency_ext.checkpointing.local.base_state_dict import TensorAwareStateDict
            from nvidia_resiliency_ext.checkpointing.local.ckpt_managers.local_manager import LocalCheckpointManager
    except ImportError as e:
        raise ConfigError(
            "backend",
            f"nvidia-resiliency-ext is not installed ({e})",
            "pip install 'checkpoint-resilience[nvrx]' -c ci/constraints.txt",
        ) from None
    return TensorAwareStateDict, LocalCheckpointManager


_made: dict[str, type] = {}


def _state_dict_class() -> type:
    """RecordsStateDict, made once NVRx is importable (its base class is NVRx's)."""
    if not _made:
        base, _ = _require()
        _made["RecordsStateDict"] = type("RecordsStateDict", (_RecordsStateDict, base), {"__module__": __name__})
    return _made["RecordsStateDict"]


def __getattr__(name: str) -> Any:
    # torch.load finds the saved class by name: resilience.backends.nvrx.RecordsStateDict
    if name == "RecordsStateDict":
        return _state_dict_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _RecordsStateDict:
    """One rank's records for NVRx: `tensors_by_key` {key: tensor}, `objects` {key: value}, `args` (the
    saving topology). Hollow: the tensors taken out, their (key, shape, dtype) kept to make empty ones."""

    def __init__(self, tensors: dict[str, torch.Tensor], objects: dict[str, Any], args: dict[str, int]):
        self.tensors_by_key = tensors
        self.objects = objects
        self.args = args
        self.placeholders: list[tuple[str, torch.Size, torch.dtype]] | None = None

    def pop_tensors(self) -> list[torch.Tensor]:
        assert not self.is_hollow
        keys = list(self.tensors_by_key)
        self.placeholders = [(k, self.tensors_by_key[k].shape, self.tensors_by_key[k].dtype) for k in keys]
        return [self.tensors_by_key.pop(k) for k in keys]

    @property
    def tensors(self) -> Iterable[torch.Tensor]:
        assert not self.is_hollow
        return list(self.tensors_by_key.values())

    @property
    def is_hollow(self) -> bool:
        return self.placeholders is not None

    def insert_tensors(self, tensor_data: Iterable[torch.Tensor]) -> None:
        assert self.placeholders is not None
        data = list(tensor_data)
        if len(data) != len(self.placeholders):
            raise ValueError(f"{len(data)} tensors for {len(self.placeholders)} places")
        self.tensors_by_key = {k: t for (k, _, _), t in zip(self.placeholders, data)}
        self.placeholders = None

    def init_tensors(self) -> None:
        assert self.placeholders is not None
        self.tensors_by_key = {k: torch.empty(shape, dtype=dtype) for k, shape, dtype in self.placeholders}
        self.placeholders = None

    def copy_tensors_to_cpu(self, non_blocking: bool = False) -> None:
        # a copy: the file must hold the state as it was when save was called
        self.tensors_by_key = {k: t.detach().clone() for k, t in self.tensors_by_key.items()}

    def restore_tensor_device(self, non_blocking: bool = True) -> None:
        """Everything lives on the CPU here: nothing to move."""


def _failures(e: BaseException) -> dict:
    return {this_rank(): f"{type(e).__name__}: {e}"}


def _topology(state: TrainingState) -> dict[str, int]:
    return {"tp": state.topo.tp, "pp": state.topo.pp, "dp": state.topo.dp}


class NvrxLocalBackend:
    """LOCAL/torch/sync through NVRx's LocalCheckpointManager."""

    SUPPORTED = ("LOCAL/torch/sync",)

    def __init__(self, combo: Combination, **options: Any):
        combo = combination(combo.type, combo.format, combo.io)
        if (combo.type, combo.format, combo.io) != (CheckpointType.LOCAL, CkptFormat.TORCH, IOMode.SYNC):
            raise ConfigError(
                "combination",
                f"the NVRx adapter does not implement {combo}",
                "use LOCAL/torch/sync (NVRx's async save needs CUDA: docs/adapters.md)",
            )
        unknown = set(options) - set(DEFAULTS)
        if unknown:
            raise ConfigError(
                "backend",
                f"the NVRx adapter has no option {sorted(unknown)[0]!r}",
                f"its options are {', '.join(DEFAULTS)}",
            )
        _, self._manager_class = _require()
        self.sd_class = _state_dict_class()
        self.combo = combo
        self.opts = {**DEFAULTS, **options}
        chosen = ",".join(f"{k}={v}" for k, v in options.items() if v != DEFAULTS[k])
        self.name = f"nvrx({chosen}):{combo}" if chosen else f"nvrx:{combo}"
        self._managers: dict[str, Any] = {}
        self._replication: Any = None

    def _manager(self, root: str):
        """One manager per root, as a training job keeps one (it caches the newest iteration)."""
        if root not in self._managers:
            repl = None
            if self.opts["replication"] == "clique":
                if world_size() % 2:
                    raise ConfigError(
                        "backend",
                        f"replication=clique pairs neighbouring ranks, this job has {world_size()} ranks "
                        "(NVRx's parse_group_sequence needs a world size divisible by jump x factor = 2)",
                        "run it on an even number of ranks, or leave replication out",
                    )
                if self._replication is None:
                    from nvidia_resiliency_ext.checkpointing.local.replication.strategies import (
                        CliqueReplicationStrategy,
                    )

                    self._replication = CliqueReplicationStrategy.from_replication_params(
                        replication_jump=1, replication_factor=2
                    )
                repl = self._replication
            self._managers[root] = self._manager_class(root, repl_strategy=repl)
        return self._managers[root]

    # ---- save ------------------------------------------------------------------------------------
    def save(self, state: TrainingState, root: str) -> None:
        root = os.path.abspath(root)
        tensors, objects = {}, {}
        for r in state.sharded_state_dict():
            if isinstance(r, ShardedTensor):
                tensors[r.key] = r.data
            elif isinstance(r, ShardedObject):
                objects[r.key] = r.value
        sd = self.sd_class(tensors, objects, _topology(state))
        try:
            self._manager(root).save(sd, state.iteration)
        except Exception as e:
            raise RankFailure(_failures(e), f"NVRx local save of iteration {state.iteration} into {root}") from e

    # ---- load ------------------------------------------------------------------------------------
    def load(self, state: TrainingState, root: str) -> LoadResult:
        root = os.path.abspath(root)
        try:
            manager = self._manager(root)
        except ConfigError as e:  # an odd world cannot be the even one that saved with replication
            raise TopologyChangeRefused(f"{root}: {e}") from None
        iteration = manager.find_latest()
        if iteration == -1:
            self._nothing_to_load(root, manager.globally_available_ids)
        path = os.path.join(root, str(this_rank()), f"iter_{iteration:07d}_{this_rank()}_local.pt")
        try:
            sd, _ = manager.load()
        except Exception as e:
            if not torch.cuda.is_available() and "not compiled with CUDA" in str(e):
                # a rank fetching its file from a replica (group_utils.isend/irecv_state_dict): a limit of
                # this machine, not a verdict on the checkpoint
                raise ConfigError(
                    "backend",
                    f"NVRx {VERSION} moves a replica fetched from another rank through CUDA ({e}); this machine "
                    "has none",
                    "run replication=clique on a GPU machine (docs/adapters.md, NVIDIA Resiliency Extension)",
                ) from None
            raise IntegrityError(path, "NVRx LocalCheckpointManager.load", f"{type(e).__name__}: {e}"[:2000]) from e
        if sd.args != _topology(state):
            raise TopologyChangeRefused(
                f"{path}: saved on tp{sd.args.get('tp')}pp{sd.args.get('pp')}dp{sd.args.get('dp')}, this job is "
                f"{state.topo}; NVRx local checkpoints load only on the topology that saved them"
            )
        for r in state.sharded_state_dict():
            if isinstance(r, ShardedTensor):
                value = sd.tensors_by_key.get(r.key)
                if value is None or value.shape != r.data.shape:
                    raise IntegrityError(path, "tensor records", f"{r.key}: missing or of another shape")
                r.data.copy_(value)
        state.load_objects(sd.objects)
        return LoadResult(int(sd.objects.get("iteration", iteration)), path, RNG_KEY in sd.objects, [])

    @staticmethod
    def _nothing_to_load(root: str, available: list) -> None:
        """No iteration every rank holds: NVRx's answer, whether files were lost or this job has more ranks
        than the one that saved (it cannot tell them apart, and Megatron-LM then starts without them)."""
        holders: dict[int, set[int]] = {}
        for ids in available or []:
            for iteration, rank, _ in ids:
                holders.setdefault(iteration, set()).add(rank)
        if not holders:
            raise CheckpointNotFound(f"{root}: no NVRx local checkpoint on any rank")
        seen = ", ".join(f"{it}: ranks {sorted(r)}" for it, r in sorted(holders.items()))
        raise CheckpointNotFound(f"{root}: no iteration that all {world_size()} ranks hold (held: {seen})")

    # ---- listing ---------------------------------------------------------------------------------
    def list_checkpoints(self, root: str) -> list[CheckpointInfo]:
        """Per iteration: complete when every rank folder's own file is in place (a replica counts)."""
        root = os.path.abspath(root)
        if not os.path.isdir(root):
            return []
        ranks = sorted(int(n) for n in os.listdir(root) if n.isdigit() and os.path.isdir(os.path.join(root, n)))
        held: dict[int, set[int]] = {}
        dirty: dict[int, set[int]] = {}
        for r in ranks:
            for name in os.listdir(os.path.join(root, str(r))):
                m = FILE.fullmatch(name)
                if m:
                    it, owner = int(m.group(1)), int(m.group(2))
                    (dirty if m.group(3) else held).setdefault(it, set()).add(owner)
        out = []
        for it in sorted(set(held) | set(dirty), reverse=True):
            missing = sorted(set(ranks) - held.get(it, set()))
            problems = []
            if missing:
                problems.append(f"no file of ranks {missing}")
            if dirty.get(it):
                problems.append(f".dirty files of ranks {sorted(dirty[it])}")
            out.append(CheckpointInfo(it, root, not missing, None, "; ".join(problems)))
        return out


def make(combo: Combination, **options: Any) -> NvrxLocalBackend:
    """NVRx's LocalCheckpointManager with its defaults (no replication), or the OPTIONS given."""
    return NvrxLocalBackend(combo, **options)


make.combinations = NvrxLocalBackend.SUPPORTED  # type: ignore[attr-defined]
make.options = OPTIONS  # type: ignore[attr-defined]
make.contract = {d: "refuse" for d in ("tp", "pp", "dp", "ep", "etp", "cp", "vpp")}  # type: ignore[attr-defined]
make.keep_last = 1  # type: ignore[attr-defined]  # the manager removes older iterations after each save
