"""Drawn scenarios on an object store (`resilience fuzz --storage s3`): a fault drawn on a write becomes the
fault of the request that carries that write to the store, carried out by the fault proxy, one to one, so
Hypothesis draws and shrinks the same actions either way and the case's YAML says what ran. The mapping is
the runner's (runner.on_store.requests_of_writes), which a backend outside the seam gets on a store too."""

from __future__ import annotations

from ..runner.on_store import requests_of_writes

__all__ = ["requests_of_writes"]
