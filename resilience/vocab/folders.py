"""Where checkpoints live on disk, by name: what the reference writes, and what the corruption at rest
finds when no learned layout is given.

    ROOT/latest_checkpointed_iteration.txt        the tracker (Megatron's name): the newest iteration
    ROOT/iter_NNNNNNN/manifest.json               a committed checkpoint (Megatron's folder name)
    ROOT/.staging-iter_NNNNNNN-XXXXXXXX/          a save being written, renamed to iter_NNNNNNN when done
    ROOT/local/rank_RRRRR/...                     LOCAL: the same, one folder per rank"""

from __future__ import annotations

import os
import re

# the names iter_name writes; group 1 is the iteration. Seven digits or more: iter_%07d pads to seven and
# writes every digit past 9,999,999 (a reader that wants exactly seven loses every later checkpoint)
ITER_FOLDER = re.compile(r"iter_(\d{7,})")
TRACKER = "latest_checkpointed_iteration.txt"
STAGING_PREFIX = ".staging-"
MANIFEST = "manifest.json"
LOCAL_FOLDER = "local"
RANK_FOLDER = re.compile(r"rank_(\d{5})")  # the names rank_root writes under LOCAL_FOLDER; group 1 is the rank


def iter_name(iteration: int) -> str:
    return f"iter_{iteration:07d}"


def iteration_of(name: str) -> int | None:
    """The iteration of a folder named as iter_name names it (iter_0000012, iter_10000000), else None: a
    name with more padding than iter_name writes (iter_00000012) is another folder, not a copy of 12's."""
    m = ITER_FOLDER.fullmatch(name)
    return int(m.group(1)) if m and iter_name(int(m.group(1))) == name else None


def staging_name(iteration: int, tag: str) -> str:
    """The staging folder of a save of `iteration`; `tag` (random hex) keeps two attempts apart."""
    return f"{STAGING_PREFIX}{iter_name(iteration)}-{tag}"


def rank_root(root: str, rank: int) -> str:
    """The folder holding rank `rank`'s LOCAL checkpoints under the checkpoint root `root`."""
    return os.path.join(root, LOCAL_FOLDER, f"rank_{rank:05d}")
