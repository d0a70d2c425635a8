"""The fault records an object store's proxy carries out (objectstore.proxy), and the firings they make.

The third carrier of the one fault language, beside the seam (faults/inject.py) and the FUSE file system
(fusefs/injector.py): which record fires on which request is resilience.triggers' decision, the same
rules, over operations named as faults.base.HTTP_OPS names them, counted per rank (the rank a request's
access key names: objectstore.requests). A record's target.path glob is matched against the object's key,
its path under the case's prefix (`prefix`), and, with no '/' in the glob, its last segment. A request no
rank sent (the runner's own client) is never faulted.

It carries out an error answer, a reset partway through a body and a lost answer on any request, and a
delay (slow_write) or a kill of the client (rank_crash, before or after) on a record aimed at a request
(target.op one of HTTP_OPS); no phase, which only code inside a rank hears. Firings say `via: s3-proxy`."""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Iterable

from ..faults.base import HTTP_OPS, Fault, faults_from
from ..faults.firings import FaultReport, firing
from ..triggers import ANSWER, CRASH, LOSE, RESET, SLOW, Carries, Decision, Matcher
from .requests import S3Request

VIA = "s3-proxy"
THREAD = "main"  # a request does not say which thread sent it: the HTTP kinds do not use target.thread


class ProxyCarrier:
    """The decisions of resilience.triggers for every rank's requests, and the firings they make."""

    CARRIES = Carries(
        VIA,
        frozenset({ANSWER, RESET, LOSE, SLOW, CRASH}),
        phases=False,
        ops=frozenset(HTTP_OPS),
        aimed=frozenset({SLOW, CRASH}),  # with no target.op they mean a file's write or byte
    )

    def __init__(
        self,
        faults: Iterable,
        *,
        report: FaultReport | None = None,
        arm_at: Iterable[int | None] | None = None,
        prefix: str = "",
    ):
        parsed = faults_from(list(faults))
        arms = list(arm_at) if arm_at is not None else [None] * len(parsed)
        if len(arms) != len(parsed):
            raise ValueError(f"{len(arms)} arming points for {len(parsed)} fault records")
        kept = [(f, a) for f, a in zip(parsed, arms) if f.layer == "inject" and self.CARRIES.carries(f)]
        self.faults: list[Fault] = [f for f, _ in kept]
        self.matcher = Matcher(self.faults, [a for _, a in kept])
        self.report = report
        self.prefix = prefix.strip("/")
        self._fired: list[dict] = []
        self._lock = threading.Lock()

    def firings(self) -> list[dict]:
        return list(self._fired)

    def reached(self, rank: int, index: int) -> None:
        """Rank `rank` begins its operation `index`: the records armed there count its requests from now."""
        self.matcher.reached(rank, index)

    def fire(self, i: int, rank: int | None, req: S3Request, action: str, **detail) -> dict:
        where = {"op": req.op, "bucket": req.bucket, "key": req.key, "upload_id": req.upload_id, "part": req.part}
        rec = firing(self.faults[i], action, via=VIA, rank=rank, **where, **detail)
        with self._lock:
            self._fired.append(rec)
        self.matcher.fired(i, rank)
        if self.report is not None:
            self.report.append(rec)
        return rec

    def _paths(self, key: str) -> tuple[str, ...]:
        """The key, its path under the prefix, and that path under a root ('/' + it): a glob the runner aimed
        at a file under the checkpoint folder ('*/.staging-*/__1_0.distcp') matches the object it became."""
        head = f"{self.prefix}/" if self.prefix else ""
        rel = key[len(head) :] if head and key.startswith(head) else key
        return tuple(dict.fromkeys((key, rel, "/" + rel)))

    def before(self, rank: int | None, req: S3Request, length: int) -> Decision:
        """Count this request against every record; say what to do with it. Each firing but a crash's is
        recorded here (a crash's names the processes it kills: `kill_client`). `length`: its body's bytes."""
        d = self.matcher.operation(req.op, self._paths(req.key), rank=rank, thread=THREAD, length=length)
        for slow in d.slow:
            if slow.first:
                self.fire(slow.index, rank, req, "slow", delay=slow.delay)
        if d.answer is not None:
            self.fire(d.answer.index, rank, req, f"answer {d.answer.status} {d.answer.code}")
        elif d.crash is None:
            if d.reset is not None:  # before a lost answer: a reset connection has no answer to lose
                self.fire(d.reset.index, rank, req, "reset", length=length, kept=d.reset.kept)
            elif d.lose is not None:
                self.fire(d.lose, rank, req, "lose answer")
        return d

    def after(self, d: Decision) -> int | None:
        """The crash due right after the request `d` decided, once the server answered it (its index)."""
        return self.matcher.after(d)

    def kill_client(self, i: int, rank: int | None, req: S3Request, conn: socket.socket, when: str) -> list[int]:
        """Record crash `i`, then SIGKILL every process holding the client's end of `conn` (found by its
        address on loopback); the pids killed. With none found (a client on another machine), nothing is
        recorded: the record did not fire, and the run says so (UNPROBED)."""
        pids = client_pids(conn)
        if not pids:
            return []
        self.fire(i, rank, req, "sigkill", when=when, pids=pids)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pids


def client_pids(conn: socket.socket) -> list[int]:
    """The processes holding the other end of an accepted loopback connection `conn` (root sees them all)."""
    import psutil

    peer, local = conn.getpeername()[:2], conn.getsockname()[:2]
    pids: set[int] = set()
    for c in psutil.net_connections(kind="tcp"):
        if c.pid is None or c.pid == os.getpid() or not (c.laddr and c.raddr):
            continue
        if tuple(c.laddr)[:2] == peer and tuple(c.raddr)[:2] == local:
            pids.add(c.pid)
    return sorted(pids)


__all__ = ["ProxyCarrier", "VIA", "client_pids"]
