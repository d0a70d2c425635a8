"""Backends with one implementation error each, for tests that run them through the runner
(`--backend tests.runner.faulty_backends:NAME`)."""

from __future__ import annotations

import errno
import os
import shutil

from resilience.checkpoint.reference import ReferenceBackend


class _DestroysOnResave(ReferenceBackend):
    """Deletes the committed folder of an iteration before saving that iteration again: a re-save cut by
    a crash loses a checkpoint that was acknowledged."""

    def save(self, state, root):
        import torch.distributed as dist

        folder = os.path.join(root, f"iter_{state.iteration:07d}")
        if dist.get_rank() == 0 and os.path.isdir(folder):
            shutil.rmtree(folder)
        dist.barrier()
        super().save(state, root)


def destroys_on_resave(combo):
    return _DestroysOnResave(combo)


class _DiskFull(ReferenceBackend):
    """Every save raises ENOSPC on rank 1 (a full disk); loads work."""

    def save(self, state, root):
        import torch.distributed as dist

        if dist.get_rank() == 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        super().save(state, root)


def disk_full(combo):
    return _DiskFull(combo)


class _Raises(ReferenceBackend):
    """Every save raises a plain bug on every rank."""

    def save(self, state, root):
        raise ValueError("cannot serialise the optimizer state")


def raises(combo):
    return _Raises(combo)
