"""The reference's async save (GLOBAL and TORCH_DCP async): save() stages a copy of the state
(staging.StagedCopy) and returns; a background thread writes the files; finalize() waits for it and
commits them as a sync save would (global_save). A failed background write raises at finalize, on
every rank."""

from __future__ import annotations

import threading
from typing import Any

import torch
import torch.distributed as dist

from ..dist import all_agree, world_size
from ..state import TrainingState
from ..vocab import phases
from .global_save import GlobalSave
from .staging import StagedCopy, return_freed_memory


class PendingSave:
    """An async save whose files are being written by a background thread."""

    def __init__(self, state: TrainingState, root: str, staging: str):
        self.state, self.iteration, self.root, self.staging = state, state.iteration, root, staging
        self.thread: threading.Thread | None = None
        self.files: dict = {}
        self.error: str | None = None


class AsyncSave(GlobalSave):
    """Every method is collective."""

    _pending: PendingSave | None
    _async_group: Any
    _staging_buffers: dict[str, torch.Tensor]  # host copies reused from save to save

    def _start_async(self, state: TrainingState, records, root: str, staging: str) -> None:
        if self._async_group is None and world_size() > 1:
            # the background writer's collectives must not interleave with training's on one group
            self._async_group = dist.new_group(backend="gloo")
        # the previous save's writer has finished (save() finalized it), so its buffers are free to reuse;
        # the copy runs on the writer thread, and the training step copies first what it is about to change
        snapshot = StagedCopy(records, self._staging_buffers)
        info = self._info(state, self._async_group)
        prepare = getattr(self.format, "prepare", None)
        if prepare is not None:  # a format's collective set-up (device meshes, groups) stays on this thread
            prepare(info)
        pending = PendingSave(state, root, staging)

        def write():
            pending.files, pending.error = self._write(info, snapshot.copy_all, staging)

        pending.thread = threading.Thread(target=write, name=f"ckpt-writer-{state.iteration}", daemon=True)
        state.write_guard = snapshot
        pending.thread.start()
        self._pending = pending

    def finalize(self, *, blocking: bool = True) -> bool:
        """Commit a finished async save. Non-blocking: returns False while the write still runs (on any
        rank). A failed background write raises AsyncSaveFailed here, on every rank."""
        pending = self._pending
        if pending is None:
            return True
        if not blocking and not all_agree(not pending.thread.is_alive(), self._async_group):  # type: ignore[union-attr]
            return False
        phases.reached("async_finalize", iteration=pending.iteration, path=pending.staging)
        pending.thread.join()  # type: ignore[union-attr]  # _start_async set it
        self._pending = None
        if getattr(pending.state, "write_guard", None) is not None:
            pending.state.write_guard = None  # the writer has copied everything
        self._commit(
            pending.state,
            pending.iteration,
            pending.root,
            pending.staging,
            pending.files,
            pending.error,
            self._async_group,
        )
        return True

    def release_staging(self) -> None:
        """Free the host copies kept for the next async save (a state's size), and give their memory back
        to the kernel; that save makes them again. A save in flight is finalized first: its writer may
        still read them."""
        self.finalize()
        self._staging_buffers.clear()
        return_freed_memory()

    @property
    def in_flight(self) -> bool:
        return self._pending is not None

    @property
    def in_flight_iteration(self) -> int | None:
        """The iteration of the async save still being written (CheckpointBackend protocol)."""
        return self._pending.iteration if self._pending is not None else None
