"""Bugs that hide in the corners (resilience.runner.corners): each right on the matrix's fixed sample and wrong
in one corner: an iteration past the padding or at zero, a tensor larger than a writer's chunk, storage slow
for seconds, ranks whose clocks read different seconds, a crash during a re-save, an unreadable manifest
beside damaged data, one deleted data file, padding rows with values, rank coordinates nested in the wrong
order."""

from __future__ import annotations

import os
import time
from dataclasses import replace

import torch.distributed as dist

from ... import storage
from ...checkpoint import commit, loading, manifest, verified
from ...checkpoint.formats import torchfile
from ...checkpoint.reference import ReferenceBackend
from ...dist import this_rank
from ...errors import IntegrityError
from ...state.sharding import ShardedObject, ShardedTensor
from ...state.training import RNG_KEY
from ...vocab import phases
from ...vocab.folders import STAGING_PREFIX, iteration_of, staging_name
from .patching import Forward, patched

_list_iterations = commit.list_iterations


def _by_name(root: str) -> list[tuple[int, str]]:
    """Newest first as the folder names sort as text: iter_9999999 comes before iter_10000000."""
    return sorted(_list_iterations(root), key=lambda found: os.path.basename(found[1]), reverse=True)


class lexical_newest(ReferenceBackend):
    """Takes the newest checkpoint to be the last folder name in text order, as `sorted(os.listdir())` does."""

    def load(self, state, root):
        with patched(commit, "list_iterations", _by_name):  # the bug
            return super().load(state, root)


def _past_zero(root: str) -> list[tuple[int, str]]:
    return [(n, path) for n, path in _list_iterations(root) if n]  # the bug: `if iteration:` reads 0 as none


class zero_is_none(ReferenceBackend):
    """Reads a checkpoint at iteration 0 as 'no checkpoint' and starts over."""

    def load(self, state, root):
        with patched(commit, "list_iterations", _past_zero):
            return super().load(state, root)


class resave_cleanup(ReferenceBackend):
    """A resume first cleans up what a crashed save left; for a crashed *re*-save it removes the committed
    copy of that iteration too, taking it for the half of the re-save that had been published."""

    def load(self, state, root):
        if this_rank() == 0:
            fs = storage.current()
            for staging in commit.stale_staging(root):
                iteration = iteration_of(os.path.basename(staging)[len(STAGING_PREFIX) :].rsplit("-", 1)[0])
                fs.rmtree(staging)
                for n, path in commit.list_iterations(root):
                    if n == iteration:
                        fs.rmtree(path)  # the bug
        if dist.is_initialized():
            dist.barrier()
        return super().load(state, root)


class finalize_timeout(ReferenceBackend):
    """An async finalize that waits for the writer half a second, then takes it for done: the save is
    acknowledged, and the write it gave up on is never committed."""

    def finalize(self, *, blocking=True):
        pending = self._pending
        if pending is not None and pending.thread is not None:
            pending.thread.join(timeout=0.5)
            if pending.thread.is_alive():  # the bug: a write still running is taken for a finished one
                self._pending = None
                return True
        return super().finalize(blocking=blocking)


CHUNK = 64 << 10


class _TailLostStream:
    """A stream that writes a large buffer in whole chunks and forgets the last partial one (the loop's
    bound rounds down), while reporting every byte written; a buffer of one chunk or less goes whole."""

    def __init__(self, inner):
        self.inner = inner

    def write(self, data) -> int:
        n = memoryview(data).nbytes
        if n > CHUNK:
            self.inner.write(memoryview(data).cast("B")[: n // CHUNK * CHUNK])  # the bug
            return n
        return self.inner.write(data)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.inner.close()


class _TailLost(Forward):
    def open_write(self, path, *, sync=True):
        return _TailLostStream(self.inner.open_write(path, sync=sync))


class chunk_tail_lost(ReferenceBackend):
    """Writes in 64 KiB chunks and loses the last partial chunk of a tensor larger than one chunk."""

    def save(self, state, root):
        with storage.use(_TailLost(storage.current())):
            return super().save(state, root)

    def finalize(self, *, blocking=True):
        with storage.use(_TailLost(storage.current())):
            return super().finalize(blocking=blocking)


_verify_file = manifest.verify_file
_fill = torchfile.fill


def _missing_is_fine(folder, rel, expected, keep=False):
    if not storage.current().exists(os.path.join(folder, rel)):
        return None  # the bug: a listed file that is gone is taken for one left out on purpose
    return _verify_file(folder, rel, expected, keep)


def _zero_filled(records, tensors, where) -> None:
    for r in records:
        if isinstance(r, ShardedTensor) and r.key not in tensors:
            r.data.zero_()  # the bug: a missing shard is filled in, not refused
    _fill([r for r in records if not isinstance(r, ShardedTensor) or r.key in tensors], tensors, where)


class zero_fills_missing(ReferenceBackend):
    """A LEGACY loader that takes a missing distrib_optim.pt for a save without one and fills the optimizer
    state it held with zeros."""

    def load(self, state, root):
        with (
            patched(loading, "verify_file", _missing_is_fine),
            patched(verified, "verify_file", _missing_is_fine),
            patched(torchfile, "fill", _zero_filled),
        ):
            return super().load(state, root)


class padding_dropped(ReferenceBackend):
    """Restores the vocabulary's real rows only and leaves its padding rows zero, as a converter that strips
    the padding and pads again does: invisible while padding is always zero."""

    def load(self, state, root):
        result = super().load(state, root)
        for piece in state.pieces:
            if piece.layout.vocab_parallel:
                first = max(0, state.spec.vocab - piece.offset[0])
                state.params[piece.layout.key][first:] = 0  # the bug
        return result


class unreadable_manifest_unverified(ReferenceBackend):
    """Takes a checkpoint whose manifest does not parse for one of an older format without checksums: it
    reads the folder with the layout the previous checkpoint's manifest describes, and verifies nothing."""

    def load(self, state, root):
        read = manifest.Manifest.read

        def read_or_guess(folder, root_=None):
            try:
                return read(folder, root_)
            except IntegrityError:
                this = iteration_of(os.path.basename(folder))
                older = [p for n, p in _list_iterations(os.path.dirname(folder)) if this is not None and n < this]
                if this is None or not older:
                    raise
                return replace(read(older[0], root_), iteration=this)

        def verify(folder, rel, expected, keep=False):
            try:
                read(folder)
            except IntegrityError:
                return None  # the bug: no manifest, so nothing to check (on whichever rank checks the file)
            return _verify_file(folder, rel, expected, keep)

        with (
            patched(manifest.Manifest, "read", read_or_guess),
            patched(loading, "verify_file", verify),
            patched(verified, "verify_file", verify),
        ):
            return super().load(state, root)


def _misnested(topo, rank: int) -> tuple[int, int, int]:
    """(tp, pp, dp) of a rank in the nesting tp, pp, dp: Megatron's tp, dp, pp whenever pp or dp is 1."""
    return rank % topo.tp, (rank // topo.tp) % topo.pp, rank // (topo.tp * topo.pp)


class rng_misnested(ReferenceBackend):
    """Places each rank's RNG state in the (pp, tp) cell, and picks the dp replica that writes it, from
    coordinates nested tp, pp, dp: on pp 2 x dp 2 both cells hold the first stage's RNG."""

    def save(self, state, root):
        records = state.sharded_state_dict

        def misnested():
            out = records()
            tp, pp, dp = _misnested(state.topo, state.coords.rank)
            for r in out:
                if isinstance(r, ShardedObject) and r.key == RNG_KEY:
                    r.global_offset, r.replica_id = (pp, tp), dp  # the bug
            return out

        with patched(state, "sharded_state_dict", misnested):
            return super().save(state, root)


class clock_named_staging(ReferenceBackend):
    """Each rank names the staging folder from the second its backend started, as a launcher's run stamp:
    ranks that started in different seconds write one save into two folders, and the commit publishes one."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._started = int(time.time())

    def _stage(self, iteration: int, root: str) -> str:
        if this_rank() == 0:
            commit.ensure_dir(root, os.path.dirname(root))
        if dist.is_initialized():
            dist.barrier()
        staging = os.path.join(root, staging_name(iteration, str(self._started)))  # the bug: not rank 0's name
        phases.reached("staging", iteration=iteration, path=staging)
        return staging
