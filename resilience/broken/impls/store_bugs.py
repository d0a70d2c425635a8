"""Broken ways onto an object store: variants of the reference that drop the store's errors, commit by a
rename the store only emulates, or list a re-saved iteration as a disk would."""

from __future__ import annotations

import os

from ... import storage
from ...checkpoint import commit
from ...checkpoint.reference import ReferenceBackend
from .patching import Forward, patched


class _Unchecked:
    """A write stream whose upload's error is dropped at close (logged nowhere, raised never)."""

    def __init__(self, inner):
        self.inner = inner

    def close(self) -> None:
        try:
            self.inner.close()
        except Exception:
            pass  # the bug

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _DropsErrors(Forward):
    def open_write(self, path, *, sync=True):
        return _Unchecked(self.inner.open_write(path, sync=sync))

    def copy(self, src, dst):
        try:
            self.inner.copy(src, dst)
        except Exception:
            pass  # the bug


class store_errors_swallowed(ReferenceBackend):
    """Every failed upload and copy of the object store dropped, as a client wrapper that logs and goes on:
    a save reports done with an object missing."""

    def save(self, state, root):
        with storage.use(_DropsErrors(storage.current())):
            return super().save(state, root)

    def finalize(self, *, blocking=True):
        with storage.use(_DropsErrors(storage.current())):
            return super().finalize(blocking=blocking)


def _publish_by_rename(fs, staging: str, final: str, keep_replaced: bool) -> None:
    """A POSIX commit moved to a bucket as it is: the old copy removed, the new one renamed into place (which
    the store does object by object, copy then delete, in key order)."""
    if fs.exists(final):
        fs.rmtree(final)
    fs.rename(staging, final)


class rename_commit(ReferenceBackend):
    """Commits by a rename the object store emulates with copies and deletes: a re-save cut short leaves
    neither the old copy of the iteration nor the new one."""

    def save(self, state, root):
        with patched(commit, "_publish_by_copies", _publish_by_rename):
            return super().save(state, root)

    def finalize(self, *, blocking=True):
        with patched(commit, "_publish_by_copies", _publish_by_rename):
            return super().finalize(blocking=blocking)


def _copy_unchecked(fs, src: str, dst: str) -> None:
    fs.copy(src, dst)  # the bug: an error means it was not done


class marker_copy_unchecked(ReferenceBackend):
    """Says a save failed when the copy of its commit marker raised, never reading it back: the store may
    have done it with its answer lost, and a checkpoint it called failed then loads."""

    def save(self, state, root):
        with patched(commit, "_copy_marker", _copy_unchecked):
            return super().save(state, root)

    def finalize(self, *, blocking=True):
        with patched(commit, "_copy_marker", _copy_unchecked):
            return super().finalize(blocking=blocking)


def _no_set_aside(root: str) -> list[tuple[int, str]]:
    return []  # the bug: only iter_N names count, as on a disk


class loader_skips_set_aside(ReferenceBackend):
    """Lists iter_N folders as on a disk and never the copy a re-save set aside: while a re-save is copied
    in, the one whole copy of that iteration is passed over (the loader reads commit.list_replaced through
    the module, so the patch reaches it)."""

    def load(self, state, root):
        with patched(commit, "list_replaced", _no_set_aside):
            return super().load(state, os.path.abspath(root))


__all__ = ["loader_skips_set_aside", "marker_copy_unchecked", "rename_commit", "store_errors_swallowed"]
