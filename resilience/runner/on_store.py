"""A case whose checkpoints live on an object store (`--storage s3`, objectstore.store): its own place there,
what the runner does at rest through a local copy of it, and the copy kept in the case folder as evidence.

Rank processes reach the store through the seam (runner.arming.use_store), so the case runs the seam's
way: the fault-injecting file system mounts over a folder, not a bucket. A backend that writes its own
files, outside the seam, would write them to the local disk and never reach the store: it is refused
before the case, unless it says it reaches object stores itself (`object_store = True` on its factory)."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator

from ..errors import ConfigError
from ..objectstore.store import CaseStore, RunStore, is_object_store
from . import io_route

CKPT = "ckpt"  # the case's checkpoint folder: the paths ranks write, and where the store's copy is kept
NO_UNSYNCED = "an object store keeps no unsynced writes to lose: an object is whole once its upload returned, or absent"


def case_store(scenario, store: RunStore | None, backend, way: str, case_dir: str) -> CaseStore | None:
    """The case's own place on the run's object store (None: local files); ConfigError when the case cannot
    reach it (check_reaches)."""
    if not is_object_store(scenario.storage):
        return None
    check_reaches(scenario, backend, way)
    assert store is not None  # run_case starts one when none was given
    return store.for_case(case_dir)


def check_reaches(scenario, backend, way: str) -> None:
    """ConfigError when the scenario's cases cannot reach its object store: the file system's way, or a
    backend whose I/O does not go through the seam."""
    if not is_object_store(scenario.storage):
        return
    if not (backend.through_seam or backend.object_store):
        raise ConfigError(
            "--storage",
            f"backend {backend} writes its own files, outside resilience.storage, so they would never reach "
            "the object store",
            "run it with --storage local, or set `object_store = True` on its factory when it writes to the "
            "store itself",
        )
    if way == io_route.FUSE:
        raise ConfigError(
            "--io",
            "the fault-injecting file system mounts over a folder, not an object store",
            "use --io seam (or auto) with --storage s3, or --storage local with --io fuse",
        )


def kept_as_evidence(case) -> None:
    """Copy the case's objects into its checkpoint folder (what a loader would list at the end), then remove
    them from the store: the folder keeps the evidence, the store keeps nothing of the run."""
    if case.store is None:
        return
    from ..objectstore import mirror

    mirror.pull(case.store, os.path.join(case.case_dir, CKPT))
    mirror.remove(case.store)
    if case.store.staging is not None:  # what killed ranks were writing never reached the store
        shutil.rmtree(case.store.staging, ignore_errors=True)


@contextlib.contextmanager
def at_rest(case, root: str) -> Iterator[None]:
    """Work on the checkpoint at rest as files: on an object store, a copy of its objects pulled into `root`
    and what changed pushed back after."""
    if case.store is None:
        yield
        return
    from ..objectstore import mirror

    pulled = mirror.pull(case.store, root)
    yield
    mirror.push(case.store, root, pulled)


__all__ = ["CKPT", "NO_UNSYNCED", "at_rest", "case_store", "check_reaches", "kept_as_evidence"]
