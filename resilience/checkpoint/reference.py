"""The reference checkpoint implementation: every valid combination, atomic, durable, verified.

Save (every rank): stage -> write own files (fsynced on close) -> fsync folders -> gather results ->
(coordinator) manifest with every file's size and checksum -> rename into place -> fsync -> tracker.
Load: newest candidate first; manifest, topology, then every file's checksum (each file hashed by one
rank); on a failed check warn and fall back to the next older one, or raise when strict.

ReferenceBackend is the facade over one module per job:
    global_save   the coordinator's all-or-nothing commit (LEGACY, GLOBAL, TORCH_DCP)
    async_save    the background writer and finalize (GLOBAL and TORCH_DCP async)
    local_save    each rank's own commit, no collective (LOCAL)
    loading       the newest valid checkpoint, with fallback (global and LOCAL)
    listing       every checkpoint folder and its integrity (one process)
with the commit order in commit.py and the shared write step in driver.py."""

from __future__ import annotations

import os

from ..state import TrainingState
from ..vocab import CheckpointInfo, CheckpointType, CkptFormat, Combination, LoadResult, combination
from .async_save import AsyncSave
from .formats.base import Format
from .listing import list_checkpoints
from .loading import FallbackLoad
from .local_save import LocalSave


def make_format(combo: Combination) -> Format:
    if combo.type is CheckpointType.LEGACY:
        from .formats.legacy import LegacyFormat

        return LegacyFormat()
    if combo.type is CheckpointType.LOCAL:
        from .formats.local import LocalFormat

        return LocalFormat()
    if combo.format is CkptFormat.TORCH_DIST:
        from .formats.torch_dist import TorchDistFormat

        return TorchDistFormat()
    from .formats.torch_dcp import TorchDcpFormat

    return TorchDcpFormat()


class ReferenceBackend(AsyncSave, LocalSave, FallbackLoad):
    """Save / finalize / load / list for one valid combination. Every method is collective."""

    def __init__(self, combo: Combination, *, keep_last: int | None = None, strict: bool = False):
        # Combination(...) itself does not validate: reject an invalid one here, before any byte is written
        self.combo = combo = combination(combo.type, combo.format, combo.io)
        self.format = make_format(combo)
        self.keep_last = keep_last
        self.strict = strict
        self.name = f"reference:{combo}"
        self._pending = None
        self._async_group = None
        self._staging_buffers = {}
        self._local_saves = {}

    def save(self, state: TrainingState, root: str) -> None:
        """Sync: returns once the checkpoint is committed. Async: returns once the state is staged;
        a save still in flight is finalized first (waits)."""
        if self._pending is not None:
            self.finalize()
        root = os.path.abspath(root)
        if self.format.layout == "local":
            return self._save_local(state, root)
        staging = self._stage(state.iteration, root)
        records = state.sharded_state_dict()
        if self.combo.is_async:
            return self._start_async(state, records, root, staging)
        self._save_sync(state, records, root, staging)

    def load(self, state: TrainingState, root: str) -> LoadResult:
        """Load the newest valid checkpoint under `root` into `state`."""
        if self._pending is not None:
            self.finalize()
        root = os.path.abspath(root)
        if self.format.layout == "local":
            return self._load_local(state, root)
        return self._load_global(state, root)

    def list_checkpoints(self, root: str) -> list[CheckpointInfo]:
        """Every checkpoint folder under `root` (this process, no collective), newest first."""
        return list_checkpoints(root)


__all__ = ["ReferenceBackend", "make_format"]
