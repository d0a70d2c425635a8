"""The broken implementations: subclasses of the reference, each changing one thing."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import multiprocessing
import os
import threading
from dataclasses import replace

from .. import storage
from ..checkpoint import async_save, commit, global_save, loading, manifest as manifest_mod, verified
from ..checkpoint.formats import torchfile
from ..checkpoint.reference import ReferenceBackend
from ..dist import this_rank
from ..errors import AsyncSaveFailed
from ..state.sharding import ShardedTensor
from ..storage.base import WriteStreamBase
from ..vocab.folders import MANIFEST, iter_name


@contextlib.contextmanager
def patched(obj, name: str, value):
    before = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, before)


class _Forward:
    """A filesystem wrapper that forwards everything it does not override."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)


class _NoFsync(_Forward):
    def open_write(self, path, *, sync=True):
        return self.inner.open_write(path, sync=False)

    def fsync_dir(self, path):
        pass


class _NoDirFsync(_Forward):
    def fsync_dir(self, path):
        pass


class _Wrapped(ReferenceBackend):
    wrapper: type[_Forward]  # each subclass names one

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


def _unchecked(*args) -> None:
    """verify_file that checks nothing."""


class no_checksum(ReferenceBackend):
    def load(self, state, root):
        # the bug: listed files are never checked
        with patched(loading, "verify_file", _unchecked), patched(verified, "verify_file", _unchecked):
            return super().load(state, root)


def _load_unsafely(path: str) -> dict:
    import torch

    with storage.current().open_read(path) as f:
        return torch.load(f, weights_only=False, map_location="cpu")  # the bug: any pickle, any global


class unsafe_unpickle(ReferenceBackend):
    """Loads its torch.save files with torch.load(weights_only=False), as code written before torch 2.6
    made weights_only the default does: a data.pkl naming os.system runs it."""

    def load(self, state, root):
        with patched(torchfile, "load", _load_unsafely):
            return super().load(state, root)


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
            patched(global_save, "all_gather", lambda obj, group=None: [obj]),
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


class ignores_topology(ReferenceBackend):
    """LEGACY loader that accepts any tp/pp and copies whatever overlaps."""

    def __init__(self, combo):
        super().__init__(combo)
        fmt = self.format
        fmt.check_topology = lambda saved, info: None  # type: ignore[method-assign]  # the bug

        def read(info, records, folder, manifest):
            from ..checkpoint.formats import legacy

            sub = os.path.join(
                folder,
                legacy.rank_folder(
                    min(info.coords.tp, manifest.topology["tp"] - 1),
                    min(info.coords.pp, manifest.topology["pp"] - 1),
                    _SavedTopo(manifest.topology),  # type: ignore[arg-type]
                ),
            )
            doc = torchfile.load(os.path.join(sub, legacy.MODEL_FILE))
            tensors = dict(doc["tensors"])
            dist_file = os.path.join(sub, legacy.DIST_OPT_FILE)
            if storage.current().exists(dist_file):
                tensors.update(torchfile.load(dist_file)["tensors"])
            for r in records:
                if isinstance(r, ShardedTensor) and r.key in tensors:
                    src = tensors[r.key]["data"]
                    n = [min(a, b) for a, b in zip(src.shape, r.data.shape)]
                    r.data[tuple(slice(0, k) for k in n)].copy_(src[tuple(slice(0, k) for k in n)])
            return {k: v for k, v in doc["objects"].items() if k != "rng"}

        fmt.read = read  # type: ignore[method-assign]  # the bug


class _SavedTopo:
    def __init__(self, d):
        self.tp, self.pp, self.dp = d["tp"], d["pp"], d["dp"]


class wrong_dedup(ReferenceBackend):
    """Distributed-optimizer state treated as replicated over dp: only dp rank 0's rows are kept."""

    def __init__(self, combo):
        super().__init__(combo)
        self.format._gather_rows = lambda info, r: torchfile.entry(r)  # type: ignore[attr-defined]  # the bug


class rng_across_tp(ReferenceBackend):
    """After a tp or pp change, hands back the current RNG and says it was restored."""

    def __init__(self, combo):
        super().__init__(combo)
        real_read = self.format.read

        def read(info, records, folder, manifest):
            objects = real_read(info, records, folder, manifest)
            if "rng" not in objects:
                rng = [r for r in records if r.key == "rng"]
                if rng:
                    objects["rng"] = rng[0].value
            return objects

        self.format.read = read  # type: ignore[method-assign]  # the bug


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


class silent_cast(ReferenceBackend):
    """A resume in another precision copies each saved parameter into the new dtype (torch's copy_ casts
    without a word): bf16 -> fp32 upcasts the rounded bf16 parameters and drops the fp32 main parameters;
    fp32 -> bf16 rebuilds the main parameters from the rounded bf16 ones."""

    def _records_as_saved(self, state, precision):
        records, exact = state.records_in_precision(precision)
        if precision.params == state.spec.dtype:
            return records, exact
        saved = {
            r.key.removeprefix("model."): r.data
            for r in records
            if isinstance(r, ShardedTensor) and r.key.startswith("model.")
        }

        def cast() -> None:
            exact()  # the optimizer moments, if they changed too
            for piece in state.pieces:
                key = piece.layout.key
                state.params[key].copy_(saved[key])  # the bug: the cast values, not the fp32 ones
                if key in state.main:
                    lo, hi = piece.opt_rows
                    state.main[key].copy_(state.params[key][lo:hi])

        return records, cast


class silent_optim_cast(ReferenceBackend):
    """A resume into bf16 optimizer moments rounds the saved fp32 moments (as any such load must) and says
    nothing: the run goes on with an optimizer state that lost precision, and nobody was told."""

    def _said_of_precision(self, path, saved, live):
        super()._said_of_precision(path, replace(saved, optim=live.optim), live)  # the bug: the moments' loss unsaid
        return []


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


# ---- a background writer that is a process (what the writer_kill column strikes) ---------------------
class _WriterProcess:
    """A process forked to write one rank's files (as megatron-core's async queue forks its writer): the
    rank's writer thread sends each file operation over a pipe, the process carries it out through the
    storage seam it inherited and answers. Killed, it answers nothing: the pipe's end of file (or a broken
    pipe) makes the operation raise in the rank. Our own messages: JSON headers, the written bytes raw."""

    def __init__(self, fs, *, keep_its_end: bool = False):
        here, there = multiprocessing.Pipe()
        pid = os.fork()
        if pid == 0:  # the writer process: only this thread was copied; it touches files and the pipe only
            code = 1
            try:
                here.close()
                _serve(there, fs)
                code = 0
            finally:
                os._exit(code)
        self.pid, self.conn = pid, here
        # the pipe's other end belongs to the writer; a copy kept here means no end of file when it dies
        self._kept = there if keep_its_end else None
        if not keep_its_end:
            there.close()
        self._ids = 0

    def new_id(self) -> int:
        self._ids += 1
        return self._ids

    def ask(self, head: dict, data: bytes | None = None) -> dict:
        try:
            self.conn.send_bytes(json.dumps(head).encode())
            if data is not None:
                self.conn.send_bytes(data)
            answer = json.loads(self.conn.recv_bytes())
        except (EOFError, OSError) as e:
            raise OSError(errno.EPIPE, f"the writer process {self.pid} is gone: {self.how_it_ended()}") from e
        if "error" in answer:
            raise OSError(answer.get("errno") or errno.EIO, answer["error"])
        return answer

    def how_it_ended(self) -> str:
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return "already reaped"
        if pid == 0:
            return "still running"
        return f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"

    def stop(self) -> None:
        """Tell the writer to exit and reap it (a dead one is reaped as it is)."""
        with contextlib.suppress(OSError):
            self.conn.send_bytes(b'{"op": "exit"}')
        self.conn.close()
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


def _serve(conn, fs) -> None:
    """The writer process's loop: one answer per operation, until told to exit or the rank's end closes."""
    streams: dict = {}
    while True:
        try:
            head = json.loads(conn.recv_bytes())
        except EOFError:
            return
        op = head["op"]
        if op == "exit":
            return
        data = conn.recv_bytes() if op == "write" else None
        answer: dict = {}
        try:
            if op == "open":
                streams[head["id"]] = fs.open_write(head["path"], sync=head["sync"])
            elif op == "write":
                storage.write_all(streams[head["id"]], data)
            elif op == "fsync":
                streams[head["id"]].fsync()
            elif op == "close":
                stream = streams.pop(head["id"])
                stream.close()
                answer = {"size": stream.size, "digest": stream.digest}
        except Exception as e:
            answer = {"error": f"{type(e).__name__}: {e}", "errno": getattr(e, "errno", None)}
        conn.send_bytes(json.dumps(answer).encode())


class _RemoteStream(WriteStreamBase):
    """A file the writer process holds open: each call is carried out there; size and digest are what the
    writer reports at close."""

    def __init__(self, writer: _WriterProcess, path: str, sync: bool):
        self.writer, self.path, self.size, self.digest = writer, path, 0, None
        self.closed = False
        self._id = writer.new_id()
        writer.ask({"op": "open", "id": self._id, "path": path, "sync": sync})

    def write(self, data) -> int:
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        self.writer.ask({"op": "write", "id": self._id}, bytes(view))
        self.size += len(view)
        return len(view)

    def flush(self) -> None:
        pass

    def fsync(self) -> None:
        self.writer.ask({"op": "fsync", "id": self._id})

    def tell(self) -> int:
        return self.size

    def fileno(self) -> int:
        raise io.UnsupportedOperation("the file is open in the writer process")

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        answer = self.writer.ask({"op": "close", "id": self._id})
        self.size, self.digest = answer["size"], answer["digest"]


class _InWriterProcess(_Forward):
    """Files opened for writing are written by the writer process; every other operation stays here."""

    def __init__(self, inner, writer: _WriterProcess):
        super().__init__(inner)
        self.writer = writer

    def open_write(self, path, *, sync=True):
        return _RemoteStream(self.writer, path, sync)


class process_writer(ReferenceBackend):
    """Not broken: the reference with each async save's files written by a process it forks for that save,
    as megatron-core's async queue forks its writer. A killed writer fails that rank's write, the commit
    spreads the failure to every rank (finalize raises on each), nothing is committed, and the next save
    forks a new writer: what the writer_kill column passes on. Its broken variants follow (CATALOGUE)."""

    keep_its_end = False  # see writer_death_hangs

    def _writer(self, fs) -> _WriterProcess:
        return _WriterProcess(fs, keep_its_end=self.keep_its_end)

    def _done_with(self, writer: _WriterProcess) -> None:
        writer.stop()

    def _write(self, info, records, staging):
        if not self.combo.is_async:
            return super()._write(info, records, staging)
        writer = self._writer(storage.current())
        try:
            with storage.use(_InWriterProcess(storage.current(), writer), this_thread=True):
                return super()._write(info, records, staging)
        finally:
            self._done_with(writer)


class writer_death_hangs(process_writer):
    """The bug: the rank keeps its copy of the writer's end of the pipe (never closed after the fork), so a
    killed writer leaves no end of file: the rank's writer thread waits for its answer forever, and so
    does finalize."""

    keep_its_end = True


class writer_never_respawned(process_writer):
    """The bug: one writer process for the life of the backend, started by the first async save (as DCP's
    process executor keeps its checkpoint process), and never replaced: once it died, every later save of
    the process fails. A restart hides it."""

    def _writer(self, fs) -> _WriterProcess:
        if getattr(self, "_kept_writer", None) is None:
            self._kept_writer = _WriterProcess(fs)
        return self._kept_writer

    def _done_with(self, writer: _WriterProcess) -> None:
        pass  # kept for the next save
