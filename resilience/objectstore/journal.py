"""A case's history of I/O on an object store: the proxy's log (objectstore.proxy), one JSON line per
request as it ended, and what it says a loader can see after a kill (`crash_view`).

Each line: `start` and `end` (seconds since the epoch), `rank` (None: no rank's key), `method`, `op`
(faults.base.HTTP_OPS), `bucket`, `key`, `range`, `upload_id` (a multipart upload's, the one created for
mpu_create), `part`, `copy_source`, `keys` (a multi-delete's), `bytes_in` (request body bytes passed to
the server) and `bytes_out` (answer body bytes passed to the client), `server_status` (what the server
answered; None: the request never reached it whole, or it never answered), `status` (what the client
got; None: nothing, its connection was reset or closed, or it was killed), `faults` (the kinds that fired
on it) and `error` (why the proxy ended the exchange early, if it did).

A line is one write(2) on an O_APPEND descriptor, so lines never interleave; a request still in flight
when the proxy stops has no line."""

from __future__ import annotations

import json
import os
import threading


class RequestLog:
    """The writer of a proxy's log (None path: nothing is written)."""

    def __init__(self, path: str | None):
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if path else None
        self._lock = threading.Lock()

    def write(self, entry: dict) -> None:
        if self._fd is None:
            return
        line = (json.dumps(entry, sort_keys=True, default=str) + "\n").encode()
        with self._lock:
            os.write(self._fd, line)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def read_requests(path: str | os.PathLike | None) -> list[dict]:
    """Every request of a proxy's log, in the order they ended (none when there is no log); a torn last
    line is skipped."""
    if path is None or not os.path.exists(path):
        return []
    out = []
    with open(path, "rb") as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def _done(r: dict) -> bool:
    """The server did it: it answered 2xx (whether the client heard it or not)."""
    status = r.get("server_status")
    return isinstance(status, int) and 200 <= status < 300


def _acknowledged(r: dict) -> bool:
    status = r.get("status")
    return isinstance(status, int) and 200 <= status < 300


def crash_view(requests: list[dict]) -> dict:
    """What a loader can see after a kill, from a proxy's log: `objects`, each object written by a put, a
    copy or a multipart upload's completion that the server did (`acknowledged`: its client heard it did;
    False: the answer was lost, or the client died first), and not deleted after; `deleted`, the objects
    whose last request was a delete the server did (a write before the log may have made them); `orphans`,
    the multipart uploads begun and never completed nor aborted, by key and upload id, with the parts the
    server stored (an S3 store keeps them, and bills them, until they are aborted)."""
    objects: dict[tuple[str, str], dict] = {}
    deleted: dict[tuple[str, str], dict] = {}
    uploads: dict[str, dict] = {}
    for r in sorted(requests, key=lambda r: r.get("end", 0.0)):
        if not _done(r):
            continue
        where = (r.get("bucket", ""), r.get("key", ""))
        op, upload = r.get("op"), r.get("upload_id")
        if op in ("put", "copy", "mpu_complete"):
            objects[where] = {"bucket": where[0], "key": where[1], "op": op, "acknowledged": _acknowledged(r)}
            deleted.pop(where, None)
            uploads.pop(upload or "", None)
        elif op == "delete":
            for key in r.get("keys") or [where[1]]:
                gone = (where[0], key)
                objects.pop(gone, None)
                deleted[gone] = {"bucket": gone[0], "key": key, "acknowledged": _acknowledged(r)}
        elif op in ("mpu_create", "mpu_part") and upload:
            entry = uploads.setdefault(upload, {"bucket": where[0], "key": where[1], "upload_id": upload, "parts": []})
            if op == "mpu_part" and r.get("part") is not None and r["part"] not in entry["parts"]:
                entry["parts"] = sorted(entry["parts"] + [r["part"]])
        elif op == "mpu_abort":
            uploads.pop(upload or "", None)
    return {
        "objects": [objects[k] for k in sorted(objects)],
        "deleted": [deleted[k] for k in sorted(deleted)],
        "orphans": sorted(uploads.values(), key=lambda u: (u["bucket"], u["key"], u["upload_id"])),
    }


__all__ = ["RequestLog", "crash_view", "read_requests"]
