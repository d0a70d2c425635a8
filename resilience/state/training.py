"""One rank's shard of a Megatron-style training state, and a topology-invariant training step.

Every element's update depends only on its key, global index, value, the step and the data position,
and uses only correctly rounded operations (+ - * / sqrt, abs), so N steps give bit-identical global
state on any topology.

Each save can stamp a generation into the state (`stamp`): a tensor beside every parameter's
optimizer state holding the number, and one more draw of every rank's RNG. Two saves of the same
iteration then differ in every file they write, so a load tells which save (or which mix) it read."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from ..dist import lazy_gloo
from .model import ModelSpec, ParamLayout
from .precision import Precision
from .sharding import Record, ShardedObject, ShardedTensor
from .topology import Coords, Topology
from .values import element_values_flat, element_values_of, global_index

BETA1, BETA2, EPS = 0.9, 0.999, 1e-8
TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}  # ModelSpec.dtype and .optim_dtype -> torch's
RNG_KEY = "rng"
# dynamic loss scaling, as Megatron's grad scaler keeps it: a 0-dim tensor that halves on a skipped
# (overflowed) iteration and doubles after GROWTH_INTERVAL updates, held alike by every rank
GRAD_SCALE_KEY = "optimizer.grad_scaler.scale"
GRAD_SCALE_START, GROWTH_INTERVAL = 2.0**16, 4
TOPOLOGY_BOUND_KEYS = (RNG_KEY,)  # state that only means something on the topology that saved it
GENERATION_PREFIX = "optimizer.generation."  # + parameter key: the stamp of the save that wrote it
# state set by a run's history of saves rather than by training: left out when comparing with training
# that never stopped (an entry ending in "." is a key prefix)
RUN_BOUND_KEYS = (RNG_KEY, GENERATION_PREFIX)


@dataclass
class Piece:
    """This rank's piece of one parameter: where it sits in the global tensor."""

    layout: ParamLayout
    global_shape: tuple[int, ...]
    offset: tuple[int, ...]
    local_shape: tuple[int, ...]
    logical_rows: int | None  # real rows of a vocab-parallel tensor; the rest is padding
    param_replica: int
    # distributed optimizer: the rows of this piece that this dp rank owns
    opt_rows: tuple[int, int]
    opt_replica: int


class ParallelGroups:
    """This rank's data-parallel process group, widened by context parallel, and (for a model with
    experts) its expert-data-parallel group, created collectively on every rank: dense state is replicated
    over the first and the distributed optimizer shards it there; an expert's state, over the second."""

    def __init__(self, topo: Topology, rank: int, experts: bool = False):
        self.dp_group = self.edp_group = None
        self.dp_ranks = self.edp_ranks = [rank]
        self.experts = experts
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            # every rank must create every group, in the same order
            self.dp_group, self.dp_ranks = _my_group(topo.dp_cp_groups(), rank)
            if experts:
                self.edp_group, self.edp_ranks = _my_group(topo.edp_groups(), rank)

    @classmethod
    def without_collectives(cls, rank: int = 0) -> ParallelGroups:
        """A rank that joins no group, for any model: a state trained alone (one rank) or only described."""
        self = cls.__new__(cls)
        self.dp_group = self.edp_group = None
        self.dp_ranks = self.edp_ranks = [rank]
        self.experts = True
        return self


def _my_group(all_ranks: list[list[int]], rank: int):
    mine: tuple = (None, [rank])
    with lazy_gloo():  # a pair of the group connects when it first exchanges data
        for ranks in all_ranks:
            group = dist.new_group(ranks)
            if rank in ranks:
                mine = (group, ranks)
    return mine


class TrainingState:
    """Model, optimizer, scheduler, data position, iteration and RNG of one rank."""

    def __init__(self, spec: ModelSpec, topo: Topology, rank: int, groups: ParallelGroups | None = None):
        spec.check_topology(topo)
        self.spec, self.topo = spec, topo
        self.coords: Coords = topo.coords(rank)
        self.groups = groups or ParallelGroups(topo, rank, experts=spec.num_experts > 0)
        if spec.num_experts and not self.groups.experts:
            raise ValueError("a model with experts needs ParallelGroups(..., experts=True)")
        self.iteration = spec.start_iteration
        self.consumed_samples = 0
        self.opt_step = 0
        mine = spec.params_of_stage(topo.tp, self.coords.pp, topo.pp, topo.vpp)
        experts = set(spec.experts_of(self.coords.ep, topo.ep)) if spec.num_experts else set()
        # dense pieces first, then this rank's experts: each kind's collectives run over its own group,
        # and every rank of a group holds the same pieces of that kind in the same order
        self.pieces = [self._piece(p) for p in mine if p.expert is None]
        self.pieces += [self._piece(p) for p in mine if p.expert in experts]
        self.dense_count = sum(p.layout.expert is None for p in self.pieces)
        self.params: dict[str, torch.Tensor] = {}
        self.exp_avg: dict[str, torch.Tensor] = {}
        self.exp_avg_sq: dict[str, torch.Tensor] = {}
        self.main: dict[str, torch.Tensor] = {}
        self.stamps: dict[str, torch.Tensor] = {}
        self.generation = 0
        self.grad_scale = torch.tensor(GRAD_SCALE_START)  # a tensor of no dimensions
        dtype, moments = TORCH_DTYPES[spec.dtype], TORCH_DTYPES[spec.optim_dtype]
        for piece, values in zip(self.pieces, self._values_of(self.pieces, 0)):
            key = piece.layout.key
            fp32 = values.clone()  # a tensor of its own: the values are views of one buffer
            self.params[key] = fp32.to(dtype)
            lo, hi = self._opt_slice(piece)
            self.exp_avg[key] = torch.zeros_like(fp32[lo:hi], dtype=moments)
            self.exp_avg_sq[key] = torch.zeros_like(fp32[lo:hi], dtype=moments)
            self.stamps[key] = torch.zeros_like(fp32[lo:hi])
            if spec.dtype == "bf16":
                self.main[key] = fp32[lo:hi].clone()
        self.rng = torch.Generator().manual_seed(spec.seed * 1_000_003 + self.coords.pp * 1009 + self.coords.tp)
        # an async save still copying the state (checkpoint.staging.StagedCopy): told before a tensor changes
        self.write_guard: Any = None  # a StagedCopy while an async save copies this state

    # ---- layout ---------------------------------------------------------------------------------
    def _piece(self, layout: ParamLayout) -> Piece:
        c, topo = self.coords, self.topo
        if layout.expert is None:  # split over tp, replicated and optimizer-sharded over dp x cp
            split, split_rank, shard, shard_rank = topo.tp, c.tp, topo.dpcp, c.dpcp
        else:  # an expert: split over etp, replicated and optimizer-sharded over expert data parallel
            split, split_rank, shard, shard_rank = topo.etp, c.etp, topo.edp, c.edp
        shape = layout.shape
        offset, local = [0] * len(shape), list(shape)
        if layout.tp_dim is not None:
            d = layout.tp_dim
            local[d] = shape[d] // split
            offset[d] = split_rank * local[d]
            param_replica = shard_rank
        else:
            param_replica = shard_rank * split + split_rank
        if self.spec.optimizer == "distributed":
            # Megatron's distributed optimizer: optimizer state of a piece split across its shard group
            rows = local[0]
            lo, hi = rows * shard_rank // shard, rows * (shard_rank + 1) // shard
            opt_replica = 0 if layout.tp_dim is not None else split_rank
        else:
            lo, hi, opt_replica = 0, local[0], param_replica
        return Piece(
            layout,
            tuple(shape),
            tuple(offset),
            tuple(local),
            self.spec.vocab if layout.vocab_parallel and not self.spec.padding_values else None,
            param_replica,
            (lo, hi),
            opt_replica,
        )

    def _opt_slice(self, piece: Piece) -> tuple[int, int]:
        return piece.opt_rows

    def _padding_mask(self, piece: Piece, rows: tuple[int, int] | None = None) -> torch.Tensor | None:
        """True on real rows of a vocab-parallel piece (optionally a row range of it)."""
        if piece.logical_rows is None:
            return None
        lo, hi = rows or (0, piece.local_shape[0])
        g = torch.arange(piece.offset[0] + lo, piece.offset[0] + hi)
        return (g < piece.logical_rows).view(-1, *([1] * (len(piece.local_shape) - 1)))

    def _indices(self, pieces: list[Piece], opt_rows: bool) -> list[tuple[str, torch.Tensor]]:
        """(key, global index of every element) of each piece, or of its optimizer rows."""
        parts = []
        for piece in pieces:
            lo, hi = piece.opt_rows if opt_rows else (0, piece.local_shape[0])
            offset = (piece.offset[0] + lo,) + piece.offset[1:]
            local = (hi - lo,) + piece.local_shape[1:]
            parts.append((piece.layout.key, global_index(piece.global_shape, offset, local)))
        return parts

    def _values_of(self, pieces: list[Piece], salt: int) -> list[torch.Tensor]:
        """The values of every piece, zero on padding rows; the unpadded ones are views of one buffer."""
        parts = self._indices(pieces, False)
        out = []
        for piece, v in zip(pieces, element_values_of(self.spec.seed + salt, parts, self.spec.value_range == "wide")):
            mask = self._padding_mask(piece)
            out.append(v if mask is None else torch.where(mask, v, torch.zeros((), dtype=v.dtype)))
        return out

    # ---- training -----------------------------------------------------------------------------
    def lr(self, step: int) -> float:
        return self.spec.lr * max(0.1, 1.0 - step / 1000.0)

    def train(self, steps: int = 1) -> None:
        for _ in range(steps):
            self.step()

    def stamp(self, generation: int) -> None:
        """Mark the state with a save's generation (a number unique to that save in its run): every
        stamp tensor holds it, and every rank's RNG draws once more, as a data loader reshuffles."""
        if self.write_guard is not None:
            self.write_guard.before_write(tuple(self.stamps.values()))
        for t in self.stamps.values():
            t.fill_(float(generation))
        self.generation = generation
        torch.rand(1, generator=self.rng)

    def step(self) -> None:
        """One iteration: consumes a batch (ramping up with the data position); unless the iteration is
        skipped, one Adam step whose gradients depend on the data position."""
        batch = self.spec.batch_size(self.consumed_samples)
        torch.rand(8, generator=self.rng)  # stands in for dropout: advances the RNG like a real step
        if self.spec.is_skipped(self.iteration + 1):
            self._scale_by(0.5)
        else:
            self._update()
            if self.opt_step % GROWTH_INTERVAL == 0:
                self._scale_by(2.0)
        self.iteration += 1
        self.consumed_samples += batch

    def _scale_by(self, factor: float) -> None:
        if self.write_guard is not None:
            self.write_guard.before_write((self.grad_scale,))
        self.grad_scale.mul_(factor)

    def _update(self) -> None:
        """One Adam step over the optimizer rows of every piece, in passes over runs of pieces (_spans): each
        run's rows copied into one flat tensor, the arithmetic run on it, the results copied back. Element by
        element the same operations as piece by piece, so bit for bit the same state, for a fraction of the
        calls; the runs bound the step's temporaries (a few times one run, not the whole state)."""
        self.opt_step += 1
        if not self.pieces:
            return
        t = self.opt_step
        position = self.consumed_samples
        scale = 1.0 + (position % 8) * 0.125
        bc1, bc2, lr = 1.0 - BETA1**t, 1.0 - BETA2**t, self.lr(t)
        keys = [piece.layout.key for piece in self.pieces]
        rows = [self._opt_slice(piece) for piece in self.pieces]
        mains = [self.main[k] if k in self.main else self.params[k][lo:hi] for k, (lo, hi) in zip(keys, rows)]
        sizes = [m.numel() for m in mains]
        grad = self._grads(keys, rows, scale, 7919 + position % 3, sizes)
        if self.spec.optimizer != "distributed":
            self._reduce_grads(grad, sum(sizes[: self.dense_count]))
        for a, b, at, n in _spans(sizes):
            g = grad[at : at + n]
            # moments computed in fp32 and stored in their own dtype (bf16 moments are rounded as copied back)
            m_new = _flat(self.exp_avg[k].float() for k in keys[a:b]) * BETA1 + g * (1.0 - BETA1)
            v_new = _flat(self.exp_avg_sq[k].float() for k in keys[a:b]) * BETA2 + (g * g) * (1.0 - BETA2)
            update = (m_new / bc1) / ((v_new / bc2).sqrt() + EPS)
            main = _flat(mains[a:b])
            if self.spec.value_range == "wide":
                main_new = main - (update * lr) * main.abs()  # a relative step keeps every magnitude
            else:
                main_new = main - update * lr
            del update, main
            self._write_back(keys[a:b], rows[a:b], mains[a:b], m_new, v_new, main_new)
        if self.spec.optimizer == "distributed":
            self._gather_rows()

    def _write_back(self, keys, rows, mains, m_new, v_new, main_new) -> None:
        sizes = [m.numel() for m in mains]
        for k, (lo, hi), old, m, v, w in zip(
            keys, rows, mains, m_new.split(sizes), v_new.split(sizes), main_new.split(sizes)
        ):
            # the first write to this piece's tensors: an async save's copy of them must exist by now, and
            # the arithmetic above (a real step's forward and backward) gave the writer time to make it
            if self.write_guard is not None:
                self.write_guard.before_write((self.params[k], old, self.exp_avg[k], self.exp_avg_sq[k]))
            self.exp_avg[k].copy_(m.view(old.shape))
            self.exp_avg_sq[k].copy_(v.view(old.shape))
            old.copy_(w.view(old.shape))
            if k in self.main:
                param = self.params[k]
                param[lo:hi].copy_(old.to(param.dtype))

    def _reduce_grads(self, grad: torch.Tensor, dense: int) -> None:
        """Replicas computed equal gradients; MAX keeps them bit-exact while running the collective, one per
        kind of piece for the whole step as a bucketed all-reduce would (one per piece costs ms each): the
        dense ones over dp x cp, the experts' over expert data parallel."""
        for part, group in ((grad[:dense], self.groups.dp_group), (grad[dense:], self.groups.edp_group)):
            if group is not None and part.numel():
                dist.all_reduce(part, op=dist.ReduceOp.MAX, group=group)

    def _grads(
        self, keys: list[str], rows: list[tuple[int, int]], scale: float, salt: int, sizes: list[int]
    ) -> torch.Tensor:
        """This rank's gradient of the optimizer rows of every piece, flat (zero on padding rows), towards
        their values for this batch, bounded (|grad| < scale) so wide values never overflow Adam's second
        moment. Made run by run (the values' integer arithmetic needs several times the rows' memory)."""
        real = self._real_rows()
        out = torch.empty(sum(sizes), dtype=torch.float32)
        for a, b, at, n in _spans(sizes):
            target = element_values_flat(
                self.spec.seed + salt, self._indices(self.pieces[a:b], True), self.spec.value_range == "wide"
            )
            diff = _flat(self.params[k][lo:hi].float() for k, (lo, hi) in zip(keys[a:b], rows[a:b])) - target
            grad = diff / (diff.abs() + 1.0) * scale
            if real is not None:  # padding rows are never looked up: zero gradient
                grad = torch.where(real[at : at + n], grad, torch.zeros((), dtype=grad.dtype))
            out[at : at + n] = grad
        return out

    def _real_rows(self) -> torch.Tensor | None:
        """True on every element of the optimizer rows that is not padding, flat as _grads orders them;
        None when no piece has padding. Made once: the pieces never change."""
        if not hasattr(self, "_real"):
            masks = []
            for piece in self.pieces:
                lo, hi = piece.opt_rows
                mask = self._padding_mask(piece, (lo, hi))
                shape = (hi - lo,) + piece.local_shape[1:]
                masks.append(torch.ones(shape, dtype=torch.bool) if mask is None else mask.expand(shape))
            has_padding = any(p.logical_rows is not None for p in self.pieces)
            self._real = _flat(masks) if has_padding else None
        return self._real

    def _gather_rows(self) -> None:
        """Distributed optimizer: every rank updated its rows of every piece; all-gather them over the
        group that shards them (dense pieces over dp x cp, experts over expert data parallel)."""
        dense, experts = self.pieces[: self.dense_count], self.pieces[self.dense_count :]
        if self.groups.dp_group is not None:
            self._gather_over(dense, self.topo.dpcp, self.groups.dp_group)
        if self.groups.edp_group is not None:
            self._gather_over(experts, self.topo.edp, self.groups.edp_group)

    def _gather_over(self, pieces: list[Piece], size: int, group) -> None:
        """All pieces in one collective (padded to the widest share so every rank sends the same size)."""
        if not pieces or size == 1:
            return  # the whole group holds the same (no) pieces: nobody joins the collective
        sends, layout = [], []
        for piece in pieces:
            param = self.params[piece.layout.key]
            rows = piece.local_shape[0]
            bounds = [(rows * d // size, rows * (d + 1) // size) for d in range(size)]
            block = (max(hi - lo for lo, hi in bounds),) + piece.local_shape[1:]
            lo, hi = piece.opt_rows
            send = torch.zeros(block, dtype=param.dtype)
            send[: hi - lo] = param[lo:hi]
            sends.append(send.reshape(-1))
            layout.append((param, bounds, block))
        flat = torch.cat(sends)
        out = [torch.empty_like(flat) for _ in range(size)]
        dist.all_gather(out, flat, group=group)
        for d, got in enumerate(out):
            for (param, bounds, block), part in zip(layout, got.split([s.numel() for s in sends])):
                a, b = bounds[d]
                param[a:b].copy_(part.view(block)[: b - a])

    # ---- sharded state dict -------------------------------------------------------------------
    def sharded_state_dict(self) -> list[Record]:
        """Every piece of this rank's state as sharded records sharing storage with the live state,
        so a loader can fill them in place."""
        return self._records(self.params, self.main)

    def records_in_precision(self, precision: Precision | str) -> tuple[list[Record], Callable[[], None]]:
        """The records a checkpoint saved in `precision` holds for this rank, and the step that moves what a
        load put into them into this state. Collective over the dp group (a distributed optimizer's rows are
        gathered) when the parameters are fp32 here and bf16 in the checkpoint.

        Parameters, without losing a bit: fp32 saved, bf16 here: the fp32 parameters become the fp32 main
        parameters, and the bf16 parameters are rounded from them, as every bf16 step does. bf16 saved, fp32
        here: the checkpoint's fp32 main parameters are the values; its bf16 parameters, rounded copies of
        them, are read and dropped. Optimizer moments: bf16 saved, fp32 here is exact; fp32 saved, bf16 here
        rounds each moment to nearest, the one loss no conversion avoids (Precision.rounds_moments_to).
        Same precision: the live records, nothing to do."""
        saved, mine = Precision.parse(precision), self.spec.precision
        if saved == mine:
            return self.sharded_state_dict(), lambda: None
        params, main = self.params, self.main
        if saved.params != mine.params:
            params = {k: torch.zeros(p.shape, dtype=TORCH_DTYPES[saved.params]) for k, p in self.params.items()}
            # fp32 main parameters cover this rank's optimizer rows, as the stamps do
            main = {k: torch.zeros_like(s) for k, s in self.stamps.items()} if saved.params == "bf16" else {}
        m, v = self.exp_avg, self.exp_avg_sq
        if saved.optim != mine.optim:
            m, v = ({k: torch.zeros_like(t, dtype=TORCH_DTYPES[saved.optim]) for k, t in x.items()} for x in (m, v))

        def finish() -> None:
            if saved.optim != mine.optim:
                for live, read in ((self.exp_avg, m), (self.exp_avg_sq, v)):
                    for key, t in live.items():
                        t.copy_(read[key])
            if saved.params == mine.params:
                return
            for piece in self.pieces:
                key = piece.layout.key
                lo, hi = piece.opt_rows
                if main:  # bf16 saved, fp32 here: this rank's rows from the main parameters
                    self.params[key][lo:hi].copy_(main[key])
                else:  # fp32 saved, bf16 here
                    self.main[key].copy_(params[key][lo:hi])
                    self.params[key].copy_(params[key].to(self.params[key].dtype))
            if main and self.spec.optimizer == "distributed":
                self._gather_rows()  # the other dp ranks' rows: each holds its own main parameters

        return self._records(params, main, m, v), finish

    def _records(
        self,
        params: dict[str, torch.Tensor],
        main: dict[str, torch.Tensor],
        exp_avg: dict[str, torch.Tensor] | None = None,
        exp_avg_sq: dict[str, torch.Tensor] | None = None,
    ) -> list[Record]:
        c, topo = self.coords, self.topo
        out: list[Record] = []
        for piece in self.pieces:
            key = piece.layout.key
            logical = (piece.logical_rows,) + piece.global_shape[1:] if piece.logical_rows else None
            out.append(
                ShardedTensor(
                    f"model.{key}", params[key], piece.global_shape, piece.offset, piece.param_replica, logical
                )
            )
            lo, _ = piece.opt_rows
            opt_offset = (piece.offset[0] + lo,) + piece.offset[1:]
            for name, table in (
                ("exp_avg", self.exp_avg if exp_avg is None else exp_avg),
                ("exp_avg_sq", self.exp_avg_sq if exp_avg_sq is None else exp_avg_sq),
                ("main_param", main),
                ("generation", self.stamps),
            ):
                if key in table:
                    out.append(
                        ShardedTensor(
                            f"optimizer.{name}.{key}",
                            table[key],
                            piece.global_shape,
                            opt_offset,
                            piece.opt_replica,
                            logical,
                        )
                    )
        common = c.rank  # rank 0 writes state every rank holds the same
        out.append(ShardedTensor(GRAD_SCALE_KEY, self.grad_scale, (), (), common))
        out += [
            ShardedObject("iteration", self.iteration, replica_id=common),
            ShardedObject("optimizer.step", self.opt_step, replica_id=common),
            ShardedObject(
                "scheduler",
                {"num_steps": self.opt_step, "base_lr": self.spec.lr, "lr": self.lr(self.opt_step)},
                replica_id=common,
            ),
            ShardedObject("data.consumed_samples", self.consumed_samples, replica_id=common),
            ShardedObject(RNG_KEY, self.rng.get_state(), (topo.pp, topo.tp), (c.pp, c.tp), c.dpcp),
        ]
        return out

    def load_objects(self, objects: dict[str, Any]) -> None:
        """Set non-tensor state from loaded objects (tensor records are filled in place)."""
        if "iteration" in objects:
            self.iteration = int(objects["iteration"])
        if "optimizer.step" in objects:
            self.opt_step = int(objects["optimizer.step"])
        if "data.consumed_samples" in objects:
            self.consumed_samples = int(objects["data.consumed_samples"])
        if objects.get(RNG_KEY) is not None:
            self.rng.set_state(objects[RNG_KEY])


STEP_RUN = 1 << 20  # elements of optimizer rows a pass of the step takes at most (a larger piece: alone)


def _spans(sizes: list[int]) -> list[tuple[int, int, int, int]]:
    """Runs of consecutive pieces of at most STEP_RUN elements together (a larger piece alone), each as
    (first piece, end piece, its first element in the flat rows, its elements)."""
    limit, spans, start, total, at = STEP_RUN, [], 0, 0, 0
    for i, n in enumerate(sizes):
        if i > start and total + n > limit:
            spans.append((start, i, at, total))
            start, at, total = i, at + total, 0
        total += n
    spans.append((start, len(sizes), at, total))
    return spans


def _flat(tensors) -> torch.Tensor:
    """The tensors one after another, flat (a copy)."""
    return torch.cat([t.reshape(-1) for t in tensors])
