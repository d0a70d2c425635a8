"""torch.save files of sharded records, shared by the LEGACY and LOCAL formats."""

from __future__ import annotations

from typing import Any

import torch

from ... import storage
from ...errors import IntegrityError
from ...state.sharding import Record, ShardedObject, ShardedTensor
from ...storage import torch_load
from ...storage.buffered import unmasked


def entry(r: ShardedTensor, data: torch.Tensor | None = None, offset=None) -> dict:
    return {
        "data": (r.data if data is None else data).detach().contiguous(),
        "global_offset": list(r.global_offset if offset is None else offset),
        "global_shape": list(r.global_shape),
    }


def save(path: str, tensors: dict[str, dict], objects: dict[str, Any]) -> None:
    with storage.current().open_write(path) as f, unmasked(f):
        torch.save({"format_version": 1, "tensors": tensors, "objects": objects}, f)  # type: ignore[arg-type]  # file-like


def load(path: str) -> dict:
    """The file's document. Read from held bytes (a verified load), its tensors share them: `fill` copies
    each into place, and the objects are copies of their own."""
    with storage.current().open_read(path) as f:
        doc = torch_load.load(f)
    if not isinstance(doc, dict) or doc.get("format_version") != 1 or "tensors" not in doc:
        raise IntegrityError(path, "content", "not a checkpoint file of format_version 1")
    if "objects" in doc:
        doc["objects"] = _owned(doc["objects"])
    return doc


def _owned(value):
    """`value` with every tensor in it cloned (nothing left sharing the file's bytes)."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {k: _owned(v) for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(_owned(v) for v in value)
    return value


def fill(records: list[Record], tensors: dict[str, dict], where: str) -> None:
    """Copy stored tensors into the records' pieces; a stored piece must contain the target piece."""
    for r in records:
        if not isinstance(r, ShardedTensor):
            continue
        stored = tensors.get(r.key)
        if stored is None:
            raise IntegrityError(where, "content", f"no tensor {r.key!r}")
        data, off = stored["data"], stored["global_offset"]
        index = []
        for dim, (o, n) in enumerate(zip(r.global_offset, r.local_shape)):
            lo = o - off[dim]
            if lo < 0 or lo + n > data.shape[dim]:
                raise IntegrityError(where, "content", f"{r.key}: stored piece does not hold rows {o}..{o + n}")
            index.append(slice(lo, lo + n))
        if data.dtype != r.data.dtype:
            raise IntegrityError(where, "content", f"{r.key}: stored {data.dtype}, expected {r.data.dtype}")
        r.data.copy_(data[tuple(index)])
        torch_load.release(data)  # copied: a held file's pages under it leave this process's memory


def objects_of(records: list[Record]) -> dict[str, Any]:
    return {r.key: r.value for r in records if isinstance(r, ShardedObject)}
