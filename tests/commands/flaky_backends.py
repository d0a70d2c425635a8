"""Backends whose verdict changes from run to run on purpose, for the tests of --repeat
(`--backend tests.commands.flaky_backends:every_second_run_fails`, `...:prune_races_its_writer`).

Which run is which is counted in a folder named by RESILIENCE_TEST_FLAKY_DIR (inherited by the forked
ranks): each checkpoint folder a run saves into takes the next number there, and the runs numbered 1, 3,
5, ... (the second, the fourth, ...) raise on every save. Deterministic, so a test knows the outcomes: a
stand-in for a backend whose retention races its own writer."""

from __future__ import annotations

import hashlib
import os
import threading
import time

from resilience import storage
from resilience.checkpoint import commit
from resilience.checkpoint.reference import ReferenceBackend
from resilience.dist import this_rank

COUNTER_DIR = "RESILIENCE_TEST_FLAKY_DIR"


def run_number(root: str) -> int:
    """The 0-based number of the run saving into `root`: rank 0 takes the next one on its first save
    there; the other ranks read it after the barrier."""
    import torch.distributed as dist

    folder = os.environ[COUNTER_DIR]
    key = hashlib.sha256(os.path.abspath(root).encode()).hexdigest()[:16]
    rank = dist.get_rank() if dist.is_initialized() else 0
    if rank == 0 and not any(name.endswith("-" + key) for name in os.listdir(folder)):
        open(os.path.join(folder, f"{len(os.listdir(folder))}-{key}"), "w").close()
    if dist.is_initialized():
        dist.barrier()
    return next(int(name.split("-")[0]) for name in os.listdir(folder) if name.endswith("-" + key))


class _EverySecondRunFails(ReferenceBackend):
    def save(self, state, root):
        if run_number(root) % 2 == 1:
            raise ValueError("cannot serialise the optimizer state (this run)")
        super().save(state, root)


def every_second_run_fails(combo):
    return _EverySecondRunFails(combo)


# how long the pruner of the runs the writer is meant to win waits before it deletes: far longer than the
# writer of the tiny test state takes to commit
WRITER_HEAD_START = 2.0


class _PruneRacesItsWriter(ReferenceBackend):
    """Async saves with keep-last-1 retention done by a thread that nothing orders against the writer thread
    committing the new save: as `save` returns (the state staged, the writer under way), rank 0 starts a
    pruner that removes every older checkpoint. Which thread gets there first is timing. Each run steers
    it, so a test knows both outcomes occur: on runs 1, 3, ... the pruner deletes at once, while the writer
    still writes (the acknowledged checkpoint is gone before its successor is committed: a retention FAIL);
    on runs 0, 2, ... it waits WRITER_HEAD_START seconds first (the writer has committed: PASS)."""

    def save(self, state, root):
        older = [path for _, path in commit.list_iterations(os.path.abspath(root))]
        lag = 0.0 if run_number(root) % 2 == 1 else WRITER_HEAD_START
        super().save(state, root)
        if older and this_rank() == 0:
            fs = storage.current()  # the process's file system: the one a case logs and injects through

            def prune():
                time.sleep(lag)
                for path in older:
                    fs.rmtree(path)

            self._pruner = threading.Thread(target=prune, name="pruner", daemon=True)
            self._pruner.start()

    def finalize(self, *, blocking: bool = True) -> bool:
        done = super().finalize(blocking=blocking)
        pruner = getattr(self, "_pruner", None)
        if done and pruner is not None and blocking:
            pruner.join()  # the pruner is part of the save: done when both threads are
        return done


def prune_races_its_writer(combo):
    return _PruneRacesItsWriter(combo)


prune_races_its_writer.combinations = ("GLOBAL/torch_dist/async",)

FLAKY_BACKEND = "tests.commands.flaky_backends:every_second_run_fails"
RACING_BACKEND = "tests.commands.flaky_backends:prune_races_its_writer"
# prune_races_its_writer's case: two async saves, each finalized, then a resume from the newest
RACE_SCENARIO = """
name: prune-race
topology: tp1pp1dp2
model: {num_layers: 1, hidden: 2, ffn_hidden: 2, heads: 1, vocab: 4}
combinations: [GLOBAL/torch_dist/async]
steps:
  - train: 1
  - save
  - finalize
  - train: 1
  - save
  - finalize
  - resume: {continue: 1}
"""
# every_second_run_fails's case: it saves once, and every second run of it fails
SCENARIO = """
name: save-resume
topology: tp1pp1dp1
model: {num_layers: 1, hidden: 2, ffn_hidden: 2, heads: 1, vocab: 4}
combinations: [LEGACY/torch/sync]
steps:
  - train: 1
  - save
  - resume: {continue: 1}
"""
