"""The reference's LOCAL save: no collective and no rank-0 dependency; each rank commits its own folder
(vocab.folders.rank_root) in the same order as a global save (commit.commit_folder).

Each save is numbered alike on every rank without a collective: ranks save in the same order, and a
load (which agrees across ranks) sets the count past every number on any rank, so two different saves
never share one; before any load the count starts after this rank's own saves (none in a fresh run). A
re-save keeps the copy it replaces: another rank may still hold only that one, and a load picks the
newest (iteration, number) every rank holds (loading.FallbackLoad._load_local)."""

from __future__ import annotations

import os

from .. import storage
from ..dist import this_rank
from ..errors import RankFailure
from ..state import TrainingState
from ..vocab import phases
from ..vocab.folders import rank_root
from . import commit
from .driver import Driver
from .manifest import Manifest, save_number


class LocalSave(Driver):
    """One folder per rank per checkpoint; nothing here waits for another rank."""

    def _save_local(self, state: TrainingState, root: str) -> None:
        rank = this_rank()
        folder = rank_root(root, rank)
        if root not in self._local_saves:  # neither loaded nor saved here yet
            self._local_saves[root] = max(save_numbers(folder, root), default=0)
        self._local_saves[root] += 1  # counted before anything can fail, so that every rank counts every save
        number = self._local_saves[root]
        commit.ensure_dir(folder, root)
        staging = os.path.join(folder, commit.staging_name(state.iteration))
        phases.reached("staging", iteration=state.iteration, path=staging)
        files, error = self._write(self._info(state), state.sharded_state_dict(), staging)
        if error:
            storage.current().rmtree(staging)
            raise RankFailure({rank: error}, f"local save of iteration {state.iteration} failed")
        manifest = Manifest(
            self.combo.to_dict(),
            state.topo.to_dict(),
            state.spec.to_dict(),
            state.iteration,
            files,
            {"rank": rank, "save": number},
        )
        # Another rank may not have committed this iteration (no collective here), so the newest
        # checkpoint every rank has may be the previous one: retention keeps one more than asked.
        commit.commit_folder(
            staging, folder, manifest, keep_last=self.keep_last + 1 if self.keep_last else None, keep_replaced=True
        )


def save_numbers(folder: str, root: str) -> list[int]:
    """The numbers of the LOCAL saves in one rank's folder whose manifest reads (this process only)."""
    out: list[int] = []
    try:
        found = commit.list_iterations(folder) + commit.list_replaced(folder)
    except OSError:  # an unreadable folder fails the save itself; the count must still go on
        return out
    for _, path in found:
        try:
            manifest = Manifest.read(path, root)
            out.append(save_number(manifest, path))
        except Exception:  # a copy whose manifest does not read never loads: its number may be reused
            continue
    return out
