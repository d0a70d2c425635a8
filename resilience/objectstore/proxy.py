"""A fault-injecting HTTP proxy in front of an S3 server: the ranks' clients talk to it, it passes every
request and answer on byte for byte, and carries out the fault records aimed at the requests
(objectstore.carrier: an error answer, a reset partway through a body, a lost answer, a delay, a kill of
the client), logging each request (objectstore.journal).

`FaultProxy(upstream, faults, report=..., log=...)` runs it in a process of its own (`python -m
resilience.objectstore.proxy CONFIG`: the runner's GIL never slows it), SIGKILLed with its parent however
that ends, on 127.0.0.1 at a port the OS picked (`endpoint`). Each rank's client signs with its own access
key (requests.rank_access_key) so the proxy knows its rank; a rank tells when it reaches an operation that
a record is armed at with `reached(endpoint, rank, index)`.

One thread per client connection, each with its own connection to the server: a connection carries one
request at a time (HTTP/1.1 without pipelining, as boto3 and s3fs use it), blocking socket calls release
the GIL, and a run has at most a few hundred connections (ranks times a client's pool), so threads are the
simplest design that keeps every connection moving at once."""

from __future__ import annotations

import contextlib
import dataclasses
import html
import http.client
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, Any, cast
from urllib.parse import parse_qs, urlsplit

from ..errors import ConfigError
from ..faults.base import faults_from
from ..faults.firings import FaultReport
from ..launch.lifetime import argv_dying_with_parent
from ..triggers import Decision, Keeps, kept
from .carrier import ProxyCarrier
from .client import check_endpoint_url
from .journal import RequestLog, read_requests
from .requests import S3Request, classify, rank_of_request
from .server import ServerFailed, stop_group
from .wire import LENGTH, NONE, UNTIL_CLOSE, Cut, Head, Peer, Sink, WireError, framing, pump_body, reset

CONTROL = "/.resilience/"  # no bucket name starts with '.': a path for the runner and the ranks, never the server's
START_TIMEOUT = 30.0
DRAIN = 2.0  # seconds a stopping proxy waits for the requests under way to be logged (stop_group waits 5)
SMALL = 1 << 20  # the most of a body the proxy reads itself (an upload's id, a multi-delete's keys)
REASONS = {500: "Internal Server Error", 503: "Slow Down"}


class Connection:
    """One client connection, served by one thread, and its own connection to the server."""

    def __init__(self, proxy: ProxyServer, sock: socket.socket):
        self.proxy, self.carrier = proxy, proxy.carrier
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client = Peer(sock)
        self.up: Peer | None = None

    def serve(self) -> None:
        try:
            while self._one():
                pass
        except (OSError, WireError):
            pass  # the client went away between requests, or sent what is not HTTP
        finally:
            self._close()

    def _close(self) -> None:
        self.client.sock.close()
        if self.up is not None:
            self.up.sock.close()
            self.up = None

    def _upstream(self) -> Peer:
        """The connection to the server: the one kept alive, unless the server closed it meanwhile."""
        if self.up is not None and select.select([self.up.sock], [], [], 0)[0]:
            self.up.sock.close()  # readable between answers: closed by the server (or out of step)
            self.up = None
        if self.up is None:
            sock = socket.create_connection(self.proxy.upstream)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.up = Peer(sock)
        return self.up

    # ---- one request ---------------------------------------------------------------------------------
    def _one(self) -> bool:
        """Serve the next request; whether the connection goes on."""
        head = self.client.read_head()
        if head is None:
            return False
        method, target = head.words[0].upper(), head.words[1]
        path, _, query = target.partition("?")
        if path.startswith(CONTROL):
            return self._control(head, path, query)
        req = classify(method, path, query, head.headers)
        x: dict[str, Any] = {"start": time.time(), "rank": rank_of_request(head.headers, query), "method": method}
        x.update(dataclasses.asdict(req), bytes_in=0, bytes_out=0, status=None, server_status=None, faults=[])
        with self.proxy.busy():
            try:
                go_on = self._exchange(head, req, x)
            except Exception as e:  # a peer gone, a message that does not parse, or a fault of the proxy's own:
                x["error"] = f"{type(e).__name__}: {e}"  # logged, and the connection closed
                go_on = False
            x["end"] = time.time()
            self.proxy.log.write(x)
        return go_on

    def _exchange(self, head: Head, req: S3Request, x: dict) -> bool:
        kind, length = framing(head, request=True)
        d = self.carrier.before(x["rank"], req, length)
        x["faults"] += self._acted(d)
        if d.delay:
            time.sleep(d.delay)
        if d.answer is not None:
            return self._answer(head, req, d, kind, length, x)
        if d.crash is not None:
            return self._kill(d.crash, req, "before", x)
        up = self._upstream()
        up.sock.sendall(head.raw)
        if kind != NONE and "100-continue" in head.headers.get("expect", "").lower():
            interim = self._response_head(up, interim=True)
            if interim.status != 100:  # refused before the body: the client sends none
                self._relay(interim, head, req, d, x)
                return False
            self.client.sock.sendall(interim.raw)
        cut = None if d.reset is None or kind == NONE else self._cut_at(d.reset.index, kind, length)
        sink = Sink(up.sock, budget=cut, keep=SMALL if req.op == "delete" else 0)
        try:
            x["bytes_in"] = pump_body(self.client, sink, kind, length)
        except Cut as c:
            x["bytes_in"], x["error"] = c.passed, "reset by a fault"
            return self._reset()
        if sink.copy:  # a multi-delete's keys
            x["keys"] = [html.unescape(k) for k in re.findall(r"<Key>(.*?)</Key>", sink.copy.decode("utf-8", "ignore"))]
        return self._relay(self._response_head(up), head, req, d, x)

    def _response_head(self, up: Peer, *, interim: bool = False) -> Head:
        """The server's next answer, each interim (1xx) one before it passed to the client (werkzeug sends
        100 Continue twice); with `interim`, the first answer, interim or not."""
        while True:
            resp = up.read_head()
            if resp is None:
                raise WireError("the server closed the connection without an answer")
            if interim or not 100 <= resp.status < 200:
                return resp
            self.client.sock.sendall(resp.raw)

    def _relay(self, resp: Head, head: Head, req: S3Request, d: Decision, x: dict) -> bool:
        """Pass the server's answer to the client, or lose it, cut it or kill the client instead."""
        assert self.up is not None
        x["server_status"] = resp.status
        method = head.words[0].upper()
        kind, length = framing(resp, request=False, method=method)
        after = self.carrier.after(d)
        # a reset here is of a request with no body (one with a body was cut on its way in): its answer is cut
        if after is not None or (d.lose is not None and d.reset is None) or (d.reset is not None and kind == NONE):
            pump_body(self.up, Sink(None), kind, length)  # the server is done with it either way
            if after is not None:
                return self._kill(after, req, "after", x)
            x["error"] = "answer lost by a fault" if d.reset is None else "reset by a fault"
            return self._reset()
        budget = None if d.reset is None else self._cut_at(d.reset.index, kind, length)
        self.client.sock.sendall(resp.raw)
        x["status"] = resp.status
        sink = Sink(self.client.sock, budget=budget, keep=SMALL if req.op == "mpu_create" else 0)
        try:
            x["bytes_out"] = pump_body(self.up, sink, kind, length)
        except Cut as c:
            x["bytes_out"], x["error"] = c.passed, "reset by a fault"
            return self._reset()
        if sink.copy and (m := re.search(rb"<UploadId>(.*?)</UploadId>", bytes(sink.copy))):
            x["upload_id"] = html.unescape(m.group(1).decode())
        if kind == UNTIL_CLOSE or resp.wants_close():
            self.up.sock.close()
            self.up = None
        return kind != UNTIL_CLOSE and not head.wants_close()

    # ---- the deeds of faults -----------------------------------------------------------------------------
    def _acted(self, d: Decision) -> list[str]:
        """The kinds of the records that act on this request (a crash after is added when it strikes)."""
        acting = [s.index for s in d.slow]
        if d.answer is not None:
            acting.append(d.answer.index)
        elif d.crash is not None:
            acting.append(d.crash)
        elif d.reset is not None:
            acting.append(d.reset.index)
        elif d.lose is not None:
            acting.append(d.lose)
        return [self.carrier.faults[i].kind for i in acting]

    def _cut_at(self, index: int, kind: str, length: int) -> int:
        """Bytes of a body passed before a reset: the record's `keep` (None: half), never the whole body
        (a body of unknown length: `keep`, or none of it)."""
        f = cast(Keeps, self.carrier.faults[index])
        return min(kept(f, length), length - 1) if kind == LENGTH else f.keep or 0

    def _answer(self, head: Head, req: S3Request, d: Decision, kind: str, length: int, x: dict) -> bool:
        """Answer with the record's S3 error; the request never reaches the server. A client waiting to
        send its body (Expect: 100-continue) sends none: the connection is closed after the answer."""
        assert d.answer is not None
        waits = "100-continue" in head.headers.get("expect", "").lower() and kind != NONE
        if not waits:
            x["bytes_in"] = pump_body(self.client, Sink(None), kind, length)
        status, code = d.answer.status, d.answer.code
        resource = html.escape(f"/{req.bucket}/{req.key}" if req.key else f"/{req.bucket}")
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>injected by the resilience proxy</Message>"
            f"<Resource>{resource}</Resource><RequestId>resilience-proxy</RequestId></Error>"
        ).encode()
        keep = not waits and not head.wants_close()
        lines = [
            f"HTTP/1.1 {status} {REASONS.get(status, code)}",
            "Content-Type: application/xml",
            f"Content-Length: {len(body)}",
            "x-amz-request-id: resilience-proxy",
            f"Connection: {'keep-alive' if keep else 'close'}",
        ]
        self.client.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + (b"" if x["method"] == "HEAD" else body))
        x["status"], x["bytes_out"] = status, 0 if x["method"] == "HEAD" else len(body)
        return keep

    def _kill(self, i: int, req: S3Request, when: str, x: dict) -> bool:
        killed = self.carrier.kill_client(i, x["rank"], req, self.client.sock, when)
        kind = self.carrier.faults[i].kind
        if when == "before" and not killed:
            x["faults"].remove(kind)  # named by _acted, but it did nothing
        elif when == "after" and killed:
            x["faults"].append(kind)
        x["killed"] = killed
        x["error"] = f"client killed {when} the request by a fault" if killed else "no client process to kill"
        return self._reset()

    def _reset(self) -> bool:
        reset(self.client.sock)
        if self.up is not None:
            reset(self.up.sock)
            self.up = None
        return False

    # ---- the runner's and the ranks' own requests -------------------------------------------------------
    def _control(self, head: Head, path: str, query: str) -> bool:
        """POST /.resilience/reached?rank=R&index=K: rank R begins its operation K (Matcher.reached)."""
        kind, length = framing(head, request=True)
        pump_body(self.client, Sink(None), kind, length)
        q = parse_qs(query)
        try:
            if path == CONTROL + "reached":
                self.carrier.reached(int(q["rank"][0]), int(q["index"][0]))
            status = 204 if path in (CONTROL + "reached", CONTROL + "ping") else 404
        except (KeyError, ValueError):
            status = 400
        self.client.sock.sendall(f"HTTP/1.1 {status} -\r\nContent-Length: 0\r\n\r\n".encode())
        return not head.wants_close()


class ProxyServer:
    """The proxy inside its own process: an accepting loop and a thread per connection."""

    def __init__(self, upstream: str, carrier: ProxyCarrier, log: RequestLog):
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.carrier, self.log = carrier, log
        self._busy = 0  # requests begun and not yet logged
        self._idle = threading.Condition()

    def serve(self, listener: socket.socket) -> None:
        while True:
            sock, _ = listener.accept()
            threading.Thread(target=Connection(self, sock).serve, daemon=True).start()

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        with self._idle:
            self._busy += 1
        try:
            yield
        finally:
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()

    def drain(self, timeout: float) -> None:
        """Wait until every request begun is logged (a client may have its answer a moment before its line
        is written), `timeout` seconds at most."""
        with self._idle:
            self._idle.wait_for(lambda: self._busy == 0, timeout)


def _stop(signum, frame) -> None:
    raise SystemExit(0)


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m resilience.objectstore.proxy CONFIG`: serve on 127.0.0.1 at a free port, printed first."""
    [path] = list(sys.argv[1:] if argv is None else argv)
    with open(path) as f:
        config = json.load(f)
    report = FaultReport(config["report"]) if config.get("report") else None
    carrier = ProxyCarrier(config["faults"], report=report, arm_at=config.get("arm_at"), prefix=config["prefix"])
    listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
    print(listener.getsockname()[1], flush=True)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # the parent stops reading after the port
    log = RequestLog(config.get("log"))
    server = ProxyServer(config["upstream"], carrier, log)
    signal.signal(signal.SIGTERM, _stop)  # stop(): the requests under way are logged first
    try:
        server.serve(listener)
    finally:
        listener.close()
        server.drain(DRAIN)
        log.close()


def reached(endpoint: str, rank: int, index: int, timeout: float = 10.0) -> None:
    """Tell the proxy at `endpoint` that rank `rank` begins its operation `index`: the records armed there
    count its requests from now."""
    parts = urlsplit(endpoint)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
    try:
        conn.request("POST", f"{CONTROL}reached?rank={int(rank)}&index={int(index)}")
        status = conn.getresponse().status
    finally:
        conn.close()
    if status != 204:
        raise ServerFailed(f"the proxy at {endpoint} answered {status} to reached(rank={rank}, index={index})")


class FaultProxy:
    """`with FaultProxy(upstream, faults, report=..., log=...) as proxy:` the proxy at `proxy.endpoint`, in
    front of the S3 server at `upstream` (http://host:port). `faults`: records (or mappings) of which it
    takes those it carries (ProxyCarrier.CARRIES); `arm_at[i]`: the rank operation from which record i
    counts (None: from the start; told by `reached`). Firings are appended to `report` (faults.firings,
    `via: s3-proxy`), each request to `log` (objectstore.journal). `prefix`: the case's key prefix, under
    which target.path globs match too."""

    def __init__(
        self,
        upstream: str,
        faults: Iterable[Any] = (),
        *,
        arm_at: Sequence[int | None] | None = None,
        report: FaultReport | str | os.PathLike | None = None,
        log: str | os.PathLike | None = None,
        prefix: str = "",
        start_timeout: float = START_TIMEOUT,
    ):
        self.upstream = check_endpoint_url(upstream)
        if not self.upstream.startswith("http://"):
            raise ConfigError("--endpoint-url", f"the fault proxy speaks plain HTTP, not {upstream!r}", "use http://")
        self.faults = faults_from(list(faults))
        self.arm_at = list(arm_at) if arm_at is not None else None
        if self.arm_at is not None and len(self.arm_at) != len(self.faults):
            raise ValueError(f"{len(self.arm_at)} arming points for {len(self.faults)} fault records")
        self.report = report.path if isinstance(report, FaultReport) else (str(report) if report else None)
        self.log = str(log) if log else None
        self.prefix, self.start_timeout = prefix, start_timeout
        self.endpoint = ""
        self._proc: subprocess.Popen | None = None
        self._err: IO[bytes] | None = None
        self._config = ""

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> str:
        """Start the proxy's process; its endpoint URL. ServerFailed, with what it printed, when it never
        says its port."""
        config = {
            "upstream": self.upstream,
            "faults": [f.to_dict() for f in self.faults],
            "arm_at": self.arm_at,
            "report": self.report,
            "log": self.log,
            "prefix": self.prefix,
        }
        fd, self._config = tempfile.mkstemp(prefix="resilience-proxy-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(config, f)
        self._err = tempfile.TemporaryFile(prefix="resilience-proxy-")  # noqa: SIM115 (closed in stop)
        argv = [sys.executable, "-m", "resilience.objectstore.proxy", self._config]
        self._proc = subprocess.Popen(
            argv_dying_with_parent(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._err,
            start_new_session=True,  # its own group: stop() ends whatever it started
        )
        port = self._read_port()
        if port is None:
            why = self._output()
            self.stop()
            raise ServerFailed(f"the fault proxy did not start within {self.start_timeout:g} s: {why}")
        self.endpoint = f"http://127.0.0.1:{port}"
        return self.endpoint

    def _read_port(self) -> int | None:
        assert self._proc is not None and self._proc.stdout is not None
        out = self._proc.stdout
        ready, _, _ = select.select([out], [], [], self.start_timeout)
        line = out.readline() if ready else b""
        out.close()
        return int(line) if line.strip().isdigit() else None

    def _output(self) -> str:
        if self._err is None:
            return ""
        self._err.seek(0)
        return self._err.read()[-2000:].decode("utf-8", "replace").strip()

    def stop(self) -> None:
        """Stop the proxy's process; idempotent. Its log and report stay."""
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_group(proc)
        if self._err is not None:
            self._err.close()
            self._err = None
        if self._config:
            os.unlink(self._config)
            self._config = ""

    def reached(self, rank: int, index: int) -> None:
        """Rank `rank` begins its operation `index` (see the module's `reached`)."""
        reached(self.endpoint, rank, index)

    def requests(self) -> list[dict]:
        """The requests logged so far (journal.read_requests)."""
        return read_requests(self.log)


__all__ = ["CONTROL", "FaultProxy", "ProxyServer", "main", "reached"]


if __name__ == "__main__":
    main()
