"""HTTP/1.1 messages passed on byte for byte (objectstore.wire), over socket pairs: where a body ends, chunked
bodies with their trailers, a head read that took the start of its body, and a body cut on purpose."""

import socket
import threading

import pytest

from resilience.objectstore.wire import (
    CHUNKED,
    LENGTH,
    NONE,
    UNTIL_CLOSE,
    Cut,
    Head,
    Peer,
    Sink,
    WireError,
    framing,
    pump_body,
)


def head(text: str) -> Head:
    return Head.parse(text.replace("\n", "\r\n").encode() + b"\r\n")


@pytest.mark.parametrize(
    "text, request_, method, expected",
    [
        ("PUT /b/k HTTP/1.1\nContent-Length: 10\n", True, "", (LENGTH, 10)),
        ("PUT /b/k HTTP/1.1\nTransfer-Encoding: chunked\n", True, "", (CHUNKED, 0)),
        ("GET /b/k HTTP/1.1\n", True, "", (NONE, 0)),
        ("PUT /b/k HTTP/1.1\nContent-Length: 0\n", True, "", (NONE, 0)),
        ("HTTP/1.1 200 OK\nContent-Length: 99\n", False, "HEAD", (NONE, 0)),
        ("HTTP/1.1 204 No Content\n", False, "DELETE", (NONE, 0)),
        ("HTTP/1.1 304 Not Modified\nContent-Length: 5\n", False, "GET", (NONE, 0)),
        ("HTTP/1.1 100 Continue\n", False, "PUT", (NONE, 0)),
        ("HTTP/1.1 200 OK\nContent-Length: 99\n", False, "GET", (LENGTH, 99)),
        ("HTTP/1.1 200 OK\nTransfer-Encoding: gzip, chunked\n", False, "GET", (CHUNKED, 0)),
        ("HTTP/1.0 200 OK\n", False, "GET", (UNTIL_CLOSE, 0)),
    ],
)
def test_where_a_body_ends(text, request_, method, expected):
    assert framing(head(text), request=request_, method=method) == expected


def test_a_head_keeps_its_bytes_and_reads_its_headers():
    raw = b"PUT /b/k HTTP/1.1\r\nHost: x\r\nX-Amz-Meta-A: 1\r\nx-amz-meta-a: 2\r\nConnection: close\r\n\r\n"
    h = Head.parse(raw)
    assert h.raw == raw and h.words == ["PUT", "/b/k", "HTTP/1.1"] and h.headers["x-amz-meta-a"] == "1, 2"
    assert h.wants_close() and not head("HTTP/1.1 200 OK\n").wants_close() and head("HTTP/1.0 200 OK\n").wants_close()
    for bad in (b"nonsense\r\n\r\n", b"GET / HTTP/1.1\r\nno colon here\r\n\r\n"):
        with pytest.raises(WireError):
            Head.parse(bad)


def relay(data: bytes, kind: str, length: int, budget=None, keep=0):
    """Send `data` into one socket pair and pump a body of it into another, read by a thread of its own;
    (what came out, the sink, what was left unread, the Cut if any)."""
    a, b = socket.socketpair()
    c, d = socket.socketpair()
    out: list[bytes] = []
    threads = [
        threading.Thread(target=lambda: (a.sendall(data), a.close())),
        threading.Thread(target=lambda: out.extend(iter(lambda: d.recv(1 << 16), b""))),
    ]
    for t in threads:
        t.start()
    src = Peer(b)
    src.read_head()
    sink = Sink(c, budget=budget, keep=keep)
    cut = None
    try:
        pump_body(src, sink, kind, length)
    except Cut as e:
        cut = e
    c.close()
    rest = bytes(src.pending) + b"".join(iter(lambda: b.recv(1 << 16), b""))
    for t in threads:
        t.join()
    for s in (b, d):
        s.close()
    return b"".join(out), sink, rest, cut


def test_a_chunked_body_passes_with_its_chunk_lines_and_trailers_and_nothing_after_it():
    body = b"5;ext=1\r\nhello\r\n0\r\nx-amz-checksum-crc32: AAAA\r\n\r\n"
    out, sink, rest, cut = relay(
        b"PUT /b/k HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + body + b"NEXT", CHUNKED, 0
    )
    assert out == body and rest == b"NEXT" and cut is None and sink.sent == len(body)


def test_a_body_by_length_passes_whole_and_a_small_one_can_be_kept():
    payload = bytes(range(256)) * 8192  # 2 MiB: more than a block
    out, sink, rest, cut = relay(
        b"PUT / HTTP/1.1\r\nContent-Length: 2097152\r\n\r\n" + payload, LENGTH, len(payload), keep=10
    )
    assert out == payload and rest == b"" and bytes(sink.copy) == payload[:10]


def test_a_body_is_cut_after_its_budget():
    payload = b"x" * 5000
    out, sink, rest, cut = relay(b"PUT / HTTP/1.1\r\nContent-Length: 5000\r\n\r\n" + payload, LENGTH, 5000, budget=1234)
    assert cut is not None and cut.passed == 1234 and out == payload[:1234]


def test_a_body_that_ends_early_is_an_error():
    with pytest.raises(WireError, match="ended 6 bytes before"):
        a, b = socket.socketpair()
        a.sendall(b"abcd")
        a.close()
        Peer(b).pump(Sink(None), 10)
