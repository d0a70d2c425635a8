"""Broken loads and resumes: variants of the reference that skip checks, unpickle anything, ignore the
topology, or hand back state that was not saved (an RNG, rows, a cast) without a word."""

from __future__ import annotations

import os
from dataclasses import replace

from ... import storage
from ...checkpoint import loading, verified
from ...checkpoint.formats import torchfile
from ...checkpoint.reference import ReferenceBackend
from ...state.sharding import ShardedTensor
from .patching import patched


def _unchecked(*args) -> None:
    """verify_file that checks nothing."""


class no_checksum(ReferenceBackend):
    def load(self, state, root):
        # the bug: listed files are never checked
        with patched(loading, "verify_file", _unchecked), patched(verified, "verify_file", _unchecked):
            return super().load(state, root)


def _load_unsafely(path: str) -> dict:
    import torch

    with storage.current().open_read(path) as f:
        return torch.load(f, weights_only=False, map_location="cpu")  # the bug: any pickle, any global


class unsafe_unpickle(ReferenceBackend):
    """Loads its torch.save files with torch.load(weights_only=False), as code written before torch 2.6
    made weights_only the default does: a data.pkl naming os.system runs it."""

    def load(self, state, root):
        with patched(torchfile, "load", _load_unsafely):
            return super().load(state, root)


class ignores_topology(ReferenceBackend):
    """LEGACY loader that accepts any tp/pp and copies whatever overlaps."""

    def __init__(self, combo):
        super().__init__(combo)
        fmt = self.format
        fmt.check_topology = lambda saved, info: None  # type: ignore[method-assign]  # the bug

        def read(info, records, folder, manifest):
            from ...checkpoint.formats import legacy

            sub = os.path.join(
                folder,
                legacy.rank_folder(
                    min(info.coords.tp, manifest.topology["tp"] - 1),
                    min(info.coords.pp, manifest.topology["pp"] - 1),
                    _SavedTopo(manifest.topology),  # type: ignore[arg-type]
                ),
            )
            doc = torchfile.load(os.path.join(sub, legacy.MODEL_FILE))
            tensors = dict(doc["tensors"])
            dist_file = os.path.join(sub, legacy.DIST_OPT_FILE)
            if storage.current().exists(dist_file):
                tensors.update(torchfile.load(dist_file)["tensors"])
            for r in records:
                if isinstance(r, ShardedTensor) and r.key in tensors:
                    src = tensors[r.key]["data"]
                    n = [min(a, b) for a, b in zip(src.shape, r.data.shape)]
                    r.data[tuple(slice(0, k) for k in n)].copy_(src[tuple(slice(0, k) for k in n)])
            return {k: v for k, v in doc["objects"].items() if k != "rng"}

        fmt.read = read  # type: ignore[method-assign]  # the bug


class _SavedTopo:
    def __init__(self, d):
        self.tp, self.pp, self.dp = d["tp"], d["pp"], d["dp"]


class wrong_dedup(ReferenceBackend):
    """Distributed-optimizer state treated as replicated over dp: only dp rank 0's rows are kept."""

    def __init__(self, combo):
        super().__init__(combo)
        self.format._gather_rows = lambda r, size, group: torchfile.entry(r)  # type: ignore[attr-defined]  # the bug


class rng_across_tp(ReferenceBackend):
    """After a tp or pp change, hands back the current RNG and says it was restored."""

    def __init__(self, combo):
        super().__init__(combo)
        real_read = self.format.read

        def read(info, records, folder, manifest):
            objects = real_read(info, records, folder, manifest)
            if "rng" not in objects:
                rng = [r for r in records if r.key == "rng"]
                if rng:
                    objects["rng"] = rng[0].value
            return objects

        self.format.read = read  # type: ignore[method-assign]  # the bug


class silent_cast(ReferenceBackend):
    """A resume in another precision copies each saved parameter into the new dtype (torch's copy_ casts
    without a word): bf16 -> fp32 upcasts the rounded bf16 parameters and drops the fp32 main parameters;
    fp32 -> bf16 rebuilds the main parameters from the rounded bf16 ones."""

    def _records_as_saved(self, state, precision):
        records, exact = state.records_in_precision(precision)
        if precision.params == state.spec.dtype:
            return records, exact
        saved = {
            r.key.removeprefix("model."): r.data
            for r in records
            if isinstance(r, ShardedTensor) and r.key.startswith("model.")
        }

        def cast() -> None:
            exact()  # the optimizer moments, if they changed too
            for piece in state.pieces:
                key = piece.layout.key
                state.params[key].copy_(saved[key])  # the bug: the cast values, not the fp32 ones
                if key in state.main:
                    lo, hi = piece.opt_rows
                    state.main[key].copy_(state.params[key][lo:hi])

        return records, cast


class silent_optim_cast(ReferenceBackend):
    """A resume into bf16 optimizer moments rounds the saved fp32 moments (as any such load must) and says
    nothing: the run goes on with an optimizer state that lost precision, and nobody was told."""

    def _said_of_precision(self, path, saved, live):
        super()._said_of_precision(path, replace(saved, optim=live.optim), live)  # the bug: the moments' loss unsaid
        return []


def _layer_renamed(key: str, renamed: dict[int, int]) -> str:
    head, dot, rest = key.partition("decoder.layers.")
    number, _, tail = rest.partition(".")
    if not dot or not number.isdigit() or int(number) not in renamed:
        return key
    return f"{head}decoder.layers.{renamed[int(number)]}.{tail}"


class vpp_chunk_lost(ReferenceBackend):
    """Loads a rank's interleaved layer chunks as if they were one run of layers (the chunk index lost): on
    vpp 2, stage 0's layers 0, 2 are filled from the checkpoint's layers 0, 1, each of the same shape."""

    def load(self, state, root):
        topo, records = state.topo, state.sharded_state_dict
        mine = state.spec.layers_of_stage(state.coords.pp, topo.pp, topo.vpp)
        renamed = dict(zip(mine, state.spec.layers_of_stage(state.coords.pp, topo.pp)))  # the bug

        def lost_chunks():
            out = records()
            for r in out:
                if isinstance(r, ShardedTensor):
                    r.key = _layer_renamed(r.key, renamed)
            return out

        with patched(state, "sharded_state_dict", lost_chunks):
            return super().load(state, root)
