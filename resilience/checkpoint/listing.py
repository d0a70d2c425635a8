"""What the reference lists under a checkpoint root: every global and LOCAL checkpoint folder, complete
(its manifest reads and every file it lists checks out) or with the problem. One process, no collective."""

from __future__ import annotations

import os

from .. import storage
from ..errors import IntegrityError
from ..vocab import CheckpointInfo
from ..vocab.folders import LOCAL_FOLDER
from . import commit
from .manifest import Manifest, verify_file


def list_checkpoints(root: str) -> list[CheckpointInfo]:
    """Global and local checkpoints under `root` with completeness and integrity (single process)."""
    out = []
    roots = [root]
    local = os.path.join(root, LOCAL_FOLDER)
    if storage.current().is_dir(local):
        roots += [os.path.join(local, n) for n in storage.current().listdir(local)]
    for r in roots:
        for iteration, path in commit.list_iterations(r) + commit.list_replaced(r):
            try:
                manifest = Manifest.read(path, root)
                for rel, expected in manifest.files.items():
                    verify_file(path, rel, expected)
                out.append(CheckpointInfo(iteration, path, True, manifest))
            except (IntegrityError, ValueError, OverflowError) as e:
                out.append(CheckpointInfo(iteration, path, False, None, str(e)))
    return sorted(out, key=lambda c: -c.iteration)  # newest first, as the protocol says; ranks' copies in order
