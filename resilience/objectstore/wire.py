"""HTTP/1.1 messages as bytes, for a proxy that passes them on unchanged: read a head (request or status
line and headers, kept byte for byte), know where its body ends (Content-Length, chunked, none for a HEAD's
answer or a 1xx, 204 or 304, else the connection's end), and pump the body from one socket to another in
large blocks (recv_into one buffer, sendall a view of it: no copy per byte, the GIL released while the
kernel moves the data), stopping after a given number of bytes when a fault cuts it."""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

from ..errors import ResilienceError

BLOCK = 1 << 20  # bytes per recv: a multipart upload's part passes in a few system calls
MAX_HEAD = 64 << 10  # a head larger than this is not an S3 request
CHUNKED, LENGTH, NONE, UNTIL_CLOSE = "chunked", "length", "none", "until-close"


class WireError(ResilienceError):
    """A message that ends early or does not parse: the proxy closes that connection."""


class Cut(ResilienceError):
    """A body stopped on purpose after `passed` bytes (a reset)."""

    def __init__(self, passed: int):
        super().__init__(passed)
        self.passed = passed


@dataclass
class Head:
    """A message's head: its first line's words, its headers (names lower-case; repeated ones joined with
    ', '), and the bytes as received."""

    raw: bytes
    words: list[str]
    headers: dict[str, str]

    @classmethod
    def parse(cls, raw: bytes) -> Head:
        lines = raw.decode("latin-1").split("\r\n")
        words = lines[0].split(" ", 2)
        if len(words) < 2:
            raise WireError(f"not an HTTP message: {lines[0][:80]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if not line:
                continue
            name, sep, value = line.partition(":")
            if not sep:
                raise WireError(f"not a header: {line[:80]!r}")
            name, value = name.strip().lower(), value.strip()
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        return cls(raw, words, headers)

    @property
    def status(self) -> int:
        """A response's status code."""
        try:
            return int(self.words[1])
        except ValueError:
            raise WireError(f"not a status: {self.words[1][:20]!r}") from None

    def wants_close(self) -> bool:
        """Whether this message ends its connection (Connection: close, or HTTP/1.0 without keep-alive)."""
        conn = self.headers.get("connection", "").lower()
        version = self.words[0] if self.words[0].startswith("HTTP/") else self.words[-1]
        return "close" in conn or (version == "HTTP/1.0" and "keep-alive" not in conn)


def framing(head: Head, *, request: bool, method: str = "") -> tuple[str, int]:
    """How a message's body is delimited: (CHUNKED, 0), (LENGTH, n), (NONE, 0) or (UNTIL_CLOSE, 0)."""
    if not request and (method == "HEAD" or head.status < 200 or head.status in (204, 304)):
        return NONE, 0
    if "chunked" in head.headers.get("transfer-encoding", "").lower():
        return CHUNKED, 0
    text = head.headers.get("content-length")
    if text is not None:
        try:
            n = int(text.split(",")[0])
        except ValueError:
            raise WireError(f"bad Content-Length {text!r}") from None
        return (LENGTH, n) if n > 0 else (NONE, 0)
    return (NONE, 0) if request else (UNTIL_CLOSE, 0)


class Peer:
    """One end of a connection: its socket, a buffer for reading into, and what was read past the last
    message (a head's read may take the start of its body)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.pending = bytearray()
        self._buf = bytearray(BLOCK)
        self._view = memoryview(self._buf)

    def _fill(self) -> int:
        n = self.sock.recv_into(self._view)
        self.pending += self._view[:n]
        return n

    def read_head(self) -> Head | None:
        """The next head; None when the connection ends before one begins."""
        while True:
            end = self.pending.find(b"\r\n\r\n")
            if end >= 0:
                raw = bytes(self.pending[: end + 4])
                del self.pending[: end + 4]
                return Head.parse(raw)
            if len(self.pending) > MAX_HEAD:
                raise WireError(f"a head longer than {MAX_HEAD} bytes")
            if self._fill() == 0:
                if self.pending:
                    raise WireError("the connection ended inside a head")
                return None

    def read_line(self) -> bytes:
        """One line with its CRLF (a chunk's size line or a trailer)."""
        while (end := self.pending.find(b"\r\n")) < 0:
            if len(self.pending) > MAX_HEAD:
                raise WireError("a chunk line too long")
            if self._fill() == 0:
                raise WireError("the connection ended inside a chunk line")
        line = bytes(self.pending[: end + 2])
        del self.pending[: end + 2]
        return line

    def pump(self, dst: Sink, n: int | None) -> int:
        """Pass `n` bytes (None: until the connection ends) from here to `dst`; the bytes passed."""
        passed = 0
        if self.pending:
            take = len(self.pending) if n is None else min(n, len(self.pending))
            dst.send(memoryview(self.pending)[:take])
            del self.pending[:take]
            passed = take
        while n is None or passed < n:
            want = BLOCK if n is None else min(BLOCK, n - passed)
            got = self.sock.recv_into(self._view, want)
            if got == 0:
                if n is None:
                    break
                raise WireError(f"the connection ended {n - passed} bytes before the body's end")
            dst.send(self._view[:got])
            passed += got
        return passed


class Sink:
    """Where a body goes: a socket (None: nowhere), with an optional budget of bytes (a reset's cut: Cut
    is raised once it is spent) and an optional copy of the first `keep` bytes (a small answer the proxy
    reads: an upload's id, the keys of a multi-delete)."""

    def __init__(self, sock: socket.socket | None, budget: int | None = None, keep: int = 0):
        self.sock, self.budget, self.keep = sock, budget, keep
        self.sent = 0
        self.copy = bytearray()

    def send(self, data: memoryview) -> None:
        if self.budget is not None and self.sent + len(data) >= self.budget:
            data = data[: self.budget - self.sent]
            self._send(data)
            raise Cut(self.sent)
        self._send(data)

    def _send(self, data: memoryview) -> None:
        if self.sock is not None and len(data):
            self.sock.sendall(data)
        if len(self.copy) < self.keep:
            self.copy += data[: self.keep - len(self.copy)]
        self.sent += len(data)


def pump_body(src: Peer, dst: Sink, kind: str, length: int) -> int:
    """Pass one body (delimited as `framing` said) from `src` to `dst`, chunk lines and trailers included;
    the bytes passed. Cut when the sink's budget runs out."""
    if kind == NONE:
        return 0
    if kind == LENGTH:
        src.pump(dst, length)
    elif kind == UNTIL_CLOSE:
        src.pump(dst, None)
    else:
        _pump_chunked(src, dst)
    return dst.sent


def _pump_chunked(src: Peer, dst: Sink) -> None:
    while True:
        line = src.read_line()
        dst.send(memoryview(line))
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise WireError(f"bad chunk size line {line[:40]!r}") from None
        if size == 0:
            while (trailer := src.read_line()) != b"\r\n":
                dst.send(memoryview(trailer))
            dst.send(memoryview(trailer))
            return
        src.pump(dst, size + 2)  # the chunk's data and its CRLF


def reset(sock: socket.socket) -> None:
    """Close `sock` so the other end sees a reset (RST), not an orderly end."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


__all__ = ["Cut", "Head", "Peer", "Sink", "WireError", "framing", "pump_body", "reset"]
