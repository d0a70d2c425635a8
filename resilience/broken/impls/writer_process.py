"""A background writer that is a process (what the writer_kill column strikes): the reference with each
async save's files written by a forked process, and its broken variants."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import multiprocessing
import os

from ... import storage
from ...checkpoint.reference import ReferenceBackend
from ...storage.base import WriteStreamBase
from .patching import Forward


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


class _InWriterProcess(Forward):
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
