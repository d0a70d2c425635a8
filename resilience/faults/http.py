"""The fault kinds of an object store's requests, carried out by the proxy in front of its server
(objectstore.proxy): an error answer instead of the server's, a connection reset partway through a body, an
answer lost after the server did the work. A delay (slow_write) and a rank killed at a request (rank_crash)
are the file kinds aimed at an HTTP operation (target.op one of HTTP_OPS)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..errors import ConfigError
from ..triggers import ANSWER, LOSE, RESET
from .base import HTTP_OPS, Fault, _int

_HTTP_USES = frozenset({"rank", "path", "op", "nth"})  # no thread: a request does not say which one sent it
# the S3 error code of each status an error answer may carry: what S3 itself answers when it throttles or fails
HTTP_ERRORS = {503: "SlowDown", 500: "InternalError"}


@dataclass(frozen=True)
class HttpError(Fault):
    """The nth matching request is answered with an S3 error, `status` 503 (SlowDown: S3 throttling) or 500
    (InternalError), and never reaches the server. A client that retries sees it succeed the next time."""

    kind: ClassVar[str] = "http_error"
    effect: ClassVar[str | None] = ANSWER
    uses: ClassVar[frozenset[str]] = _HTTP_USES
    ops: ClassVar[tuple[str, ...]] = HTTP_OPS
    status: int = 503

    @property
    def code(self) -> str:
        return HTTP_ERRORS[self.status]

    def _check(self, where):
        if isinstance(self.status, bool) or self.status not in HTTP_ERRORS:
            statuses = ", ".join(f"{s} ({c})" for s, c in HTTP_ERRORS.items())
            raise ConfigError(f"{where}.status", f"unknown value {self.status!r}", f"use one of {statuses}")


@dataclass(frozen=True)
class ConnectionReset(Fault):
    """The nth matching request's connection is reset partway through a body: after `keep` bytes of the
    request's body (None: half) when it has one, so the server never completes it; else after `keep` bytes
    of the answer's body, the server having done the request. The client sees a reset connection."""

    kind: ClassVar[str] = "connection_reset"
    effect: ClassVar[str | None] = RESET
    uses: ClassVar[frozenset[str]] = _HTTP_USES
    ops: ClassVar[tuple[str, ...]] = HTTP_OPS
    keep: int | None = None

    def _check(self, where):
        _int(self.keep, f"{where}.keep", minimum=0)


@dataclass(frozen=True)
class ResponseLost(Fault):
    """The nth matching request reaches the server and is done there, but its answer is dropped and the
    connection closed: the client sees an error for a write that happened."""

    kind: ClassVar[str] = "response_lost"
    effect: ClassVar[str | None] = LOSE
    uses: ClassVar[frozenset[str]] = _HTTP_USES
    ops: ClassVar[tuple[str, ...]] = HTTP_OPS


__all__ = ["HTTP_ERRORS", "ConnectionReset", "HttpError", "ResponseLost"]
