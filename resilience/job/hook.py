"""The optional hook for teams that allow a line of code: `resilience.job.report(step, loss=..., state=...)`
prints one line the runner reads as a point of the metric curve, with a digest of the whole state, so a
resumed run is compared with the golden one bit for bit, not only by its printed loss.

    import resilience.job
    resilience.job.report(step, loss=loss.item(), state=model)   # every rank, after each step

The line: `[resilience] step N loss X rank R state HEX` (R from RANK, else LOCAL_RANK; HEX: sha256 of every
tensor's dtype, shape and bytes, and every other value's repr, in key order). A module or optimizer gives
its state_dict(); a DTensor its local shard (each rank digests what it holds). Nothing here imports torch
unless a state is given, and nothing is printed but that line."""

from __future__ import annotations

import hashlib
import os
import sys
from typing import Any

LINE = "[resilience] step {step} loss {loss!r} rank {rank} state {digest}"


def report(step: int, *, loss: float, state: Any = None, rank: int | None = None, file=None) -> str:
    """Print the step's point (and the state's digest) as one line; returns the line."""
    if rank is None:
        rank = int(os.environ.get("RANK") or os.environ.get("LOCAL_RANK") or 0)
    digest = state_digest(state) if state is not None else "-"
    line = LINE.format(step=int(step), loss=float(loss), rank=rank, digest=digest)
    out = sys.stdout if file is None else file
    print(line, file=out, flush=True)
    return line


def state_digest(state: Any) -> str:
    """sha256 of a state: nested dicts (in key order), lists and tuples, tensors (dtype, shape, bytes)."""
    h = hashlib.sha256()
    _feed(h, state)
    return h.hexdigest()


def _feed(h, value: Any) -> None:
    if hasattr(value, "state_dict") and callable(value.state_dict):  # a module, an optimizer, a Stateful
        value = value.state_dict()
    if isinstance(value, dict):
        for k in sorted(value, key=repr):
            h.update(b"k" + repr(k).encode())
            _feed(h, value[k])
    elif isinstance(value, (list, tuple)):
        h.update(b"l%d" % len(value))
        for v in value:
            _feed(h, v)
    elif _is_tensor(value):
        t = value.to_local() if hasattr(value, "to_local") else value  # a DTensor: the shard this rank holds
        t = t.detach().cpu().contiguous()
        h.update(f"t{t.dtype}{tuple(t.shape)}".encode())
        h.update(_raw(t))
    else:
        h.update(b"v" + repr(value).encode())


def _raw(t) -> bytes:
    import torch

    return t.reshape(-1).view(torch.uint8).numpy().tobytes()  # as bytes: bf16 has no numpy dtype


def _is_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")  # a state holding tensors has torch imported already
    return torch is not None and isinstance(value, torch.Tensor)


__all__ = ["report", "state_digest"]
