"""The adapter that lets `resilience` test rankckpt: a CheckpointBackend (resilience.backends.CheckpointBackend).

    resilience adapter check rankckpt_resilience:factory
    resilience matrix --backend rankckpt_resilience:factory
    resilience run scenarios/ --backend rankckpt_resilience:factory
    resilience matrix --backend "rankckpt_resilience:factory[keep=1,prune=early]"   # rankckpt 0.1's retention

It changes nothing rankckpt decides: it turns the framework's state into rankckpt's shard and back, and
rankckpt's errors into the ones the protocol names. The contract: rankckpt loads a checkpoint only under
the layout that saved it (the topology and the precision, which the adapter names and the manifest keeps)
and refuses every tp, pp, dp and precision change with TopologyMismatch, so the checkers expect a clear
refusal of each."""

from __future__ import annotations

import rankckpt

from resilience.backends import CheckpointInfo, LoadResult
from resilience.backends.options import Option
from resilience.errors import CheckpointNotFound, ConfigError, IntegrityError, RankFailure, TopologyChangeRefused
from resilience.state import ShardedTensor

# each rank's save is its own file, written synchronously
COMBINATIONS = ("LOCAL/torch/sync",)
CONTRACT = {"tp": "refuse", "pp": "refuse", "dp": "refuse", "precision": "refuse"}
OPTIONS = (
    Option("keep", 2, "rankckpt.save(keep=): committed iterations kept, newest first", between=(1, 8), sweep=(1,)),
    Option(
        "prune",
        rankckpt.PRUNE_AFTER_COMMIT,
        "rankckpt.save(prune=): when older iterations are removed: after_commit (once every rank knows the "
        "new one is committed) or early (rankckpt 0.1: as soon as rank 0's own file is in place)",
        choices=(rankckpt.PRUNE_AFTER_COMMIT, rankckpt.PRUNE_EARLY),
    ),
)


class RankckptBackend:
    name = "rankckpt"

    def __init__(self, combo, keep: int = 2, prune: str = rankckpt.PRUNE_AFTER_COMMIT):
        if str(combo) not in COMBINATIONS:
            raise ConfigError("combination", f"rankckpt does not implement {combo}", f"use {', '.join(COMBINATIONS)}")
        self.combo, self.keep, self.prune = combo, keep, prune

    def save(self, state, root: str) -> None:
        """Every record of this rank's state under its key: tensors as they are, objects as their values."""
        shard = {r.key: r.data if isinstance(r, ShardedTensor) else r.value for r in state.sharded_state_dict()}
        try:
            rankckpt.save(shard, root, state.iteration, layout=_layout(state), keep=self.keep, prune=self.prune)
        except rankckpt.CheckpointError as e:
            raise RankFailure(e.failures, str(e)) from e

    def load(self, state, root: str) -> LoadResult:
        records = state.sharded_state_dict()
        try:
            iteration, shard, _, skipped = rankckpt.load(root, layout=_layout(state))
        except rankckpt.TopologyMismatch as e:
            raise TopologyChangeRefused(str(e)) from e
        except rankckpt.NoCheckpoint as e:
            raise CheckpointNotFound(str(e)) from e
        except rankckpt.CheckpointError as e:  # checkpoints there, none of them whole: each named with its check
            raise IntegrityError(root, "rankckpt load", str(e)) from e
        objects = {}
        for r in records:  # rankckpt verified the file; the keys and shapes are this state's own
            if isinstance(r, ShardedTensor):
                r.data.copy_(shard[r.key])
            else:
                objects[r.key] = shard[r.key]
        state.load_objects(objects)
        # the same topology and precision (anything else was refused): the RNG comes back exactly
        return LoadResult(iteration, rankckpt.folder_of(root, iteration), rng_restored=True, warnings=skipped)

    def list_checkpoints(self, root: str) -> list[CheckpointInfo]:
        """Every iteration folder, newest first; complete when its manifest reads."""
        whole = set(rankckpt.committed(root))
        return [
            CheckpointInfo(
                it, rankckpt.folder_of(root, it), it in whole, problem="" if it in whole else "no readable manifest"
            )
            for it in rankckpt.iterations(root)
        ]


def _layout(state) -> str:
    """What a rank's shard is: its topology and precision (`tp2pp1dp1:bf16`); rankckpt loads only under the same."""
    return f"{state.topo}:{state.spec.precision}"


def factory(combo, **options) -> RankckptBackend:
    """What `--backend rankckpt_resilience:factory` calls in every rank process, once per combination."""
    return RankckptBackend(combo, **options)


def prunes_early(combo, **options) -> RankckptBackend:
    """rankckpt 0.1, as first shipped: one checkpoint kept, the previous one removed as soon as rank 0's own
    file of the next is in place, while the other ranks may still be writing theirs."""
    return RankckptBackend(combo, **{"keep": 1, "prune": rankckpt.PRUNE_EARLY, **options})


for _f in (factory, prunes_early):
    _f.combinations = COMBINATIONS  # type: ignore[attr-defined]
    _f.contract = CONTRACT  # type: ignore[attr-defined]
    _f.options = OPTIONS  # type: ignore[attr-defined]
factory.keep_last = 2  # type: ignore[attr-defined]  # rankckpt removes older iterations itself
prunes_early.keep_last = 1  # type: ignore[attr-defined]
