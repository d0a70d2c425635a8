"""A backend whose verdict changes from run to run on purpose, for the tests of --repeat
(`--backend tests.commands.flaky_backends:every_second_run_fails`).

Which run is which is counted in a folder named by RESILIENCE_TEST_FLAKY_DIR (inherited by the forked
ranks): each checkpoint folder a run saves into takes the next number there, and the runs numbered 1, 3,
5, ... (the second, the fourth, ...) raise on every save. Deterministic, so a test knows the outcomes: a
stand-in for a backend whose retention races its own writer."""

from __future__ import annotations

import hashlib
import os

from resilience.checkpoint.reference import ReferenceBackend

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


FLAKY_BACKEND = "tests.commands.flaky_backends:every_second_run_fails"
# a case the backend above judges: it saves once, and every second run of it fails
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
