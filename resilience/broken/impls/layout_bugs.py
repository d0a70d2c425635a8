"""Bugs of the parallel layouts of large jobs, each invisible on a dense tp/pp/dp model: experts whose
replica ids forget expert tensor parallel, legacy files per (tp, pp, ep) written by expert-data-parallel
rank 0, an empty shard written at offset 0, per-rank lengths kept in rank 0's state, expert optimizer
moments left stale by a load (a rank's interleaved chunks loaded as one run is `load_bugs.vpp_chunk_lost`)."""

from __future__ import annotations

import os
from dataclasses import replace

import torch
from torch.distributed.checkpoint.default_planner import create_default_global_save_plan

from ... import storage
from ...checkpoint.formats import torchfile
from ...checkpoint.formats.legacy import DIST_OPT_FILE, MODEL_FILE, LegacyFormat, rank_folder
from ...checkpoint.formats.torch_dist import TorchDistFormat, _PieceSavePlanner
from ...checkpoint.reference import ReferenceBackend
from ...state.model import is_expert_key
from ...state.sharding import ShardedObject, ShardedTensor
from .patching import patched


def _piece_key(record_key: str) -> str:
    """The parameter a record belongs to: model.K and optimizer.NAME.K -> K."""
    head, _, rest = record_key.partition(".")
    return rest if head == "model" else rest.partition(".")[2]


class expert_replica_without_etp(ReferenceBackend):
    """Describes an expert's piece as if expert tensor parallel did not split it (its offset and shape those
    of the etp piece) with the etp rank in its replica id: every etp rank's piece is then one replicated
    tensor, only etp rank 0's is written (a checkpoint 1/etp of its size, Megatron-LM#1836), and each etp rank
    loads that one piece."""

    def _records(self, state, real):
        def described():
            out = real()
            etp, rank = state.topo.etp, state.coords.etp
            if etp == 1:
                return out
            split = {p.layout.key: p.layout.tp_dim for p in state.pieces if p.layout.expert is not None}
            for i, r in enumerate(out):
                dim = split.get(_piece_key(r.key)) if isinstance(r, ShardedTensor) else None
                if dim is None:
                    continue
                n = r.global_shape[dim] // etp
                shape, offset = list(r.global_shape), list(r.global_offset)
                shape[dim], offset[dim] = n, offset[dim] - rank * n
                out[i] = replace(
                    r, global_shape=tuple(shape), global_offset=tuple(offset), replica_id=r.replica_id * etp + rank
                )  # the bug
            return out

        return described

    def save(self, state, root):
        with patched(state, "sharded_state_dict", self._records(state, state.sharded_state_dict)):
            return super().save(state, root)

    def load(self, state, root):
        with patched(state, "sharded_state_dict", self._records(state, state.sharded_state_dict)):
            return super().load(state, root)


class _OneFilePerTpPpEp(LegacyFormat):
    """Megatron's legacy layout before its fix: one file per (tp, pp, ep), dense and expert state together,
    written by expert-data-parallel rank 0."""

    @staticmethod
    def _folder(info) -> str:
        c = info.coords
        return rank_folder(c.tp, c.pp, info.topo) + (f"_{c.ep:03d}" if info.topo.ep > 1 else "")

    def write(self, info, records, folder):
        c, topo = info.coords, info.topo
        dist_opt = info.spec.optimizer == "distributed"
        model, optim = {}, {}
        for r in records:
            if not isinstance(r, ShardedTensor):
                continue
            if dist_opt and r.key.startswith("optimizer.") and r.data.dim():
                size, group = (topo.edp, info.edp_group) if is_expert_key(r.key) else (topo.dpcp, info.dp_group)
                optim[r.key] = self._gather_rows(r, size, group)
            else:
                model[r.key] = torchfile.entry(r)
        if c.edp != 0:
            return  # the bug: with tp > ep x etp, expert-data-parallel rank 0 is not on every tp rank
        sub = os.path.join(folder, self._folder(info))
        storage.current().mkdir(sub)
        torchfile.save(os.path.join(sub, MODEL_FILE), model, torchfile.objects_of(records))
        if dist_opt:
            torchfile.save(os.path.join(sub, DIST_OPT_FILE), optim, {})

    def reader_of(self, rel, info):
        return None

    def read(self, info, records, folder, manifest):
        return self._read_part(records, os.path.join(folder, self._folder(info)))


class legacy_skips_tp_ranks(ReferenceBackend):
    """LEGACY files per (tp, pp, ep) written by expert-data-parallel rank 0: with tp > ep x etp some tp ranks
    hold no such rank, and their model_optim_rng.pt is never written (Megatron-LM PR #4234)."""

    def __init__(self, combo):
        super().__init__(combo)
        self.format = _OneFilePerTpPpEp()


class _LowestRankKeeps(_PieceSavePlanner):
    def __init__(self, pieces):
        super().__init__(pieces)
        self.dedup_save_to_lowest_rank = True  # DCP's option: of two chunks at one index, the lower rank's kept

    def _create_global_plan(self, all_plans):
        # as DCP before it checked that the chunks it kept fill every tensor (torch 2.13 refuses the save)
        return create_default_global_save_plan(self._dedup_save_plans(all_plans))


class _EmptyAtZero(TorchDistFormat):
    planner = _LowestRankKeeps

    @staticmethod
    def pieces_to_write(records):
        pieces, state = TorchDistFormat.pieces_to_write(records)
        for r in records:
            if isinstance(r, ShardedTensor) and r.replica_id == 0 and r.key not in pieces and r.data.dim():
                empty = replace(r, global_offset=(0,) * r.data.dim())  # the bug: an empty shard's offset lost
                pieces[r.key], state[r.key] = empty, r.data.detach()[:0].contiguous()
        return pieces, state


class empty_shard_at_zero(ReferenceBackend):
    """Writes a rank's empty shard (a distributed-optimizer share of no rows) as a chunk at offset 0: it
    collides with the real shard there, and DCP's deduplication keeps one of the two (pytorch PR #150862),
    here the lower rank's, which holds the empty one. torch 2.13's DCP refuses such a plan; this writer
    plans as DCP did before that check."""

    def __init__(self, combo):
        super().__init__(combo)
        self.format = _EmptyAtZero()


SHARD_ROWS = "optimizer.shard_rows"


class rank0_shard_lengths(ReferenceBackend):
    """Keeps the length of every distributed-optimizer shard in the common state, which rank 0 writes: each
    rank then takes rank 0's lengths for its own, and a resume stops with a size mismatch wherever shards
    split unevenly (a large vocabulary, experts; reported on a Megatron-LM fork)."""

    @staticmethod
    def _lengths(records) -> dict[str, int]:
        """This rank's number of rows of each optimizer piece."""
        return {
            r.key: r.local_shape[0]
            for r in records
            if isinstance(r, ShardedTensor) and r.key.startswith("optimizer.") and r.data.dim()
        }

    @classmethod
    def _with_lengths(cls, state, real):
        def records():
            out = real()
            return [*out, ShardedObject(SHARD_ROWS, cls._lengths(out), replica_id=state.coords.rank)]

        return records

    def save(self, state, root):
        with patched(state, "sharded_state_dict", self._with_lengths(state, state.sharded_state_dict)):
            return super().save(state, root)

    def load(self, state, root):
        mine = self._lengths(state.sharded_state_dict())
        seen: dict = {}
        real_load_objects = state.load_objects

        def load_objects(objects):
            seen.update(objects.get(SHARD_ROWS) or {})
            real_load_objects(objects)

        with (
            patched(state, "sharded_state_dict", self._with_lengths(state, state.sharded_state_dict)),
            patched(state, "load_objects", load_objects),
        ):
            result = super().load(state, root)
        for key, rows in seen.items():  # rank 0's lengths taken for this rank's
            if key in mine and mine[key] != rows:
                raise RuntimeError(
                    f"size mismatch for {key}: the shard holds {mine[key]} rows, the checkpoint says {rows}"
                )
        return result


class stale_expert_moments(ReferenceBackend):
    """Loads every expert's parameters but not their Adam moments, which keep the values they had before the
    load, as a conversion that regroups experts (DeepSpeed #8147) did."""

    def load(self, state, root):
        real = state.sharded_state_dict

        def records():
            out = real()
            for i, r in enumerate(out):
                if isinstance(r, ShardedTensor) and is_expert_key(r.key) and r.key.startswith("optimizer.exp_avg"):
                    out[i] = replace(r, data=torch.empty_like(r.data))  # the bug: read into a throwaway buffer
            return out

        with patched(state, "sharded_state_dict", records):
            return super().load(state, root)
