"""The operation log: every seam operation of a rank with its persistence points, for crash states.

One folder per run; each rank appends `ops.rank<R>.jsonl` (one JSON line per operation) and
`ops.rank<R>.bin` (the bytes of its writes). Both are written with os.write on O_APPEND descriptors, so
a process that SIGKILLs itself loses nothing it logged. Operations of all ranks are merged by a
machine-wide monotonic clock (collectives separate the ranks' dependent operations anyway)."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

# op names: create (open for writing; truncates an existing file), write, fsync (a file), close,
# fsync_dir, rename (src -> dst, replacing dst), exchange (a <-> b), mkdir (one folder), unlink, rmtree;
# in the files only: cancel (an op recorded ahead did not happen; read_ops drops both)
LOGGED = ("create", "write", "fsync", "close", "fsync_dir", "rename", "exchange", "mkdir", "unlink", "rmtree")


def _line_encoder() -> Callable[[dict], str]:
    """The JSON of one log line (a flat record: str, int, float, bool, None), compact, with an encoder made
    once: json.dumps with options makes a JSONEncoder per call, and JSONEncoder.encode a C encoder per call."""
    slow = json.JSONEncoder(separators=(",", ":"))
    c_make_encoder = getattr(json.encoder, "c_make_encoder", None)  # CPython's C accelerator, the one encode uses
    if c_make_encoder is None:
        return slow.encode
    ascii_str = json.encoder.encode_basestring_ascii
    make = c_make_encoder(None, slow.default, ascii_str, None, ":", ",", False, False, True)
    return lambda rec: "".join(make(rec, 0))


encode_line = _line_encoder()


@dataclass(frozen=True)
class Op:
    """One recorded operation. `stream` identifies the open file a write/fsync/close acts on (its path may
    have been renamed since); `blob` is where the written bytes sit in the rank's .bin file."""

    op: str
    rank: int
    seq: int
    t: int
    path: str
    thread: str = "main"
    dst: str | None = None
    stream: str | None = None
    offset: int | None = None
    length: int | None = None
    blob: int | None = None
    ref: int | None = None  # cancel: the seq of the op recorded ahead that did not happen

    def to_dict(self) -> dict:
        # every field is a str or an int: no deep copy (asdict) needed, and a case's timeline reads thousands
        return {k: v for k, v in vars(self).items() if v is not None}

    def __str__(self) -> str:
        where = f"{self.path} -> {self.dst}" if self.dst else self.path
        extra = f" @{self.offset}+{self.length}" if self.op == "write" else ""
        return f"r{self.rank}#{self.seq} {self.op} {where}{extra}"


def _thread() -> str:
    return "main" if threading.current_thread() is threading.main_thread() else "writer"


class OpLog:
    """Appends one rank's operations to its files in `folder`."""

    def __init__(self, folder: str | os.PathLike, rank: int):
        self.folder = str(folder)
        self.rank = rank
        os.makedirs(self.folder, exist_ok=True)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        self._meta = os.open(os.path.join(self.folder, f"ops.rank{rank}.jsonl"), flags, 0o644)
        self._data = os.open(os.path.join(self.folder, f"ops.rank{rank}.bin"), flags, 0o644)
        self._pos = os.fstat(self._data).st_size
        self._seq = 0
        self._streams = 0
        self._lock = threading.Lock()
        self._paths: dict[str, str] = {}

    def new_stream(self) -> str:
        with self._lock:
            self._streams += 1
            return f"{self.rank}:{os.getpid()}:{self._streams}"

    @contextlib.contextmanager
    def ahead(self, op: str, path: str, **fields) -> Iterator[None]:
        """Record `op` before running the block; if the block fails, record that the op did not happen."""
        seq = self.record(op, path, **fields)
        try:
            yield
        except BaseException:
            self.record("cancel", path, ref=seq)
            raise

    def record(self, op: str, path: str, data=None, **fields) -> int:
        """Append one operation; returns its sequence number."""
        with self._lock:
            self._seq += 1
            rec = {
                "op": op,
                "rank": self.rank,
                "seq": self._seq,
                "t": time.monotonic_ns(),
                "path": self._absolute(path),
                "thread": fields.pop("thread", None) or _thread(),  # the FUSE file system names its caller's
            }
            for k, v in fields.items():
                if v is not None:
                    rec[k] = self._absolute(v) if k == "dst" else v
            if data is not None:
                view = memoryview(data).cast("B")
                rec["blob"], rec["length"] = self._pos, len(view)
                done = 0
                while done < len(view):
                    done += os.write(self._data, view[done:])
                self._pos += len(view)
            os.write(self._meta, (encode_line(rec) + "\n").encode())
            return self._seq

    def _absolute(self, path: str) -> str:
        """os.path.abspath, remembered: a save logs thousands of writes to a few dozen paths."""
        found = self._paths.get(path)
        if found is None:
            found = self._paths[path] = os.path.abspath(path)
        return found

    def close(self) -> None:
        for fd in (self._meta, self._data):
            try:
                os.close(fd)
            except OSError:
                pass


def read_ops(folder: str | os.PathLike) -> list[Op]:
    """Every rank's operations in one global order (clock, then rank, then sequence)."""
    folder = str(folder)
    ops: list[Op] = []
    if not os.path.isdir(folder):
        return ops
    for name in sorted(os.listdir(folder)):
        if not (name.startswith("ops.rank") and name.endswith(".jsonl")):
            continue
        with open(os.path.join(folder, name), "rb") as f:
            for line in f:
                try:
                    ops.append(Op(**json.loads(line)))
                except (ValueError, TypeError):
                    continue  # a torn last line
    cancelled = {(o.rank, o.ref) for o in ops if o.op == "cancel"}
    ops = [o for o in ops if o.op != "cancel" and (o.rank, o.seq) not in cancelled]
    return sorted(ops, key=lambda o: (o.t, o.rank, o.seq))


def read_blob(folder: str | os.PathLike, op: Op) -> bytes:
    """The bytes a logged write wrote."""
    if op.blob is None or not op.length:
        return b""
    with open(os.path.join(str(folder), f"ops.rank{op.rank}.bin"), "rb") as f:
        f.seek(op.blob)
        return f.read(op.length)


class Blobs:
    """The bytes of many logged writes: each rank's .bin file read once (a crash state replays thousands
    of small writes; opening the file for each cost more than building the states)."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = str(folder)
        self._data: dict[int, bytes] = {}

    def of(self, op: Op) -> memoryview:
        if op.blob is None or not op.length:
            return memoryview(b"")
        data = self._data.get(op.rank)
        if data is None:
            with open(os.path.join(self.folder, f"ops.rank{op.rank}.bin"), "rb") as f:
                data = self._data[op.rank] = f.read()
        return memoryview(data)[op.blob : op.blob + op.length]
