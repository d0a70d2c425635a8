"""The reference's global save (LEGACY, GLOBAL, TORCH_DCP): every rank writes its files into one staging
folder, then the coordinator (rank 0) commits all of them or none (commit.commit_folder) and tells every
rank which. A rank that failed to write fails the save on every rank, and nothing is committed."""

from __future__ import annotations

import os
from typing import Any

from .. import storage
from ..dist import broadcast, gather, this_rank
from ..errors import AsyncSaveFailed, RankFailure
from ..state import TrainingState
from ..vocab import phases
from . import commit
from .driver import Driver, describe
from .manifest import Manifest


class GlobalSave(Driver):
    """One folder per checkpoint, committed by the coordinator. Every method is collective."""

    def _stage(self, iteration: int, root: str) -> str:
        """(coordinator) create `root` and name the staging folder; every rank gets the name."""
        staging = None
        if this_rank() == 0:
            commit.ensure_dir(root, os.path.dirname(root))
            staging = os.path.join(root, commit.staging_name(iteration))
        staging = broadcast(staging)  # rank 0 named it
        phases.reached("staging", iteration=iteration, path=staging)
        return staging

    def _save_sync(self, state: TrainingState, records, root: str, staging: str) -> None:
        files, error = self._write(self._info(state), records, staging)
        self._commit(state, state.iteration, root, staging, files, error)

    def _commit(
        self,
        state: TrainingState,
        iteration: int,
        root: str,
        staging: str,
        files: dict,
        error: str | None,
        group: Any = None,
    ) -> None:
        """Gather every rank's files (or error); the coordinator commits them all with one manifest, or
        removes the staging folder; the outcome reaches every rank, and a failure raises on each."""
        gathered = gather((files, error), group)  # the coordinator's alone: it decides
        outcome: tuple[str, dict[int, Any]] | None = None
        if gathered is not None:
            errors = {r: err for r, (_, err) in enumerate(gathered) if err}
            if errors:
                storage.current().rmtree(staging)
                outcome = ("failed", errors)
            else:
                try:
                    merged: dict = {}
                    for per_rank, _ in gathered:
                        merged.update(per_rank)
                    manifest = Manifest(
                        self.combo.to_dict(), state.topo.to_dict(), state.spec.to_dict(), iteration, merged
                    )
                    commit.commit_folder(staging, root, manifest, keep_last=self.keep_last)
                    outcome = ("ok", {})
                except Exception as e:
                    outcome = ("failed", {0: describe(e)})
        status, failures = broadcast(outcome, group)  # rank 0 decided it
        if status != "ok":
            cls = AsyncSaveFailed if self.combo.is_async else RankFailure
            raise cls(failures, f"save of iteration {iteration} failed, nothing committed")
