"""Broken saves and commits: variants of the reference that lose durability, commit too early or in the
wrong order, drop errors, or keep what they should replace."""

from __future__ import annotations

import os
import threading

from ... import storage
from ...checkpoint import async_save, commit, global_save, manifest as manifest_mod
from ...checkpoint.reference import ReferenceBackend
from ...dist import this_rank
from ...errors import AsyncSaveFailed
from ...vocab.folders import MANIFEST, iter_name
from .patching import Forward, patched


class _NoFsync(Forward):
    def open_write(self, path, *, sync=True):
        return self.inner.open_write(path, sync=False)

    def fsync_dir(self, path):
        pass


class _NoDirFsync(Forward):
    def fsync_dir(self, path):
        pass


class _Wrapped(ReferenceBackend):
    wrapper: type[Forward]  # each subclass names one

    def save(self, state, root):
        with storage.use(self.wrapper(storage.current())):
            return super().save(state, root)

    def finalize(self, *, blocking=True):
        with storage.use(self.wrapper(storage.current())):
            return super().finalize(blocking=blocking)


class no_fsync(_Wrapped):
    wrapper = _NoFsync


class no_dir_fsync(_Wrapped):
    wrapper = _NoDirFsync


class tracker_before_data(ReferenceBackend):
    """Megatron's order turned worse: the tracker first, then the data; the loader trusts the tracker."""

    def save(self, state, root):
        root = os.path.abspath(root)
        if this_rank() == 0:
            storage.current().mkdir(root)
            commit.write_tracker(root, state.iteration)
        return super().save(state, root)

    def _candidates(self, root, warnings):
        candidates, tracker = super()._candidates(root, warnings)
        tracked, _ = commit.read_tracker(root)
        only = [c for c in candidates if c[0] == tracked]
        if not only:
            only = [(tracked, os.path.join(root, iter_name(tracked or 0)), None, "tracked iteration missing")]
        return only, None


class in_place_overwrite(ReferenceBackend):
    """No staging folder: files go straight into iter_N, the manifest last."""

    def save(self, state, root):
        root = os.path.abspath(root)
        with (
            patched(commit, "staging_name", lambda it: iter_name(it)),
            patched(commit, "publish", lambda staging, final, **_: None),
        ):
            return super().save(state, root)


class commit_before_all_ranks(ReferenceBackend):
    """The coordinator commits with its own files only, without waiting for the other ranks."""

    def _commit(self, state, iteration, root, staging, files, error, group=None):
        if this_rank() != 0:
            return
        with (
            patched(global_save, "gather", lambda obj, group=None: [obj]),
            patched(global_save, "broadcast", lambda obj, group=None, src=0: obj),
        ):
            return super()._commit(state, iteration, root, staging, files, error, group)


class swallowed_async_error(ReferenceBackend):
    def finalize(self, *, blocking=True):
        try:
            return super().finalize(blocking=blocking)
        except AsyncSaveFailed:
            return True  # the bug: the failure is dropped and the save counts as done


class retention_deletes_newest(ReferenceBackend):
    def __init__(self, combo):
        super().__init__(combo, keep_last=1)

    def save(self, state, root):
        def keep_oldest(root, keep_last, newest_valid):
            found = commit.list_iterations(root)
            for _, path in found[:-keep_last]:  # newest first: deletes the newest ones
                storage.current().rmtree(path)

        with patched(commit, "apply_retention", keep_oldest):
            return super().save(state, root)


class prunes_before_commit(ReferenceBackend):
    """Keep-last-1 retention run as a save begins, not after it commits: for the length of the save the
    acknowledged checkpoint is gone and the new one is not there yet."""

    def __init__(self, combo):
        super().__init__(combo, keep_last=1)

    def save(self, state, root):
        if this_rank() == 0:  # the bug: the previous checkpoint is removed before the new one is committed
            for _, path in commit.list_iterations(root):
                storage.current().rmtree(path)
        return super().save(state, root)


class manifest_not_durable(ReferenceBackend):
    def save(self, state, root):
        def write(self_, folder):
            with storage.current().open_write(os.path.join(folder, MANIFEST), sync=False) as f:
                f.write(self_.to_json().encode())

        with patched(manifest_mod.Manifest, "write", write):  # the bug: the manifest is never fsynced
            return super().save(state, root)


class async_no_snapshot(ReferenceBackend):
    """The writer runs at finalize on the live tensors (on CPU, Megatron's preload copies nothing)."""

    def _start_async(self, state, records, root, staging):
        with patched(async_save, "StagedCopy", _LiveRecords), patched(threading.Thread, "start", _deferred_start):
            super()._start_async(state, records, root, staging)

    def finalize(self, *, blocking=True):
        pending = self._pending
        if pending is not None and getattr(pending.thread, "_deferred", False):
            threading.Thread.start(pending.thread)  # type: ignore[arg-type]  # a pending save has one
        return super().finalize(blocking=True)


class _LiveRecords:
    """No snapshot at all: the writer gets the live tensors, and training writes go unannounced."""

    def __init__(self, records, buffers=None):
        self.records = records

    def before_write(self, tensors) -> None:
        pass

    def copy_all(self):
        return self.records


def _deferred_start(thread):
    thread._deferred = True  # started by finalize, so training runs in between


class mixed_resave(ReferenceBackend):
    """An incremental re-save: when the iteration already exists, every other data file of the old save
    is taken as unchanged and kept (with its manifest entry); only the rest is replaced."""

    def save(self, state, root):
        real = commit.publish

        def merge(staging, final, **_):
            fs = storage.current()
            if not fs.exists(final):
                return real(staging, final)
            old, new = manifest_mod.Manifest.read(final), manifest_mod.Manifest.read(staging)
            data = sorted(f for f in new.files if f in old.files and os.path.basename(f) not in _METADATA)
            kept = set(data[1::2])  # the bug: these are assumed unchanged since the last save
            for rel in sorted(new.files):
                if rel not in kept:
                    fs.rename(os.path.join(staging, rel), os.path.join(final, rel))
            new.files.update({rel: old.files[rel] for rel in kept})
            new.write(final)
            fs.fsync_dir(final)
            fs.rmtree(staging)

        with patched(commit, "publish", merge):
            return super().save(state, root)


_METADATA = {MANIFEST, ".metadata", "metadata.json"}


class poisoned_after_error(ReferenceBackend):
    """A 'save in progress' flag set as a save starts and cleared when it completes (for an async save,
    when finalize commits it), but not on the error path: after one failed save or finalize the flag stays
    set and every later save in this process refuses as already in progress. A new process starts clean,
    so a restart hides it; only the same job saving again shows it."""

    def __init__(self, combo):
        super().__init__(combo)
        self._saving = False

    def save(self, state, root):
        if self._pending is not None:
            self.finalize()  # the one in flight first, as the reference does
        if self._saving:
            raise RuntimeError("a checkpoint save is already in progress")
        self._saving = True
        super().save(state, root)  # the bug: a save that raises leaves the flag set
        if self._pending is None:
            self._saving = False

    def finalize(self, *, blocking=True):
        done = super().finalize(blocking=blocking)  # the bug: a failed commit leaves the flag set
        if done:
            self._saving = False
        return done
