"""A fingerprint of the global state: per key, a hash of the global tensor assembled from the shards.
Any topology computes the same fingerprint for the same global state."""
from __future__ import annotations

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
            if data.numel():  # no copy: assembling or encoding copies it
                out.append(("t", r.key, tuple(r.logical), tuple(offset), data.detach()))
        elif isinstance(r, ShardedObject):
            out.append(("o", r.key, tuple(r.global_shape), tuple(r.global_offset), r.value))
    return out


def assemble(pieces: list[tuple]) -> dict[str, str]:
    """Digest per key from the pieces of every rank. An object piece holds its value ("o") or, as sent
    by another rank, already its digest ("d")."""
    tensors: dict[str, torch.Tensor] = {}
    objects: dict[str, dict] = {}
    for kind, key, shape, offset, data in pieces:
        if kind == "t":
            full = tensors.setdefault(key, torch.zeros(shape, dtype=data.dtype))
            full[tuple(slice(o, o + s) for o, s in zip(offset, data.shape))] = data
        else:
            objects.setdefault(key, {})[offset] = data if kind == "d" else _digest_object(data)
    out = {key: _digest_object(t) for key, t in tensors.items()}
    for key, cells in objects.items():
        h = xxhash.xxh3_128()
        for offset in sorted(cells):
            h.update(repr(offset).encode())
            h.update(cells[offset].encode())
        out[key] = h.hexdigest()
    return dict(sorted(out.items()))


def fingerprint(records: list[Record], *, dst: int | None = None) -> dict[str, str]:
    """Collective over the default group: every rank gets {key: digest} of the global state; with `dst`,
    only rank `dst` does (the others get {} and skip assembling and hashing the whole state)."""
    pieces = local_pieces(records)
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return assemble(pieces)
    blob = _to_bytes(pieces)
    gathered = [None] * dist.get_world_size()
    if dst is None:
        dist.all_gather_object(gathered, blob)
    else:
        dist.gather_object(blob, gathered if dist.get_rank() == dst else None, dst=dst)
        if dist.get_rank() != dst:
            return {}
    return assemble([p for b in gathered for p in _from_bytes(b)])


# Pieces travel as one bytes blob: a JSON header, then the raw bytes of every tensor piece. Objects are
# digested where they live, so no rank unpickles another's values; torch.save / torch.load of many small
# tensors cost more than the hashing itself.
def _to_bytes(pieces) -> bytes:
    header, chunks = [], []
    for kind, key, shape, offset, data in pieces:
        if kind == "t":
            raw = data.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
            header.append(["t", key, list(shape), list(offset), list(data.shape), str(data.dtype), len(raw)])
            chunks.append(raw)
        else:
            header.append(["d", key, list(shape), list(offset), _digest_object(data)])
    head = json.dumps(header).encode()
    return b"".join([len(head).to_bytes(8, "little"), head, *chunks])


def _from_bytes(blob: bytes) -> list[tuple]:
    n = int.from_bytes(blob[:8], "little")
    body = bytearray(blob[8 + n:])  # writable: torch.frombuffer shares it
    out, at = [], 0
    for entry in json.loads(blob[8:8 + n]):
        if entry[0] == "d":
            _, key, shape, offset, digest = entry
            out.append(("d", key, tuple(shape), tuple(offset), digest))
            continue
        _, key, shape, offset, local, dtype, size = entry
        data = torch.frombuffer(body, dtype=torch.uint8, offset=at, count=size)  # pieces are never empty
        out.append(("t", key, tuple(shape), tuple(offset), data.view(_dtype(dtype)).reshape(local)))
        at += size
    return out


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"fingerprint piece of unknown dtype {name!r}")
    return dtype


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
