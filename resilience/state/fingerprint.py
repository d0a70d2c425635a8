"""A fingerprint of the global state: per key, a hash of the global tensor assembled from the shards.
Any topology computes the same fingerprint for the same global state."""
from __future__ import annotations

import io
import json

import torch
import torch.distributed as dist
import xxhash

from .sharding import Record, ShardedObject, ShardedTensor


def _digest_object(value) -> str:
    h = xxhash.xxh3_128()
    if isinstance(value, torch.Tensor):
        h.update(str(value.dtype).encode())
        h.update(value.contiguous().view(torch.uint8).numpy().tobytes())
    else:
        h.update(json.dumps(value, sort_keys=True).encode())
    return h.hexdigest()


def local_pieces(records: list[Record]) -> list[tuple]:
    """The replica-0 pieces of this rank, cropped to their logical (unpadded) part."""
    out = []
    for r in records:
        if r.replica_id != 0:
            continue
        if isinstance(r, ShardedTensor):
            data, offset = r.data, r.global_offset
            rows = r.logical[0] - offset[0]
            data = data[: max(0, rows)]
            if data.numel():
                out.append(("t", r.key, tuple(r.logical), tuple(offset), data.detach().clone()))
        elif isinstance(r, ShardedObject):
            out.append(("o", r.key, tuple(r.global_shape), tuple(r.global_offset), r.value))
    return out


def assemble(pieces: list[tuple]) -> dict[str, str]:
    """Digest per key from the pieces of every rank."""
    tensors: dict[str, torch.Tensor] = {}
    objects: dict[str, dict] = {}
    for kind, key, shape, offset, data in pieces:
        if kind == "t":
            full = tensors.setdefault(key, torch.zeros(shape, dtype=data.dtype))
            full[tuple(slice(o, o + s) for o, s in zip(offset, data.shape))] = data
        else:
            objects.setdefault(key, {})[offset] = data
    out = {key: _digest_object(t) for key, t in tensors.items()}
    for key, cells in objects.items():
        h = xxhash.xxh3_128()
        for offset in sorted(cells):
            h.update(repr(offset).encode())
            h.update(_digest_object(cells[offset]).encode())
        out[key] = h.hexdigest()
    return dict(sorted(out.items()))


def fingerprint(records: list[Record]) -> dict[str, str]:
    """Collective over the default group: every rank gets {key: digest} of the global state."""
    pieces = local_pieces(records)
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return assemble(pieces)
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, _to_bytes(pieces))
    return assemble([p for blob in gathered for p in _from_bytes(blob)])


def _to_bytes(pieces) -> bytes:
    buf = io.BytesIO()
    torch.save(pieces, buf)
    return buf.getvalue()


def _from_bytes(blob: bytes):
    return torch.load(io.BytesIO(blob), weights_only=True)


def combine(digests: dict[str, str], exclude: tuple[str, ...] = ()) -> str:
    """One digest for a whole fingerprint (keys in `exclude` left out)."""
    h = xxhash.xxh3_128()
    for key, d in sorted(digests.items()):
        if key not in exclude:
            h.update(f"{key}={d};".encode())
    return h.hexdigest()


def differences(a: dict[str, str], b: dict[str, str], exclude: tuple[str, ...] = ()) -> list[str]:
    """Keys whose digest differs or that only one side has."""
    return sorted(k for k in set(a) | set(b) if k not in exclude and a.get(k) != b.get(k))
