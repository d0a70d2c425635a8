"""A fingerprint of the global state: per key, a hash of the global tensor assembled from the shards.
Any topology computes the same fingerprint for the same global state.

Objects (iteration, data position, RNG, ...) are taken from every rank, not only the replica a save
writes: a cell whose ranks disagree digests to something no single value gives, so a rank that
restored the wrong RNG or data position shows. Tensor replicas (a dp rank's copy of a parameter) are
held to the same rule: each is digested where it lives and compared with the replica-0 values of its
box, and a key whose replicas disagree digests to something no consistent state gives, so a rank that
loaded a damaged or stale copy shows though only replica 0 enters the values."""

from __future__ import annotations

import functools
import json
from math import prod
from typing import Any

import torch
import torch.distributed as dist
import xxhash

from .. import dist as collectives
from .sharding import Record, ShardedObject, ShardedTensor


def _digest_object(value) -> str:
    h = xxhash.xxh3_128()
    if isinstance(value, torch.Tensor):
        h.update(str(value.dtype).encode())
        h.update(value.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    else:
        h.update(json.dumps(value, sort_keys=True).encode())
    return h.hexdigest()


def _digest_tensor(t: torch.Tensor) -> str:
    return _digest_object(t.detach())


def local_pieces(records: list[Record]) -> list[tuple]:
    """The replica-0 tensor pieces of this rank, cropped to their logical (unpadded) part, the digest of
    every other replica's cropped piece ("r": (its local shape, digest)), and every object this rank
    holds (replica or not)."""
    out: list[tuple] = []
    for r in records:
        if isinstance(r, ShardedTensor):
            data, offset = r.data, r.global_offset
            if data.dim():  # a tensor of no dimensions has no rows to crop
                data = data[: max(0, r.logical[0] - offset[0])]
            if not data.numel():
                continue
            if r.replica_id != 0:  # only its digest travels: compared with replica 0's values of its box
                out.append(("r", r.key, tuple(r.logical), tuple(offset), (tuple(data.shape), _digest_tensor(data))))
            else:  # no copy: assembling or encoding copies it
                out.append(("t", r.key, tuple(r.logical), tuple(offset), data.detach()))
        elif isinstance(r, ShardedObject):
            out.append(("o", r.key, tuple(r.global_shape), tuple(r.global_offset), r.value))
    return out


def assemble(pieces: list[tuple]) -> dict[str, str]:
    """Digest per key from the pieces of every rank. An object piece holds its value ("o") or, as sent
    by another rank, already its digest ("d")."""
    tensors = assemble_tensors(pieces)
    objects: dict[str, dict] = {}
    for kind, key, _shape, offset, data in pieces:
        if kind in ("o", "d"):
            objects.setdefault(key, {}).setdefault(offset, set()).add(data if kind == "d" else _digest_object(data))
    out = {key: _digest_object(t) for key, t in tensors.items()}
    for key, boxes in replica_disagreements(pieces, tensors).items():
        # no consistent state digests to this: the key differs from every save whose replicas agreed
        out[key] = xxhash.xxh3_128_hexdigest(f"{out.get(key)};replicas disagree at {sorted(boxes)}".encode())
    for key, cells in objects.items():
        h = xxhash.xxh3_128()
        for offset in sorted(cells):
            h.update(repr(offset).encode())
            # ranks that agree give the value's own digest, however many of them hold it
            h.update(",".join(sorted(cells[offset])).encode())
        out[key] = h.hexdigest()
    return dict(sorted(out.items()))


def replica_disagreements(pieces: list[tuple], tensors: dict[str, torch.Tensor]) -> dict[str, list]:
    """{key: [box, ...]} of the replica pieces ("r") whose digest differs from the replica-0 values of
    their box in `tensors` (the assembled global tensors)."""
    out: dict[str, list] = {}
    for _kind, key, _shape, offset, (local, digest) in (p for p in pieces if p[0] == "r"):
        full = tensors.get(key)
        box = tuple(slice(o, o + s) for o, s in zip(offset, local))
        if full is None or _digest_tensor(full[box].contiguous()) != digest:
            out.setdefault(key, []).append([[o, o + s] for o, s in zip(offset, local)])
    return out


def assemble_tensors(pieces: list[tuple]) -> dict[str, torch.Tensor]:
    """The global (logical) tensor of every key, from the tensor pieces of every rank."""
    tensors: dict[str, torch.Tensor] = {}
    whole: set[str] = set()  # keys whose tensor is still the one piece that covered it (not a copy)
    for kind, key, shape, offset, data in pieces:
        if kind != "t":
            continue
        full = tensors.get(key)
        if full is None:
            if tuple(data.shape) == tuple(shape) and not any(offset):  # the whole tensor: no copy needed
                tensors[key] = data
                whole.add(key)
                continue
            full = tensors[key] = torch.zeros(shape, dtype=data.dtype)
        elif key in whole:  # another piece of a key one piece covered: write into a copy, never the piece
            full = tensors[key] = full.clone()
            whole.discard(key)
        box = full
        for dim, (o, n) in enumerate(zip(offset, data.shape)):
            box = box.narrow(dim, o, n)
        box.copy_(data)
    return tensors


def fingerprint(records: list[Record], *, dst: int | None = None) -> dict[str, str]:
    """Collective over the default group: every rank gets {key: digest} of the global state; with `dst`,
    only rank `dst` does (the others get {} and skip assembling and hashing the whole state)."""
    pieces = gather_pieces(records, dst=dst)
    return assemble(pieces) if pieces is not None else {}


def gather_pieces(records: list[Record], *, dst: int | None = None) -> list[tuple] | None:
    """Collective: the pieces of every rank (None on ranks other than `dst` when it is given)."""
    pieces = local_pieces(records)
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return pieces
    me = dist.get_rank()
    gathered: list[Any] = [None] * dist.get_world_size()
    if dst is None:
        dist.all_gather_object(gathered, _to_bytes(pieces))
    elif dst == 0:  # the gathering rank's own pieces never travel: it sends nothing and keeps them as they are
        got = collectives.gather(b"" if me == dst else _to_bytes(pieces))
        if got is None:
            return None
        gathered = got
    else:
        dist.gather_object(b"" if me == dst else _to_bytes(pieces), gathered if me == dst else None, dst=dst)
        if me != dst:
            return None
    return [p for rank, b in enumerate(gathered) for p in (pieces if rank == me else _from_bytes(b))]


def generations(pieces: list[tuple], prefix: str) -> dict[str, dict[int, dict]]:
    """For every stamp tensor (keys starting with `prefix`): {generation: {"elements": n, "box": [[lo, hi)
    per dim]}}, where each generation number sits (a value that is no whole number, or a replica whose
    stamps differ from replica 0's, counts as -1). One generation for every key is one whole save."""
    out = {}
    stamps = [p for p in pieces if p[1].startswith(prefix)]
    tensors = assemble_tensors(stamps)
    for key, full in tensors.items():
        found: dict[int, dict] = {}
        if full.numel() and bool((full == full.view(-1)[0]).all()):  # one value, as after one whole save
            value = full.view(-1)[0].item()
            g = int(value) if float(value).is_integer() else -1
            out[key[len(prefix) :]] = {g: {"elements": full.numel(), "box": [[0, n] for n in full.shape]}}
            continue
        for value in torch.unique(full).tolist():
            mask = full == value
            g = int(value) if float(value).is_integer() else -1
            box = [[int(ix.min()), int(ix.max()) + 1] for ix in mask.nonzero().unbind(1)]
            if g in found:  # several non-whole values: one box around them all
                old = found[g]
                box = [[min(a[0], b[0]), max(a[1], b[1])] for a, b in zip(old["box"], box)]
                found[g] = {"elements": old["elements"] + int(mask.sum()), "box": box}
            else:
                found[g] = {"elements": int(mask.sum()), "box": box}
        out[key[len(prefix) :]] = found
    for key, boxes in replica_disagreements(stamps, tensors).items():
        # a replica's values travel only as a digest: where it differs, its generation is unknown
        lo = [min(b[d][0] for b in boxes) for d in range(len(boxes[0]))]
        hi = [max(b[d][1] for b in boxes) for d in range(len(boxes[0]))]
        elements = sum(prod(h - lo_ for lo_, h in b) for b in boxes)
        out.setdefault(key[len(prefix) :], {}).setdefault(
            -1, {"elements": elements, "box": [list(x) for x in zip(lo, hi)]}
        )
    return out


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
        elif kind == "r":
            header.append(["r", key, list(shape), list(offset), list(data[0]), data[1]])
        else:
            header.append(["d", key, list(shape), list(offset), _digest_object(data)])
    head = json.dumps(header).encode()
    return b"".join([len(head).to_bytes(8, "little"), head, *chunks])


def _from_bytes(blob: bytes) -> list[tuple]:
    n = int.from_bytes(blob[:8], "little")
    body = bytearray(blob[8 + n :])  # writable: torch.frombuffer shares it
    out, at = [], 0
    for entry in json.loads(blob[8 : 8 + n]):
        if entry[0] == "d":
            _, key, shape, offset, digest = entry
            out.append(("d", key, tuple(shape), tuple(offset), digest))
            continue
        if entry[0] == "r":
            _, key, shape, offset, local, digest = entry
            out.append(("r", key, tuple(shape), tuple(offset), (tuple(local), digest)))
            continue
        _, key, shape, offset, local, dtype, size = entry
        data = torch.frombuffer(body, dtype=torch.uint8, offset=at, count=size)  # pieces are never empty
        out.append(("t", key, tuple(shape), tuple(offset), data.view(_dtype(dtype)).reshape(local)))
        at += size
    return out


@functools.cache
def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"fingerprint piece of unknown dtype {name!r}")
    return dtype


def _excluded(key: str, exclude: tuple[str, ...]) -> bool:
    return any(key == e or e.endswith(".") and key.startswith(e) for e in exclude)


def combine(digests: dict[str, str], exclude: tuple[str, ...] = ()) -> str:
    """One digest for a whole fingerprint (keys in `exclude` left out; an entry ending in "." leaves
    out every key it begins)."""
    h = xxhash.xxh3_128()
    for key, d in sorted(digests.items()):
        if not _excluded(key, exclude):
            h.update(f"{key}={d};".encode())
    return h.hexdigest()


def differences(a: dict[str, str], b: dict[str, str], exclude: tuple[str, ...] = ()) -> list[str]:
    """Keys whose digest differs or that only one side has."""
    return sorted(k for k in set(a) | set(b) if not _excluded(k, exclude) and a.get(k) != b.get(k))
